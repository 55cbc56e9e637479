"""Peak memory per rank (``pyg_sparsecomm.memory``): every rank's own ``ru_maxrss``, gathered,
and printed by the examples' ``run_job``."""
import re

import torch

from pyg_sparsecomm.launch.runtime import run_job
from pyg_sparsecomm.memory import format_bytes, peak_memory_per_rank, peak_memory_report
from pyg_sparsecomm.testing import launch

EXTRA = 300 * 10**6  # bytes rank 1 touches beyond rank 0


def _peaks(rank, world_size):
    before = peak_memory_per_rank()[rank]["host"]
    if rank == 1:
        block = torch.ones(EXTRA // 8, dtype=torch.float64)  # resident: every page written
        del block
    return before, peak_memory_per_rank(), peak_memory_report()


def test_every_rank_reports_its_own_peak():
    (before0, rows0, line0), (before1, rows1, line1) = launch(_peaks, 2)
    assert rows0 == rows1 and line0 == line1  # gathered: the same table on every rank
    assert [row["rank"] for row in rows0] == [0, 1] and rows0[0]["cuda"] is None
    assert rows0[1]["host"] >= before1 + 0.9 * EXTRA  # rank 1's own allocation, not rank 0's
    assert rows0[0]["host"] < before0 + 0.5 * EXTRA
    assert re.fullmatch(r"peak memory per rank: 0: [0-9.]+ MB, 1: [0-9.]+ (MB|GB)", line0), line0
    assert format_bytes(1234) == "1.2 KB" and format_bytes(5e9) == "5.0 GB" and format_bytes(12) == "12 B"


def test_run_job_prints_the_peak_memory_of_every_rank(capsys):
    def train(args, rank, world_size, device):
        return {"test_acc": [0.5], "epoch_s": [0.01]}

    assert run_job(train, None)[0] == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "final test accuracy 0.5000, median epoch 10.0 ms"
    assert re.fullmatch(r"peak memory per rank: 0: [0-9.]+ (MB|GB)", lines[1]), lines
