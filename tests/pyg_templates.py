"""PyG 2.8 renders a conv class's ``propagate`` once per process, from the class's first instance:
if that instance cannot fuse message and aggregation (``SAGEConv(aggr="lstm")``, ``"std"``, a list
of aggregations), the rendered fused branch raises ``NotImplementedError``, and a later default
instance of the class fails on a sparse ``adj_t``.  Which instance comes first in pytest's process
depends on which modules ran before (under ``-n 2`` each worker runs a different share), so the
conftest renders every fusing class's template from a default instance first: a template rendered
with fusion serves both kinds of instance (each checks its own ``fuse`` at run time)."""
import inspect

import torch
import torch_geometric.nn.conv as pyg_conv
from torch_geometric.nn import MessagePassing

#: constructor arguments of a default instance, where ``(4, 4)`` does not build one
ARGUMENTS = {"SimpleConv": (), "WLConvContinuous": (), "LGConv": (), "SSGConv": (4, 4, 0.1),
             "RGCNConv": (4, 4, 2), "FastRGCNConv": (4, 4, 2), "SignedConv": (4, 4, True), "PANConv": (4, 4, 2),
             "EGConv": (8, 8), "PDNConv": (4, 4, 2, 4)}


def fusing_classes() -> list[type]:
    """PyG's conv classes that implement ``message_and_aggregate``."""
    classes = (getattr(pyg_conv, name) for name in pyg_conv.__all__)
    return [cls for cls in classes if inspect.isclass(cls) and issubclass(cls, MessagePassing)
            and cls.message_and_aggregate is not MessagePassing.message_and_aggregate]


def render_fused_templates() -> None:
    """Builds one default instance of every fusing class (raises if one cannot be built, or does not fuse)."""
    with torch.random.fork_rng():  # the instances draw parameters: the global stream stays as it was
        for cls in fusing_classes():
            instance = cls(*ARGUMENTS.get(cls.__name__, (4, 4)))
            assert instance.fuse, f"{cls.__name__}{ARGUMENTS.get(cls.__name__, (4, 4))} does not fuse: pick arguments"
