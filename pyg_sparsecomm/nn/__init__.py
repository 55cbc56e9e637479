"""PyG layers trained full-graph across processes: :func:`distribute` and the public layers.

``nn/`` holds the public layers (this folder), the rules of what ``distribute`` does with each
layer class (:mod:`.rules`: the registry, a leaf, and PyG's own rules, registered into it on
import) and the layer-call runtime (:mod:`.runtime`: the compiled :class:`~.runtime.plan.LayerPlan`,
the per-call :class:`~.runtime.call.LayerCall`, the hooks and the one halo port).
:mod:`.owner_sharded` is how a module declares parameters sharded by owner (LightGCN's table), which
checkpoints save and restore row by row.
"""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"distribute": ".distribute", "refusal": ".distribute", "summary": ".distribute",
            "NodeDropout": ".dropout", "node_dropout": ".dropout", "DistributedGCNConv": ".gcn_conv",
            "distributed_gcn_norm": ".gcn_norm", "OwnerRows": ".owner_sharded", "OwnerSharded": ".owner_sharded",
            "GcnNormalisation": ".rules.registry", "LayerRule": ".rules.registry", "layer_rule": ".rules.pyg",
            "layer_table": ".rules.pyg", "register_layer_rule": ".rules.registry"}

if TYPE_CHECKING:  # pragma: no cover
    from .distribute import distribute, refusal, summary
    from .dropout import NodeDropout, node_dropout
    from .gcn_conv import DistributedGCNConv
    from .gcn_norm import distributed_gcn_norm
    from .owner_sharded import OwnerRows, OwnerSharded
    from .rules.pyg import layer_rule, layer_table
    from .rules.registry import GcnNormalisation, LayerRule, register_layer_rule

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["DistributedGCNConv", "distribute", "summary", "refusal", "LayerRule", "GcnNormalisation",
           "register_layer_rule", "layer_rule", "layer_table", "distributed_gcn_norm", "NodeDropout", "node_dropout",
           "OwnerRows", "OwnerSharded"]
