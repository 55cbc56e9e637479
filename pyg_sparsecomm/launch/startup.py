"""Start-up of a ported PyG script: the dataset processed once, then this rank's shard.

A single-process script builds its dataset and takes the graph::

    dataset = Planetoid(root, "Cora", transform=T.NormalizeFeatures())
    data = dataset[0]

Across processes, every rank constructing the dataset on a fresh root would race on its processed
files (``PytorchStreamReader failed reading file``); importing the package locks a PyG dataset's
download and processing (:mod:`~pyg_sparsecomm.graph.dataset_lock`), so the dataset line stays, and
:func:`rank_zero_first` does the same with a broadcast for any other callable.  Every rank needs the
same partition::

    dataset = Planetoid(root, "Cora", transform=T.NormalizeFeatures())
    data = partition_and_shard(dataset[0])      # data.edge_index / data.adj_t: the shard's HaloAdj

Both join ``torchrun``'s job first if the script did not (:func:`~pyg_sparsecomm.launch.runtime.join_job`),
and both pass through on one process.
"""
import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch_geometric.data import Data, HeteroData

from ..comm.group import collective_device, global_rank, host_all_gather, is_distributed, raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.offline import refusing_downloads
from ..link.hetero_split_shards import is_hetero_link_split, same_hetero_split, with_hetero_pairs
from ..link.split_shards import is_link_split, same_split, with_pairs, without_pairs
from ..partition import SparsityAwarePartitioner
from ..partition._threads import usable_cores
from ..partition.hypergraph import default_hypergraph_threads
from ..partition.kaminpar_backend import default_kaminpar_threads
from ..plan.stats import CommStats
from ..store.rank_data import shard
from .runtime import join_job


def _agree(error: BaseException | None, group: dist.ProcessGroup | None) -> str | None:
    """Rank 0's outcome on every rank: ``None`` if it succeeded, else its error as text (a
    one-element broadcast, which also makes the others wait for rank 0; the text only on error)."""
    flag = torch.tensor([int(error is None)], device=collective_device(group))
    src = global_rank(group, 0)
    dist.broadcast(flag, src=src, group=group)
    if bool(flag.item()):
        return None
    message = [f"{type(error).__name__}: {error}" if error is not None else None]
    dist.broadcast_object_list(message, src=src, group=group)
    return str(message[0])


@contextmanager
def _rank_zero_first_block(group: dist.ProcessGroup | None) -> Iterator[None]:
    join_job()
    with refusing_downloads(), _rank_zero_first_steps(group):
        yield


@contextmanager
def _rank_zero_first_steps(group: dist.ProcessGroup | None) -> Iterator[None]:
    if group_world_size(group) == 1:
        yield
        return
    if group_rank(group) != 0:
        error = _agree(None, group)
        if error is not None:
            raise RuntimeError(f"rank 0 failed inside rank_zero_first() ({error}); this rank skipped the block")
        yield
        return
    try:
        yield
    except BaseException as raised:
        _agree(raised, group)
        raise
    _agree(None, group)


def rank_zero_first(fn: Callable[..., Any] | None = None, *, group: dist.ProcessGroup | None = None):
    """Runs a block (or a call) on rank 0 first, then on the other ranks: a dataset's download and
    processing happen once, and the others load the processed files.  A PyG dataset needs no wrap
    (importing the package locks its download and processing: :mod:`~pyg_sparsecomm.graph.dataset_lock`);
    this is for the others (OGB's NumPy ``NodePropPredDataset``, a script's own preprocessing).

    As a context manager::

        with rank_zero_first():
            dataset = Planetoid(root, "Cora", transform=T.NormalizeFeatures())

    or wrapping a callable (one line, whatever the dataset class)::

        dataset = rank_zero_first(Planetoid)(root, "Cora", transform=T.NormalizeFeatures())

    If rank 0 raises inside, it re-raises and the other ranks raise ``RuntimeError`` without
    running the block.  The other ranks wait in a broadcast, so processing that takes longer
    than the process group's timeout needs a longer ``timeout`` in ``init_process_group``.  The
    root must be on a file system the ranks share (one machine, or a shared directory).
    Without ``torchrun`` (one process) the block just runs; under ``torchrun`` the process group
    is initialised first if it is not yet.  With ``PYG_SPARSECOMM_OFFLINE`` set
    (:data:`~pyg_sparsecomm.graph.offline.OFFLINE_ENV`), a PyG dataset built inside whose raw files
    are missing never tries to download them: rank 0 raises ``FileNotFoundError`` naming the
    files and the folder to copy them into, and the other ranks raise that message.

    Args:
        fn (Callable[..., Any], optional): a callable to wrap (``Planetoid``, ``OGB``'s ``PygNodePropPredDataset``,
            ...); ``None`` returns the context manager. (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks that wait for rank 0 of ``group`` (default: all).
    """
    if fn is None:
        return _rank_zero_first_block(group)

    def call(*args, **kwargs):
        with _rank_zero_first_block(group):
            return fn(*args, **kwargs)
    return call


def partition_and_shard(data: Data | tuple[Data, ...], method: str = "metis", seed: int = 0,
                        group: dist.ProcessGroup | None = None, **options) -> Any:
    """This rank's shard of ``data``, partitioned into one part per rank of ``group``.

    Rank 0 runs ``SparsityAwarePartitioner(num_parts=world_size, method, seed, **options)``
    (unless ``data`` already carries a ``part`` for this world size, e.g. from a
    ``pre_transform``) and broadcasts the partition, so every rank shards the same one (and the
    partitioner runs once, not once per rank).  The shard is :func:`~pyg_sparsecomm.shard`'s,
    and takes the place of the graph in the script: besides ``adj``, the shard's
    :class:`~pyg_sparsecomm.HaloAdj` is also ``edge_index`` (without values, as PyG's
    ``edge_index``: weights only where ``data.edge_weight`` is passed) or ``adj_t`` if ``data`` was
    given as ``adj_t``, e.g. by ``T.ToSparseTensor()`` (with its values, as PyG's ``adj_t``), so
    ``model(data.x, data.edge_index)`` runs unchanged on a ``distribute()``d model.  On one
    process it is the one-part shard.

    A link split, PyG's ``RandomLinkSplit`` output ``(train_data, val_data, test_data)``, gives the
    tuple of their shards (:mod:`~pyg_sparsecomm.link.split_shards`): rank 0's split on every rank
    (with its Python ``random`` state), the training graph partitioned, every split sharded with
    that partition, and each shard's ``edge_label_index`` the pairs whose source the rank owns (a
    :class:`~pyg_sparsecomm.link.pair_index.PairIndex`: ``z[edge_label_index[0]]`` works), with
    their ``edge_label``.  A heterogeneous link split (``RandomLinkSplit(edge_types=...,
    rev_edge_types=...)`` of a ``HeteroData``) gives the tuple of its heterogeneous shards
    (:mod:`~pyg_sparsecomm.link.hetero_split_shards`): every relation's ``edge_index`` is its
    adjacency on the shard (``local.edge_index_dict`` is ``local.adj_dict``), and a supervised
    relation's ``edge_label_index`` a :class:`~pyg_sparsecomm.link.hetero_pair_index.HeteroPairIndex`
    (``row, col = edge_label_index``; ``z_dict[src][row]`` works), with its ``edge_label``.

    Args:
        data (torch_geometric.data.Data): the whole graph (the same on every rank), as ``edge_index`` or ``adj_t``, or a
            link split of graphs (a ``HeteroData`` that is no link split is refused, naming its path:
            ``SparsityAwarePartitioner`` and ``shard``).
        method (str, optional): partitioning method (see :class:`~pyg_sparsecomm.SparsityAwarePartitioner`).
            (default: :obj:`"metis"`)
        seed (int, optional): seed of the method. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): process group to train in (default: all ranks).
        **options (optional): further arguments of :class:`~pyg_sparsecomm.SparsityAwarePartitioner`.
    """
    if is_link_split(data):
        return _shard_link_split(data, method, seed, group, **options)
    if is_hetero_link_split(data):
        return _shard_hetero_link_split(data, method, seed, group, **options)
    if isinstance(data, HeteroData):
        raise TypeError("partition_and_shard takes a homogeneous Data; a HeteroData is partitioned on every rank "
                        "(the methods are deterministic for a seed), then sharded: data = SparsityAwarePartitioner("
                        "num_parts=world_size)(hetero_data); local = shard(data); and the model takes "
                        "local.adj_dict where it took edge_index_dict: model(local.x_dict, local.adj_dict)")
    join_job()
    world_size = group_world_size(group)
    if getattr(data, "part", None) is None or int(getattr(data, "num_parts", -1)) != world_size:
        data = partition_on_rank_zero(SparsityAwarePartitioner(world_size, method=method, seed=seed, **options),
                                      data, group)
    local = shard(data, group=group)  # of a graph given as adj_t, local.adj_t is its adj
    if "adj_t" not in local:  # PyG's edge_index carries no weights: a layer uses local.edge_weight only where passed
        local.edge_index = local.adj.with_value(None)
    return local


def _shard_link_split(splits, method: str, seed: int, group: dist.ProcessGroup | None,
                      **options) -> tuple[Data, ...]:
    """The shards of a link split (see :mod:`~pyg_sparsecomm.link.split_shards`): rank 0's split,
    the training graph partitioned once, every split's graph sharded with that partition."""
    join_job()
    splits = same_split(splits, group)
    world_size = group_world_size(group)
    train = partition_on_rank_zero(SparsityAwarePartitioner(world_size, method=method, seed=seed, **options),
                                   without_pairs(splits[0]), group)
    shards = []
    for split in splits:
        graph = without_pairs(split)
        graph.part, graph.num_parts, graph.comm_stats = train.part, train.num_parts, train.comm_stats
        shards.append(with_pairs(partition_and_shard(graph, group=group), split, train.part, group))
    return tuple(shards)


