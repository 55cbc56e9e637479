"""Which distributed class ``distribute()`` swaps in for PyG's models that compute over all nodes, and
for a user's subclass of one.

PyG's own classes have rules (:mod:`~pyg_sparsecomm.nn.rules.pyg`) whose ``distributed_class`` is
swapped in as for norms.  A user's subclass (``class Net(GAE)``) gets the distributed methods too,
in a class built for it (the distributed mixin before the user's class, so its own ``__init__``,
``encode`` and helpers still run) — unless it overrides a method the distributed class computes
over all ranks (``recon_loss``, ``loss``, ``test``, ...), which would run on this rank's rows only:
then ``distribute()`` refuses it, naming the method.
"""
import torch
import torch.distributed as dist
from torch_geometric.nn.models import ARGA, ARGVA, GAE, VGAE, DeepGraphInfomax, InnerProductDecoder

from .adversarial import DistributedARGA, DistributedARGVA
from .autoencoder import DistributedGAE, DistributedInnerProductDecoder, DistributedVGAE
from .deep_graph_infomax import DistributedDeepGraphInfomax
from .shard_model import ShardModel

#: PyG's class, its distributed class and the methods that replaces (most derived first)
MODELS: tuple[tuple[type, type, tuple[str, ...]], ...] = (
    (ARGVA, DistributedARGVA, ("recon_loss", "test", "reg_loss", "discriminator_loss")),
    (ARGA, DistributedARGA, ("recon_loss", "test", "reg_loss", "discriminator_loss")),
    (VGAE, DistributedVGAE, ("recon_loss", "test", "reparametrize", "kl_loss")),
    (GAE, DistributedGAE, ("recon_loss", "test")),
    (DeepGraphInfomax, DistributedDeepGraphInfomax, ("forward", "loss", "test")),
    (InnerProductDecoder, DistributedInnerProductDecoder, ()),
)
_BUILT: dict[type, type] = {}


def _model_of(cls: type) -> tuple[type, type, tuple[str, ...]] | None:
    return next((entry for entry in MODELS if issubclass(cls, entry[0])), None)


def model_refusal(module: torch.nn.Module) -> str | None:
    """Why a user's subclass of one of PyG's models of :data:`MODELS` cannot be distributed (see the
    module doc), or ``None``.

    Args:
        module (torch.nn.Module): any module of the model.
    """
    cls = type(module)
    entry = _model_of(cls)
    if entry is None or issubclass(cls, entry[1]) or cls is entry[0]:
        return None
    base, _, replaced = entry
    overridden = [name for name in replaced if getattr(cls, name) is not getattr(base, name)]
    if not overridden:
        return None
    return (f"overrides {', '.join(overridden)} of PyG's {base.__name__}, which distribute() computes over all "
            f"nodes of all ranks (yours would run on this rank's rows only): compute it from the model's "
            f"distributed methods, or leave it to {base.__name__}'s")


def convert_model(module: torch.nn.Module, group: dist.ProcessGroup | None) -> None:
    """Gives a module of PyG's models of :data:`MODELS` (or a user's subclass) its distributed class,
    in place, and attaches it to ``group`` (a collective); other modules are left alone.

    Args:
        module (torch.nn.Module): any module of the model (after its rule's class swap).
        group (torch.distributed.ProcessGroup): the ranks the graph is sharded over (``None``: all).
    """
    entry = _model_of(type(module))
    if entry is not None and not isinstance(module, entry[1]):
        module.__class__ = _built(type(module), entry[1])
    if isinstance(module, ShardModel):
        module.attach_shard(group)


def _built(cls: type, distributed: type) -> type:
    """The distributed class of a user's subclass ``cls``: ``distributed`` (its methods first), then ``cls``."""
    if cls not in _BUILT:
        _BUILT[cls] = type(f"Distributed{cls.__name__}", (distributed, cls), {"__module__": cls.__module__})
    return _BUILT[cls]
