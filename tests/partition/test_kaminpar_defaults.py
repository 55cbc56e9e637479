"""``method="kaminpar"``'s options chosen from the graph: the choice as a function of the graph's
statistics, small graphs partitioned exactly as with the plain options and nothing said, a large
one's choices reaching KaMinPar with one warning naming them, named options always kept, and the
same choice through ``partition_files`` and ``python -m pyg_sparsecomm partition``."""
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition import kaminpar_backend, kaminpar_defaults
from pyg_sparsecomm.partition.kaminpar_defaults import AUTO, PLAIN_OPTIONS, AutomaticOptionsWarning, GraphStats
from pyg_sparsecomm.partition.methods import row_nnz

ALL_AUTO = {name: AUTO for name in PLAIN_OPTIONS}
LARGE, REDUCTION = kaminpar_defaults.LARGE_EDGES, kaminpar_defaults.REDUCTION_EDGES


def _stats(num_edges: int = LARGE, hub_share: float = 0.6, low_degree_share: float = 0.5) -> GraphStats:
    """An R-MAT-like graph: hubs holding most edge ends, half the nodes of at most 2 edge ends."""
    return GraphStats(num_nodes=1 << 21, num_edges=num_edges, max_degree=80_000, hub_share=hub_share,
                      low_degree_share=low_degree_share)


def _choose(stats: GraphStats, num_parts: int = 64, preset: str = "default", **named):
    return kaminpar_defaults.choose_options(stats, num_parts, {**ALL_AUTO, "preset": preset, **named}, cores=2)


def test_graph_stats_count_edge_ends():
    degree = np.array([0, 1, 2, 3, 500, 1000])  # two nodes above SAMPLE_DEGREE = 384
    stats = GraphStats.of_degrees(degree, num_edges=753)
    assert stats == GraphStats(6, 753, 1000, 1500 / 1506, 0.5)
    assert GraphStats.of_degrees(np.zeros(3, dtype=np.int64), 0) == GraphStats(3, 0, 0, 0.0, 1.0)


def test_a_small_graph_keeps_the_plain_options():
    chosen, why = _choose(_stats(REDUCTION - 1))
    assert {k: chosen[k] for k in PLAIN_OPTIONS} == PLAIN_OPTIONS and set(why) == set(PLAIN_OPTIONS)
    chosen, _ = _choose(_stats(REDUCTION - 1), preset="terapart")  # the preset needs compression at any size
    assert chosen["compress"] is True and chosen["split"] is None


def test_a_mid_size_graph_gets_the_reductions_only():
    chosen, why = _choose(_stats(LARGE - 1))
    assert {k: chosen[k] for k in PLAIN_OPTIONS} == dict(PLAIN_OPTIONS, fold_leaves=True, sample_degree=384)
    assert "7,999,999 edges >= 1,000,000" in why["fold_leaves"] and "7,999,999 edges < 8,000,000" in why["split"]


def test_a_large_graph_with_hubs_and_leaves_gets_every_option():
    chosen, why = _choose(_stats())
    assert {k: chosen[k] for k in PLAIN_OPTIONS} == {"threads": 2, "compress": True, "split": 2, "fold_leaves": True,
                                                     "sample_degree": kaminpar_defaults.SAMPLE_DEGREE}
    assert "50% of the nodes have at most 2 edge ends (>= 20%)" in why["fold_leaves"]
    assert "60% of the edge ends lie at nodes of degree above 384 (>= 25%; maximum degree 80000)" \
        in why["sample_degree"]
    assert "8,000,000 edges >= 8,000,000" in why["compress"] and "64 parts >= 16" in why["split"]


def test_each_option_follows_its_statistic():
    below_leaves = _choose(_stats(low_degree_share=kaminpar_defaults.LEAF_SHARE - 0.01))[0]
    below_hubs = _choose(_stats(hub_share=kaminpar_defaults.HUB_SHARE - 0.01))[0]
    few_parts = _choose(_stats(), num_parts=kaminpar_defaults.SPLIT_MIN_PARTS - 1)[0]
    assert (below_leaves["fold_leaves"], below_leaves["sample_degree"]) == (False, 384)
    assert (below_hubs["fold_leaves"], below_hubs["sample_degree"]) == (True, None)
    assert few_parts["split"] is None and few_parts["compress"] is True
    mesh = _choose(_stats(hub_share=0.0, low_degree_share=0.0))[0]  # a large mesh: neither hubs nor leaves
    assert (mesh["fold_leaves"], mesh["sample_degree"], mesh["split"]) == (False, None, 2)


def test_named_options_are_kept_false_and_none_included():
    named = {"threads": 1, "compress": False, "split": None, "fold_leaves": False, "sample_degree": None}
    chosen, why = _choose(_stats(), **named)
    assert {k: chosen[k] for k in named} == named and why == {}
    chosen, why = _choose(_stats(), fold_leaves=False, split=[2, 2])
    assert (chosen["fold_leaves"], chosen["split"], chosen["sample_degree"]) == (False, [2, 2], 384)
    assert set(why) == {"threads", "compress", "sample_degree"}


kaminpar = pytest.importorskip("kaminpar")


def _parts_and_warnings(data: Data, P: int, seed: int, **options):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        part = SparsityAwarePartitioner(P, "kaminpar", seed=seed, **options)(data).part
    return part, [w for w in said if issubclass(w.category, AutomaticOptionsWarning)]


def _same_as_plain(data: Data, cases) -> None:
    for P, seed in cases:
        part, said = _parts_and_warnings(data, P, seed)
        assert not said, said[0].message
        assert torch.equal(part, _parts_and_warnings(data, P, seed, **PLAIN_OPTIONS)[0]), (P, seed)


