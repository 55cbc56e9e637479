"""Partition once, train many times: one file per rank plus a manifest.

``save_partition(data, root, source=partition_source(partitioner, dataset))`` writes
``root/part-<r>.pt`` for every rank ``r`` (its rows of every node attribute, its local
edges of every edge attribute, its local adjacency and its halo plan) and
``root/manifest.json``: format version, the ``source`` description (how the partition
was made: dataset, method, seed, options, number of parts, graph size, feature shape
and a fingerprint of the whole graph) and the SHA-256 of every part file.
``load_shard(root, expected_source=...)`` then reads only this rank's file: memory per
rank is its share of the graph plus its halo plan, never the whole graph — the path for
graphs that fit no single machine.  Files are loaded with
``torch.load(weights_only=True)`` (tensors, lists and numbers only: no code runs on
load) and validated against the manifest; a cache made another way raises instead of
being reused silently.

Writing is atomic (:mod:`~pyg_sparsecomm.store.atomic_dir`): the files are written into a temporary
sibling directory, hashed as they are written, and renamed into place under a lock, so a killed
or concurrent writer never leaves a directory that loads; loading memory-maps the part file.
"""
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch_geometric.data import Data, HeteroData

from ..comm.grid import ProcessGrid
from ..comm.group import raise_together
from ..comm.group import rank as group_rank
from ..comm.group import world_size as group_world_size
from ..graph.inputs import with_edge_index
from ..partition.partitioner import option_value
from ..plan.halo_adj import HaloAdj
from ..plan.known_pattern import pattern_of
from .atomic_dir import atomic_directory, save_hashed, unfinished_hint, write_text_synced
from .file_format import hash_tensor, plan_from_record, plan_record
from .hetero_files import hetero_from_record, hetero_records, hetero_source
from .rank_data import attach_adjacency, replicate, shard_from_pattern
from .streamed_save import has_streamed, save_streamed

# 2: the manifest holds a ``source`` description; part files hold sliced edge attributes.
FORMAT_VERSION = 2
_MANIFEST_KEYS = {"format_version": int, "source": dict, "files": dict}
_SOURCE_KEYS = {"num_parts": int, "num_nodes": int, "num_edges": int, "fingerprint": str}
_NOT_RECORDED = "<not recorded>"


def graph_fingerprint(data: Data) -> str:
    """SHA-256 over the graph: structure, partition and every tensor attribute (``x``, ``y``,
    masks, edge attributes, ...) plus scalar attributes; one pass over the bytes.

    Args:
        data (torch_geometric.data.Data): the graph, partitioned or not.
    """
    h = hashlib.sha256()
    h.update(f"num_nodes={int(data.num_nodes)};".encode())
    for key in sorted(data.keys()):  # sorted: the same digest whatever the insertion order
        value = data[key]
        if isinstance(value, torch.Tensor):
            hash_tensor(h, key, value)
        elif isinstance(value, (bool, int, float, str)):
            h.update(f"{key}={value!r};".encode())
    return h.hexdigest()


def _canonical(value: Any) -> Any:
    # What the manifest's JSON gives back (tuples become lists, ...), so that a description
    # compares equal to its recorded copy.
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def partition_source(partitioner: Any, dataset: str | None = None) -> dict:
    """How a partition is made, from its ``SparsityAwarePartitioner``: dataset name, method (with
    ``"+vb"`` when balanced), seed, options and number of parts.

    Pass it to :func:`save_partition` (recorded in the manifest) and, in every later run, to
    :func:`load_shard` as ``expected_source``: a cache made differently then raises.  Needs no
    graph, so every rank can build it.

    Args:
        partitioner (SparsityAwarePartitioner): the partitioner that makes (or made) the partition.
        dataset (str, optional): the dataset's name, recorded as it is. (default: :obj:`None`)
    """
    options = {k: option_value(v) for k, v in partitioner.options.items()}
    method = partitioner.method
    if partitioner.balance == "max_send":
        method += "+vb"
        options.update(epsilon_balance=partitioner.epsilon_balance,
                       max_total_increase=partitioner.max_total_increase, vb_restarts=partitioner.vb_restarts,
                       vb_objective=partitioner.vb_objective)
    return _canonical({"dataset": dataset, "method": method, "seed": partitioner.seed,
                       "num_parts": partitioner.num_parts, "options": options})


