"""``init_distributed()`` under ``torchrun --max-restarts``: a restarted job joins again (issue 28).

Before, the second attempt read the dead attempt's addresses from torchrun's store and gloo's
``connectFullMesh`` failed ("Connection refused" / "Connect timeout").  The real restart is the
checkpoint drill's torchrun job (fixture ``drill``, tests/conftest.py): rank 1 dies on the first
attempt and joins the second 3 s late, so rank 0 would read rank 1's address of the first attempt
if the store still served it (without the delay, that happened only when rank 0 was faster)."""
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from pyg_sparsecomm.launch.attempts import attempt_number


def test_a_job_restarted_by_torchrun_joins_again(drill):
    lines = sorted((drill / "joins.txt").read_text().split("\n")[:-1])
    assert lines == ["0 0 2", "0 1 2", "1 0 2", "1 1 2"], lines


def _join(store, world_size, ranks=None, timeout=10.0, delays=None):
    """``attempt_number`` of ``ranks`` (default: all) of a ``world_size``-rank attempt, on threads
    (rank r starts after ``delays[r]`` s); a rank's error message instead of its number."""
    ranks = list(range(world_size)) if ranks is None else ranks
    delays = delays or [0.0] * world_size
    numbers: dict = {}

    def join(r):
        time.sleep(delays[r])
        try:
            numbers[r] = attempt_number(store, r, world_size, timedelta(seconds=timeout))
        except RuntimeError as error:
            numbers[r] = str(error)
    threads = [threading.Thread(target=join, args=(r,)) for r in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [numbers[r] for r in ranks]


def test_attempts_agree_on_a_new_number_whatever_the_earlier_attempts_left():
    store = dist.HashStore()
    first = _join(store, 3)
    late = _join(store, 3, delays=[0.0, 0.0, 0.5])            # a rank that starts late
    rank_zero_late = _join(store, 3, delays=[0.5, 0.0, 0.0])  # its peers join before rank 0 of this attempt
    for numbers in (first, late, rank_zero_late):
        assert len(set(numbers)) == 1 and isinstance(numbers[0], int), numbers
    assert len({first[0], late[0], rank_zero_late[0]}) == 3
    dead = _join(store, 3, ranks=[0, 1], timeout=0.5)           # rank 2 died before joining
    assert "ranks [2] of 3 did not join" in dead[0], dead
    again = _join(store, 3)                                     # the next attempt, whole again
    assert len(set(again)) == 1 and again[0] not in (first[0], late[0], rank_zero_late[0])
