"""``SparsityAwarePartitioner`` on ``HeteroData``: one owner per node of every type, every type
balanced, and ``comm_stats`` per relation and per source type equal to a brute-force count
(a source type's volume is the union over the relations reading it)."""
import pytest
import torch
from torch_geometric.data import HeteroData

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.graph.datasets import igbh_like


def brute_force_rows(data, parts, edge_types):
    """Rows moved: ``|{(j, p)}|`` over edges ``j -> i`` of ``edge_types`` with ``part(i) = p != part(j)``."""
    pairs = set()
    for s, r, d in edge_types:
        for j, i in data[s, r, d].edge_index.t().tolist():
            p = int(parts[d][i])
            if p != int(parts[s][j]):
                pairs.add((s, j, p))
    return len(pairs)


@pytest.mark.parametrize("method", ["metis", "random", "contiguous"])
def test_every_node_of_every_type_has_one_owner_and_stats_match_brute_force(method):
    data = igbh_like(300, featureless=("institute",), isolated=0.05, seed=2)
    out = SparsityAwarePartitioner(3, method=method, seed=1)(data)
    assert out.num_parts == 3 and "part" not in data["paper"]  # a copy: the input is unchanged
    parts = {t: out[t].part for t in out.node_types}
    for t, part in parts.items():
        assert part.shape == (data[t].num_nodes,) and part.dtype == torch.long
        assert 0 <= int(part.min()) and int(part.max()) < 3
    stats = out.comm_stats
    for et in data.edge_types:
        assert stats.relations[et].total_rows == brute_force_rows(data, parts, [et]), et
    for s in ("paper", "author", "institute", "fos"):
        readers = [et for et in data.edge_types if et[0] == s]
        assert stats.sources[s].total_rows == brute_force_rows(data, parts, readers), s
    assert stats.total_rows == brute_force_rows(data, parts, data.edge_types)
    assert stats.total_rows < stats.relation_rows  # paper is read by three relations
    for t in data.node_types:
        assert stats.part_sizes[t].tolist() == torch.bincount(parts[t], minlength=3).tolist()


def test_metis_balances_every_node_type_and_cuts_less_than_random():
    data = igbh_like(1500, seed=0)
    metis = SparsityAwarePartitioner(4, method="metis", seed=1)(data).comm_stats
    random = SparsityAwarePartitioner(4, method="random", seed=1)(data).comm_stats
    assert max(metis.node_imbalance().values()) <= 1.1, metis.node_imbalance()
    assert metis.total_rows < random.total_rows
    again = SparsityAwarePartitioner(4, method="metis", seed=1)(data)
    assert again.comm_stats.total_rows == metis.total_rows  # deterministic for a seed


def test_random_and_contiguous_split_each_type_evenly():
    data = igbh_like(103, num_institutes=5, seed=1)
    for method in ("random", "contiguous"):
        out = SparsityAwarePartitioner(4, method=method)(data)
        for t in data.node_types:
            counts = torch.bincount(out[t].part, minlength=4)
            assert int(counts.max() - counts.min()) <= 1, (method, t, counts)


def test_unsupported_settings_and_bad_graphs_are_refused_by_name():
    data = igbh_like(50, seed=0)
    with pytest.raises(NotImplementedError, match=r"method='hypergraph' is not supported for heterogeneous"):
        SparsityAwarePartitioner(2, method="hypergraph")(data)
    with pytest.raises(NotImplementedError, match=r"balance='max_send' is not supported for heterogeneous"):
        SparsityAwarePartitioner(2, method="metis", balance="max_send")(data)
    with pytest.raises(ValueError, match=r"largest node type has 50 nodes into 51 parts"):
        SparsityAwarePartitioner(51, method="random")(data)
    bad = HeteroData()
    bad["a"].num_nodes, bad["b"].num_nodes = 3, 2
    bad["a", "to", "b"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"\('a', 'to', 'b'\): edge_index\[1\] holds ids outside \[0, 2\) of "
                                         r"node type 'b'"):
        SparsityAwarePartitioner(2, method="random")(bad)
    ghost = igbh_like(50, seed=0)  # issue 45: a relation to a node type never given nodes
    ghost["paper", "cites_ghost", "ghost"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match=r"relation \('paper', 'cites_ghost', 'ghost'\) ends at node type 'ghost', "
                                         r"which has no nodes.*set data\['ghost'\]\.num_nodes"):
        SparsityAwarePartitioner(2, method="random")(ghost)
    assert "ghost" not in ghost.node_types  # the check added no node type to the user's graph
    ghost["ghost"]  # now a node type, still without nodes
    with pytest.raises(ValueError, match=r"node type 'ghost' has no num_nodes \(set data\['ghost'\]\.num_nodes"), \
            pytest.warns(UserWarning, match=r"Unable to accurately infer 'num_nodes'"):  # PyG's, before the error
        SparsityAwarePartitioner(2, method="random")(ghost)
    sparse = HeteroData()
    sparse["a"].num_nodes = 3
    sparse["a", "to", "a"].adj_t = torch.eye(3).to_sparse()
    with pytest.raises(ValueError, match=r"needs an edge_index .*adj_t is not supported for heterogeneous"):
        SparsityAwarePartitioner(2, method="random")(sparse)


def test_comm_stats_load_with_weights_only_as_a_processed_dataset_would():
    import io
    data = SparsityAwarePartitioner(3, method="random")(igbh_like(60, seed=0))
    buf = io.BytesIO()
    torch.save({"comm_stats": data.comm_stats}, buf)
    buf.seek(0)
    stats = torch.load(buf, weights_only=True)["comm_stats"]
    assert stats.total_rows == data.comm_stats.total_rows and stats.relation_rows == data.comm_stats.relation_rows
    assert stats.part_sizes["paper"].tolist() == data.comm_stats.part_sizes["paper"].tolist()
