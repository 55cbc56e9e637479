"""``init_distributed`` on a (faked) CUDA machine sets what makes a dead or stalled NCCL peer
end the job within the timeout, without overriding the user's own settings (issue #24, defect 5).

No GPU here: CUDA's availability, ``set_device`` and ``init_process_group`` are replaced, and the
test reads the environment ``ProcessGroupNCCL`` would be created with.
"""
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from pyg_sparsecomm.launch import runtime

NAMES = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")


@pytest.fixture
def fake_cuda_job(monkeypatch):
    """A torchrun-like environment on a machine that reports CUDA; returns what init saw."""
    seen: dict = {}
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)  # restored (absent) after the test
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: seen.setdefault("device", device))

    def init_process_group(backend, timeout):
        import os
        seen.update(backend=backend, timeout=timeout, env={n: os.environ.get(n) for n in NAMES})
    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(runtime.atexit, "register", lambda fn: None)
    return seen


def test_nccl_job_gets_the_watchdog_settings(fake_cuda_job):
    rank, world_size, device = runtime.init_distributed(timeout=timedelta(seconds=90))
    assert (rank, world_size, device) == (1, 2, torch.device("cuda", 1))
    assert fake_cuda_job["backend"] == "nccl" and fake_cuda_job["device"] == torch.device("cuda", 1)
    assert fake_cuda_job["env"] == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_ENABLE_MONITORING": "1",
                                    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "150"}


def test_the_users_settings_win(fake_cuda_job, monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    monkeypatch.setenv("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "1000")
    runtime.init_distributed()
    assert fake_cuda_job["env"] == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_ENABLE_MONITORING": "1",
                                    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "1000"}


def test_gloo_jobs_are_left_alone(fake_cuda_job):
    """An explicit gloo backend (also on a CUDA machine) sets no NCCL variable."""
    _, _, device = runtime.init_distributed(backend="gloo")
    assert device == torch.device("cpu") and fake_cuda_job["backend"] == "gloo"
    assert fake_cuda_job["env"] == dict.fromkeys(NAMES)
