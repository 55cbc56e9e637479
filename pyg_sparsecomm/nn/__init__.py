from .distribute import distribute, refusal, summary
from .dropout import NodeDropout, node_dropout
from .gcn_conv import DistributedGCNConv
from .gcn_norm import distributed_gcn_norm
from .layer_rules import GcnNormalisation, LayerRule, layer_rule, layer_table, register_layer_rule

__all__ = ["DistributedGCNConv", "distribute", "summary", "refusal", "LayerRule", "GcnNormalisation",
           "register_layer_rule", "layer_rule", "layer_table", "distributed_gcn_norm", "NodeDropout", "node_dropout"]
