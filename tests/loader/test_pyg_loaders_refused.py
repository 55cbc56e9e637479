"""PyG's own loaders handed a shard are refused by name, naming the package's loader that does the
job, on every rank at the same point (issue 54, item 5); ``DistributedNodeSubsetLoader(num_parts=)``
ports ``RandomNodeLoader`` in one line; a keyword no loader takes names the closest accepted one
(issue 55, item 4).  Real gloo runs at P = 2."""
import math

import pytest
import torch
import torch_geometric.loader as pyg_loader
from torch_geometric.data import Data

from pyg_sparsecomm import partition_and_shard, shard
from pyg_sparsecomm.graph.foreign_loader import REPLACEMENTS
from pyg_sparsecomm.loader import DistributedLinkNeighborLoader, DistributedNeighborLoader, DistributedNodeSubsetLoader
from pyg_sparsecomm.testing import launch

N = 60

#: PyG loader -> how a script makes it over ``data`` (those that run without pyg-lib / torch-sparse here),
#: and the package's loader its error must name
CALLS = {
    "RandomNodeLoader": (lambda data: next(iter(pyg_loader.RandomNodeLoader(data, num_parts=4))),
                         "DistributedNodeSubsetLoader(data, num_parts=num_parts"),
    "NeighborLoader": (lambda data: pyg_loader.NeighborLoader(data, num_neighbors=[2], batch_size=4),
                       "DistributedNeighborLoader"),
    "LinkNeighborLoader": (lambda data: pyg_loader.LinkNeighborLoader(data, num_neighbors=[2], batch_size=4),
                           "DistributedLinkNeighborLoader"),
    "ClusterData": (lambda data: pyg_loader.ClusterData(data, num_parts=4), "DistributedNodeSubsetLoader"),
    "GraphSAINTNodeSampler": (lambda data: pyg_loader.GraphSAINTNodeSampler(data, batch_size=10),
                              "DistributedNodeSubsetLoader"),
    "GraphSAINTEdgeSampler": (lambda data: pyg_loader.GraphSAINTEdgeSampler(data, batch_size=10),
                              "DistributedNodeSubsetLoader"),
    "GraphSAINTRandomWalkSampler": (lambda data: pyg_loader.GraphSAINTRandomWalkSampler(data, batch_size=10,
                                                                                        walk_length=2),
                                    "DistributedNeighborLoader"),
}


def graph(world_size: int) -> Data:
    gen = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(N, 3, generator=gen), edge_index=torch.randint(0, N, (2, 300), generator=gen),
                y=torch.randint(0, 2, (N,), generator=gen), num_nodes=N, part=torch.arange(N) % world_size,
                num_parts=world_size)


def _pyg_loaders(rank, world_size):
    import warnings
    local = partition_and_shard(graph(world_size).clone())
    messages = {}
    for name, (make, _) in CALLS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG's "NeighborSampler without pyg-lib is deprecated"
            try:
                make(local)
            except (TypeError, AttributeError) as error:
                messages[name] = str(error)
            except ImportError as error:  # needs torch-sparse here: not what the test is about
                messages[name] = f"skipped: {error}"
    return messages


def test_pyg_loaders_over_a_shard_are_refused_naming_the_replacement_on_every_rank():
    per_rank = launch(_pyg_loaders, 2)
    assert per_rank[0].keys() == per_rank[1].keys() == CALLS.keys()
    checked = 0
    for messages in per_rank:
        for name, message in messages.items():
            if message.startswith("skipped"):
                continue
            assert f"PyG's {name} cannot cut batches from a shard" in message, (name, message)
            assert CALLS[name][1] in message, (name, message)
            checked += 1
    assert checked >= 2 * 5, per_rank  # RandomNodeLoader, the samplers, ClusterData, NeighborLoader, ...


SIMULATED = '''
class ShaDowKHopSampler:
    def __init__(self, data):
        data.adj[0]

class HGTLoader:
    def __init__(self, data):
        data.adj.csc()
'''


def test_a_pyg_loader_that_needs_torch_sparse_here_is_named_too():
    """``ShaDowKHopSampler`` and ``HGTLoader`` need torch-sparse / pyg-lib before they read the graph here:
    classes of their names in a module of ``torch_geometric.loader`` stand in for them."""
    scope = {"__name__": "torch_geometric.loader.stand_in"}
    exec(SIMULATED, scope)  # noqa: S102 -- classes whose module is torch_geometric.loader's
    local = shard(graph(1), rank=0, world_size=1)
    with pytest.raises(TypeError, match=r"PyG's ShaDowKHopSampler cannot .* DistributedNeighborLoader\(data, "
                                        r"num_neighbors=\[-1\] \* depth"):
        scope["ShaDowKHopSampler"](local)
    with pytest.raises(AttributeError, match="PyG's HGTLoader cannot .* DistributedNeighborLoader on the hetero"):
        scope["HGTLoader"](local)
    with pytest.raises(TypeError, match="HaloAdj is not subscriptable: a shard's adjacency"):
        local.adj[0]  # outside any PyG loader: the message of before
    assert set(CALLS) <= set(REPLACEMENTS)


def _subset_by_parts(rank, world_size):
    local = shard(graph(world_size))
    loader = DistributedNodeSubsetLoader(local, num_parts=4, shuffle=True)
    members = [b.n_id.as_subclass(torch.Tensor) for b in loader]
    with pytest.raises(ValueError, match="pass one"):
        DistributedNodeSubsetLoader(local, batch_size=8, num_parts=4)
    return len(loader), loader.sampling.batch_size, torch.cat(members)


@pytest.mark.parametrize("world_size", [1, 2])
def test_num_parts_ports_random_node_loader(world_size):
    """``RandomNodeLoader(data, num_parts=4)``'s batches: ``ceil(N / 4)`` nodes on average, every node
    in one batch per epoch, the same number of batches on every rank."""
    results = launch(_subset_by_parts, world_size)
    assert len({r[0] for r in results}) == 1 and results[0][1] == math.ceil(N / 4)
    assert 2 <= results[0][0] <= 6  # about num_parts batches (random subsets)
    assert torch.equal(torch.sort(torch.cat([r[2] for r in results])).values, torch.arange(N))


def test_unknown_keywords_name_the_closest_accepted_one():
    local = shard(graph(1), rank=0, world_size=1)
    with pytest.raises(TypeError, match=r"'shufle' \(did you mean 'shuffle'\?\).*batch_size.*persistent_workers"):
        DistributedNeighborLoader(local, [2], batch_size=4, shufle=True)
    with pytest.raises(TypeError, match=r"'num_worker' \(did you mean 'num_workers'\?\)"):
        DistributedNodeSubsetLoader(local, batch_size=4, num_worker=2)
    pairs = torch.randint(0, N, (2, 20))
    loader = DistributedLinkNeighborLoader(local, [2], pairs, batch_size=8, num_workers=0, persistent_workers=True,
                                           pin_memory=True)
    assert loader.prefetch == 0 and len(list(loader)) == len(loader)
    with pytest.raises(ValueError, match="num_neighbors.*not supported|replace=True"):
        DistributedLinkNeighborLoader(local, [2], pairs, replace=True)
