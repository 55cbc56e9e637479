"""``init_distributed()`` under ``torchrun --max-restarts``: a restarted job joins again (issue 28).

Before, the second attempt read the dead attempt's addresses from torchrun's store and gloo's
``connectFullMesh`` failed ("Connection refused" / "Connect timeout")."""
from pathlib import Path

from torchrun_job import torchrun

HERE = Path(__file__).resolve().parent


def test_a_job_restarted_by_torchrun_joins_again(tmp_path):
    report = tmp_path / "report.txt"
    done = torchrun(HERE / "rank_dies_once.py", 2, str(report), max_restarts=1, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = sorted(report.read_text().split("\n")[:-1])
    assert lines == ["0 0 2", "0 1 2", "1 0 2", "1 1 2"], lines
