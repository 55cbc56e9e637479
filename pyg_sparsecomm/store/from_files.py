"""Out-of-core partitioning: from ``.npy`` files to one part file per rank.

For graphs whose features fit no single process, :func:`partition_files` (and
``python -m pyg_sparsecomm partition``) reads the graph from files and writes the directory that
:func:`~pyg_sparsecomm.save_partition` would write for the same graph in memory, so every rank
then calls :func:`~pyg_sparsecomm.load_shard` as before.  No array of the graph's size is held
whole, except by a partitioning method that reads the edges:

* the edges (``[2, E]`` ``.npy``, or several such chunks) are read a chunk at a time by every pass
  (the range check, :func:`~pyg_sparsecomm.plan.homogeneous.comm_pattern`, the fingerprint), then copied once
  into scratch files grouped by the part owning their target
  (:func:`~pyg_sparsecomm.store.edges_by_part.group_edges_by_part`), from which every part reads its
  own in-edges: :math:`2E` edges read for the parts in all, not :math:`2PE`.  Only a method that
  reads the edges (METIS, KaMinPar, ..., not ``"random"`` or ``"contiguous"``) gets them whole,
  as ``int32`` ids below :math:`2^{31}` nodes (:math:`8E` bytes), freed once it returns;
* every node attribute (``x``, ``y``, masks: ``.npy`` with one row per node) is read once in
  chunks of ``chunk_bytes``: each chunk is hashed (for the manifest's fingerprint) and its rows
  scattered into a scratch file ordered by (part, node);
* every part file is then written in pieces (:func:`~pyg_sparsecomm.store.streamed_save.save_streamed`):
  its in-edges sorted into CSR order through scratch files
  (:func:`~pyg_sparsecomm.store.part_in_edges.sort_in_edges`), its columns, edge ids, weights and
  node-attribute rows copied into the file a chunk at a time.

Peak memory is the partitioning method's, then the partition's node arrays (owner and row of every
node, the halo pairs, one part's plan) plus one chunk; never the edge list, the feature matrix, nor
one part's rows or in-edges.  The files are read with plain reads (no memory map: mapped pages
would count towards the writer's resident memory until unmapped).
"""
import hashlib
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..memory import release_free_heap
from ..partition import SparsityAwarePartitioner
from ..plan.edges import EDGE_CHUNK, numpy_ids
from ..plan.homogeneous import CommPattern, comm_pattern, id_dtype, rank_plan
from ..plan.sorted_keys import key_groups
from .edges_by_part import EdgesByPart, group_edges_by_part
from .file_format import hash_header, hash_tensor, plan_record
from .files import partition_source, write_partition
from .part_in_edges import sort_in_edges
from .streamed_save import Streamed, file_chunks

PathLike = str | os.PathLike
#: default bytes of one chunk of node-attribute rows (a chunk is read, hashed and scattered at once)
CHUNK_BYTES = 64 << 20


@dataclass
class NpyFile:
    """Where the C-ordered array of a ``.npy`` file lies: ``shape``, ``dtype``, data ``offset``."""
    path: Path
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    @classmethod
    def open(cls, path: PathLike, what: str) -> "NpyFile":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{what} file {path} not found")
        with open(path, "rb") as f:
            try:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran_order, dtype = read_header(f)
            except ValueError as e:
                raise ValueError(f"{what} file {path} is no .npy array ({e}): save it with numpy.save") from None
            offset = f.tell()
        if fortran_order and len(shape) > 1:
            raise ValueError(f"{what} file {path} is stored in Fortran order: save it C-ordered "
                             f"(numpy.save(path, numpy.ascontiguousarray(a)))")
        if dtype.hasobject:
            raise ValueError(f"{what} file {path} holds Python objects ({dtype}): save a numeric array")
        npy = cls(path, tuple(shape), dtype, offset)
        expected = offset + npy.row_bytes * (shape[0] if shape else 1)
        if path.stat().st_size < expected:
            raise ValueError(f"{what} file {path} is truncated: {path.stat().st_size} bytes, its header "
                             f"announces {expected}: write it again")
        return npy

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    def read(self, f: Any, start: int, count: int) -> np.ndarray:
        """``count`` rows (elements for 1-D) from ``start`` on, through the open file ``f``."""
        f.seek(self.offset + start * self.row_bytes)
        per_row = self.row_bytes // self.dtype.itemsize if self.dtype.itemsize else 0
        out = np.fromfile(f, dtype=self.dtype, count=count * per_row)
        return out.reshape((count, *self.shape[1:]))

    def read_row(self, f: Any, row: int, start: int, count: int) -> np.ndarray:
        """Elements ``start .. start + count - 1`` (fewer at the end) of row ``row`` of a 2-D array."""
        width = self.shape[1]
        f.seek(self.offset + (row * width + start) * self.dtype.itemsize)
        return np.fromfile(f, dtype=self.dtype, count=max(0, min(width, start + count) - start))


