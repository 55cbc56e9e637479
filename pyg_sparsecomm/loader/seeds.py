r"""Which of a rank's rows are seed candidates: PyG's ``input_nodes``, read over a shard.

PyG's ``NeighborLoader(data, input_nodes=...)`` takes an index of node ids or a bool mask over
``data``'s nodes.  The distributed loaders take the same arguments, over the *whole* graph, and
each rank keeps the candidates it owns; a mask over the shard's rows is accepted too:

* an integer tensor is always a list of **global** node ids (e.g. OGB's ``split_idx["train"]``):
  rank ``r`` keeps :math:`\{i : n\_id_i \in \text{input\_nodes}\}`;
* a bool mask of length ``N`` (the graph's nodes, e.g. ``data.train_mask``) is read at the
  rank's global ids, :math:`\text{mask}[n\_id]`;
* a bool mask of length ``num_owned`` (the shard's rows, e.g. ``local.train_mask``) is taken
  as it is;
* a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (rows of the shard: ``local.train_idx`` of
  a graph that carried ``train_idx``, or ``shard_index(split_idx, local)['train']``) is read as
  rows of this shard, and refused if it indexes another shard's rows.

A mask whose length is both ``N`` and ``num_owned`` (one rank owns every node) is ambiguous
unless the shard keeps the global order (``n_id = 0 .. N - 1``, where both readings agree):
then it raises, naming the unambiguous forms.  Anything else raises naming the fix.

Every rank also knows the whole seed set (:func:`global_seed_ids`, gathered once), so it can count
the seeds of every batch of an epoch without talking (:func:`seeds_per_batch`): ``len(loader)``
and the batches skipped for having no seed are the same on every rank, known before an epoch starts.
"""
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.group import world_size
from ..graph.node_index import ShardIndex
from ..sampling.rules import NeighborSampling, NodeSubsetSampling
from ..training.whole_graph import global_count

_CHUNK = 1 << 20  # ids hashed at a time when every node is a seed (bounds the temporary arrays)

_FORMS = ("pass global node ids (an int64 index such as split_idx['train']), a bool mask over all nodes "
          "(data.train_mask), a bool mask over this rank's shard rows (local.train_mask) or an index of the "
          "shard's rows (local.train_idx, shard_index(split_idx, local)['train'])")


def owned_seed_mask(input_nodes: Tensor | None, n_id: Tensor, num_nodes: int) -> Tensor:
    """``[num_owned]`` bool mask of this rank's rows that are seed candidates (see the module docstring).

    Args:
        input_nodes (torch.Tensor): ``None`` (every node), global ids, a bool mask over all nodes or the shard's
            rows, or a ``ShardIndex`` of the shard's rows.
        n_id (torch.Tensor): ``[num_owned]`` global id of every row of the shard.
        num_nodes (int): ``N``, the graph's number of nodes.
    """
    n_id = n_id.cpu()
    num_owned = n_id.numel()
    if input_nodes is None:
        return torch.ones(num_owned, dtype=torch.bool)
    if isinstance(input_nodes, (str, tuple)):
        raise ValueError(f"input_nodes={input_nodes!r} names a node type (heterogeneous graphs), which the "
                         f"distributed loaders do not support: {_FORMS}")
    if not isinstance(input_nodes, Tensor):
        raise TypeError(f"input_nodes must be a tensor, got {type(input_nodes).__name__}: {_FORMS}")
    if isinstance(input_nodes, ShardIndex):
        return _shard_rows(input_nodes, num_owned, num_nodes)
    input_nodes = input_nodes.detach().cpu()
    if input_nodes.dim() != 1:
        raise ValueError(f"input_nodes must be one-dimensional, got shape {list(input_nodes.shape)}: {_FORMS}")
    if input_nodes.dtype == torch.bool:
        return _mask(input_nodes, n_id, num_nodes)
    if input_nodes.is_floating_point() or input_nodes.is_complex() or input_nodes.dtype == torch.uint8:
        raise ValueError(f"input_nodes has dtype {input_nodes.dtype}: {_FORMS}")
    return _global_ids(input_nodes.long(), n_id, num_nodes)


def check_in_order(input_nodes: Tensor | None, sampling: NeighborSampling | NodeSubsetSampling, loader: str) -> None:
    """Raises ``ValueError`` naming the fix when a neighbour loader without ``shuffle`` (batches of
    the seeds in ascending order) is given seed ids in another order, which PyG's loader would keep
    (a script concatenating the batches' seed rows would get them in another order, silently)."""
    if sampling.shuffle or not isinstance(sampling, NeighborSampling) or not isinstance(input_nodes, Tensor):
        return
    ids = input_nodes.rows() if isinstance(input_nodes, ShardIndex) else input_nodes
    if ids.dtype == torch.bool or ids.dim() != 1 or ids.numel() < 2 or ids.is_floating_point():
        return
    ids = ids.detach()
    if not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError(f"{loader}(shuffle=False) cuts the seeds in ascending id order into batches, but input_nodes "
                         f"holds ids in another order (PyG's loader would keep it, and a script concatenating the "
                         f"batches' seed rows would get them reordered): pass torch.sort(input_nodes).values (and "
                         f"read the outputs in that order), a bool mask, or shuffle=True")


