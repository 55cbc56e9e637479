"""``partition_files`` / ``python -m pyg_sparsecomm partition``: a graph read from ``.npy`` files
gives the partition directory ``save_partition`` writes for the same graph in memory."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner, load_shard, partition_files, save_partition, shard
from pyg_sparsecomm.cli.main import main as cli_main
from pyg_sparsecomm.plan.homogeneous import RankPlan
from pyg_sparsecomm.store.files import partition_source, read_manifest

N, F, ISOLATED = 70, 5, 8  # the last ISOLATED nodes have no edge at all


def _graph() -> Data:
    """Directed, with self-loops, duplicate edges, isolated nodes, weights, labels and masks."""
    gen = torch.Generator().manual_seed(0)
    edges = torch.randint(0, N - ISOLATED, (2, 260), generator=gen)
    loops = torch.arange(0, N - ISOLATED, 4).repeat(2, 1)
    edge_index = torch.cat([edges, loops, edges[:, :12]], dim=1)
    return Data(x=torch.randn(N, F, generator=gen), edge_index=edge_index,
                edge_weight=torch.rand(edge_index.size(1), generator=gen) + 0.5,
                y=torch.randint(0, 4, (N,), generator=gen), train_mask=torch.rand(N, generator=gen) < 0.3,
                test_mask=torch.rand(N, generator=gen) < 0.3)


def _files(tmp_path, data: Data, edge_dtype=np.int64, edge_chunks: int = 1) -> dict:
    """The graph as .npy files: ``partition_files``' keyword arguments."""
    paths = {}
    for key in ("x", "y", "train_mask", "test_mask", "edge_weight"):
        paths[key] = tmp_path / f"{key}.npy"
        np.save(paths[key], data[key].numpy())
    edges = data.edge_index.numpy().astype(edge_dtype)
    edge_files = []
    for k, chunk in enumerate(np.array_split(edges, edge_chunks, axis=1)):
        edge_files.append(tmp_path / f"edges{k}.npy")
        np.save(edge_files[-1], np.ascontiguousarray(chunk))
    return {"edges": edge_files if edge_chunks > 1 else edge_files[0], "x": paths["x"], "y": paths["y"],
            "masks": {"train_mask": paths["train_mask"], "test_mask": paths["test_mask"]},
            "edge_weight": paths["edge_weight"]}


def _assert_same_shard(a: Data, b: Data) -> None:
    assert sorted(a.keys()) == sorted(b.keys())
    for key in a.keys():
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        elif key != "adj":
            assert a[key] == b[key], key
    for key in ("rowptr", "col", "value"):
        assert torch.equal(getattr(a.adj, key), getattr(b.adj, key)), key
    for field in RankPlan.__dataclass_fields__:
        va, vb = getattr(a.adj.plan, field), getattr(b.adj.plan, field)
        assert torch.equal(va, vb) if isinstance(va, torch.Tensor) else va == vb, field


# (P, method, edge dtype, edge chunks): int32 and chunked edge files, METIS, a balanced method, and
# "random", for which the edges are never read whole
CASES = [(1, "metis", np.int32, 1), (2, "metis", np.int64, 3), (3, "random", np.int32, 2), (4, "metis+vb", np.int64, 1),
         (2, "random", ">i8", 3)]  # big-endian ids: read as their values, hashed as the int64 graph's


@pytest.mark.parametrize("P, method, edge_dtype, edge_chunks", CASES)
def test_part_files_load_as_save_partition_of_the_graph_in_memory(tmp_path, P, method, edge_dtype, edge_chunks):
    data = _graph()
    partitioner = SparsityAwarePartitioner(P, method, seed=2)
    source = partition_source(partitioner, dataset="toy")
    save_partition(partitioner(data), tmp_path / "memory", source=source)
    files = _files(tmp_path, data, edge_dtype, edge_chunks)
    # chunks of 3 rows of x (and of a few edges): every chunk boundary case is exercised
    manifest = partition_files(out=tmp_path / "files", num_parts=P, method=method, seed=2, dataset="toy",
                               chunk_bytes=3 * F * 4, **files)
    assert manifest == tmp_path / "files" / "manifest.json"
    assert read_manifest(tmp_path / "files")["source"] == read_manifest(tmp_path / "memory")["source"]
    for r in range(P):
        from_files = load_shard(tmp_path / "files", rank=r, world_size=P, expected_source=source)
        _assert_same_shard(from_files, load_shard(tmp_path / "memory", rank=r, world_size=P))
    assert not list(tmp_path.glob(".files.tmp-*"))  # the scratch files are gone


