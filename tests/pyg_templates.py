"""PyG 2.8 renders a conv class's ``propagate`` once per process, from the class's first instance:
if that instance cannot fuse message and aggregation (``SAGEConv(aggr="lstm")``, ``"std"``, a list
of aggregations), the rendered fused branch raises ``NotImplementedError``, and a later default
instance of the class fails on a sparse ``adj_t``.  Which instance comes first in pytest's process
depends on which modules ran before (under ``-n 2`` each worker runs a different share), so the
conftest renders every class's template from a default instance first, with the package's own
:func:`~pyg_sparsecomm.testing.warm.warm_pyg_templates` (what ``launch``'s fork server does for the
ranks): a template rendered with fusion serves both kinds of instance (each checks its own ``fuse``
at run time)."""
import inspect

import torch_geometric.nn.conv as pyg_conv
from torch_geometric.nn import MessagePassing

from pyg_sparsecomm.testing.warm import warm_pyg_templates


def fusing_classes() -> list[type]:
    """PyG's conv classes that implement ``message_and_aggregate``."""
    classes = (getattr(pyg_conv, name) for name in pyg_conv.__all__)
    return [cls for cls in classes if inspect.isclass(cls) and issubclass(cls, MessagePassing)
            and cls.message_and_aggregate is not MessagePassing.message_and_aggregate]


def render_fused_templates() -> None:
    """Renders every conv class's template from a default instance; raises unless every fusing
    class's rendered ``propagate`` calls ``message_and_aggregate``."""
    warm_pyg_templates()  # restores the random number generator's state
    unfused = [cls.__name__ for cls in fusing_classes() if not hasattr(cls, "_jinja_propagate")
               or "self.message_and_aggregate(" not in inspect.getsource(cls._jinja_propagate)]
    assert not unfused, f"PyG's propagate of {unfused} was rendered without fusion"
