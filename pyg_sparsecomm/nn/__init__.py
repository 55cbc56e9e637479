from .gcn_conv import DistributedGCNConv
from .gcn_norm import distributed_gcn_norm

__all__ = ["DistributedGCNConv", "distributed_gcn_norm"]
