"""Ranks holding different models inside ``distribute()`` are told what differs (issue #45, finding 6).

Before: ``distribute()`` broadcast rank 0's parameters into whatever each rank had built.  With a
wider model on rank 1, gloo copied a prefix silently and the layer's first call then advised to
"wrap it in distribute(model)", which the script had done; with a deeper model on rank 0, rank 1's
process aborted in C++ (gloo's ``op.preamble.length <= op.nbytes``) without a Python error.  Now
``distribute()`` compares the models' structure first and every rank raises the same error
naming the first difference; parameters changed after ``distribute()`` are named as such.
"""
import torch
from graphs import NUM_FEATURES, make_cases
from torch_geometric.nn import GCN

from pyg_sparsecomm import distribute, shard
from pyg_sparsecomm.testing import launch


def _models(rank, world_size):
    """What each rank raised for: a wider model on rank 1, a deeper one on rank 0, and the same
    model re-initialised with each rank's own seed after distribute()."""
    local = shard(make_cases(world_size)["directed"])
    built = {"wider on rank 1": lambda: GCN(NUM_FEATURES, 16 if rank == 0 else 32, num_layers=2, out_channels=3),
             "deeper on rank 0": lambda: GCN(NUM_FEATURES, 16, num_layers=3 if rank == 0 else 2, out_channels=3),
             "reset after distribute": lambda: GCN(NUM_FEATURES, 16, num_layers=2, out_channels=3)}
    raised = {}
    for name, build in built.items():
        try:
            model = distribute(build())
            if name == "reset after distribute":
                torch.manual_seed(rank)
                model.reset_parameters()
            model(local.x, local.adj)
            raised[name] = None
        except ValueError as e:
            raised[name] = str(e)
    return raised


def test_different_models_name_what_differs():
    every = launch(_models, 2, timeout=120, pg_timeout=20)
    assert every[0] == every[1]  # every rank raises the same error
    raised = every[0]
    wider = raised["wider on rank 1"]
    assert wider.startswith("distribute(): the ranks built different models"), wider
    assert "rank 0 has convs.0.bias: [16] float32, rank 1 has convs.0.bias: [32] float32" in wider, wider
    assert "Build the same model on every rank" in wider and "wrap" not in wider, wider
    deeper = raised["deeper on rank 0"]
    assert "rank 0 has convs.1.bias: [16] float32, rank 1 has convs.1.bias: [3] float32" in deeper, deeper
    reset = raised["reset after distribute"]
    assert "GCNConv holds different parameters on different ranks" in reset, reset
    assert "Under distribute(model), which copied rank 0's parameters to every rank, some ranks changed them " \
           "afterwards" in reset and "call reset_parameters() before distribute()" in reset, reset