def _shard_hetero_link_split(splits, method: str, seed: int, group: dist.ProcessGroup | None,
                             **options) -> tuple[HeteroData, ...]:
    """The shards of a heterogeneous link split (see :mod:`~pyg_sparsecomm.link.hetero_split_shards`):
    rank 0's split, its training graph partitioned once (on rank 0, then broadcast), every split's
    graph sharded with that partition."""
    join_job()
    splits = same_hetero_split(splits, group)
    world_size = group_world_size(group)
    partitioner = SparsityAwarePartitioner(world_size, method=method, seed=seed, **options)
    train = raise_together(lambda: partitioner(splits[0]) if group_rank(group) == 0 else None,
                           "partition_and_shard", group)
    message: list[Any] = [None if train is None else ({t: train[t].part for t in train.node_types}, train.comm_stats)]
    if is_distributed(group) and world_size > 1:
        dist.broadcast_object_list(message, src=global_rank(group, 0), group=group, device=collective_device(group))
    parts, stats = message[0]
    shards = []
    for split in splits:
        graph = copy.copy(split)
        for node_type, part in parts.items():
            graph[node_type].part = part
        graph.num_parts, graph.comm_stats = world_size, stats
        shards.append(with_hetero_pairs(shard(graph, group=group), parts, group))
    return tuple(shards)


def partition_on_rank_zero(partitioner: SparsityAwarePartitioner, data: Data,
                           group: dist.ProcessGroup | None = None) -> Data:
    """``partitioner(data)`` computed once, on rank 0 of ``group``, and given to every rank.

    Every rank of a job holding the same graph needs the same partition; running the
    partitioner in each of them costs ``P`` times its time on the machine's cores (the
    hypergraph methods take seconds already on graphs of a few thousand nodes).  Here rank 0
    runs it and broadcasts ``part`` and ``comm_stats``, so every rank returns what
    ``partitioner(data)`` returns.  If rank 0 raises, it re-raises and the other ranks raise
    ``RuntimeError`` naming rank 0's error.  On one process it is ``partitioner(data)``.

    The other ranks wait meanwhile, so Mt-KaHyPar (the hypergraph methods) runs on rank 0 with
    as many threads as the cores the process may use, not ``torch.get_num_threads()`` (one under
    ``torchrun``), unless :func:`~pyg_sparsecomm.partition.set_hypergraph_threads` chose a count
    or rank 0 already partitioned with it (its pool then keeps that count for the process).
    KaMinPar (``"kaminpar"``, and ``"auto"`` when it picks it) gets that many threads too unless
    the partitioner names ``threads``.

    Args:
        partitioner (SparsityAwarePartitioner): the :class:`~pyg_sparsecomm.SparsityAwarePartitioner` to run.
        data (torch_geometric.data.Data): the whole graph, the same on every rank.
        group (torch.distributed.ProcessGroup, optional): the ranks that share the partition (default: all).
    """
    if isinstance(data, HeteroData):
        raise TypeError("partition_on_rank_zero takes a homogeneous Data; partition a HeteroData with "
                        "partitioner(data) on every rank (its methods are deterministic for a seed)")
    join_job()
    if not is_distributed(group) or group_world_size(group) == 1:
        return partitioner(data)
    _check_same_graph_size(data, group)
    part = torch.empty(data.num_nodes, dtype=torch.long)
    stats: list[CommStats | None] = [None]
    if group_rank(group) == 0:
        try:
            cores = usable_cores()
            with default_hypergraph_threads(cores), default_kaminpar_threads(cores):
                done = partitioner(data)
            part, stats = done.part, [done.comm_stats]
        except BaseException as raised:
            _agree(raised, group)
            raise
    error = _agree(None, group)
    if error is not None:
        raise RuntimeError(f"rank 0 failed to partition the graph ({error})")
    device = collective_device(group)
    buffer = part.to(device) if device is not None else part
    dist.broadcast(buffer, src=global_rank(group, 0), group=group)
    dist.broadcast_object_list(stats, src=global_rank(group, 0), group=group, device=device)
    out = copy.copy(data)
    out.part, out.num_parts, out.comm_stats = buffer.cpu(), partitioner.num_parts, stats[0]
    return out


def _check_same_graph_size(data: Data, group: dist.ProcessGroup | None) -> None:
    """Raises ``ValueError`` on every rank unless every rank holds as many nodes and edges: rank 0's
    partition of another graph would be taken for this rank's (a broadcast into a buffer of another
    length fills it only in part)."""
    sizes = [tuple(s) for s in host_all_gather([int(data.num_nodes), int(data.num_edges)], group)]
    if len(set(sizes)) > 1:
        by_rank = ", ".join(f"rank {r}: {n} nodes, {e} edges" for r, (n, e) in enumerate(sizes))
        raise ValueError(f"partition_on_rank_zero: the ranks hold different graphs ({by_rank}): every rank must "
                         f"pass the same graph (the same dataset call, transforms seeded alike on every rank)")
