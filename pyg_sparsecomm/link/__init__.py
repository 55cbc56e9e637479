"""Link prediction on a sharded graph: supervision pairs and their exchange plan (:mod:`.pairs`), a
shard's ``edge_label_index`` indexing embeddings as PyG's does (:mod:`.pair_index`), negatives drawn
by hashes of global ids (:mod:`.negative_sampling`) or, on a shard, as PyG draws them
(:mod:`.shard_negatives`), and whole-graph metrics (:mod:`.metrics`, :mod:`.roc_auc`)."""
from .metrics import global_auc, global_hits_at_k
from .negative_sampling import structured_negative_sampling
from .pair_index import PairIndex
from .pairs import DistributedPairs, distribute_pairs, local_pairs, pair_plan
from .roc_auc import roc_auc_score
from .shard_negatives import negative_sampling

__all__ = ["DistributedPairs", "distribute_pairs", "local_pairs", "pair_plan", "negative_sampling",
           "structured_negative_sampling", "global_auc", "global_hits_at_k", "PairIndex", "roc_auc_score"]