def test_cli_writes_what_the_api_writes(tmp_path, capsys):
    data = _graph()
    files = _files(tmp_path, data)
    partition_files(out=tmp_path / "api", num_parts=2, method="metis", **files)
    code = cli_main(["partition", "--edges", str(files["edges"]), "--x", str(files["x"]), "--y", str(files["y"]),
                     "--mask", f"train_mask={files['masks']['train_mask']}",
                     "--mask", f"test_mask={files['masks']['test_mask']}",
                     "--edge-weight", str(files["edge_weight"]), "--num-parts", "2", "--method", "metis",
                     "--out", str(tmp_path / "cli")])
    printed = capsys.readouterr().out
    assert code == 0 and "(2 part files)" in printed and "peak memory" in printed, printed
    assert read_manifest(tmp_path / "cli")["source"] == read_manifest(tmp_path / "api")["source"]
    for r in range(2):
        _assert_same_shard(load_shard(tmp_path / "cli", rank=r, world_size=2),
                           load_shard(tmp_path / "api", rank=r, world_size=2))


def _bad(tmp_path, name, array, fortran=False):
    path = tmp_path / f"bad_{name}"
    np.save(path, np.asfortranarray(array) if fortran else array)
    return path


def test_bad_input_files_are_refused_naming_the_file_and_the_fix(tmp_path):
    data = _graph()
    files = _files(tmp_path, data)
    E = data.edge_index.size(1)
    cases = [
        (dict(edges=_bad(tmp_path, "t.npy", data.edge_index.t().numpy().copy())),
         rf"shape \[{E}, 2\]: expected integer ids of shape \[2, num_edges\]"),
        (dict(edges=_bad(tmp_path, "f.npy", data.edge_index.float().numpy())), "float32 array"),
        (dict(edges=_bad(tmp_path, "o.npy", data.edge_index.numpy() + N)), rf"node id \d+, outside \[0, {N}\)"),
        (dict(y=_bad(tmp_path, "y.npy", np.zeros(N + 1))), r"one row per node; their first dimensions: "
         rf"\{{'x': {N}, 'y': {N + 1}, "),
        (dict(x=_bad(tmp_path, "xf.npy", data.x.numpy(), fortran=True)), "Fortran order: save it C-ordered"),
        (dict(edge_weight=_bad(tmp_path, "w.npy", np.ones(3))), r"shape \[3\]: expected \[\d+\], one weight per edge"),
        (dict(x=tmp_path / "missing.npy"), "node attribute 'x' file .*missing.npy not found"),
    ]
    for change, message in cases:
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            partition_files(out=tmp_path / "out", num_parts=2, **{**files, **change})
    truncated = tmp_path / "cut.npy"
    truncated.write_bytes((tmp_path / "x.npy").read_bytes()[:-8])
    with pytest.raises(ValueError, match="is truncated: .* write it again"):
        partition_files(out=tmp_path / "out", num_parts=2, **{**files, "x": truncated})
    with pytest.raises(ValueError, match=f"cannot split {N} nodes into {N + 1} parts"):
        partition_files(out=tmp_path / "out", num_parts=N + 1, **files)
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="partition: edge file .* holds a float32 array"):
        cli_main(["partition", "--edges", str(tmp_path / "bad_f.npy"), "--num-parts", "2",
                  "--out", str(tmp_path / "o")])


