"""PyG layers trained full-graph across processes: :func:`distribute` and the public layers.

``nn/`` holds the public layers (this folder), the rules of what ``distribute`` does with each
layer class (:mod:`.rules`: the registry, a leaf, and PyG's own rules, registered into it on
import) and the layer-call runtime (:mod:`.runtime`: the compiled :class:`~.runtime.plan.LayerPlan`,
the per-call :class:`~.runtime.call.LayerCall`, the hooks and the one halo port).
:mod:`.owner_sharded` is how a module declares parameters sharded by owner (LightGCN's table), which
checkpoints save and restore row by row.
"""
from .distribute import distribute, refusal, summary
from .dropout import NodeDropout, node_dropout
from .gcn_conv import DistributedGCNConv
from .gcn_norm import distributed_gcn_norm
from .owner_sharded import OwnerRows, OwnerSharded
from .rules.registry import GcnNormalisation, LayerRule, layer_rule, layer_table, register_layer_rule

__all__ = ["DistributedGCNConv", "distribute", "summary", "refusal", "LayerRule", "GcnNormalisation",
           "register_layer_rule", "layer_rule", "layer_table", "distributed_gcn_norm", "NodeDropout", "node_dropout",
           "OwnerRows", "OwnerSharded"]
