"""``python -m pyg_sparsecomm.testing.burner -- COMMAND``: the command runs while the burners spin,
its exit code comes back, the burners are gone afterwards, also when the burner itself is killed."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")

BURNER = [sys.executable, "-m", "pyg_sparsecomm.testing.burner"]
#: the command: writes the burners' ids, exits 7 if both are running burners (1 otherwise)
CHECK = ("import os, sys; pids = os.environ['PYG_SPARSECOMM_BURNERS'].split(','); open(sys.argv[1], 'w').write("
         "','.join(pids)); sys.exit(7 if len(pids) == 2 and all(b'getppid' in open(f'/proc/{p}/cmdline', 'rb').read() "
         "for p in pids) else 1)")


def _burners_left(pids: list[str]) -> list[str]:
    """The ids that still belong to a burner (an id the system reused for another program is not one)."""
    left = []
    for pid in pids:
        try:
            if b"getppid" in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(pid)
        except OSError:  # gone
            pass
    return left


def test_the_command_runs_beside_the_burners_and_its_exit_code_comes_back(tmp_path):
    ids = tmp_path / "ids"
    done = subprocess.run([*BURNER, "--processes", "2", "--", sys.executable, "-c", CHECK, str(ids)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 7, done.stderr
    assert "burner: 2 busy process(es) beside" in done.stderr and "exit code 7" in done.stderr, done.stderr
    assert _burners_left(ids.read_text().split(",")) == []  # stopped and reaped before it returned
    killed = subprocess.run([*BURNER, "--processes", "1", "--", sys.executable, "-c",
                             "import os; os.kill(os.getpid(), 9)"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == 128 + signal.SIGKILL, killed.stderr
    refused = subprocess.run(BURNER, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "give the command to run after '--'" in refused.stderr


def test_burners_stop_by_themselves_when_the_burner_is_killed(tmp_path):
    ids, ready = tmp_path / "ids", tmp_path / "ready"
    command = (f"import os, time; open({str(ids)!r}, 'w').write(f'{{os.getpid()}} ' + "
               f"os.environ['PYG_SPARSECOMM_BURNERS']); os.rename({str(ids)!r}, {str(ready)!r}); time.sleep(600)")
    burner = subprocess.Popen([*BURNER, "--processes", "2", "--", sys.executable, "-c", command])
    try:
        deadline = time.time() + 300  # the command's start (an interpreter beside two burners)
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        own, burners = ready.read_text().split()
        pids = burners.split(",")
        assert len(_burners_left(pids)) == 2
    finally:
        burner.kill()  # SIGKILL: no finally of the burner's runs
        burner.wait()
        if ready.exists():
            os.kill(int(ready.read_text().split()[0]), signal.SIGKILL)  # the command, orphaned too
    deadline = time.time() + 120  # a burner checks its parent every million iterations
    while _burners_left(pids) and time.time() < deadline:
        time.sleep(0.05)
    assert _burners_left(pids) == []