def _data_source(data: Data) -> dict:
    """The description fields read off the partitioned graph itself."""
    x = getattr(data, "x", None)
    return {"num_parts": int(data.num_parts), "num_nodes": int(data.num_nodes),
            "num_edges": int(data.edge_index.size(1)),
            "num_features": None if x is None else int(x.size(-1)) if x.dim() > 1 else 1,
            "x_dtype": None if x is None else str(x.dtype).replace("torch.", ""),
            "fingerprint": graph_fingerprint(data)}


def source_mismatch(recorded: Mapping, expected: Mapping) -> list[tuple[str, Any, Any]]:
    """``(field, recorded, expected)`` for every field of ``expected`` the recorded description
    lacks or holds another value for; fields only ``recorded`` has are not compared."""
    expected = _canonical(dict(expected))
    return [(k, recorded.get(k, _NOT_RECORDED), v) for k, v in sorted(expected.items())
            if recorded.get(k, _NOT_RECORDED) != v]


def _fields(pairs: list[tuple[str, Any]]) -> str:
    return ", ".join(f"{k}={v}" if v == _NOT_RECORDED else f"{k}={v!r}" for k, v in pairs)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _to_record(local: Data) -> dict:
    adj, plan = local.adj, local.adj.plan
    record = {**plan_record(plan), "rowptr": adj.rowptr, "col": adj.col, "value": adj.value,
              "e_id": local.e_id, "attrs": {}}
    skip = {"adj", "edge_weight", "e_id", "n_id", "num_nodes", "global_num_nodes"}
    for key, value in local.items():
        if key in skip or isinstance(value, HaloAdj):  # adj_t: attach_adjacency sets it again on loading
            continue
        record["attrs"][key] = value
    return record


def save_partition(data: Data | HeteroData, root: str | Path, source: Mapping | None = None) -> Path:
    """Writes every rank's shard of a partitioned ``data`` under ``root``; returns the manifest path.

    ``source`` (see :func:`partition_source`) describes how the partition was made; the manifest
    records it together with the graph's size, feature shape and :func:`graph_fingerprint`.
    The graph may be given as ``edge_index`` or ``adj_t``, as for :func:`~pyg_sparsecomm.shard`.
    A partitioned ``HeteroData`` is written the same way, one file per rank holding what
    ``shard(data)`` gives that rank (:mod:`~pyg_sparsecomm.store.hetero_files`).

    Args:
        data (torch_geometric.data.Data or torch_geometric.data.HeteroData): the whole graph carrying
            ``part`` (see :class:`~pyg_sparsecomm.SparsityAwarePartitioner`).
        root (str or pathlib.Path): the partition directory, written atomically
            (:func:`~pyg_sparsecomm.store.atomic_dir.atomic_directory`).
        source (Mapping, optional): how the partition was made (:func:`partition_source`).
            (default: :obj:`None`)
    """
    if isinstance(data, HeteroData):
        measured = hetero_source(data)
    else:
        data = with_edge_index(data, "save_partition")
        if getattr(data, "part", None) is None:
            raise ValueError("data has no partition: apply SparsityAwarePartitioner first")
        measured = _data_source(data)
    described = _canonical(dict(source or {}))
    wrong = [(k, described[k], v) for k, v in measured.items() if k in described and described[k] != v]
    if wrong:  # the description belongs to another graph or partition: recording it would lie
        raise ValueError(f"source does not describe data: {_fields([(k, a) for k, a, _ in wrong])} given, "
                         f"but data has {_fields([(k, b) for k, _, b in wrong])}")
    records = hetero_records(data) if isinstance(data, HeteroData) else _records(data, measured["num_parts"])
    return write_partition(root, {**described, **measured}, records)


def _records(data: Data, num_parts: int) -> Iterator[dict]:
    pattern = pattern_of(data.edge_index, data.part, data.num_nodes, num_parts, getattr(data, "comm_stats", None))
    return (_to_record(shard_from_pattern(data, pattern, r)) for r in range(num_parts))


def _is_partition_file(name: str) -> bool:
    return name == "manifest.json" or re.fullmatch(r"part-\d+\.pt", name) is not None


