"""torchrun's summary names the rank that failed first (issue 55, item 5), in real ``torchrun
--standalone`` jobs of 2 ranks (tests/root_cause_job.py).

Before, torchrun's "Root Cause" named rank 0, which had only stopped because rank 1 failed, in 6
of 7 runs: torchrun names the failure stamped first, in whole seconds, the lowest rank among
equal ones.  Now the cause's error file is stamped when it failed, a consequence one second later,
and a stalled rank's file is written by the peer that waited for it (comm/error_file.py)."""
import re
from pathlib import Path

from torchrun_job import torchrun

JOB = Path(__file__).resolve().parents[1] / "root_cause_job.py"


def _failures(stderr: str) -> tuple[str, dict[int, str]]:
    """torchrun's root cause block and every failure's block by rank."""
    assert "Root Cause (first observed failure):" in stderr, stderr[-3000:]
    other, root = stderr.split("Root Cause (first observed failure):", 1)
    blocks = {int(m.group(1)): block for block in re.split(r"\n\s*\[\d+\]:\n", other + root)[1:]
              if (m := re.search(r"rank\s*:\s*(\d+)", block))}
    return root.split("=" * 20, 1)[0], blocks


def test_the_root_cause_is_the_rank_that_raised_not_its_peer():
    done = torchrun(JOB, 2, "raise", timeout=300)
    assert done.returncode != 0
    root, blocks = _failures(done.stderr)
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", root), root
    assert "ValueError: rank 1's own error: label 99 is out of range" in root, root
    # rank 0 says it stopped because rank 1 failed, and why it is not the root cause
    assert "because rank 1 failed" in blocks[0] and "stopped because of another rank's failure" in blocks[0], \
        done.stderr[-4000:]


def test_a_stalled_rank_is_the_root_cause_with_where_to_look():
    done = torchrun(JOB, 2, "stall", timeout=300)
    assert done.returncode != 0
    root, blocks = _failures(done.stderr)
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", root), root
    pid = re.search(r"rank 1 did not arrive at .* of rank 0: pid (\d+) on host \S+; to see where it is stuck: "
                    r"py-spy dump --pid (\d+)", root)
    assert pid and pid.group(1) == pid.group(2), root
    assert f"pid: {pid.group(1)}" in root, root  # torchrun's own record of the process is the same
    assert "because rank 1 did not arrive" in blocks[0], done.stderr[-4000:]
