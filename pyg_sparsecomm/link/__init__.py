"""Link prediction on a sharded graph: supervision pairs and their exchange plan (:mod:`.pairs`), a
shard's ``edge_label_index`` indexing embeddings as PyG's does (:mod:`.pair_index`), negatives drawn
by hashes of global ids (:mod:`.negative_sampling`) or, on a shard, as PyG draws them
(:mod:`.shard_negatives`), whole-graph metrics (:mod:`.metrics`, :mod:`.roc_auc`), PyG's ranking
metrics over every rank's users (:mod:`.ranking`; :mod:`.ranking_functions`: its deprecated functional
aliases) and top-k recommendation over every rank's items (:mod:`.topk`)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"hetero_negative_sampling": ".hetero_negatives",
            "hetero_structured_negative_sampling": ".hetero_negatives", "global_auc": ".metrics",
            "global_average_precision": ".metrics", "global_hits_at_k": ".metrics",
            "structured_negative_sampling": ".negative_sampling", "PairIndex": ".pair_index",
            "DistributedPairs": ".pairs", "distribute_pairs": ".pairs", "local_pairs": ".pairs",
            "pair_plan": ".pairs", "DistributedLinkPredHitRatio": ".ranking", "DistributedLinkPredMAP": ".ranking",
            "DistributedLinkPredMetric": ".ranking", "DistributedLinkPredMRR": ".ranking",
            "DistributedLinkPredNDCG": ".ranking", "DistributedLinkPredPrecision": ".ranking",
            "DistributedLinkPredRecall": ".ranking", "global_hit_ratio_at_k": ".ranking_functions",
            "global_link_pred_metric": ".ranking_functions", "global_map_at_k": ".ranking_functions",
            "global_mrr_at_k": ".ranking_functions", "global_ndcg_at_k": ".ranking_functions",
            "global_precision_at_k": ".ranking_functions", "global_recall_at_k": ".ranking_functions",
            "average_precision_score": ".roc_auc", "roc_auc_score": ".roc_auc",
            "negative_sampling": ".shard_negatives", "TopK": ".topk", "recommend_topk": ".topk"}

if TYPE_CHECKING:  # pragma: no cover
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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["DistributedPairs", "distribute_pairs", "local_pairs", "pair_plan", "negative_sampling",
           "structured_negative_sampling", "global_auc", "global_hits_at_k", "PairIndex", "roc_auc_score",
           "average_precision_score", "global_average_precision",
           "DistributedLinkPredMetric", "DistributedLinkPredPrecision", "DistributedLinkPredRecall",
           "DistributedLinkPredNDCG", "DistributedLinkPredMRR", "DistributedLinkPredHitRatio", "DistributedLinkPredMAP",
           "global_link_pred_metric", "global_precision_at_k", "global_recall_at_k", "global_ndcg_at_k",
           "global_mrr_at_k", "global_hit_ratio_at_k", "global_map_at_k", "recommend_topk", "TopK",
           "hetero_negative_sampling", "hetero_structured_negative_sampling"]
