"""The suite's ``pytest -n 2 --dist loadgroup`` run (tests/core_sharing.py): single-process tests of
the two workers run side by side, a test that starts a process runs alone unless marked
``one_core``.  Checked in an inner session on two small modules, one per group.

Every check reads a fact, never a clock, so a loaded machine only slows the session down:

* tests of the two workers meet by handshakes (a file one writes, the other waits for): a meeting
  happens only if the lock lets both tests run at once (each waits two minutes for its partner);
* while it runs, every test body holds ``running.lock`` shared and the process of the test that is not
  ``one_core`` holds it exclusively: a non-blocking ``flock`` that fails (on either side) is the fact
  that the process and a test of the other worker ran at once.

Which worker ran which module is xdist's choice: the checks compare the two workers' tests,
whichever module each ran."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SHARED = textwrap.dedent('''
    import fcntl, json, os, subprocess, sys, time
    from contextlib import contextmanager
    from pathlib import Path

    import pytest

    LOG = Path(os.environ["CORE_SHARING_LOG"])
    RUNNING = LOG.parent / "running.lock"
    WAIT = 120.0  # seconds a test waits for its partner: only a lock that keeps them apart uses it up

    def record(name, **facts):
        with open(LOG, "a") as f:
            f.write(json.dumps(dict(name=name, worker=os.environ["PYTEST_XDIST_WORKER"], **facts)) + "\\n")

    def signal(name):
        (LOG.parent / name).touch()

    def wait_for(name, wait=WAIT):
        """True once ``name`` was signalled, False after ``wait`` seconds without it."""
        deadline = time.time() + wait
        while not (LOG.parent / name).exists():
            if time.time() > deadline:
                return False
            time.sleep(0.01)
        return True

    @contextmanager
    def running():
        """Holds RUNNING shared while a test body runs; yields False if the process held it then."""
        fd = os.open(RUNNING, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                yield True
            except BlockingIOError:
                yield False
        finally:
            os.close(fd)
''')

#: single-process tests, each meeting a test of module B
MODULE_A = SHARED + textwrap.dedent('''
    def test_meets_the_other_workers_single_process_test():
        with running() as free:
            signal("a0")
            met = wait_for("b0")
        record("a0", free=free, met=met)

    def test_meets_the_one_core_tests_process():
        with running() as free:
            met = wait_for("one_core started")
            if met:
                signal("a1 saw one_core")  # the process ends when it sees this
        record("a1", free=free, met=met)

    def test_runs_on_when_the_other_worker_starts_a_process():
        with running() as free:
            signal("a2 running")  # the other worker starts its process once it sees this
            met = wait_for("process starting")
            # the process cannot start before this test ends: were the lock not exclusive, it would
            # start now, find RUNNING held and exit 4
            saw = wait_for("process running", wait=2.0)
        record("a2", free=free, met=met, saw_process=saw)

    def test_single_a3():
        with running() as free:
            time.sleep(0.3)
        record("a3", free=free)
''')

#: the process of test_starts_a_process: holds RUNNING exclusively for its life, exits 4 if a test
#: of the other worker held it when it started
PROCESS = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
           "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
           "except BlockingIOError: sys.exit(4)\n"
           "open(sys.argv[2], 'w').close(); time.sleep(1.0)")

MODULE_B = SHARED + f"PROCESS = {PROCESS!r}\n" + textwrap.dedent('''
    def test_meets_the_other_workers_single_process_test():
        with running() as free:
            signal("b0")
            met = wait_for("a0")
        record("b0", free=free, met=met)

    @pytest.mark.one_core
    def test_starts_a_process_marked_one_core():
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                                  "import test_module_b as b; sys.exit(0 if b.wait_for('a1 saw one_core') else 3)",
                                  os.path.dirname(__file__)])
        signal("one_core started")
        record("one_core", returncode=child.wait())

    def test_starts_a_process():
        met = wait_for("a2 running")  # so a test of the other worker runs when the process starts
        signal("process starting")
        child = subprocess.Popen([sys.executable, "-c", PROCESS, str(RUNNING), str(LOG.parent / "process running")])
        record("process", met=met, returncode=child.wait())

    def test_single_b3():
        with running() as free:
            time.sleep(0.3)
        record("b3", free=free)
''')


def _inner_pytest(folder: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``pytest -n 2`` with core_sharing on ``folder``'s tests; the installed plugins are not loaded
    (their imports, in three interpreters, took most of its time)."""
    env = {**os.environ, **env, "PYTHONPATH": str(HERE), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "xdist", "-p", "core_sharing",
                           "-p", "no:cacheprovider", "-n", "2", *args, "--rootdir", str(folder), str(folder)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def test_single_process_tests_share_the_cores_a_process_runs_alone(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    (tmp_path / "test_module_b.py").write_text(MODULE_B)
    log = tmp_path / "facts.jsonl"
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
    # no test of the other worker ran while the process of a test that is not one_core ran (it
    # found RUNNING free, and no test found it held), though one (a2) was running when that test
    # started its process and did not see it start
    assert runs["process"]["met"] and runs["a2"]["met"] and not runs["a2"]["saw_process"], runs
    assert runs["process"]["returncode"] == 0, runs
    assert [name for name, run in runs.items() if run.get("free") is False] == [], runs


def test_the_suite_refuses_workers_without_loadgroup(tmp_path):
    (tmp_path / "test_module_a.py").write_text(MODULE_A)
    done = _inner_pytest(tmp_path, {"CORE_SHARING_LOG": str(tmp_path / "facts.jsonl")})
    assert done.returncode != 0 and "--dist loadgroup" in done.stdout + done.stderr, done.stdout + done.stderr
