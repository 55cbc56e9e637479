"""Under ``torchrun --max-restarts=1``: every rank joins with ``init_distributed()`` and all-reduces;
on the first attempt rank 1 then dies (``os._exit``); the second attempt must join again and
finish.  Writes ``attempt rank sum`` lines to the report file given as the argument.

On the second attempt rank 1 joins 3 s late, so rank 0 would read rank 1's address of the first
attempt if the store still served it (without the delay, that happened only when rank 0 was faster)."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from pyg_sparsecomm.runtime import distributed_job

if __name__ == "__main__":
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 1 and os.environ["RANK"] == "1":
        time.sleep(3)
    with distributed_job(timeout=timedelta(seconds=30)) as (rank, world_size, _):
        total = torch.ones(1)
        dist.all_reduce(total)
        with open(sys.argv[1], "a") as report:
            report.write(f"{attempt} {rank} {int(total)}\n")
        if rank == 1 and attempt == 0:
            os._exit(3)   # dies without a word, as a killed process
        dist.barrier()
