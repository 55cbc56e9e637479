r"""Part files of a partitioned :class:`~torch_geometric.data.HeteroData` (see :mod:`~pyg_sparsecomm.store.files`).

Rank :math:`r`'s record holds what :func:`~pyg_sparsecomm.shard` gives rank :math:`r`: per node
type its owned rows of every node attribute (``x``, ``y``, masks, ...) and ``n_id``; per relation
the CSR of its in-edges (``rowptr``, ``col``, ``value``), ``e_id`` and the sliced edge
attributes; per source node type the halo plan its relations share.  :func:`hetero_from_record`
rebuilds that shard, one :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` object per source type, so the
deduplicated exchange of :mod:`pyg_sparsecomm.nn.runtime.hetero` works on a loaded shard unchanged.
"""
import hashlib
from collections.abc import Iterator
from typing import Any

import torch
from torch_geometric.data import HeteroData

from ..graph.validate import check_hetero
from ..plan.relation_adj import RelationAdj
from .file_format import hash_tensor, plan_from_record, plan_record
from .rank_hetero import partition_of, shard_hetero

_EDGE_REBUILT = {"adj", "edge_weight", "e_id"}  # rebuilt from the CSR (edge_weight is adj.value)


def _split(mapping: dict, data: HeteroData) -> tuple[dict, dict]:
    """``(global attributes, per-type stores)`` of ``HeteroData.to_dict()``."""
    types = {*data.node_types, *data.edge_types}
    glob = {k: v for k, v in mapping.items() if k not in types}
    return glob, {k: v for k, v in mapping.items() if k in types}


def hetero_fingerprint(data: HeteroData) -> str:
    """SHA-256 over every store of ``data`` (node types, relations, global attributes): tensors
    by bytes, scalars by value, in sorted order (independent of insertion order)."""
    h = hashlib.sha256()
    glob, stores = _split(data.to_dict(), data)
    for name, store in [("", glob), *sorted(((str(k), v) for k, v in stores.items()))]:
        for key in sorted(store):
            value = store[key]
            if isinstance(value, torch.Tensor):
                hash_tensor(h, f"{name}.{key}", value)
            elif isinstance(value, (bool, int, float, str)):
                h.update(f"{name}.{key}={value!r};".encode())
    return h.hexdigest()


def hetero_source(data: HeteroData) -> dict:
    """The manifest's description read off a partitioned ``HeteroData`` (sizes summed over types)."""
    check_hetero(data)
    _, num_parts = partition_of(data)
    return {"kind": "hetero", "num_parts": num_parts,
            "num_nodes": sum(int(data[t].num_nodes) for t in data.node_types),
            "num_edges": sum(int(data[e].edge_index.size(1)) for e in data.edge_types),
            "node_types": list(data.node_types), "edge_types": [list(e) for e in data.edge_types],
            "fingerprint": hetero_fingerprint(data)}


def hetero_record(local: HeteroData) -> dict:
    """One rank's shard (from :func:`~pyg_sparsecomm.store.rank_hetero.shard_hetero`) as tensors,
    lists and numbers."""
    glob, _ = _split(local.to_dict(), local)
    plans: dict[str, dict] = {}
    relations = []
    for edge_type in local.edge_types:
        store, adj = local[edge_type], local[edge_type].adj
        plans.setdefault(edge_type[0], plan_record(adj.plan))
        relations.append({"edge_type": list(edge_type), "rowptr": adj.rowptr, "col": adj.col,
                          "value": adj.value, "num_rows": adj.num_rows, "e_id": store.e_id,
                          "attrs": {k: v for k, v in store.items() if k not in _EDGE_REBUILT}})
    any_plan = next(iter(plans.values()), None)
    return {"kind": "hetero", "rank": None if any_plan is None else any_plan["rank"],
            "world_size": None if any_plan is None else any_plan["world_size"], "globals": glob,
            "nodes": {t: dict(local[t].items()) for t in local.node_types},
            "plans": plans, "relations": relations}


def hetero_records(data: HeteroData) -> Iterator[dict]:
    """Every rank's record, in rank order, one shard in memory at a time."""
    _, num_parts = partition_of(data)
    for rank in range(num_parts):
        record = hetero_record(shard_hetero(data, rank=rank, world_size=num_parts))
        record["rank"], record["world_size"] = rank, num_parts  # also when the graph has no relation
        yield record


def hetero_from_record(record: dict[str, Any]) -> HeteroData:
    """The shard :func:`hetero_record` wrote: equal to ``shard(data)`` on that rank."""
    local = HeteroData()
    for key, value in record["globals"].items():
        local[key] = value
    for node_type, attrs in record["nodes"].items():
        for key, value in attrs.items():
            local[node_type][key] = value
    plans = {t: plan_from_record(p) for t, p in record["plans"].items()}
    for rel in record["relations"]:
        edge_type = tuple(rel["edge_type"])
        adj = RelationAdj(rel["rowptr"], rel["col"], rel["value"], plans[edge_type[0]], edge_type,
                          rel["num_rows"])
        for key, value in rel["attrs"].items():
            local[edge_type][key] = value
        local[edge_type].adj = adj
        local[edge_type].edge_weight = adj.value
        local[edge_type].e_id = rel["e_id"]
    return local