def _mask(mask: Tensor, n_id: Tensor, num_nodes: int) -> Tensor:
    length, num_owned = mask.numel(), n_id.numel()
    if length == num_nodes and length == num_owned:
        if torch.equal(n_id, torch.arange(num_nodes)):
            return mask  # the shard keeps the global order: both readings are the same
        raise ValueError(f"input_nodes is a bool mask of length {length}, which is both the graph's number of "
                         f"nodes and this rank's number of rows (it owns every node, in another order): it could "
                         f"be either; pass global ids instead: mask.nonzero().view(-1) for a mask over the "
                         f"graph's nodes, or local.n_id[mask] for a mask over the shard's rows")
    if length == num_nodes:
        return mask.index_select(0, n_id)
    if length == num_owned:
        return mask
    raise ValueError(f"input_nodes is a bool mask of length {length}, but the graph has {num_nodes} nodes and "
                     f"this rank owns {num_owned} rows: {_FORMS}")


def _global_ids(ids: Tensor, n_id: Tensor, num_nodes: int) -> Tensor:
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"input_nodes holds global node ids (as PyG's NeighborLoader takes them), which must lie "
                         f"in [0, {num_nodes}); got values in [{int(ids.min())}, {int(ids.max())}] (for the "
                         f"shard's rows, pass a bool mask over them, e.g. local.train_mask)")
    unique = torch.unique(ids)
    if unique.numel() != ids.numel():
        raise ValueError(f"input_nodes holds {ids.numel() - unique.numel()} duplicate node ids: every seed is "
                         f"drawn once per epoch here; pass torch.unique(input_nodes)")
    return torch.isin(n_id, unique)


def _shard_rows(index: ShardIndex, num_owned: int, num_nodes: int) -> Tensor:
    if index.num_rows != num_owned or index.num_nodes != num_nodes:
        raise ValueError(f"input_nodes is an index of the rows of another shard ({index.num_rows} rows of a graph of "
                         f"{index.num_nodes} nodes; this one holds {num_owned} of {num_nodes}): pass the loader's own "
                         f"shard's index (shard_index(ids, local) with the local passed to the loader) or global ids")
    rows = index.rows().cpu()
    mask = torch.zeros(num_owned, dtype=torch.bool)
    mask[rows] = True
    if int(mask.sum()) != rows.numel():
        raise ValueError(f"input_nodes holds {rows.numel() - int(mask.sum())} duplicate node ids: every seed is "
                         f"drawn once per epoch here; pass torch.unique(input_nodes)")
    return mask


def global_seed_ids(owned: Tensor, n_id: Tensor, num_nodes: int, group: dist.ProcessGroup | None) -> Tensor | None:
    """Sorted global ids of every rank's seed candidates (``owned`` masks this rank's rows); ``None``
    when every node is one.  Collective: one all-reduce, then one ``all_gather_object`` of the ids
    unless every node is a seed (all ranks take the same branch: the count is global)."""
    if global_count(owned, group) == num_nodes:
        return None
    mine = n_id.cpu()[owned]
    if world_size(group) == 1:
        return torch.sort(mine).values
    parts: list = [None] * world_size(group)
    dist.all_gather_object(parts, mine, group=group)
    return torch.sort(torch.cat(parts)).values


def seeds_per_batch(sampling: NeighborSampling | NodeSubsetSampling, epoch: int, seeds: Tensor | None,
                    num_nodes: int, num_batches: int,
                    batch_of: Callable[[int, Tensor, int], Tensor] | None = None) -> Tensor:
    """``[num_batches]`` seeds of every batch of ``epoch`` over all ranks, from the global ``seeds``
    (``None``: every node), without communication; ``batch_of(epoch, ids, num_batches)`` is the batch of
    seed ids (default: ``sampling.batch_of``; a heterogeneous subset rule hashes ids of the input type)."""
    batch_of = sampling.batch_of if batch_of is None else batch_of
    if getattr(sampling, "drop_last", False):   # exactly batch_size each, by construction
        return torch.full((num_batches,), sampling.batch_size, dtype=torch.long)
    total = num_nodes if seeds is None else seeds.numel()
    if isinstance(sampling, NeighborSampling) and not sampling.shuffle:  # runs of the seeds in order
        counts = torch.full((num_batches,), sampling.batch_size, dtype=torch.long)
        counts[-1] = total - (num_batches - 1) * sampling.batch_size
        return counts.clamp_(min=0)
    counts = torch.zeros(num_batches, dtype=torch.long)
    for start in range(0, total, _CHUNK):
        end = min(start + _CHUNK, total)
        ids = torch.arange(start, end) if seeds is None else seeds[start:end]
        counts += torch.bincount(batch_of(epoch, ids, num_batches), minlength=num_batches)
    return counts
