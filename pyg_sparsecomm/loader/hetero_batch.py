r"""A rank's part of one sampled heterogeneous mini-batch, as a PyG ``HeteroData``.

The homogeneous batch (:mod:`.batch`) per node type and per relation: every node type's rows
in the batch are ordered by (hop, id) (:func:`~.batch.batch_rows`); every *source* type
:math:`s` gets one batch plan (:func:`~.batch.batch_plan`) whose halo is the union of the halo
columns the batch's edges of every relation :math:`(s, r, d)` read, so one exchange of an
:math:`s` tensor serves every relation reading it (:mod:`pyg_sparsecomm.nn.runtime.hetero`); every
relation becomes a :class:`~pyg_sparsecomm.sampling.SampledRelationAdj` over that plan
(:func:`~.batch.relabel`), rows the batch's destination rows.
"""
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import HeteroData

from ..plan.relation_adj import RelationAdj
from ..sampling.sampled_relation_adj import SampledRelationAdj, SourceHops
from ..store.rank_hetero import HeteroShard
from ..training.per_rank import LocalCount
from .batch import BatchPlan, BatchRows, Requests, batch_plan, batch_rows, relabel, slice_attribute

EdgeType = tuple[str, str, str]


class HeteroSampled(NamedTuple):
    """What one rank sampled for one heterogeneous batch."""
    row_hop: dict[str, Any]  # per node type: as Sampled.row_hop (rows per hop, or a hop per row)
    edge_pos: dict[EdgeType, Tensor]   # per relation, positions of the kept in-edges in its shard CSR
    edge_hop: dict[EdgeType, Tensor]   # per relation, hop each was sampled at (1-based)
    requests: dict[str, Requests]      # per source type, the requests peers sent for its rows
    num_seeds: int                     # rows of hop 0 of the input type


def build_hetero_batch(local: HeteroData, adjs: dict[EdgeType, RelationAdj], sampled: HeteroSampled,
                       input_type: str, num_hops: int, group: dist.ProcessGroup | None) -> HeteroData:
    """This rank's ``HeteroData`` of the batch (see :func:`hetero_batch_attributes`).

    Args:
        local (torch_geometric.data.HeteroData): the rank's heterogeneous shard.
        adjs (dict[EdgeType, RelationAdj]): its relations' adjacencies on the CPU.
        sampled (HeteroSampled): what this rank sampled.
        input_type (str): the seeds' node type.
        num_hops (int): hops of the batch.
        group (torch.distributed.ProcessGroup): the process group.
    """
    rows = {t: batch_rows(hop, num_hops + 1, int(local[t].num_nodes)) for t, hop in sampled.row_hop.items()}
    cols = {et: adj.col.index_select(0, sampled.edge_pos[et]) for et, adj in adjs.items()}
    planned = {s: _source_plan(s, adjs, cols, sampled, rows[s], group) for s in sampled.requests}
    batch_adjs, edge_pos = {}, {}
    # every relation reading a source type holds that type's one plan, on the shard's device
    device = {s: local[next(et for et in adjs if et[0] == s)].adj.device for s in planned}
    sources = {s: _source_hops(next(iter(p.values())), rows[s], device[s]) for s, p in planned.items()}
    edge_hops = {et: torch.bincount(sampled.edge_hop[et], minlength=num_hops + 1)[1:].tolist() for et in adjs}
    for et, adj in adjs.items():
        col, (src, _, dst) = cols[et], et
        is_halo = col >= adj.num_owned
        row = adj.row().index_select(0, sampled.edge_pos[et])
        rowptr, new_col, perm = relabel(row, col, is_halo, planned[src][et], rows[src], rows[dst])
        edge_pos[et] = sampled.edge_pos[et].index_select(0, perm)
        value = None if adj.value is None else adj.value.index_select(0, edge_pos[et])
        where = device[src]
        batch_adj = SampledRelationAdj(rowptr.to(where), new_col.to(where),
                                       None if value is None else value.to(where), sources[src], et,
                                       rows[dst].counts.tolist(), edge_hops[et])
        batch_adj.given_as = adj.given_as
        batch_adjs[et] = batch_adj
    return hetero_batch_attributes(local, rows, edge_pos, batch_adjs, edge_hops, input_type, sampled.num_seeds)


