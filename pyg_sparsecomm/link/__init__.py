"""Link prediction on a sharded graph: supervision pairs and their exchange plan (:mod:`.pairs`),
negatives drawn by hashes of global ids (:mod:`.negative_sampling`) and whole-graph metrics
(:mod:`.metrics`)."""
from .metrics import global_auc, global_hits_at_k
from .negative_sampling import negative_sampling, structured_negative_sampling
from .pairs import DistributedPairs, distribute_pairs, local_pairs, pair_plan

__all__ = ["DistributedPairs", "distribute_pairs", "local_pairs", "pair_plan", "negative_sampling",
           "structured_negative_sampling", "global_auc", "global_hits_at_k"]
