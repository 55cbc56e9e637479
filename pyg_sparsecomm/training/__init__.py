"""What a training loop over a shard needs to equal single-process training: whole-graph losses,
sums, counts and accuracies (:mod:`.whole_graph`), an evaluator of the rows of all ranks
(:mod:`.evaluator`: OGB's ``Evaluator``), what a loss sums and divides by on this rank
(:mod:`.loss_reduction`), the warning for per-rank values used as whole-graph ones (:mod:`.per_rank`)
and the record the two gradient synchronisations share (:mod:`.grad_registry`)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {name: ".whole_graph" for name in ("distributed_loss", "sync_gradients", "global_sum", "global_count",
                                              "global_accuracy", "gather_nodes")}
_EXPORTS["PerRankValueWarning"] = ".per_rank"
_EXPORTS["GlobalEvaluator"] = ".evaluator"

if TYPE_CHECKING:  # pragma: no cover
    from .evaluator import GlobalEvaluator
    from .per_rank import PerRankValueWarning
    from .whole_graph import distributed_loss, gather_nodes, global_accuracy, global_count, global_sum, sync_gradients

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "distributed_loss", "sync_gradients", "global_sum", "global_count", "global_accuracy", "gather_nodes",
    "PerRankValueWarning", "GlobalEvaluator",
]
