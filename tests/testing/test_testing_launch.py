"""``pyg_sparsecomm.testing.processes.launch``: what a worker inherits is out of the collector's reach, the
modules named by ``preload`` are imported before the fork, and only a job whose gloo mesh failed to
connect is started again."""
import gc
import os
import subprocess
import sys
import weakref

import pytest

from pyg_sparsecomm.graph import datasets
from pyg_sparsecomm.testing import launch, mesh_failed_to_connect, preload


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _frozen_and_collecting(rank, world_size):
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    return gc.get_freeze_count(), alive() is None


def test_worker_freezes_what_it_inherited_and_still_collects_its_own_cycles():
    for frozen, collected in launch(_frozen_and_collecting, 2):
        assert frozen > 10_000  # torch, PyG and the package were imported before the fork
        assert collected


def _what_the_fork_server_prepared(rank, world_size):
    return "forkserver_warm" in sys.modules, datasets._seeded_sbm_edges.cache_info().currsize


def test_modules_named_by_preload_are_imported_once_before_the_fork():
    # the conftest preloads tests/forkserver_warm.py, which this module does not import: a rank has it
    # only from the fork server, with the built-in SBM graph generated there
    for imported, graphs in launch(_what_the_fork_server_prepared, 2):
        assert imported and graphs == 1


def test_preload_refuses_a_module_this_process_has_not_imported():
    with pytest.raises(ValueError, match="not imported in this process"):
        preload("pytest", "a_module_nobody_imported")


def test_preload_after_the_fork_server_started_raises_unless_it_has_the_module():
    launch(_what_the_fork_server_prepared, 1)  # the server runs
    preload("pytest")  # it imported pytest: nothing to do
    with pytest.raises(RuntimeError, match="fork server already runs without"):
        preload("weakref")  # imported here, not named before the server started


_STARTS_THE_SERVER = """
import os, signal, time, weakref
from pyg_sparsecomm.testing import preload, start_fork_server
start_fork_server()
pid = os.getpid()
deadline = time.monotonic() + 60  # the child is forked at once, but execs the server when the machine lets it
while True:
    children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    servers = [c for c in children if b"multiprocessing.forkserver" in open(f"/proc/{c}/cmdline", "rb").read()]
    if servers or time.monotonic() > deadline:
        break
    time.sleep(0.01)
try:
    preload("weakref")
except RuntimeError as e:
    print(len(servers), "fork server(s); preload refused:", e)
for server in servers:  # not left importing torch and PyG after this process ends
    os.kill(int(server), signal.SIGKILL)
"""


@pytest.mark.one_core  # one interpreter at a time: the server is killed as soon as it is seen
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process's children from /proc")
def test_start_fork_server_starts_it_before_any_launch():
    """The conftest starts the server at collection, so it imports beside the first tests: in a fresh
    process the call leaves one fork server child running, and a later preload is refused."""
    proc = subprocess.run([sys.executable, "-c", _STARTS_THE_SERVER], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("1 fork server(s); preload refused: preload(): the fork server already runs"), \
        proc.stdout


def _fails_in_the_function(rank, world_size, marker_dir):
    with open(os.path.join(marker_dir, f"call-{rank}-{os.getpid()}"), "w"):
        pass
    raise RuntimeError("Gloo connectFullMesh failed (raised by the function, not by the mesh)")


def test_a_failure_inside_the_function_is_not_retried(tmp_path):
    with pytest.raises(RuntimeError, match="raised by the function"):
        launch(_fails_in_the_function, 1, str(tmp_path))
    assert len(os.listdir(tmp_path)) == 1


def test_only_connect_failures_of_every_failed_rank_count_as_a_mesh_failure():
    assert mesh_failed_to_connect({1: ("connect", "Connection closed by peer")})
    assert not mesh_failed_to_connect({})
    assert not mesh_failed_to_connect({0: ("failed", "Traceback ...")})
    assert not mesh_failed_to_connect({0: ("connect", "..."), 1: ("failed", "...")})
