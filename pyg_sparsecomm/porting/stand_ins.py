"""PyG's ``NeighborLoader`` for the single-process side of a check: it draws with a random stream
no port can reproduce (and needs pyg-lib or torch-sparse), so the check gives the PyG script the
batches :class:`~pyg_sparsecomm.loader.DistributedNeighborLoader` draws from its default seed
(:func:`~pyg_sparsecomm.sampling.global_batches`), as plain PyG batches: the batch's nodes
(seeds first) with their node attributes, its edges renumbered, ``n_id``, ``e_id`` and
``batch_size``.

Where the script asks PyG for draws the package does not make (``replace=True``, ``disjoint=True``,
``subgraph_type="induced"``, ``weight_attr``, ...: options the stand-in does not take), no port
draws its batches: the stand-in still gives the script the package's batches, so that both sides
train on the same fixed first batch, and :data:`FIRST_STEP_ONLY` says why the check compares the
first step only (its loss, gradients and parameters).  Uses it cannot stand for at all
(heterogeneous graphs, positional options) keep PyG's loader; :data:`UNREPRODUCIBLE` then names them.
"""
from typing import Any

import torch
from torch_geometric.data import Data

from ..sampling import NeighborSampling, global_batches

#: the loaders a run used whose draws no port reproduces (each a sentence)
UNREPRODUCIBLE: list[str] = []
#: the loaders given the package's batches (each a sentence)
REPLACED: list[str] = []
#: the loaders whose options draw what no port draws, given the package's batches all the same (each
#: a sentence): the check compares the first step only
FIRST_STEP_ONLY: list[str] = []
#: PyG keywords the stand-in takes without a change of meaning
_HARMLESS = {"num_workers", "persistent_workers", "pin_memory", "prefetch_factor", "filter_per_worker"}
#: PyG keywords the stand-in takes at PyG's default value (another value draws what the package does not)
_DEFAULTS: dict[str, Any] = {"replace": False, "disjoint": False, "subgraph_type": "directional", "directed": True,
                             "time_attr": None, "input_time": None, "weight_attr": None}
#: PyG keywords the stand-in takes as DistributedNeighborLoader does
_OWN = {"batch_size", "input_nodes", "shuffle", "drop_last", "transform"}


class StandInNeighborLoader:
    """``NeighborLoader(data, num_neighbors, batch_size, input_nodes, shuffle)`` yielding the
    package's global batches of a homogeneous ``Data`` (one epoch per iteration)."""

    def __init__(self, data: Data, num_neighbors: Any, batch_size: int = 1, input_nodes: Any = None,
                 shuffle: bool = False, drop_last: bool = False, transform: Any = None) -> None:
        self.data, self.input_nodes, self.epoch, self.transform = data, input_nodes, 0, transform
        self.sampling = NeighborSampling(batch_size=batch_size, shuffle=bool(shuffle), seed=0,
                                         num_neighbors=tuple(num_neighbors), drop_last=bool(drop_last))
        count = data.num_nodes if input_nodes is None else int(
            input_nodes.sum() if input_nodes.dtype == torch.bool else input_nodes.numel())
        self.num_batches = self.sampling.num_batches(count)

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Any:
        data, epoch = self.data, self.epoch
        self.epoch += 1
        for batch in global_batches(data.edge_index, data.num_nodes, self.sampling, self.input_nodes, epoch):
            out = self._batch(batch)
            yield out if self.transform is None else self.transform(out)

    def _batch(self, batch: Any) -> Data:
        data, position = self.data, torch.full((self.data.num_nodes,), -1)
        position[batch.n_id] = torch.arange(batch.n_id.numel())
        out = Data(edge_index=position[data.edge_index[:, batch.e_id]], n_id=batch.n_id, e_id=batch.e_id,
                   batch_size=batch.num_seeds)
        for key, value in data.items():
            if key == "edge_index" or not torch.is_tensor(value):
                continue
            if data.is_node_attr(key):
                out[key] = value[batch.n_id]
            elif data.is_edge_attr(key):
                out[key] = value[batch.e_id]
        out.num_nodes = batch.n_id.numel()
        return out


def _at_default(key: str, value: Any) -> bool:
    return key in _DEFAULTS and isinstance(value, (bool, str, type(None))) and value == _DEFAULTS[key]


def neighbor_loader(pyg_loader: type) -> type:
    """A ``NeighborLoader`` class that is the stand-in where it can be (with options that draw what the
    package does not: named in :data:`FIRST_STEP_ONLY`), else PyG's ``pyg_loader`` (named in
    :data:`UNREPRODUCIBLE`)."""

    def make(data: Any, num_neighbors: Any = None, *args: Any, **kwargs: Any) -> Any:
        drawn = {k: v for k, v in kwargs.items() if k not in _HARMLESS | _OWN and not _at_default(k, v)}
        homogeneous = isinstance(data, Data) and isinstance(num_neighbors, (list, tuple)) and not args
        input_nodes = kwargs.get("input_nodes")
        if homogeneous and (input_nodes is None or torch.is_tensor(input_nodes)):
            REPLACED.append("PyG's NeighborLoader: given the package's batches (DistributedNeighborLoader's, seed 0)")
            if drawn:
                options = ", ".join(f"{k}={v!r}" for k, v in sorted(drawn.items()))
                FIRST_STEP_ONLY.append(f"PyG's NeighborLoader({options}) draws batches of its own (PyG's random "
                                       "stream, not the package's: no port reproduces them)")
            return StandInNeighborLoader(data, num_neighbors, **{k: v for k, v in kwargs.items() if k in _OWN})
        UNREPRODUCIBLE.append("PyG's NeighborLoader (a heterogeneous graph or positional options): its own "
                              "random stream, which no port reproduces")
        return pyg_loader(data, num_neighbors, *args, **kwargs)
    return make  # type: ignore[return-value]


def install() -> None:
    """Puts :func:`neighbor_loader` in place of ``torch_geometric.loader.NeighborLoader``."""
    import torch_geometric.loader as pyg_loader
    pyg_loader.NeighborLoader = neighbor_loader(pyg_loader.NeighborLoader)
