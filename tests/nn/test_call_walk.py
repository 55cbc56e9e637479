"""The walk of ``x`` through one forward of ``distribute(GraphSAGE(...))`` on a shard visits at
most 13 package modules (issue 47's 12, and the port's exchanger ``nn/runtime/watched_exchanger.py``,
its own module since issue 57 split ``nn/runtime/port.py``).

How it counts: ``sys.setprofile`` sees every Python frame entered while the forward runs (a call
of the model after a first one, which ran the first-use checks); every frame whose code lives in
a source file of ``pyg_sparsecomm`` names its module, ``__init__.py`` files, the comm exchange and
the SpMM algorithm included (C functions and torch's or PyG's own Python code are not package
modules).  A module counts once however many of its functions run.  Two jobs, each rank counted
on its own: one gloo rank (P = 1), where the exchange functions run too, returning the empty
halo, and two ranks (P = 2), where halo rows move: the second layer's exchange (the all-to-allv,
its byte counter, its device check) and the agreement that the first layer's cached halo of the
input features is still valid (one host all-reduce).
"""
import os
import sys

import pytest
import torch
from test_distribute_layers import make_graph
from torch_geometric.nn.models import GraphSAGE

import pyg_sparsecomm
from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch

#: the most package modules one forward of a distributed GraphSAGE may visit
MOST_MODULES = 13


def _walk_worker(rank, world_size):
    data = make_graph(world_size)
    local = shard(data)
    torch.manual_seed(0)
    model = distribute(GraphSAGE(data.x.size(1), 8, num_layers=2, out_channels=4))
    model(local.x, local.adj)  # the first call on the shard runs the first-use checks
    root = os.path.dirname(pyg_sparsecomm.__file__)
    seen: dict[str, list[str]] = {}

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(root):
            names = seen.setdefault(os.path.relpath(path, root), [])
            if frame.f_code.co_name not in names:
                names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = model(local.x, local.adj)
    finally:
        sys.setprofile(None)
    assert out.shape == (local.adj.num_owned, 4)
    return seen


@pytest.mark.parametrize("world_size", [1, 2])
def test_one_graphsage_forward_visits_at_most_13_package_modules(world_size):
    for rank, seen in enumerate(launch(_walk_worker, world_size)):
        listing = "\n".join(f"  {module}: {', '.join(functions)}" for module, functions in seen.items())
        assert len(seen) <= MOST_MODULES, \
            f"rank {rank} of {world_size}: {len(seen)} package modules visited (at most {MOST_MODULES}):\n{listing}"
        assert "nn/runtime/call.py" in seen and "nn/runtime/port.py" in seen  # the walk is the runtime's
        if world_size > 1:  # halo rows moved: the walk went through the exchange
            assert "comm/halo.py" in seen, listing
