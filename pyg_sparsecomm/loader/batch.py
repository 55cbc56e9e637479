r"""A rank's part of one sampled mini-batch, as a PyG ``Data`` the distributed layers take.

Input: what this rank sampled -- the hop of each of its rows in the batch (``-1``: not in
it) and the in-edges it kept (positions in its shard's CSR, with the hop each was sampled
at) -- and the requests its peers sent for its rows (``(peer, row, hop)``, :mod:`.halo_requests`).  Output: the
batch's rows and edges relabelled to a :class:`~pyg_sparsecomm.sampling.SampledAdj` whose plan moves
exactly the rows the batch's edges read, so one layer's exchange is the batch's column-net
connectivity-1 volume.  Requests name rows in the owner's shard, so the owner needs no id
lookup; one reply tells each requester where its halo rows sit in the owner's batch (the
plan's ``halo_remote_index``) and every rank's rows per hop (trimmed layers' sizes).
"""
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from ..comm.ids import exchange_ids
from ..graph.batch_node_ids import BatchNodeIds
from ..plan.halo_adj import HaloAdj, csr_order
from ..plan.homogeneous import RankPlan
from ..sampling.host_reads import read_counts
from ..sampling.row_sets import RowLookup, unique_rows_inverse
from ..sampling.sampled_adj import SampledAdj
from ..training.per_rank import LocalCount

# Gathers use ``index_select``: on the CPU, ``t[index]`` with an int64 tensor is several times
# slower in torch 2.13 (x[rows] of a 262k x 64 float matrix: 109 vs 19 ms for 47k random rows).
_EDGE_KEYS = ("edge_weight", "e_id", "edge_attr")


class Requests(NamedTuple):
    """Rows of this rank that peers' batch edges read: ``peer``, local ``row``, first ``hop``."""
    peer: Tensor
    row: Tensor
    hop: Tensor


class Sampled(NamedTuple):
    """What one rank sampled for one batch (see the module docstring)."""
    # the rows of each hop (sets, ascending: O(batch)), or [num_owned] hop of each shard row, -1 if absent
    row_hop: Tensor | list[Tensor]
    edge_pos: Tensor  # [m] positions of the kept in-edges in local.adj (CSR order)
    edge_hop: Tensor  # [m] hop each was sampled at (1-based)
    num_seeds: int    # rows of hop 0 are the seeds


def build_batch(local: Data, adj: HaloAdj, sampled: Sampled, requests: Requests, num_hops: int | None,
                group: dist.ProcessGroup | None) -> Data:
    """This rank's ``Data`` of the batch (see :func:`batch_attributes` for its fields).

    Args:
        local (torch_geometric.data.Data): the rank's shard (its attributes may live on any device).
        adj (HaloAdj): its adjacency, on the device where batches are sampled and planned (the shard's).
        sampled (Sampled): what this rank sampled.
        requests (Requests): every request peers sent this batch (each (peer, row) once).
        num_hops (int): hops of a trimmable neighbour batch; ``None`` for node subsets.
        group (torch.distributed.ProcessGroup): the process group.
    """
    levels = (num_hops if num_hops is not None else 1) + 1  # hops 0 .. L
    rows = batch_rows(sampled.row_hop, levels, adj.num_owned)
    col = adj.col.index_select(0, sampled.edge_pos)
    is_halo = col >= adj.num_owned
    edge_counts = torch.bincount(sampled.edge_hop, minlength=levels)[1:]
    planned = batch_plan(adj.plan, rows, col[is_halo] - adj.num_owned, sampled.edge_hop[is_halo], requests, group,
                         edge_counts)
    row = adj.row().index_select(0, sampled.edge_pos)
    rowptr, new_col, perm = relabel(row, col, is_halo, planned, rows, rows)
    edge_pos = sampled.edge_pos.index_select(0, perm)
    value = None if adj.value is None else adj.value.index_select(0, edge_pos)
    trimmable = num_hops is not None
    batch_adj = SampledAdj(rowptr, new_col, value, planned.plan, planned.node_counts if trimmable else None,
                           planned.edge_counts if trimmable else None, planned.halo_hop, planned.send_hop,
                           planned.part_rows if trimmable else None)
    batch_adj.given_as = adj.given_as  # the script's form of the graph, for the layers' self-loops and values
    return batch_attributes(local, rows.rows, edge_pos, batch_adj.to(local.adj.device), sampled.num_seeds)


class BatchRows(NamedTuple):
    """A rank's rows of one node set in a batch."""
    rows: Tensor       # shard rows in the batch, ordered by (hop, id)
    batch_row: Tensor | RowLookup  # [num_owned] batch row of every shard row (-1: absent), or its lookup
    counts: Tensor     # [hops + 1] rows per hop


