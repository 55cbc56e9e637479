"""``igbh_like``: the IGBH-shaped heterogeneous generator of the tests and benchmarks."""
import pytest
import torch
from torch_geometric.utils import degree

from pyg_sparsecomm.graph.datasets import IGBH_RELATIONS, igbh_like


def test_types_relations_and_reverses():
    data = igbh_like(200, num_features=5)
    assert data.node_types == ["paper", "author", "institute", "fos"]
    assert {data[t].num_nodes for t in data.node_types} == {200, 4, 20}
    for src, rel, dst in IGBH_RELATIONS:
        edge_index = data[src, rel, dst].edge_index
        assert int(edge_index[0].max()) < data[src].num_nodes and int(edge_index[1].max()) < data[dst].num_nodes
        if rel == "cites":  # directed by default, as in IGBH
            assert (dst, f"rev_{rel}", src) not in data.edge_types
        else:
            assert torch.equal(data[dst, f"rev_{rel}", src].edge_index, edge_index.flip(0))
    assert data["paper"].x.shape == (200, 5) and data["paper"].y.shape == (200,)
    masks = torch.stack([data["paper"][m] for m in ("train_mask", "val_mask", "test_mask")])
    assert bool((masks.sum(0) == 1).all())  # a split: every paper in exactly one mask


def test_seeded_power_law_featureless_isolated_and_directed():
    a = igbh_like(300, featureless=("institute", "fos"), isolated=0.1, without_reverse=("cites", "topic"), seed=3)
    b = igbh_like(300, featureless=("institute", "fos"), isolated=0.1, without_reverse=("cites", "topic"), seed=3)
    c = igbh_like(300, seed=4)
    for et in a.edge_types:
        assert torch.equal(a[et].edge_index, b[et].edge_index)
    assert not torch.equal(a["paper", "cites", "paper"].edge_index, c["paper", "cites", "paper"].edge_index)
    assert a["institute"].get("x") is None and a["fos"].get("x") is None and a["author"].get("x") is not None
    assert ("fos", "rev_topic", "paper") not in a.edge_types
    cites = a["paper", "cites", "paper"].edge_index
    in_degree = degree(cites[1], 300)
    assert float(in_degree.max()) > 5 * float(in_degree.mean())  # a power law's hubs
    assert cites.size(1) == torch.unique(cites[0] * 300 + cites[1]).numel()  # no duplicate edges
    touched = torch.zeros(300, dtype=torch.bool)
    for (s, _, d), ei in a.edge_index_dict.items():
        if s == "paper":
            touched[ei[0]] = True
        if d == "paper":
            touched[ei[1]] = True
    assert int((~touched).sum()) >= 30  # the isolated 10 % (and any paper no draw picked)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"featureless must name node types .*\['venue'\]"):
        igbh_like(10, featureless=("venue",))
    with pytest.raises(ValueError, match=r"isolated must be in \[0, 1\) \(got 1.0\)"):
        igbh_like(10, isolated=1.0)