def _source_hops(planned: BatchPlan, rows: BatchRows, device: torch.device) -> SourceHops:
    """The source type's batch plan and hop bookkeeping on ``device``: one object every relation reading
    the type holds (and trims once per hop)."""
    return SourceHops(planned.plan.to(device), rows.counts.tolist(), planned.halo_hop.to(device),
                      planned.send_hop.to(device), planned.part_rows.to(device))


def _source_plan(src: str, adjs: dict[EdgeType, RelationAdj], cols: dict[EdgeType, Tensor], sampled: HeteroSampled,
                 rows: BatchRows, group: dist.ProcessGroup | None) -> dict[EdgeType, BatchPlan]:
    """The batch plan of source type ``src`` over the halo columns every relation reading it reads,
    as each relation's view (its own ``halo_pos``); one reply exchange."""
    reading = [et for et in adjs if et[0] == src]
    halo = [cols[et] >= adjs[et].num_owned for et in reading]
    halo_col = torch.cat([cols[et][h] - adjs[et].num_owned for et, h in zip(reading, halo, strict=True)])
    edge_hop = torch.cat([sampled.edge_hop[et][h] for et, h in zip(reading, halo, strict=True)])
    any_adj = adjs[reading[0]]
    planned = batch_plan(any_adj.plan, rows, halo_col, edge_hop, sampled.requests[src], group)
    counts = [int(h.sum()) for h in halo]
    return {et: planned._replace(halo_pos=pos)
            for et, pos in zip(reading, torch.split(planned.halo_pos, counts), strict=True)}


def hetero_batch_attributes(local: HeteroData, rows: dict[str, BatchRows], edge_pos: dict[EdgeType, Tensor],
                            adjs: dict[EdgeType, SampledRelationAdj], edge_hops: dict[EdgeType, list[int]],
                            input_type: str, num_seeds: int) -> HeteroData:
    """The batch's ``HeteroData``: per node type its node-level attributes at the batch's rows,
    ``n_id`` (global ids), ``num_nodes`` and ``num_sampled_nodes`` (rows per hop); per relation
    ``adj`` (a :class:`~pyg_sparsecomm.sampling.sampled_relation_adj.SampledRelationAdj`:
    ``batch.adj_dict`` is what the model takes as ``edge_index_dict``, and what
    :func:`~pyg_sparsecomm.sampling.trim_to_layer` trims with ``batch.num_sampled_nodes_dict``),
    ``edge_weight`` (its values), ``e_id`` and the other edge-level attributes in ``adj``'s edge
    order, and ``num_sampled_edges``; on the input type
    ``batch_size`` (this rank's seeds, its first rows: score ``out[:batch_size]``) and ``seed_mask``."""
    batch = HeteroShard()  # PyG's HeteroData, whose edge_index_dict names adj_dict
    for key, value in local._global_store.items():
        batch[key] = value
    for t, r in rows.items():
        store, num_nodes = local[t], local[t].num_nodes
        for key, value in store.items():
            if key not in ("num_nodes", "global_num_nodes"):
                batch[t][key] = slice_attribute(key, value, num_nodes, -1, r.rows, r.rows)
        batch[t].num_nodes = r.rows.numel()
        batch[t].global_num_nodes = store.global_num_nodes
        batch[t].num_sampled_nodes = r.counts.tolist()
    for et, adj in adjs.items():
        store, nnz = local[et], local[et].adj.nnz
        for key, value in store.items():
            if key not in ("adj", "edge_weight"):
                batch[et][key] = slice_attribute(key, value, -1, nnz, edge_pos[et], edge_pos[et])
        batch[et].adj = adj
        batch[et].edge_weight = adj.value
        batch[et].num_sampled_edges = edge_hops[et]
    batch[input_type].batch_size = LocalCount(num_seeds)  # this rank's (see per_rank)
    device = local[input_type].n_id.device
    batch[input_type].seed_mask = torch.arange(rows[input_type].rows.numel(), device=device) < num_seeds
    return batch