def test_small_graphs_are_partitioned_as_with_the_plain_options():
    _same_as_plain(rmat_graph(11, 8, seed=1), [(4, 0), (16, 1), (64, 2)])


@pytest.mark.dataset
def test_cora_and_citeseer_are_partitioned_as_with_the_plain_options(planetoid_root):
    from torch_geometric.datasets import Planetoid
    for name in ("Cora", "CiteSeer"):
        _same_as_plain(Planetoid(planetoid_root, name)[0], [(4, 0), (16, 1)])


@pytest.fixture
def large_below_a_thousand_edges(monkeypatch):
    """Every graph of 1000 edges or more is 'large', degrees above 24 are hubs' (a scale-11 R-MAT
    graph then gets every option), one thread is all the cores; records the settings of KaMinPar's
    calls."""
    monkeypatch.setattr(kaminpar_defaults, "LARGE_EDGES", 1000)
    monkeypatch.setattr(kaminpar_defaults, "REDUCTION_EDGES", 1000)
    monkeypatch.setattr(kaminpar_defaults, "SAMPLE_DEGREE", 24)
    monkeypatch.setattr(kaminpar_backend, "usable_cores", lambda: 1)
    calls, real = [], kaminpar_backend._partition_edges

    def recording(edges, num_nodes, blocks, vertex_weights, **settings):
        count = len(blocks) if isinstance(blocks, np.ndarray) else blocks
        calls.append({"blocks": count, "ids": edges[0].dtype, **settings, "degree": len(settings["known_degree"])})
        return real(edges, num_nodes, blocks, vertex_weights, **settings)

    monkeypatch.setattr(kaminpar_backend, "_partition_edges", recording)
    return calls


def test_a_large_graphs_choices_reach_kaminpar_and_named_options_win(large_below_a_thousand_edges):
    calls, data, P = large_below_a_thousand_edges, rmat_graph(11, 8, seed=1), 16
    part, said = _parts_and_warnings(data, P, 3)
    assert len(said) == 1
    message = str(said[0].message)
    for chosen in ("threads=1", "compress=True", "split=2", "fold_leaves=True", "sample_degree=24"):
        assert chosen in message, message
    first = calls[0]  # with split=2: the halves first, then each half's 8 parts
    assert (first["blocks"], first["threads"], first["compress"], first["fold"], first["sample_degree"]) \
        == (2, 1, True, True, 24) and first["degree"] == 1  # the choice's degrees, reused by the sample
    assert [(c["blocks"], c["degree"]) for c in calls[1:]] == [(8, 0), (8, 0)]  # the halves: their own
    weights = np.bincount(part.numpy(), weights=row_nnz(data.edge_index, data.num_nodes), minlength=P)
    # KaMinPar's balance (split: per level, rounded) is a heuristic's: the package enforces this bound
    assert sorted(part.unique().tolist()) == list(range(P))
    assert weights.max() <= np.ceil(1.03 * np.ceil(weights.sum() / P)), weights
    assert calls[0]["ids"] == np.int64
    with pytest.warns(AutomaticOptionsWarning):  # int32 ids (partition_files' edges) go in without an int64 copy
        SparsityAwarePartitioner(P, "kaminpar", seed=3).assign(data.edge_index.int(), data.num_nodes)
    assert calls[-3]["blocks"] == 2 and calls[-3]["ids"] == np.int32
    calls.clear()  # every option named: nothing chosen, nothing said
    _, said = _parts_and_warnings(data, P, 3, threads=None, compress=False, split=None, fold_leaves=False,
                                  sample_degree=None)
    assert not said and [(c["blocks"], c["threads"], c["compress"], c["fold"], c["sample_degree"], c["degree"])
                         for c in calls] == [(P, 1, False, False, None, 0)]
    calls.clear()  # one named: the others still chosen
    _, said = _parts_and_warnings(data, P, 3, fold_leaves=False)
    assert len(said) == 1 and "fold_leaves" not in str(said[0].message)
    assert calls[0]["fold"] is False and calls[0]["sample_degree"] == 24 and calls[0]["blocks"] == 2


def test_auto_partition_files_and_the_cli_choose_alike(large_below_a_thousand_edges, tmp_path, monkeypatch, capsys):
    from pyg_sparsecomm import partition_files
    from pyg_sparsecomm.cli.main import main as cli_main
    from pyg_sparsecomm.partition import auto

    calls, data = large_below_a_thousand_edges, rmat_graph(11, 8, seed=1)
    np.save(tmp_path / "edges.npy", data.edge_index.numpy())
    monkeypatch.setattr(auto, "KAMINPAR_ABOVE_EDGES", 1000)
    in_memory = _parts_and_warnings(data, 16, 0)[1]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        SparsityAwarePartitioner(16, "auto")(data)
        partition_files(tmp_path / "edges.npy", tmp_path / "api", 16, "kaminpar", num_nodes=data.num_nodes)
    messages = [str(w.message) for w in said if issubclass(w.category, AutomaticOptionsWarning)]
    assert messages == [str(in_memory[0].message)] * 2
    calls.clear()
    assert cli_main(["partition", "--edges", str(tmp_path / "edges.npy"), "--num-nodes", str(data.num_nodes),
                     "--num-parts", "16", "--method", "kaminpar", "--option", "sample_degree=null",
                     "--out", str(tmp_path / "cli")]) == 0
    err = capsys.readouterr().err
    assert "partition: method='kaminpar' chose its options from the graph" in err and "sample_degree" not in err
    assert calls[0]["sample_degree"] is None and calls[0]["fold"] is True