def write_partition(root: str | Path, source: Mapping | Callable[[], Mapping], records: Iterable[dict]) -> Path:
    """Writes part records (rank order, one at a time) and the manifest as one atomic directory.

    The one writer of partition directories (:func:`save_partition` and
    :func:`~pyg_sparsecomm.store.from_files.partition_files`): under a lock, into a temporary sibling
    renamed into place at the end (:func:`~pyg_sparsecomm.store.atomic_dir.atomic_directory`), every
    file hashed as it is written.  A random ``write_id`` in the manifest and in every record
    ties the files of one write together.  An existing ``root`` may hold an older partition
    (it is replaced), nothing else.  ``source`` is the manifest's description, or a callable
    giving it once the records are written (when writing them computes part of it).

    Raises:
        DirectoryLockedError: another process is writing ``root``.
        FileExistsError: ``root`` holds files that belong to no partition.
    """
    write_id = uuid.uuid4().hex
    with atomic_directory(root, replaceable=_is_partition_file) as tmp:
        files: dict[str, str] = {}
        for record in records:  # no enumerate(): its reused tuple would keep the last record alive
            name = f"part-{len(files)}.pt"
            save = save_streamed if has_streamed(record) else save_hashed  # records written in pieces
            files[name] = save({**record, "write_id": write_id}, tmp / name)
            del record  # one part in memory at a time
        described = dict(source() if callable(source) else source)
        manifest = {"format_version": FORMAT_VERSION, "source": described, "files": files, "write_id": write_id}
        write_text_synced(json.dumps(manifest, indent=1, sort_keys=True), tmp / "manifest.json")
    return Path(root) / "manifest.json"


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return names.get(type(value), "null")


def _check_keys(path: Path, where: str, body: dict, keys: Mapping[str, type]) -> None:
    missing = sorted(k for k in keys if k not in body)
    if missing:
        raise ValueError(f"corrupt partition manifest {path}: {where} lacks key(s) {missing}: re-run save_partition")
    for key, kind in keys.items():
        if _json_type(body[key]) != _json_type(kind()):  # by JSON type: True is no integer here
            raise ValueError(f"corrupt partition manifest {path}: {key!r} in {where} should be a JSON "
                             f"{_json_type(kind())}, got a JSON {_json_type(body[key])}: re-run save_partition")


def read_manifest(root: str | Path) -> dict:
    """The validated ``manifest.json`` under ``root``; ``ValueError`` naming the file and the problem."""
    path = Path(root) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"no partition manifest at {path}{unfinished_hint(Path(root))}: "
                                f"run save_partition first")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"corrupt partition manifest {path}: {e}") from None
    if not isinstance(manifest, dict):  # a corrupt file, not a caller's type error: ValueError like the rest
        raise ValueError(f"corrupt partition manifest {path}: expected a JSON object, "  # noqa: TRY004
                         f"got a JSON {_json_type(manifest)}: re-run save_partition")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path} has format version {manifest.get('format_version')}, "
                         f"this library reads {FORMAT_VERSION}: re-run save_partition")
    _check_keys(path, "the manifest", manifest, _MANIFEST_KEYS)
    _check_keys(path, "source", manifest["source"], _SOURCE_KEYS)
    return manifest


def check_source(root: str | Path, manifest: dict, expected_source: Mapping | None = None,
                 expected_fingerprint: str | None = None) -> None:
    """Raises ``ValueError`` listing the fields in which the partition under ``root`` differs
    from ``expected_source`` (or whose fingerprint is not ``expected_fingerprint``)."""
    recorded = manifest["source"]
    diff = source_mismatch(recorded, expected_source or {})
    if expected_fingerprint is not None and expected_fingerprint != recorded["fingerprint"]:
        diff.append(("fingerprint", recorded["fingerprint"], expected_fingerprint))
    if diff:
        raise ValueError(f"partition cache at {root} was made with {_fields([(k, a) for k, a, _ in diff])}; "
                         f"this run asks for {_fields([(k, b) for k, _, b in diff])} (stale cache): delete the "
                         f"directory to re-partition, or use another partition directory")