def batch_rows(row_hop: Tensor | list[Tensor], levels: int, num_rows: int | None = None) -> BatchRows:
    """The shard rows in the batch (``row_hop >= 0``, or the rows of every hop) ordered by (hop, id),
    every shard row's batch row (a :class:`~pyg_sparsecomm.sampling.row_sets.RowLookup` given the
    rows per hop: O(batch); ``num_rows``: the shard's rows), and the rows per hop ``0 .. levels - 1``."""
    if isinstance(row_hop, list):
        rows = torch.cat(row_hop) if len(row_hop) > 1 else row_hop[0]
        counts = torch.tensor([r.numel() for r in row_hop], dtype=torch.long, device=rows.device)
        return BatchRows(rows, RowLookup(rows, num_rows), counts)
    in_batch = torch.nonzero(row_hop >= 0).view(-1)
    hop = row_hop.index_select(0, in_batch)
    # a hop's rows are ascending in in_batch already: one pass per hop over the batch, not a sort
    rows = torch.cat([in_batch[hop == h] for h in range(levels)]) if levels > 1 else in_batch
    batch_row = torch.full((row_hop.numel(),), -1, dtype=torch.long, device=row_hop.device)
    batch_row.index_copy_(0, rows, torch.arange(rows.numel(), device=row_hop.device))
    return BatchRows(rows, batch_row, torch.bincount(hop, minlength=levels))


class BatchPlan(NamedTuple):
    """The plan of a batch's rows and what relabelling and trimming need of it."""
    plan: RankPlan
    halo_pos: Tensor   # position of every halo column read (as given to batch_plan) in the batch's halo
    halo_hop: Tensor   # [halo_size] first hop an edge reads each halo entry at
    send_hop: Tensor   # [len(send_index)] first hop a peer's edge reads each sent row at
    part_rows: Tensor  # [P, hops + 1] every rank's rows per hop
    node_counts: list[int]         # this rank's rows per hop (rows.counts, read with the plan's counts)
    edge_counts: list[int] | None  # this rank's edges per hop 1 .. L, when batch_plan was given them


def batch_plan(plan: RankPlan, rows: BatchRows, halo_col: Tensor, edge_hop: Tensor, requests: Requests,
               group: dist.ProcessGroup | None, edge_counts: Tensor | None = None) -> BatchPlan:
    """The batch's :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` over ``rows``: its halo is the shard halo
    columns ``halo_col`` the batch's edges read (sampled at ``edge_hop``), its send lists the rows
    peers ``requests``-ed; one reply exchange (:func:`_reply`).  Every size the host needs before the
    reply (send and receive counts, rows per hop, ``edge_counts`` when given, the requests' check) is
    read from the device at once, and the ranks' rows per hop once after it."""
    P, levels = plan.world_size, rows.counts.numel()
    used_halo, halo_pos = unique_rows_inverse(halo_col, plan.halo_size)  # (owner, id) order
    halo_hop = torch.full((used_halo.numel(),), levels, dtype=torch.long, device=halo_col.device)
    halo_hop.scatter_reduce_(0, halo_pos, edge_hop, "amin")  # first hop reading it
    send_peer, send_index, send_hop = _send_lists(requests, rows.batch_row, plan.num_owned)
    halo_owner = plan.halo_owner.index_select(0, used_halo)
    extra = () if edge_counts is None else (edge_counts,)
    counts = read_counts(torch.bincount(send_peer, minlength=P), torch.bincount(halo_owner, minlength=P), rows.counts,
                         (send_index < 0).any(), *extra)
    send_counts, recv_counts, node_counts = counts[:P], counts[P:2 * P], counts[2 * P:2 * P + levels]
    if counts[2 * P + levels]:
        raise RuntimeError("a peer requested a row that is not in this rank's batch (ranks sampled different batches)")
    remote_index, part_rows = _reply(send_index, send_counts, recv_counts, rows.counts, group)
    part_sizes = [sum(node_counts)] if P == 1 else part_rows.sum(1).tolist()
    batch = RankPlan(rank=plan.rank, world_size=P, num_nodes=plan.num_nodes, n_id=plan.n_id.index_select(0, rows.rows),
                     halo_n_id=plan.halo_n_id.index_select(0, used_halo), halo_owner=halo_owner,
                     halo_remote_index=remote_index, send_index=send_index, send_counts=send_counts,
                     recv_counts=recv_counts, part_sizes=part_sizes, minibatch=True)
    return BatchPlan(batch, halo_pos, halo_hop, send_hop, part_rows, node_counts,
                     None if edge_counts is None else counts[2 * P + levels + 1:])


def relabel(row: Tensor, col: Tensor, is_halo: Tensor, planned: BatchPlan, src: BatchRows,
            dst: BatchRows) -> tuple[Tensor, Tensor, Tensor]:
    """The batch's CSR of edges ``(row, col)`` given in shard numbering (``row``: shard rows of the
    targets ``dst``; ``col``: shard columns of the sources ``src``, halo where ``is_halo``):
    ``(rowptr, col, perm)``, ``perm`` taking the given edges to CSR order."""
    # owned columns: their batch rows; halo columns: rows + their position in the batch's halo
    new_col = torch.empty_like(col)
    owned = ~is_halo
    new_col.masked_scatter_(owned, src.batch_row.index_select(0, col[owned]))  # (src may own no row)
    new_col.masked_scatter_(is_halo, src.rows.numel() + planned.halo_pos)
    new_row = dst.batch_row.index_select(0, row)
    rowptr, perm = csr_order(new_row, new_col, dst.rows.numel(), planned.plan.num_owned + planned.plan.halo_size)
    assert perm is not None
    return rowptr, new_col.index_select(0, perm), perm


