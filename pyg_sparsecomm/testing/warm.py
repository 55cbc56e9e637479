"""Imported by :func:`pyg_sparsecomm.testing.processes.launch`'s fork server only: builds one instance of each
of PyG's conv classes (and ``DistributedGCNConv``) there, so that PyG's per-class code generation
runs once in the server.

PyG renders a Jinja template into a temporary module for each ``MessagePassing`` class the first
time a process builds one (``MessagePassing._set_jittable_templates``): about 0.1 s per class and
process, and one file left in the temporary directory each time.  Processes forked from the server
inherit the generated modules, so a job's ranks no longer each pay it for every class they use.
The random number generator's state is restored afterwards: a worker starts from the same state
as without this module.
"""
import inspect
import warnings

import torch
import torch_geometric.nn.conv as pyg_conv
from torch_geometric.nn import MessagePassing

from ..nn.gcn_conv import DistributedGCNConv

#: constructor arguments tried in turn (the first that builds counts; a class none fits is skipped)
_ATTEMPTS: tuple[tuple, ...] = ((4, 4), (4, 4, 1), (torch.nn.Linear(4, 4),), (4, 4, 1, 1), (4,), (), ((4, 4), 4),
                                (8, 8), (torch.nn.Linear(8, 4), 2), (4, 4, 2, 2, 2))
_KEYWORDS: tuple[dict, ...] = (
    {}, {"K": 1, "alpha": 0.1}, {"metadata": (["a"], [("a", "to", "a")])},
    {"aggregators": ["mean"], "scalers": ["identity"], "deg": torch.tensor([1])},
    {"num_node_types": 1, "num_edge_types": 1, "edge_type_emb_dim": 2, "edge_dim": 2, "edge_attr_emb_dim": 2})


def warm_pyg_templates() -> list[str]:
    """Builds one instance of every ``MessagePassing`` class of ``torch_geometric.nn.conv`` that one of
    the simple argument lists fits; returns the names built."""
    state = torch.get_rng_state()
    built = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in pyg_conv.__all__:
                cls = getattr(pyg_conv, name)
                if inspect.isclass(cls) and issubclass(cls, MessagePassing) and cls is not MessagePassing:
                    if _build_one(cls):
                        built.append(name)
            DistributedGCNConv(4, 4)  # a MessagePassing subclass of its own
            built.append(DistributedGCNConv.__name__)
    finally:
        torch.set_rng_state(state)
    return built


def _build_one(cls: type) -> bool:
    for args in _ATTEMPTS:
        for kwargs in _KEYWORDS:
            try:
                cls(*args, **kwargs)
                return True
            except Exception:  # noqa: BLE001, S112 -- this argument list does not fit the class: try the next
                continue
    return False


WARMED = warm_pyg_templates()