def _torch_dtype(npy: NpyFile, what: str) -> torch.dtype:
    try:
        return torch.from_numpy(np.empty(0, dtype=npy.dtype)).dtype
    except TypeError:
        raise ValueError(f"{what} file {npy.path} has dtype {npy.dtype}, which torch cannot hold") from None


@dataclass
class EdgeFiles:
    """The ``[2, E]`` edges of one ``.npy`` file or of several (concatenated in order, edges
    numbered on from one file to the next), read in chunks with plain reads."""
    files: list[NpyFile]

    @classmethod
    def open(cls, edges: PathLike | Sequence[PathLike]) -> "EdgeFiles":
        """Raises ``ValueError`` for a file that is not an integer ``[2, E]`` array."""
        paths = [edges] if isinstance(edges, (str, os.PathLike)) else list(edges)
        if not paths:
            raise ValueError("no edge files given")
        files = [NpyFile.open(p, "edge") for p in paths]
        for npy in files:
            if len(npy.shape) != 2 or npy.shape[0] != 2 or npy.dtype.kind not in "iu":
                raise ValueError(f"edge file {npy.path} holds a {npy.dtype} array of shape {list(npy.shape)}: "
                                 f"expected integer ids of shape [2, num_edges] (row 0 sources, row 1 targets)")
        return cls(files)

    @property
    def num_edges(self) -> int:
        return sum(npy.shape[1] for npy in self.files)

    def rows(self, step: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(row, first edge, ids)`` of every block of at most ``step`` ids, in the order of the
        bytes of the ``[2, E]`` ``edge_index`` in memory: every file's sources, then its targets."""
        for row in range(2):
            start = 0
            for npy in self.files:
                with open(npy.path, "rb") as f:
                    for a in range(0, npy.shape[1], step):
                        yield row, start + a, numpy_ids(npy.read_row(f, row, a, step))
                start += npy.shape[1]

    def chunks(self, step: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The edges as :data:`~pyg_sparsecomm.plan.edges.EdgeChunks`: ``(edge ids, sources, targets)``
        of every run of at most ``step`` edges."""
        start = 0
        for npy in self.files:
            with open(npy.path, "rb") as f:
                for a in range(0, npy.shape[1], step):
                    src, dst = numpy_ids(npy.read_row(f, 0, a, step)), numpy_ids(npy.read_row(f, 1, a, step))
                    yield np.arange(start + a, start + a + src.size, dtype=np.int64), src, dst
            start += npy.shape[1]

    def num_nodes(self, num_nodes: int | None, step: int) -> int:
        """``num_nodes``, or the largest id + 1 when it is ``None``, after one pass checking that
        every id lies in ``[0, num_nodes)`` (``ValueError`` naming the id otherwise)."""
        lo, hi = 0, -1
        for _, _, block in self.rows(step):
            if block.size:
                lo, hi = min(lo, int(block.min())), max(hi, int(block.max()))
        if lo < 0 or (num_nodes is not None and hi >= num_nodes):
            bad = lo if lo < 0 else hi
            raise ValueError(f"edge files {[str(npy.path) for npy in self.files]} hold node id {bad}, outside "
                             f"[0, {num_nodes}) (num_nodes from the node attribute files or num_nodes=)")
        return hi + 1 if num_nodes is None else num_nodes

    def read(self, num_nodes: int, step: int) -> Tensor:
        """The whole ``edge_index`` (ids checked), ``int32`` when the ids fit
        (:func:`~pyg_sparsecomm.plan.homogeneous.id_dtype`: the topology a method reads then takes 8 bytes per
        edge), else ``int64``."""
        out: np.ndarray = np.empty((2, self.num_edges), dtype=id_dtype(num_nodes))
        edge_index = torch.from_numpy(out)
        for row, a, block in self.rows(step):
            out[row, a:a + block.size] = block
        return edge_index

    def hash_into(self, h: Any, step: int) -> None:
        """Feeds the hash ``h`` what ``hash_tensor(h, "edge_index", edge_index)`` feeds it for the
        ``int64`` ``edge_index`` of these files (the graph's fingerprint)."""
        hash_header(h, "edge_index", torch.long, 2 * self.num_edges)
        for _, _, block in self.rows(step):
            h.update(block.astype(np.int64, copy=False).data)


def _node_files(node_attrs: Mapping[str, PathLike], num_nodes: int | None) -> tuple[dict[str, NpyFile], int | None]:
    files = {key: NpyFile.open(path, f"node attribute {key!r}") for key, path in node_attrs.items()}
    rows = {key: npy.shape[0] if npy.shape else None for key, npy in files.items()}
    sizes = set(rows.values()) | ({num_nodes} if num_nodes is not None else set())
    if len(sizes) > 1 or None in sizes:
        raise ValueError(f"node attribute files must have one row per node"
                         f"{'' if num_nodes is None else f' ({num_nodes})'}; their first dimensions: {rows}")
    for key, npy in files.items():
        _torch_dtype(npy, f"node attribute {key!r}")
    return files, (sizes.pop() if sizes else None)


def _hash_scatter(h: Any, key: str, npy: NpyFile, pattern: CommPattern, scratch: Path, chunk_bytes: int) -> None:
    """One pass over a node attribute: hashed as :func:`~pyg_sparsecomm.graph_fingerprint` hashes
    it, and its rows written to ``scratch`` in (part, node) order: part ``r``'s rows from row
    ``sum(part_sizes[:r])`` on, in ``n_id`` order."""
    N, row_bytes = pattern.num_nodes, npy.row_bytes
    numel = N * (row_bytes // npy.dtype.itemsize if npy.dtype.itemsize else 0)
    h.update(f"{key}:{_torch_dtype(npy, key)}:{numel}:".encode())
    first_row = np.concatenate([[0], np.cumsum(pattern.part_sizes)[:-1]])
    step = max(1, chunk_bytes // max(row_bytes, 1))
    with open(npy.path, "rb") as f, open(scratch, "wb") as out:
        out.truncate(N * row_bytes)
        for a in range(0, N, step):
            b = min(N, a + step)
            block = np.ascontiguousarray(npy.read(f, a, b - a))
            h.update(block.data.cast("B"))
            for r, rows in key_groups(pattern.part[a:b], pattern.num_parts):  # ascending node id within
                dest = first_row[r] + pattern.local_index[a + rows[0]]  # the part's rows run on
                os.pwrite(out.fileno(), block[rows].data, int(dest) * row_bytes)  # no bytes copy
            del block  # before the next chunk is read: one chunk at a time


def _part_record(by_part: EdgesByPart, weight: Tensor | None, pattern: CommPattern, rank: int,
                 node_files: dict[str, NpyFile], scratch: dict[str, Path], tmp: Path, chunk_bytes: int) -> dict:
    """Part ``rank``'s record as :func:`~pyg_sparsecomm.store.files.save_partition` writes it, its
    in-edges sorted into scratch files and every O(part) array :class:`Streamed` from a file."""
    plan = rank_plan(pattern, rank)
    edges = sort_in_edges(by_part.chunks_of(rank), pattern, plan, tmp, chunk_bytes)
    release_free_heap()  # the sort's freed blocks, before the file is written a chunk at a time
    stream = partial(file_chunks, chunk_bytes=chunk_bytes)
    value = None if weight is None else Streamed(weight.dtype, (edges.num_edges,), partial(
        _gathered, weight.numpy(), edges.files["e_id"], edges.num_edges, chunk_bytes))
    first = int(np.sum(pattern.part_sizes[:rank])) if rank else 0
    count = int(pattern.part_sizes[rank])
    attrs = {key: Streamed(_torch_dtype(npy, key), (count, *npy.shape[1:]),
                           partial(stream, scratch[key], first * npy.row_bytes, count * npy.row_bytes))
             for key, npy in node_files.items()}
    col, e_id = (Streamed(torch.long, (edges.num_edges,), partial(stream, edges.files[k], 0, 8 * edges.num_edges))
                 for k in ("col", "e_id"))
    return {**plan_record(plan), "rowptr": edges.rowptr, "col": col, "value": value, "e_id": e_id, "attrs": attrs}


def _gathered(weight: np.ndarray, e_id: Path, num_edges: int, chunk_bytes: int) -> Iterator[np.ndarray]:
    for chunk in file_chunks(e_id, 0, 8 * num_edges, max(8, chunk_bytes // 16 * 8)):  # ids and their weights
        yield weight[np.frombuffer(chunk, dtype=np.int64)]


def _partition(partitioner: SparsityAwarePartitioner, edges: EdgeFiles, N: int, step: int) -> Tensor:
    """The partition of the graph: its edges are read whole only for a method that reads them, and
    freed when it returns (a ``[2, 0]`` stand-in for ``"random"`` and ``"contiguous"``)."""
    edge_index = edges.read(N, step) if partitioner.reads_edges else torch.empty(2, 0, dtype=torch.long)
    return partitioner.assign(edge_index, N)


def _records(partitioner: SparsityAwarePartitioner, edges: EdgeFiles, edge_weight: Tensor | None, N: int,
             node_files: dict[str, NpyFile], out: Path, source: dict, chunk_bytes: int) -> Iterator[dict]:
    """Partitions the graph, then yields the part records in rank order (one at a time, each
    streamed from scratch files while it is written); fills ``source["fingerprint"]``.  Runs
    while the store holds the directory's lock, so that a second writer is refused before
    partitioning, not after."""
    num_parts = partitioner.num_parts
    part = _partition(partitioner, edges, N, max(1, chunk_bytes // 16))
    release_free_heap()  # the method's freed arrays (and the edges it read), before the passes
    # The pattern below is the only one built, from the edge files read a chunk at a time.
    step = min(EDGE_CHUNK, max(1, chunk_bytes // 80))  # the passes' arrays: ~80 B per edge of a step
    pattern = comm_pattern(edges.chunks, part, N, num_parts, chunk=step)
    release_free_heap()  # the pattern's merges leave freed heap behind: give it back before the parts
    tensors = {"part": part, **({} if edge_weight is None else {"edge_weight": edge_weight})}
    h = hashlib.sha256(f"num_nodes={N};".encode())
    # A scratch name the store's next writer removes if this one is killed.
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.tmp-scratch-", dir=out.parent) as tmp:
        scratch = {key: Path(tmp) / key for key in node_files}
        for key in sorted([*tensors, "edge_index", *node_files, "num_parts"]):  # graph_fingerprint's order
            if key == "num_parts":
                h.update(f"num_parts={num_parts!r};".encode())
            elif key == "edge_index":
                edges.hash_into(h, max(1, chunk_bytes // 16))
            elif key in tensors:
                hash_tensor(h, key, tensors[key])
            else:
                _hash_scatter(h, key, node_files[key], pattern, scratch[key], chunk_bytes)
                release_free_heap()
        source["fingerprint"] = h.hexdigest()
        by_part = group_edges_by_part(edges.chunks, pattern, Path(tmp), step)  # the parts read 2E edges, not 2PE
        for r in range(num_parts):
            yield _part_record(by_part, edge_weight, pattern, r, node_files, scratch, Path(tmp), chunk_bytes)


def partition_files(edges: PathLike | Sequence[PathLike], out: PathLike, num_parts: int,
                    method: str = "metis", seed: int = 0, *, x: PathLike | None = None,
                    y: PathLike | None = None, masks: Mapping[str, PathLike] | None = None,
                    edge_weight: PathLike | None = None, num_nodes: int | None = None,
                    dataset: str | None = None, chunk_bytes: int = CHUNK_BYTES, **options) -> Path:
    r"""Partitions a graph stored as ``.npy`` files and writes one part file per rank under ``out``.

    The result is the directory ``save_partition(SparsityAwarePartitioner(num_parts, method,
    seed, **options)(data), out, source=partition_source(...))`` writes for the in-memory graph
    ``data = Data(x=x, y=y, edge_index=edges, edge_weight=edge_weight, **masks)`` (the same
    partition, records and manifest, fingerprint included), so every rank then loads its part
    with ``load_shard(out, expected_source=...)``.  Peak memory: the partitioning method's (a
    method that reads the edges gets them whole, :math:`8E` bytes of ``int32`` ids below
    :math:`2^{31}` nodes; ``"random"`` and ``"contiguous"`` none), then the partition's node arrays
    and one chunk; see :mod:`~pyg_sparsecomm.store.from_files`.  Scratch files next to ``out`` take one
    copy of the node attributes, 16 bytes per edge (the edges grouped by part; 24 beyond
    :math:`2^{31}` nodes) and 24 bytes per in-edge of the part being written.

    Args:
        edges (PathLike or Sequence[PathLike]): ``.npy`` file of integer ids, shape ``[2, E]`` (row 0 sources, row 1
            targets, as PyG's ``edge_index``), or a list of such files (chunks, concatenated in order).
        out (PathLike): the partition directory (written atomically, see :func:`~pyg_sparsecomm.save_partition`).
        num_parts (int): number of parts (the world size to train with).
        method (str, optional): the partitioning method, as for
            :class:`~pyg_sparsecomm.SparsityAwarePartitioner` (``"metis+vb"`` etc. too):
            ``"kaminpar"`` chooses the options not given from the graph's size and degrees, as
            there (:mod:`~pyg_sparsecomm.partition.kaminpar_defaults`), and reads the ``int32``
            edges as they are (no ``int64`` copy). (default: :obj:`"metis"`)
        seed (int, optional): the method's seed. (default: :obj:`0`)
        x (PathLike, optional): ``.npy`` node features ``[N, F]`` (any dtype torch holds).
            (default: :obj:`None`)
        y (PathLike, optional): ``.npy`` node labels ``[N]``. (default: :obj:`None`)
        masks (Mapping[str, PathLike], optional): ``{name: .npy path}`` of further node attributes, e.g.
            ``{"train_mask": ...}``. (default: :obj:`None`)
        edge_weight (PathLike, optional): ``.npy`` of ``[E]`` edge weights, in the order of ``edges``.
            (default: :obj:`None`)
        num_nodes (int, optional): ``N``. (default: the node attribute files' first dimension, else the
            largest node id + 1)
        dataset (str, optional): the dataset name recorded in the manifest's ``source``. (default: :obj:`None`)
        chunk_bytes (int, optional): the working memory of every streamed pass: bytes of node-attribute rows
            read at once, of the in-edges sorted at once (``chunk_bytes / 64`` edges), of a
            part file's record copied at once. (default: :obj:`CHUNK_BYTES`)
        **options (optional): the method's options, as for
            :class:`~pyg_sparsecomm.SparsityAwarePartitioner`.

    Returns:
        The path of the manifest.
    """
    partitioner = SparsityAwarePartitioner(num_parts, method, seed=seed, **options)
    node_attrs = {k: v for k, v in (("x", x), ("y", y)) if v is not None} | dict(masks or {})
    node_files, rows = _node_files(node_attrs, num_nodes)
    edge_files = EdgeFiles.open(edges)
    N, E = edge_files.num_nodes(rows, max(1, chunk_bytes // 16)), edge_files.num_edges
    weight = None
    if edge_weight is not None:
        npy = NpyFile.open(edge_weight, "edge weight")
        if npy.shape != (E,):
            raise ValueError(f"edge weight file {npy.path} has shape {list(npy.shape)}: expected "
                             f"[{E}], one weight per edge")
        with open(npy.path, "rb") as f:
            weight = torch.from_numpy(npy.read(f, 0, E))
    if num_parts > max(N, 1):
        raise ValueError(f"cannot split {N} nodes into {num_parts} parts")
    described = partition_source(partitioner, dataset)
    x_file = node_files.get("x")
    source = {**described, "num_parts": num_parts, "num_nodes": N, "num_edges": E,
              "num_features": None if x_file is None else (x_file.shape[-1] if len(x_file.shape) > 1 else 1),
              "x_dtype": None if x_file is None else str(_torch_dtype(x_file, "x")).replace("torch.", "")}
    out = Path(out).absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    records = _records(partitioner, edge_files, weight, N, node_files, out, source, chunk_bytes)
    return write_partition(out, lambda: source, records)