def _send_lists(requests: Requests, batch_row: Tensor | RowLookup, n_local: int) -> tuple[Tensor, Tensor, Tensor]:
    """The requests as send lists: ``(peer, batch row, hop)`` sorted by (peer, id), the order of
    every requester's halo (its halo is sorted by owner, then id)."""
    order = torch.argsort(requests.peer * n_local + requests.row)
    peer, row, hop = (t.index_select(0, order) for t in requests)
    return peer, batch_row.index_select(0, row), hop  # (batch_plan checks that every row is in the batch)


def _reply(send_index: Tensor, send_counts: list[int], recv_counts: list[int], row_counts: Tensor,
           group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor]:
    """Tells every requester where its rows sit in this rank's batch, and every rank this rank's
    rows per hop; returns this rank's ``halo_remote_index`` and ``[P, hops + 1]`` rows per hop."""
    P, k = len(send_counts), row_counts.numel()
    if P == 1:
        return send_index.new_zeros(0), row_counts.view(1, -1)
    pieces = []
    for part in torch.split(send_index, send_counts):
        pieces += [row_counts, part]
    payload = torch.cat(pieces)
    received, _ = exchange_ids(payload, [c + k for c in send_counts], group, "plan",
                               recv_counts=[c + k for c in recv_counts])
    chunks = torch.split(received, [c + k for c in recv_counts])
    part_rows = torch.stack([chunk[:k] for chunk in chunks])
    return torch.cat([chunk[k:] for chunk in chunks]), part_rows


def batch_attributes(local: Data, rows: Tensor, edge_pos: Tensor, adj: SampledAdj, num_seeds: int) -> Data:
    """The batch's ``Data``: node-level attributes of the shard at ``rows``, edge-level ones at
    ``edge_pos`` (in ``adj``'s edge order), graph-level ones unchanged, and

    * ``adj``: the batch's :class:`~pyg_sparsecomm.sampling.SampledAdj` (pass it where the model takes ``edge_index``),
      also ``edge_index`` (where PyG's ``NeighborLoader`` batch holds its graph, so
      ``model(batch.x, batch.edge_index)`` runs on a ``distribute()``d model) and any other key
      of the shard that holds its :class:`~pyg_sparsecomm.plan.halo_adj.HaloAdj` (e.g. ``adj_t``);
    * ``n_id`` / ``e_id``: global ids of the batch's rows / edges (``n_id`` a
      :class:`~pyg_sparsecomm.graph.batch_node_ids.BatchNodeIds`: ``x[batch.n_id]`` of the shard's
      ``x`` takes the batch's rows, as PyG's ``x_all[batch.n_id]``);
    * ``batch_size``: this rank's seed rows, the first ones (score ``out[:batch.batch_size]``);
    * ``seed_mask``: the same as a mask;
    * ``num_sampled_nodes`` / ``num_sampled_edges``: this rank's rows and edges per hop (neighbour batches),
      for PyG's ``BasicGNN(..., num_sampled_nodes_per_hop=..., num_sampled_edges_per_hop=...)``.
    """
    batch = Data()
    nnz = local.adj.nnz
    for key, value in local.items():
        if key in ("adj", "edge_weight", "num_nodes", "global_num_nodes"):  # edge_weight: adj's values
            continue
        batch[key] = (adj if isinstance(value, HaloAdj)
                      else slice_attribute(key, value, local.num_nodes, nnz, rows, edge_pos))
    batch.adj = batch.edge_index = adj
    # global ids (the shard's n_id, or the script's loader.data.n_id) that index the shard's tensors at rows
    batch.n_id = BatchNodeIds.of(batch.n_id if "n_id" in batch else adj.plan.n_id, rows, local.num_nodes)
    batch.edge_weight = adj.value
    batch.num_nodes = rows.numel()
    batch.global_num_nodes = local.global_num_nodes
    batch.batch_size = LocalCount(num_seeds)  # this rank's: warns where a script takes it for the global one
    batch.seed_mask = torch.arange(rows.numel(), device=adj.device) < num_seeds
    batch.num_sampled_nodes, batch.num_sampled_edges = adj.num_sampled_nodes, adj.num_sampled_edges
    return batch


def slice_attribute(key: str, value: Any, num_nodes: int, nnz: int, rows: Tensor, edge_pos: Tensor) -> Any:
    if not isinstance(value, Tensor) or value.dim() == 0:
        return value
    if (key in _EDGE_KEYS or "edge" in key) and value.size(0) == nnz:
        return value.index_select(0, edge_pos.to(value.device))
    if value.size(0) == num_nodes:
        return value.index_select(0, rows.to(value.device))
    return value