def load_shard(root: str | Path, group: dist.ProcessGroup | None = None,
               rank: int | None = None, world_size: int | None = None,
               expected_fingerprint: str | None = None, grid: ProcessGrid | None = None,
               expected_source: Mapping | None = None) -> Data | HeteroData:
    """Loads this rank's shard written by :func:`save_partition` (reads one part file only):
    a ``HeteroData`` equal to ``shard(data)`` when a ``HeteroData`` was saved.

    With a 1.5D ``grid`` (a partition into ``P / c`` parts) it loads block row
    ``grid.row`` and returns the replicated view of :func:`~pyg_sparsecomm.shard`.

    Raises ``ValueError`` when the manifest is corrupt, when the world size (``P / c`` with a
    grid) differs from the number of parts, when ``expected_source`` (see
    :func:`partition_source`; compared field by field with the recorded description, so no
    rank needs the graph) or ``expected_fingerprint`` (see :func:`graph_fingerprint`, for
    callers that hold the graph) differs from what the partition was made from (stale
    cache), or when the file's checksum does not match the manifest (corrupt or replaced);
    ``FileNotFoundError`` when the manifest or this rank's part file is missing.

    Under a process group (``rank`` and ``world_size`` not given) the checks are collective:
    every rank checks its own file, and when any rank's check fails *every* rank raises the
    same error, naming the failing ranks and their files (one ``all_gather_object`` over
    ``group``, the default group with a ``grid``), instead of one rank stopping while the
    others proceed into a collective it never joins.

    Args:
        root (str or pathlib.Path): the directory :func:`save_partition` wrote.
        group (torch.distributed.ProcessGroup, optional): process group to train in.
            (default: the default group)
        rank (int, optional): the rank whose shard to load, without a process group (tests,
            simulations). (default: taken from ``group``)
        world_size (int, optional): the world size with ``rank``. (default: taken from ``group``)
        expected_fingerprint (str, optional): the :func:`graph_fingerprint` the partition must have
            been made from. (default: :obj:`None`)
        grid (ProcessGrid, optional): the 1.5D process grid. (default: :obj:`None`)
        expected_source (Mapping, optional): the :func:`partition_source` the partition must have
            been made with. (default: :obj:`None`)
    """
    def load() -> Data | HeteroData:
        return _load_shard(root, group, rank, world_size, expected_fingerprint, grid, expected_source)

    if rank is not None or world_size is not None:  # simulating a rank: no process group involved
        return load()
    return raise_together(load, f"load_shard({str(root)!r})", None if grid is not None else group)


def _load_shard(root: str | Path, group: dist.ProcessGroup | None, rank: int | None,
                world_size: int | None, expected_fingerprint: str | None, grid: ProcessGrid | None,
                expected_source: Mapping | None) -> Data | HeteroData:
    """:func:`load_shard` on this rank alone."""
    manifest = read_manifest(root)
    num_parts = manifest["source"]["num_parts"]
    if grid is not None:
        if manifest["source"].get("kind") == "hetero":
            raise ValueError(f"the partition in {root} is of a HeteroData, which has no 1.5D layout: load it "
                             f"without grid=")
        if num_parts != grid.num_block_rows:
            raise ValueError(f"the partition in {root} has {num_parts} parts but a grid with c="
                             f"{grid.replication} on {grid.world_size} ranks needs P/c={grid.num_block_rows}")
        local = _load_shard(root, None, grid.row, grid.num_block_rows, expected_fingerprint, None,
                            expected_source)
        return replicate(local, grid.col, grid.replication)
    rank = group_rank(group) if rank is None else rank
    world_size = group_world_size(group) if world_size is None else world_size
    if num_parts != world_size:
        raise ValueError(f"the partition in {root} has {num_parts} parts but the world size is "
                         f"{world_size}: re-partition with num_parts={world_size}")
    check_source(root, manifest, expected_source, expected_fingerprint)
    path = Path(root) / f"part-{rank}.pt"
    if not path.exists():
        raise FileNotFoundError(f"missing part file {path} (rank {rank} reads part-{rank}.pt of the "
                                f"{num_parts} files the manifest lists): put {root} where every rank can read "
                                f"it (a shared file system, or a full copy per machine), or re-run save_partition")
    if _sha256(path) != manifest["files"].get(path.name):
        raise ValueError(f"checksum mismatch for {path}: the file is corrupt or not from this partition: "
                         f"re-run save_partition")
    rec = torch.load(path, weights_only=True, mmap=True)  # tensors stay in the page cache until used
    if rec.get("write_id") != manifest.get("write_id"):  # replaced between reading the manifest and here
        raise ValueError(f"{path} is not from the write {root}/manifest.json describes (the partition was "
                         f"replaced while loading): load again")
    if rec["rank"] != rank or rec["world_size"] != world_size:
        raise ValueError(f"{path} holds rank {rec['rank']} of {rec['world_size']}, expected {rank} of {world_size}")
    if rec.get("kind") == "hetero":
        return hetero_from_record(rec)
    adj = HaloAdj(rec["rowptr"], rec["col"], rec["value"], plan_from_record(rec))
    return attach_adjacency(Data(**rec["attrs"]), adj, rec["e_id"])
