"""The suite's ``pytest -n 2 --dist loadgroup`` run (tests/core_sharing.py): single-process tests of
the two workers run side by side, a test that starts a process runs alone unless marked
``one_core``.  Checked in an inner session on two small modules, one per worker, from the times
each test wrote."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

SINGLE = textwrap.dedent('''
    import json, os, time

    def record(name, start, end):
        with open(os.environ["CORE_SHARING_LOG"], "a") as f:
            f.write(json.dumps([name, os.environ["PYTEST_XDIST_WORKER"], start, end]) + "\\n")

    def sleeper(name, seconds):
        start = time.time()
        time.sleep(seconds)
        record(name, start, time.time())
''')

MODULE_A = SINGLE + "".join(f"\ndef test_single_a{i}():\n    sleeper('a{i}', 0.8)\n" for i in range(6))

MODULE_B = SINGLE + textwrap.dedent('''
    import subprocess, sys
    import pytest

    def test_single_b0():
        sleeper("b0", 0.8)

    def test_starts_a_process():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
        start = time.time()  # the process runs from here on
        child.wait()
        record("process", start, time.time())

    @pytest.mark.one_core
    def test_starts_a_process_marked_one_core():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
        start = time.time()
        child.wait()
        record("one_core", start, time.time())

    def test_single_b1():
        sleeper("b1", 0.8)
''')


def _inner_pytest(folder: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``pytest -n 2`` with core_sharing on ``folder``'s tests; the installed plugins are not loaded
    (their imports, in three interpreters, took most of its time)."""
    env = {**os.environ, **env, "PYTHONPATH": str(HERE), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-p", "core_sharing",
                           "-p", "no:cacheprovider", "-n", "2", *args, "--rootdir", str(folder), str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def _overlap(a, b) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_single_process_tests_share_the_cores_a_process_runs_alone(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    (tmp_path / "test_module_b.py").write_text(MODULE_B)
    log = tmp_path / "times.jsonl"
    env = {"CORE_SHARING_LOG": str(log)}
    done = _inner_pytest(tmp_path, env, "--dist", "loadgroup")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {run[0]: tuple(run) for run in map(json.loads, log.read_text().splitlines())}
    assert len(runs) == 10 and len({runs["a0"][1], runs["b0"][1]}) == 2, runs
    process = runs["process"]
    others = [run for run in runs.values() if run[1] != process[1]]
    assert not any(_overlap(process, run) for run in others), runs
    assert any(_overlap(runs["b0"], run) or _overlap(runs["b1"], run) for run in others), runs
    assert any(_overlap(runs["one_core"], run) for run in others), runs


def test_the_suite_refuses_workers_without_loadgroup(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    done = _inner_pytest(tmp_path, {})
    assert done.returncode != 0 and "--dist loadgroup" in done.stdout + done.stderr, done.stdout + done.stderr
