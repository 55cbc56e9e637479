from .gcn_conv import DistributedGCNConv
from .dropout import NodeDropout, node_dropout
from .gcn_norm import distributed_gcn_norm

__all__ = ["DistributedGCNConv", "distributed_gcn_norm", "NodeDropout", "node_dropout"]
