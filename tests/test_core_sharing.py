"""The suite's ``pytest -n 2 --dist loadgroup`` run (tests/core_sharing.py): single-process tests of
the two workers run side by side, a test that starts a process runs alone unless marked
``one_core``.  Checked in an inner session on two small modules, one per group.

The tests of the inner modules meet by handshakes (a file one writes, the other waits for), not by
timing: a meeting happens only if the lock lets both tests run at once, and each test waits a minute
for its partner, so a loaded machine only slows the meeting down.  Which worker ran which module is
xdist's choice: the checks compare the two workers' tests, whichever module each ran."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SHARED = textwrap.dedent('''
    import json, os, subprocess, sys, time
    from pathlib import Path

    import pytest

    LOG = Path(os.environ["CORE_SHARING_LOG"])
    WAIT = 60.0  # seconds a test waits for its partner: only a lock that keeps them apart uses it up

    def record(name, start, **facts):
        with open(LOG, "a") as f:
            f.write(json.dumps(dict(name=name, worker=os.environ["PYTEST_XDIST_WORKER"], start=start,
                                    end=time.time(), **facts)) + "\\n")

    def signal(name):
        (LOG.parent / name).touch()

    def wait_for(name):
        """True once ``name`` was signalled, False after WAIT seconds without it."""
        deadline = time.time() + WAIT
        while not (LOG.parent / name).exists():
            if time.time() > deadline:
                return False
            time.sleep(0.01)
        return True
''')

#: single-process tests, each meeting a test of module B
MODULE_A = SHARED + textwrap.dedent('''
    def test_meets_the_other_workers_single_process_test():
        start = time.time()
        signal("a0")
        record("a0", start, met=wait_for("b0"))

    def test_meets_the_one_core_tests_process():
        start = time.time()
        met = wait_for("one_core started")
        if met:
            signal("a1 saw one_core")  # the process ends when it sees this
        record("a1", start, met=met)

    def test_runs_on_when_the_other_worker_starts_a_process():
        start = time.time()
        seen = wait_for("process starting")
        time.sleep(1.5)  # were the lock not exclusive, the process would run now
        record("a2", start, met=seen)

    def test_single_a3():
        start = time.time()
        time.sleep(0.3)
        record("a3", start)
''')

MODULE_B = SHARED + textwrap.dedent('''
    def test_meets_the_other_workers_single_process_test():
        start = time.time()
        signal("b0")
        record("b0", start, met=wait_for("a0"))

    @pytest.mark.one_core
    def test_starts_a_process_marked_one_core():
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                  "import test_module_b as b; sys.exit(0 if b.wait_for('a1 saw one_core') else 3)",
                                  os.path.dirname(__file__)])
        start = time.time()  # the process runs from here on
        signal("one_core started")
        record("one_core", start, returncode=child.wait())

    def test_starts_a_process():
        signal("process starting")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
        start = time.time()  # the process runs from here on, with the cores to itself
        record("process", start, returncode=child.wait())

    def test_single_b3():
        start = time.time()
        time.sleep(0.3)
        record("b3", start)
''')


def _inner_pytest(folder: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``pytest -n 2`` with core_sharing on ``folder``'s tests; the installed plugins are not loaded
    (their imports, in three interpreters, took most of its time)."""
    env = {**os.environ, **env, "PYTHONPATH": str(HERE), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-p", "core_sharing",
                           "-p", "no:cacheprovider", "-n", "2", *args, "--rootdir", str(folder), str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def _overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_single_process_tests_share_the_cores_a_process_runs_alone(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    (tmp_path / "test_module_b.py").write_text(MODULE_B)
    log = tmp_path / "times.jsonl"
    done = _inner_pytest(tmp_path, {"CORE_SHARING_LOG": str(log)}, "--dist", "loadgroup")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {run["name"]: run for run in map(json.loads, log.read_text().splitlines())}
    assert len(runs) == 8, runs
    for module in "ab":  # one group per module (--dist loadgroup): one worker ran all of a module
        assert len({run["worker"] for name, run in runs.items() if name[0] == module}) == 1, runs
    if runs["a0"]["worker"] == runs["b0"]["worker"]:
        pytest.skip(f"xdist gave both modules to {runs['a0']['worker']}: no other worker to share with")
    # single-process tests of the two workers ran at once; so did a one_core test's process and one
    assert runs["a0"]["met"] and runs["b0"]["met"], runs
    assert runs["a1"]["met"] and runs["one_core"]["returncode"] == 0, runs
    # no test of the other worker ran while the process of a test that is not one_core ran,
    # though one (a2) was running when that test started its process
    assert runs["a2"]["met"] and runs["process"]["returncode"] == 0, runs
    others = [run for run in runs.values() if run["worker"] != runs["process"]["worker"]]
    assert not [run["name"] for run in others if _overlap(runs["process"], run)], runs


def test_the_suite_refuses_workers_without_loadgroup(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    done = _inner_pytest(tmp_path, {"CORE_SHARING_LOG": str(tmp_path / "times.jsonl")})
    assert done.returncode != 0 and "--dist loadgroup" in done.stdout + done.stderr, done.stdout + done.stderr
