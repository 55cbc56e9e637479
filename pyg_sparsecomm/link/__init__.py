"""Link prediction on a sharded graph: supervision pairs and their exchange plan (:mod:`.pairs`), a
shard's ``edge_label_index`` indexing embeddings as PyG's does (:mod:`.pair_index`), negatives drawn
by hashes of global ids (:mod:`.negative_sampling`) or, on a shard, as PyG draws them
(:mod:`.shard_negatives`), whole-graph metrics (:mod:`.metrics`, :mod:`.roc_auc`), PyG's ranking
metrics over every rank's users (:mod:`.ranking`, :mod:`.ranking_functions`) and top-k recommendation
over every rank's items (:mod:`.topk`)."""
from .hetero_negatives import hetero_negative_sampling, hetero_structured_negative_sampling
from .metrics import global_auc, global_average_precision, global_hits_at_k
from .negative_sampling import structured_negative_sampling
from .pair_index import PairIndex
from .pairs import DistributedPairs, distribute_pairs, local_pairs, pair_plan
from .ranking import (
    DistributedLinkPredHitRatio,
    DistributedLinkPredMAP,
    DistributedLinkPredMetric,
    DistributedLinkPredMRR,
    DistributedLinkPredNDCG,
    DistributedLinkPredPrecision,
    DistributedLinkPredRecall,
)
from .ranking_functions import (
    global_hit_ratio_at_k,
    global_link_pred_metric,
    global_map_at_k,
    global_mrr_at_k,
    global_ndcg_at_k,
    global_precision_at_k,
    global_recall_at_k,
)
from .roc_auc import average_precision_score, roc_auc_score
from .shard_negatives import negative_sampling
from .topk import TopK, recommend_topk

__all__ = ["DistributedPairs", "distribute_pairs", "local_pairs", "pair_plan", "negative_sampling",
           "structured_negative_sampling", "global_auc", "global_hits_at_k", "PairIndex", "roc_auc_score",
           "average_precision_score", "global_average_precision",
           "DistributedLinkPredMetric", "DistributedLinkPredPrecision", "DistributedLinkPredRecall",
           "DistributedLinkPredNDCG", "DistributedLinkPredMRR", "DistributedLinkPredHitRatio", "DistributedLinkPredMAP",
           "global_link_pred_metric", "global_precision_at_k", "global_recall_at_k", "global_ndcg_at_k",
           "global_mrr_at_k", "global_hit_ratio_at_k", "global_map_at_k", "recommend_topk", "TopK",
           "hetero_negative_sampling", "hetero_structured_negative_sampling"]
