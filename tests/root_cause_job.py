"""The job of tests/launch/test_root_cause.py under the real ``torchrun``: rank 1 raises (``raise``)
or stalls (``stall``: sleeps in its script) while rank 0 waits for it in a collective."""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from pyg_sparsecomm.launch.runtime import init_distributed

rank, world_size, _ = init_distributed(timeout=timedelta(seconds=4))
dist.barrier()
if rank == 1:
    if sys.argv[1] == "raise":
        raise ValueError("rank 1's own error: label 99 is out of range")
    time.sleep(600)  # stalled: the agent stops it once rank 0 has failed
dist.all_reduce(torch.ones(1))
