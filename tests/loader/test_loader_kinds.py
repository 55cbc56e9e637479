"""One loader per kind of batch (issue 57, item 4): ``pyg_sparsecomm.loader`` has three loader classes --
neighbour, link and node-subset batches -- each taking a ``Data`` or a ``HeteroData`` shard, as PyG's
loaders take both, and picking the sampling strategy of the shard's kind; no loader subclasses another.
The heterogeneous loaders' old names are deprecated aliases of them (a ``DeprecationWarning`` naming the
new class), and importing the package loads none of the loader modules."""
import importlib
import json
import pkgutil
import subprocess
import sys
import warnings

import pytest
import torch
from test_hetero_loader import make_graph as make_hetero
from test_loader import make_graph

import pyg_sparsecomm.loader as loader_package
from pyg_sparsecomm import SparsityAwarePartitioner, shard
from pyg_sparsecomm.loader.base import DistributedLoader

KINDS = {"DistributedNeighborLoader", "DistributedLinkNeighborLoader", "DistributedNodeSubsetLoader"}
OLD_NAMES = {"DistributedHeteroNeighborLoader": "DistributedNeighborLoader",
             "DistributedHeteroLinkNeighborLoader": "DistributedLinkNeighborLoader",
             "DistributedHeteroNodeSubsetLoader": "DistributedNodeSubsetLoader"}
CITES = ("paper", "cites", "paper")


def _is_loader(name: str, value: object) -> bool:
    return isinstance(value, type) and (issubclass(value, DistributedLoader) or name.endswith("Loader"))


def _all_subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in {direct, *_all_subclasses(direct)}}


def test_at_most_three_loader_classes():
    exported = {n for n in loader_package.__all__ if _is_loader(n, getattr(loader_package, n))}
    assert exported == KINDS and len(exported) <= 3
    assert not set(OLD_NAMES) & set(loader_package.__all__)  # the aliases are not advertised
    defined = {}  # every loader class any module of loader/ defines
    for info in pkgutil.iter_modules(loader_package.__path__):
        module = importlib.import_module(f"{loader_package.__name__}.{info.name}")
        defined |= {n: v for n, v in vars(module).items()
                    if _is_loader(n, v) and getattr(v, "__module__", "") == module.__name__}
    assert set(defined) - {"DistributedLoader"} == KINDS, sorted(defined)
    loaders = [getattr(loader_package, n) for n in sorted(KINDS)]
    for cls in loaders:
        assert _all_subclasses(cls) == set(), cls  # no twin class (a heterogeneous loader was one)
        assert "__new__" not in vars(cls) and "__init_subclass__" not in vars(cls), cls
    assert _all_subclasses(DistributedLoader) <= set(loaders)


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_an_old_heterogeneous_name_is_a_deprecated_alias(old):
    new = OLD_NAMES[old]
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: use {new}"):
        alias = getattr(loader_package, old)
    assert alias is getattr(loader_package, new)
    with pytest.warns(DeprecationWarning, match=new):
        exec(f"from pyg_sparsecomm.loader import {old}", {})


def test_an_alias_makes_the_loader_the_new_name_makes():
    hetero = shard(SparsityAwarePartitioner(1, method="random", seed=1)(make_hetero()), rank=0, world_size=1)
    local = shard(make_graph(1), rank=0, world_size=1)
    pairs = torch.stack([torch.arange(6), torch.arange(6, 12)])  # supervision pairs of papers, global ids
    made = {"DistributedHeteroNeighborLoader": dict(args=([3, 2],), kwargs=dict(input_nodes="paper", batch_size=8)),
            "DistributedHeteroNodeSubsetLoader": dict(args=(), kwargs=dict(input_nodes="paper", batch_size=8)),
            "DistributedHeteroLinkNeighborLoader": dict(args=([3, 2], (CITES, pairs)), kwargs=dict(batch_size=4))}
    for old, how in made.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            alias = getattr(loader_package, old)
        new = getattr(loader_package, OLD_NAMES[old])
        a = alias(hetero, *how["args"], prefetch=0, **how["kwargs"])
        b = new(hetero, *how["args"], prefetch=0, **how["kwargs"])
        assert type(a) is type(b) is new and type(a.sampler) is type(b.sampler), old
        assert type(a.sampler).__name__.startswith("Hetero"), old
        first_a, first_b = next(iter(a)), next(iter(b))
        assert first_a.node_types == first_b.node_types and all(
            torch.equal(first_a[t].n_id, first_b[t].n_id) for t in first_a.node_types), old
    homogeneous = loader_package.DistributedNeighborLoader(local, [3, 2], batch_size=9, prefetch=0)
    assert type(homogeneous.sampler).__name__.startswith("Homo")


def test_importing_the_package_loads_no_loader_module():
    code = ("import json, sys\nimport pyg_sparsecomm.loader\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pyg_sparsecomm.loader.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
