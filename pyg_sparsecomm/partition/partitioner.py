"""``SparsityAwarePartitioner``: a PyG transform that attaches a partition and its volumes."""
from __future__ import annotations

import copy
import copyreg
import dataclasses
import hashlib
import inspect
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.transforms import BaseTransform

from ..graph.inputs import with_edge_index
from ..graph.validate import check_edge_index, check_node_tensor
from ..plan.homogeneous import comm_pattern
from ..plan.known_pattern import remember_graph, remember_pattern
from ..plan.stats import CommStats
from .balance import _check_objective, balance_max_send
from .methods import EDGE_FREE_METHODS, INT32_METHODS, METHODS, method_options
from .pickled_arrays import numpy_array, plain_array


class SparsityAwarePartitioner(BaseTransform):
    r"""Partitions the rows of :math:`A` and :math:`H` for sparsity-aware distributed SpMM.

    Returns a shallow copy of ``data`` with

    * ``data.part``: ``LongTensor[num_nodes]``, the rank that owns every node;
    * ``data.num_parts``: the number of parts (the world size to train with);
    * ``data.comm_stats``: a :class:`~pyg_sparsecomm.plan.stats.CommStats` with the
      rows sent and received per SpMM (total, max, avg), message counts and
      compute imbalance that this partition implies.

    The graph is a homogeneous :class:`~torch_geometric.data.Data` given as ``edge_index``
    or as ``adj_t`` (torch sparse CSR/CSC/COO, or ``torch_sparse.SparseTensor``, e.g. from
    ``T.ToSparseTensor()``); an ``adj_t`` comes back as the equivalent ``edge_index``, its
    values as ``edge_weight`` (see :mod:`pyg_sparsecomm.graph.inputs`).  A ``HeteroData`` gets
    ``data[node_type].part`` for every node type, balanced per type, and a
    :class:`~pyg_sparsecomm.plan.hetero.HeteroCommStats` (methods ``"metis"``, ``"random"``,
    ``"contiguous"``; see :mod:`pyg_sparsecomm.partition.hetero`).

    Partitioning (METIS, ...) is the expensive step, so compute it once: use the
    partitioner as the dataset's ``pre_transform`` (the partition is saved with the
    processed dataset), or call it once and keep the result::

        dataset = Planetoid(root, "Cora", pre_transform=SparsityAwarePartitioner(4))
        data = dataset[0]  # carries part, num_parts and comm_stats

    Used as a ``transform`` (re-applied at every ``dataset[i]``) or called again on the same
    graph, it partitions once: the partition of the last graph is kept, keyed by the SHA-256
    of its structure (``edge_index`` and ``num_nodes``) and the partitioner's settings (the
    partition depends on nothing else), and re-used while neither changes.

    Args:
        num_parts (int): number of parts (processes).
        method (str, optional): ``"random"``, ``"contiguous"``, ``"metis"``, ``"hypergraph"``
            (column-net model, km1 = exact volume; needs the ``hypergraph`` extra), ``"kaminpar"``
            (large graphs; the options not given are chosen from the graph, see
            :mod:`~pyg_sparsecomm.partition.kaminpar_defaults`), ``"auto"``, ... (``METHODS``).
            (default: :obj:`"metis"`)
        seed (int, optional): seed of the method; a fixed seed gives the same partition on every rank.
            (default: :obj:`0`)
        balance (str, optional): ``"max_send"`` lowers the maximum send volume per rank, then the maximum
            receive volume (never raising either): refinement of the partition
            (:func:`~pyg_sparsecomm.partition.balance.refine_max_send`) plus send-balanced
            restarts, see :func:`~pyg_sparsecomm.partition.balance.balance_max_send`;
            a method name
            ending in ``"+vb"`` (``"metis+vb"``, ``"hypergraph+vb"``) means the same. (default: :obj:`None`)
        epsilon_balance (float, optional): compute imbalance (max/avg row nonzeros - 1) the balancing may reach.
            (default: :obj:`0.03`)
        max_total_increase (float, optional): the balancing may raise the total volume (rows per SpMM) by at
            most this fraction of the input partition's; on irregular graphs a larger budget buys a
            lower maximum (see ``benchmarks/RESULTS.md``). (default: :obj:`0.1`)
        vb_restarts (int, optional): besides refining the input partition, the balancing tries this many
            send-balanced restarts (multi-constraint METIS with each row's send volume as the
            second constraint, then refinement, see
            :func:`~pyg_sparsecomm.partition.balance.balance_max_send`) and keeps the
            lowest maximum send volume within the bounds above; ``0`` = refinement only. (default: :obj:`4`)
        vb_objective (str, optional): METIS objective of those restarts: ``"vol"`` (total volume), ``"cut"``
            (edge cut), or ``"auto"`` = ``"vol"`` unless the graph has hubs (mean endpoint
            degree above 32, where METIS's volume refinement becomes slow at large P), see
            :func:`~pyg_sparsecomm.partition.balance.restart_objective`. (default: :obj:`"auto"`)
        **options (optional): method options, e.g. ``epsilon``/``backend``/``preset`` for ``"hypergraph"``.
    """

    def __init__(self, num_parts: int, method: str = "metis", seed: int = 0,
                 balance: str | None = None, epsilon_balance: float = 0.03,
                 max_total_increase: float = 0.1, vb_restarts: int = 4, vb_objective: str = "auto",
                 **options) -> None:
        if method.endswith("+vb"):  # "metis+vb" == method="metis", balance="max_send"
            method, balance = method[:-3], balance or "max_send"
        if balance not in (None, "max_send"):
            raise ValueError(f"unknown balance {balance!r}; choose None or 'max_send'")
        if not isinstance(num_parts, int) or num_parts < 1:
            raise ValueError(f"num_parts must be a positive integer, got {num_parts!r}")
        if method not in METHODS:
            raise ValueError(f"unknown partitioning method {method!r}; choose one of {sorted(METHODS)}")
        self.num_parts = num_parts
        self.method = method
        self.seed = seed
        if max_total_increase < 0 or not isinstance(vb_restarts, int) or vb_restarts < 0:
            raise ValueError(f"max_total_increase must be >= 0 and vb_restarts a non-negative integer, "
                             f"got {max_total_increase!r} and {vb_restarts!r}")
        self.balance, self.epsilon_balance = balance, epsilon_balance
        self.max_total_increase, self.vb_restarts = max_total_increase, vb_restarts
        self.vb_objective = _check_objective(vb_objective)
        self.options = options
        params = inspect.signature(METHODS[method]).parameters
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise ValueError(f"method {method!r} takes no option(s) {unknown}; its options: "
                             f"{method_options(method)}")
        # (structure and settings key, partition, stats) of the last graph partitioned
        self._last: tuple[str, Tensor, CommStats] | None = None

    def forward(self, data: Data) -> Data:
        if isinstance(data, HeteroData):
            from .hetero import partition_hetero_data
            return partition_hetero_data(self, data)
        data = with_edge_index(data, self.__class__.__name__)
        num_nodes = data.num_nodes
        if num_nodes is None:
            raise ValueError("data.num_nodes is unknown: set data.num_nodes or data.x")
        check_edge_index(data.edge_index, num_nodes)
        check_node_tensor("x", data.x, num_nodes)
        if self.num_parts > max(num_nodes, 1):
            raise ValueError(f"cannot split {num_nodes} nodes into {self.num_parts} parts")
        edge_index = data.edge_index.cpu()
        key = f"{structure_key(edge_index, num_nodes)};{self._settings()}"
        if self._last is None or self._last[0] != key:
            self._last = (key, *self.partition(edge_index, num_nodes))
        _, part, stats = self._last
        remember_graph(stats, data.edge_index)  # shard(out) and save_partition(out) reuse the pattern
        out = copy.copy(data)
        out.part = part.clone()  # the caller may edit it in place; the cached copy stays intact
        out.num_parts = self.num_parts
        out.comm_stats = stats
        return out

    def partition(self, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, CommStats]:
        """The partition of a graph (``LongTensor[num_nodes]``) and its statistics, computed
        without the cache of :meth:`forward`."""
        part = self.assign(edge_index, num_nodes)
        pattern = comm_pattern(edge_index, part, num_nodes, self.num_parts)
        stats = CommStats.from_pattern(pattern)
        remember_pattern(stats, pattern, edge_index)  # travels with the stats, for shard() (plan/known_pattern.py)
        return part, stats

    @property
    def reads_edges(self) -> bool:
        """Whether :meth:`assign` reads ``edge_index`` (every method but ``"random"`` and
        ``"contiguous"``, and every balancing): the out-of-core writer reads the edges whole only
        then."""
        return self.method not in EDGE_FREE_METHODS or bool(self.balance)

    def assign(self, edge_index: Tensor, num_nodes: int) -> Tensor:
        """The partition alone (``LongTensor[num_nodes]``): the method, then the balancing; for a
        caller that builds its own communication pattern from it (no statistics computed)."""
        if self.reads_edges and (self.method not in INT32_METHODS or self.balance):
            edge_index = edge_index.long()  # int32 ids would overflow the methods' row * N + col keys
        part = METHODS[self.method](edge_index, num_nodes, self.num_parts, self.seed, **self.options)
        if self.balance == "max_send":
            part = balance_max_send(edge_index, num_nodes, part.to(torch.long), self.num_parts,
                                    epsilon=self.epsilon_balance, max_total_increase=self.max_total_increase,
                                    restarts=self.vb_restarts, seed=self.seed, objective=self.vb_objective)
        return part.to(torch.long)

    def _settings(self) -> str:
        """Everything besides the graph that the partition depends on (method, seed, options, ...);
        tensor options (``input_nodes``) by their content, not their abbreviated ``repr``."""
        settings = {k: v for k, v in sorted(vars(self).items()) if k != "_last"}
        settings["options"] = {k: option_value(v) for k, v in sorted(self.options.items())}
        return repr(settings)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_last"] = None  # a pickled transform (DataLoader workers, ...) carries no graph
        return state

    def __repr__(self) -> str:
        opts = "".join(f", {k}={_short(v)}" for k, v in self.options.items())
        if self.balance:
            opts += f", balance={self.balance!r}"
        return f"{self.__class__.__name__}({self.num_parts}, method={self.method!r}, seed={self.seed}{opts})"


