"""Partition once, train many times: one file per rank plus a manifest.

``save_partition(data, root)`` writes ``root/part-<r>.pt`` for every rank ``r``
(its rows of every node attribute, its local adjacency and its halo plan) and
``root/manifest.json`` (format version, number of parts, graph size and
fingerprint, SHA-256 of every part file).  ``load_shard(root)`` then reads only
this rank's file: memory per rank is its share of the graph plus its halo plan,
never the whole graph — the path for graphs that fit no single machine.
Files are loaded with ``torch.load(weights_only=True)`` (tensors, lists and
numbers only: no code runs on load) and validated against the manifest.
"""
import hashlib
import json
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
import torch.distributed as dist
from torch_geometric.data import Data

from .adj import HaloAdj
from .comm.group import rank as group_rank
from .comm.group import world_size as group_world_size
from .data import attach_adjacency, replicate, shard_from_pattern
from .grid import ProcessGrid
from .plan import RankPlan, comm_pattern

FORMAT_VERSION = 1
_PLAN_TENSORS = ("n_id", "halo_n_id", "halo_owner", "halo_remote_index", "send_index")
_PLAN_LISTS = ("send_counts", "recv_counts", "part_sizes")


def graph_fingerprint(data: Data) -> str:
    """SHA-256 over the graph structure and the partition (not the features)."""
    h = hashlib.sha256()
    h.update(str(int(data.num_nodes)).encode())
    h.update(np.ascontiguousarray(data.edge_index.cpu().numpy().astype(np.int64)).tobytes())
    part = getattr(data, "part", None)
    if part is not None:
        h.update(np.ascontiguousarray(part.cpu().numpy().astype(np.int64)).tobytes())
    return h.hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _to_record(local: Data) -> dict:
    adj, plan = local.adj, local.adj.plan
    record = {"rank": plan.rank, "world_size": plan.world_size, "num_nodes": plan.num_nodes,
              "rowptr": adj.rowptr, "col": adj.col, "value": adj.value, "e_id": local.e_id,
              "attrs": {}}
    for name in _PLAN_TENSORS:
        record[name] = getattr(plan, name)
    for name in _PLAN_LISTS:
        record[name] = list(getattr(plan, name))
    skip = {"adj", "edge_weight", "e_id", "n_id", "num_nodes", "global_num_nodes"}
    for key, value in local.items():
        if key in skip:
            continue
        record["attrs"][key] = value
    return record


def save_partition(data: Data, root: Union[str, Path]) -> Path:
    """Writes every rank's shard of a partitioned ``data`` under ``root``; returns the manifest path."""
    if getattr(data, "part", None) is None:
        raise ValueError("data has no partition: apply SparsityAwarePartitioner first")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    num_parts = int(data.num_parts)
    pattern = comm_pattern(data.edge_index.cpu(), data.part.cpu(), data.num_nodes, num_parts)
    files = {}
    for r in range(num_parts):
        path = root / f"part-{r}.pt"
        torch.save(_to_record(shard_from_pattern(data, pattern, r)), path)
        files[path.name] = _sha256(path)
    manifest = {"format_version": FORMAT_VERSION, "num_parts": num_parts, "num_nodes": int(data.num_nodes),
                "num_edges": int(data.edge_index.size(1)), "fingerprint": graph_fingerprint(data),
                "files": files}
    path = root / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path


def read_manifest(root: Union[str, Path]) -> dict:
    path = Path(root) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"no partition manifest at {path}: run save_partition first")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"corrupt partition manifest {path}: {e}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {manifest.get('format_version')}, "
                         f"this library reads {FORMAT_VERSION}: re-run save_partition")
    return manifest


def load_shard(root: Union[str, Path], group: Optional[dist.ProcessGroup] = None,
               rank: Optional[int] = None, world_size: Optional[int] = None,
               expected_fingerprint: Optional[str] = None, grid: Optional[ProcessGrid] = None) -> Data:
    """Loads this rank's shard written by :func:`save_partition` (reads one part file only).

    With a 1.5D ``grid`` (a partition into ``P / c`` parts) it loads block row
    ``grid.row`` and returns the replicated view of :func:`~pyg_sparsecomm.shard`.

    Raises ``ValueError`` when the world size (``P / c`` with a grid) differs from the number of parts,
    when the file's checksum does not match the manifest (corrupt or replaced),
    or when ``expected_fingerprint`` (see :func:`graph_fingerprint`) differs
    from the one the partition was made for (stale cache).
    """
    manifest = read_manifest(root)
    if grid is not None:
        if manifest["num_parts"] != grid.num_block_rows:
            raise ValueError(f"the partition in {root} has {manifest['num_parts']} parts but a grid with c="
                             f"{grid.replication} on {grid.world_size} ranks needs P/c={grid.num_block_rows}")
        local = load_shard(root, rank=grid.row, world_size=grid.num_block_rows,
                           expected_fingerprint=expected_fingerprint)
        return replicate(local, grid.col, grid.replication)
    rank = group_rank(group) if rank is None else rank
    world_size = group_world_size(group) if world_size is None else world_size
    if manifest["num_parts"] != world_size:
        raise ValueError(f"the partition in {root} has {manifest['num_parts']} parts but the world size is "
                         f"{world_size}: re-partition with num_parts={world_size}")
    if expected_fingerprint is not None and expected_fingerprint != manifest["fingerprint"]:
        raise ValueError(f"the partition in {root} was made for another graph or partition "
                         f"(stale cache): re-run save_partition")
    path = Path(root) / f"part-{rank}.pt"
    if not path.exists():
        raise FileNotFoundError(f"missing part file {path}")
    if _sha256(path) != manifest["files"].get(path.name):
        raise ValueError(f"checksum mismatch for {path}: the file is corrupt or not from this partition")
    rec = torch.load(path, weights_only=True)
    if rec["rank"] != rank or rec["world_size"] != world_size:
        raise ValueError(f"{path} holds rank {rec['rank']} of {rec['world_size']}, expected {rank} of {world_size}")
    plan = RankPlan(rank=rank, world_size=world_size, num_nodes=rec["num_nodes"],
                    **{k: rec[k] for k in _PLAN_TENSORS}, **{k: rec[k] for k in _PLAN_LISTS})
    adj = HaloAdj(rec["rowptr"], rec["col"], rec["value"], plan)
    return attach_adjacency(Data(**rec["attrs"]), adj, rec["e_id"])
