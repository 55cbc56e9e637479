"""``shard(HeteroData)``: per node type the owned rows, per relation a bipartite ``RelationAdj``
whose columns are ``[owned | halo]`` of the source type, the halo being the union over every
relation reading that type (one plan per source type, shared by its relations)."""
import pytest
import torch

from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.plan.relation_adj import RelationAdj

P = 3


def partitioned():
    data = igbh_like(120, num_institutes=2, featureless=("institute",), isolated=0.1, seed=4)
    cites = ("paper", "cites", "paper")
    data[cites].edge_attr = torch.randn(data[cites].edge_index.size(1), 3)
    data[cites].edge_weight = torch.rand(data[cites].edge_index.size(1)) + 0.5
    return SparsityAwarePartitioner(P, method="random", seed=1)(data)


def test_every_rank_holds_its_rows_and_exactly_the_in_edges_of_its_targets():
    data = partitioned()
    shards = [shard(data, rank=r, world_size=P) for r in range(P)]
    assert sum(s["institute"].num_nodes for s in shards) == 2  # a rank owns no institute
    for t in data.node_types:
        ids = torch.cat([s[t].n_id for s in shards])
        assert torch.equal(ids.sort().values, torch.arange(data[t].num_nodes))  # one owner each
        for r, s in enumerate(shards):
            assert bool((data[t].part[s[t].n_id] == r).all())
            for key in ("x", "y", "train_mask"):
                if key in data[t]:
                    assert torch.equal(s[t][key], data[t][key][s[t].n_id])
    for et in data.edge_types:
        src, _, dst = et
        edge_index = data[et].edge_index
        seen = torch.zeros(edge_index.size(1), dtype=torch.long)
        for r, s in enumerate(shards):
            adj = s[et].adj
            assert isinstance(adj, RelationAdj) and adj.edge_type == et
            assert adj.num_rows == s[dst].num_nodes and adj.num_owned == s[src].num_nodes
            col_ids = torch.cat([s[src].n_id, adj.plan.halo_n_id])
            local = adj.edge_index()
            assert not local.numel() or int(local[0].max()) < adj.num_cols
            glob = torch.stack([col_ids[local[0]], s[dst].n_id[local[1]]])
            assert torch.equal(glob, edge_index[:, s[et].e_id])  # e_id: adj's edge order
            assert bool((data[dst].part[edge_index[1, s[et].e_id]] == r).all())
            seen[s[et].e_id] += 1
        assert bool((seen == 1).all()), et  # every edge on the owner of its target, once
    cites = ("paper", "cites", "paper")
    for s in shards:
        assert torch.equal(s[cites].edge_attr, data[cites].edge_attr[s[cites].e_id])
        assert torch.equal(s[cites].edge_weight, data[cites].edge_weight[s[cites].e_id])
        assert torch.equal(s[cites].adj.value, s[cites].edge_weight)


def test_one_plan_per_source_type_whose_halo_is_the_union_of_its_relations():
    data = partitioned()
    for r in range(P):
        local = shard(data, rank=r, world_size=P)
        for src in data.node_types:
            readers = [et for et in data.edge_types if et[0] == src]
            plans = {id(local[et].adj.plan) for et in readers}
            assert len(plans) == 1, src  # shared: one exchange serves every relation
            needed = set()
            for et in readers:
                edge_index = data[et].edge_index
                mine = data[et[2]].part[edge_index[1]] == r
                sources = edge_index[0, mine]
                needed |= set(sources[data[src].part[sources] != r].tolist())
            assert set(local[readers[0]].adj.plan.halo_n_id.tolist()) == needed, (r, src)
        assert set(local.adj_dict) == set(data.edge_types)
        assert set(local.x_dict) == {"paper", "author", "fos"}


def test_shard_refuses_what_it_cannot_do():
    data = igbh_like(30, seed=0)
    with pytest.raises(ValueError, match=r"node type\(s\) \['paper', 'author', 'institute', 'fos'\] have no "
                                         r"partition: apply SparsityAwarePartitioner"):
        shard(data, rank=0, world_size=2)
    parts = SparsityAwarePartitioner(2, method="random")(data)
    with pytest.raises(ValueError, match=r"partitioned into num_parts=2 but the world size is 3"):
        shard(parts, rank=0, world_size=3)
    from pyg_sparsecomm.comm.grid import ProcessGrid
    with pytest.raises(NotImplementedError, match=r"1.5D layout is not supported for heterogeneous"):
        shard(parts, grid=ProcessGrid(2, world_size=4, rank=0))
