from .distribute import REFUSED, distribute, refusal, summary
from .dropout import NodeDropout, node_dropout
from .gcn_conv import DistributedGCNConv
from .gcn_norm import distributed_gcn_norm

__all__ = ["DistributedGCNConv", "distribute", "summary", "refusal", "REFUSED", "distributed_gcn_norm", "NodeDropout",
           "node_dropout"]
