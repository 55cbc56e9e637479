"""PyG's models that compute over all nodes, on a shard: ``DeepGraphInfomax`` (:mod:`.deep_graph_infomax`),
``GAE``/``VGAE``/``InnerProductDecoder`` (:mod:`.autoencoder`), ``ARGA``/``ARGVA`` (:mod:`.adversarial`); the
whole graph's node tensors a user's function sees (:mod:`.whole_graph_nodes`), node noise keyed by global ids
(:mod:`.node_noise`), ``RECT_L``'s class centres (:mod:`.rect`),
``LINKX``'s weight rows by global id (:mod:`.sparse_linear`), what the models share (:mod:`.shard_model`),
which class each gets (:mod:`.classes`) and the verdict of every class of ``torch_geometric.nn.models``
(:mod:`.verdicts`)."""
from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

_EXPORTS = {"DistributedARGA": ".adversarial", "DistributedARGVA": ".adversarial", "DistributedGAE": ".autoencoder",
            "DistributedInnerProductDecoder": ".autoencoder", "DistributedVGAE": ".autoencoder",
            "DistributedDeepGraphInfomax": ".deep_graph_infomax", "node_normal": ".node_noise",
            "DistributedRECT_L": ".rect", "DistributedSparseLinear": ".sparse_linear", "MODEL_VERDICTS": ".verdicts",
            "model_table": ".verdicts", "WholeGraphNodes": ".whole_graph_nodes"}

if TYPE_CHECKING:  # pragma: no cover
    from .adversarial import DistributedARGA, DistributedARGVA
    from .autoencoder import DistributedGAE, DistributedInnerProductDecoder, DistributedVGAE
    from .deep_graph_infomax import DistributedDeepGraphInfomax
    from .node_noise import node_normal
    from .rect import DistributedRECT_L
    from .sparse_linear import DistributedSparseLinear
    from .verdicts import MODEL_VERDICTS, model_table
    from .whole_graph_nodes import WholeGraphNodes

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["DistributedDeepGraphInfomax", "DistributedGAE", "DistributedVGAE", "DistributedARGA", "DistributedARGVA",
           "DistributedInnerProductDecoder", "WholeGraphNodes", "node_normal",
           "DistributedRECT_L", "DistributedSparseLinear", "MODEL_VERDICTS", "model_table"]
