"""The one-sided engines of ``algorithm="rdma"`` on symmetric memory are freed before a job's
process group is destroyed, and never barrier on a destroyed group at exit (issue #24, defect 9).

``distributed_job`` (and ``run_job``, the examples' driver) destroys the process group when its
block ends; the engines' exit handler used to barrier on that destroyed group afterwards (a
traceback at exit).  The script runs in a real process (exit handlers do not run in
``launch``'s workers) on the emulated symmetric heap (``tests/_symm_emulation.py``).
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchrun_job import free_port

TESTS = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    sys.path.insert(0, {tests!r})
    from _symm_emulation import emulated_backend
    from graphs import NUM_FEATURES, make_cases
    import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
    from pyg_sparsecomm import DistributedGCNConv, shard
    from pyg_sparsecomm.rdma import engine_cache
    from pyg_sparsecomm.launch.runtime import distributed_job

    with distributed_job("gloo") as (rank, world_size, device):
        rdma_algorithm.set_backend(emulated_backend({workdir!r}))
        local = shard(make_cases(world_size)["directed"])
        conv = DistributedGCNConv(NUM_FEATURES, 4, algorithm="rdma")
        conv(local.x, local.adj).sum().backward()
        engine = engine_cache.engines()[0]
        print("engines", len(engine_cache.engines()), flush=True)
    print("freed", engine.freed, flush=True)  # collectively, while the group lived
""")


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(tests=str(TESTS), workdir=str(tmp_path)))
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), PYTHONPATH=os.pathsep.join([str(TESTS.parent), str(TESTS)]))
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.one_core  # one child process
def test_engines_are_freed_before_distributed_job_destroys_the_group(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "engines 1" in done.stdout and "freed True" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr

