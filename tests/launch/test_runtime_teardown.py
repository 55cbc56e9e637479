"""The end of a job releases gloo's worker threads while the interpreter is alive.

``destroy_process_group`` unregisters the groups, but a group still referenced from Python (the
package caches its dedicated groups) kept its worker threads until interpreter shutdown, where a
worker releasing the last collective's work needs the GIL of a finalising interpreter and the
process aborts ("terminate called without an active exception"; seen in 1 of ~20 runs of the
README's script on a loaded machine).  ``distributed_job`` / ``init_distributed``'s exit handler
now release the package's cached groups with the default group.
"""
import os

import torch
import torch.distributed as dist

from pyg_sparsecomm.comm import group as comm_group
from pyg_sparsecomm.launch.runtime import distributed_job
from pyg_sparsecomm.testing import launch


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _job_then_threads(rank, world_size):
    with distributed_job():  # joins the job the launcher made and ends it
        twin = comm_group.dedicated_group(None, "teardown test")
        value = torch.ones(3)
        dist.all_reduce(value, group=twin)
        gathered = [torch.zeros(3) for _ in range(world_size)] if rank == 0 else None
        dist.gather(value, gathered, dst=0)  # the last collective, as gather_nodes is in scripts
        del twin
        during = _native_threads()
    return during, _native_threads(), len(comm_group._DEDICATED), dist.is_initialized()


def test_distributed_job_releases_the_cached_groups_threads():
    for during, after, cached, initialised in launch(_job_then_threads, 2):
        assert not initialised and cached == 0
        # the default group's and the dedicated group's gloo workers (2 each) have ended
        assert after <= during - 4, (during, after)
