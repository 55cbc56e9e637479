"""Debug mode ``PYG_SPARSECOMM_CHECK_DEVICES=1`` (on for the whole suite, ``tests/conftest.py``):
every collective the package issues checks that its tensors are on the group's device
(issue #24, build item 2b).  On NCCL that device is the rank's GPU; no GPU here, so the group's
device is faked for the single-process checks, and the real gloo runs put a tensor where the
CPU group cannot take it.
"""
import pytest
import torch

from pyg_sparsecomm import global_sum, sync_gradients
from pyg_sparsecomm.comm import collectives, device_check, halo
from pyg_sparsecomm.comm.device_check import CHECK_DEVICES_ENV, checking_devices
from pyg_sparsecomm.testing import launch

CUDA = torch.device("cuda", 0)


def _checking(rank: int, world_size: int) -> bool:
    return checking_devices()


def test_the_suite_runs_in_debug_mode():
    assert checking_devices()
    assert launch(_checking, 2) == [True, True]


@pytest.fixture
def nccl_like_group(monkeypatch):
    """The default group's device is the GPU (as ``collective_device`` says on NCCL)."""
    monkeypatch.setattr(device_check, "collective_device", lambda group=None: CUDA)


CALLS = {
    "broadcast_rows": lambda t: collectives.broadcast_rows(t, 0),
    "reduce_rows": lambda t: collectives.reduce_rows(t, 0),
    "all_reduce_rows": lambda t: collectives.all_reduce_rows(t),
    "all_to_all_rows": lambda t: halo.start_all_to_all_rows(t, [t.size(0)], [t.size(0)]),
    "start_p2p_rows": lambda t: halo.start_p2p_rows(t, [0], [0]),
}


@pytest.mark.parametrize("name", CALLS)
def test_a_cpu_tensor_for_a_gpu_group_is_named(name, nccl_like_group):
    with pytest.raises(RuntimeError, match=rf"{name}: tensors on cpu reach a collective .* whose device is cuda:0"):
        CALLS[name](torch.ones(2, 3))


def test_the_checks_are_off_without_the_variable(nccl_like_group, monkeypatch):
    monkeypatch.setenv(CHECK_DEVICES_ENV, "0")
    device_check.check_devices("anything", None, torch.ones(1))  # no GPU expected: nothing checked


def _misplaced(rank: int, world_size: int) -> dict:
    errors = {}
    for what, call in (("global_sum", lambda: global_sum(torch.ones(2, device="meta"))),
                       ("sync_gradients", lambda: sync_gradients(torch.nn.Linear(2, 2, device="meta")))):
        try:
            call()
        except RuntimeError as e:
            errors[what] = str(e)
    return errors


def test_gloo_collectives_refuse_tensors_off_the_cpu():
    for errors in launch(_misplaced, 2):
        assert "global_sum: tensors on meta reach a collective of a gloo process group" in errors["global_sum"]
        assert "sync_gradients: tensors on meta" in errors["sync_gradients"]