def test_the_writer_holds_neither_the_edges_nor_a_parts_rows_nor_its_in_edges(tmp_path, monkeypatch):
    """numpy's allocations are traced by tracemalloc: the writer's peak is a few chunks, far below
    the edge list (3.2 MB as int64, read a chunk at a time by every pass and never whole for
    ``"random"``: reading it whole fails here), one part's feature rows (8 MB) and its in-edges
    (1.6 MB relabelled and sorted), which the part files are streamed from scratch files instead."""
    import tracemalloc

    from pyg_sparsecomm.store.from_files import EdgeFiles

    def whole(*args):
        raise AssertionError("the edges were read whole for a method that reads none")
    monkeypatch.setattr(EdgeFiles, "read", whole)

    gen = torch.Generator().manual_seed(0)
    n, width, P, E, chunk = 2000, 4000, 4, 200_000, 256 << 10
    np.save(tmp_path / "edges.npy", torch.randint(0, n, (2, E), generator=gen).numpy())
    np.save(tmp_path / "x.npy", torch.randn(n, width, generator=gen).numpy())
    tracemalloc.start()
    try:
        partition_files(tmp_path / "edges.npy", tmp_path / "parts", P, "random", x=tmp_path / "x.npy",
                        chunk_bytes=chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * chunk, (peak, chunk)  # 1.7 MB here; 18 MB when a part's record was held whole
    x = np.load(tmp_path / "x.npy")
    for r in range(P):
        local = load_shard(tmp_path / "parts", rank=r, world_size=P)
        assert torch.equal(local.x, torch.from_numpy(x[local.n_id.numpy()]))


def test_part_files_are_the_shards_of_the_partition_with_an_empty_part(tmp_path, monkeypatch):
    """Every field of every rank's loaded part equals ``shard()`` of the same partition, part 2
    empty, P = 1..4, the in-edges sorted in many blocks of a few rows (chunks of 10 edges)."""
    data = _graph()
    files = _files(tmp_path, data)
    for P in range(1, 5):
        part = torch.arange(N) % P
        if P > 2:
            part[part == 2] = 0  # part 2 owns no node (and no edge)
        monkeypatch.setattr(SparsityAwarePartitioner, "assign", lambda self, edge_index, num_nodes, p=part: p)
        partition_files(out=tmp_path / f"p{P}", num_parts=P, method="random", chunk_bytes=640, **files)
        partitioned = data.clone()
        partitioned.part, partitioned.num_parts = part, P
        for r in range(P):
            _assert_same_shard(load_shard(tmp_path / f"p{P}", rank=r, world_size=P),
                               shard(partitioned, rank=r, world_size=P))


def test_edges_read_whole_are_int32_when_every_id_fits(tmp_path):
    """A method that reads the edges gets them as int32 ids (8 bytes per edge) below 2^31 nodes;
    beyond, or for an id that does not fit, as they are (int64), never wrapped."""
    from pyg_sparsecomm.store.from_files import EdgeFiles

    def read(path, num_nodes):
        files = EdgeFiles.open(path)
        n = files.num_nodes(num_nodes, step=2)
        return files.read(n, step=2), n
    small = np.array([[0, 5, 2], [1, 1, 7]], dtype=np.int64)
    np.save(tmp_path / "small.npy", small)
    for num_nodes in (8, None):  # known from the node files, or found by the range pass
        edge_index, n = read(tmp_path / "small.npy", num_nodes)
        assert edge_index.dtype == torch.int32 and n == 8 and np.array_equal(edge_index.numpy(), small)
    big = np.array([[0, 2 ** 32 + 3], [2 ** 31, 1]], dtype=np.int64)
    np.save(tmp_path / "big.npy", big)
    edge_index, n = read(tmp_path / "big.npy", None)
    assert edge_index.dtype == torch.long and n == 2 ** 32 + 4 and np.array_equal(edge_index.numpy(), big)
    with pytest.raises(ValueError, match=r"node id 4294967299, outside \[0, 10\)"):
        read(tmp_path / "big.npy", 10)


def test_edges_are_grouped_by_part_once_and_read_a_bounded_number_of_times(tmp_path, monkeypatch):
    """The edge files are read in full a fixed number of times whatever P (the range check, the
    pattern, the fingerprint, the grouping by part), not twice per part; every part's group holds
    exactly its in-edges, in edge order, an empty part none."""
    from pyg_sparsecomm.plan.edges import edge_chunks
    from pyg_sparsecomm.plan.homogeneous import comm_pattern
    from pyg_sparsecomm.store.edges_by_part import group_edges_by_part
    from pyg_sparsecomm.store.from_files import EdgeFiles

    data = _graph()
    files = _files(tmp_path, data, np.int64, 2)
    passes = []

    def counting(name, read):
        def counted(self, step):
            passes.append(name)
            return read(self, step)
        return counted
    for name in ("rows", "chunks"):
        monkeypatch.setattr(EdgeFiles, name, counting(name, getattr(EdgeFiles, name)))
    for P in (2, 7):
        passes.clear()
        partition_files(out=tmp_path / f"p{P}", num_parts=P, method="random", chunk_bytes=640, **files)
        assert sorted(passes) == ["chunks", "chunks", "rows", "rows"], (P, passes)
    part = torch.arange(N) % 4
    part[part == 2] = 0  # part 2 owns no node
    pattern = comm_pattern(data.edge_index, part, N, 4)
    (tmp_path / "g").mkdir()
    grouped = group_edges_by_part(edge_chunks(data.edge_index), pattern, tmp_path / "g", step=7)
    for r in range(4):
        got = [np.concatenate(field) if field else np.empty(0)
               for field in zip(*grouped.chunks_of(r)(5), strict=True)] or [np.empty(0)] * 3
        e_id = torch.nonzero(part[data.edge_index[1]] == r).flatten().numpy()
        assert np.array_equal(got[0], e_id), r
        assert np.array_equal(got[1], data.edge_index[0, e_id].numpy())
        assert np.array_equal(got[2], data.edge_index[1, e_id].numpy())