def option_value(value: Any) -> Any:
    """A method option as the cache key and the store's source description record it: a tensor
    (e.g. ``input_nodes=data.train_mask``) as its dtype, shape and SHA-256, a batch rule
    (``sampling=NeighborSampling(...)``, a frozen dataclass) as its ``repr``, anything else as is."""
    if isinstance(value, Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        digest = hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()
        return f"Tensor(dtype={str(flat.dtype).replace('torch.', '')}, shape={list(value.shape)}, sha256={digest})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return repr(value)
    return value


def _short(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"Tensor(dtype={str(value.dtype).replace('torch.', '')}, shape={list(value.shape)})"
    return repr(value)


def structure_key(edge_index: Tensor, num_nodes: int) -> str:
    """SHA-256 of a graph's structure: ``num_nodes`` and the bytes of ``edge_index`` (as int64)."""
    h = hashlib.sha256(f"{num_nodes};{list(edge_index.shape)};".encode())
    h.update(edge_index.to(torch.long).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _comm_stats(fields: dict) -> CommStats:
    """Rebuilds a pickled :class:`~pyg_sparsecomm.plan.stats.CommStats` (its arrays as plain numbers:
    :mod:`~pyg_sparsecomm.partition.pickled_arrays`)."""
    return CommStats(**{k: numpy_array(v) for k, v in fields.items()})


def _reduce_comm_stats(stats: CommStats):
    fields = {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats) if f.init}
    return _comm_stats, ({k: plain_array(v) for k, v in fields.items()},)


# ``comm_stats`` pickles as plain numbers through an allow-listed constructor, so a dataset processed with
# the partitioner as ``pre_transform`` loads with ``torch.load(weights_only=True)`` as PyG loads it
# (no numpy globals, no fallback to unsafe loading), and a partitioned graph passes to ``mp.spawn``.
copyreg.pickle(CommStats, _reduce_comm_stats)
torch.serialization.add_safe_globals([_comm_stats])
