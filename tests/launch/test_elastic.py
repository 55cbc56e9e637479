"""An elastic ``torchrun --nnodes 1:2`` job loses a node and continues at the new world size (issue 28).

Two agents ("nodes", one worker each) on this host meet through torch's c10d rendezvous on
127.0.0.1 (``tests/elastic_worker.py``).  After the 2-rank job saved checkpoints, the test kills
node B (its agent and its worker, SIGKILL); node A's worker fails in its next collective, A
restarts it (``--max-restarts 1``) and the rendezvous completes with A alone once B's keep-alive
expired: world size 1.  With ``--allow-repartition`` the 1-rank job resumes the 2-rank checkpoint
(re-partitioned) from the same parameters and its loss curve continues as an uninterrupted run's.
(Without the option the example refuses such a checkpoint naming it: tests/checkpoint/test_checkpoint_examples.py,
in one process group rather than a second elastic job of five interpreters.)

The rendezvous settings: ``keep_alive_interval=1,keep_alive_max_attempt=5`` (a node without
heartbeat for 5 s is dropped; torch's default is 15 s), ``last_call_timeout=3`` (the first round
waits up to 3 s for the second node after the first; a round after the loss completes 3 s after A
joined it alone), ``join_timeout=60``.

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: with torch's default (the agent of rank 0 hosts the
workers' store and every agent caches its address), a round after a node *joined* gives the
workers different stores: ``DynamicRendezvousHandler.next_rendezvous`` rebuilds the cached
``_bootstrap_store_info`` only for a node without one or a new rank 0 without a server, so a node
that keeps its cache uses its old store while the new rank 0 serves another (torch 2.13; our
``attempt_number`` then fails after its timeout naming the rank missing).  Under load the first
round can close before node B joins (B then joins in a second round), so the test sets it: every
round then publishes the address anew and worker rank 0 hosts the store.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torchrun_job import free_port

HERE = Path(__file__).resolve().parents[1]  # tests/
ROOT = HERE.parent
RDZV = "join_timeout=60,last_call_timeout=3,close_timeout=10,keep_alive_interval=1,keep_alive_max_attempt=5"
DEADLINE = 240.0   # seconds for a whole job (its phases are bounded by the timeouts above)


def _agent(out: Path, node: str, port: int, host: bool, allow: bool) -> subprocess.Popen:
    """One ``torchrun`` agent of the job; its output in ``out/<node>.log``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), OMP_NUM_THREADS="1",
               ELASTIC_NODE=node, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=elastic-{port}",
               f"--rdzv-conf={RDZV},is_host={int(host)}", "--local-addr=127.0.0.1", "--max-restarts=1",
               "--monitor-interval=0.2", str(HERE / "elastic_worker.py"), str(out),
               *(["--allow-repartition"] if allow else [])]
    log = open(out / f"{node}.log", "w")  # noqa: SIM115 -- closed with the process (see _finish)
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def _poll(condition, what: str, deadline: float, agents) -> None:
    while not condition():
        if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
            raise AssertionError(f"{what}: not within the deadline or an agent ended early")
        time.sleep(0.05)


class Job:
    """A two-node elastic job: B is started first (as a client of A's store) so both join the first round."""

    def __init__(self, out: Path, allow: bool) -> None:
        out.mkdir()
        self.out, port = out, free_port()
        self.b = _agent(out, "b", port, host=False, allow=allow)
        self.a = _agent(out, "a", port, host=True, allow=allow)

    def lose_node_b(self, deadline: float) -> None:
        """Waits for the checkpoints of the 2-rank job, then kills node B: its agent, then its worker."""
        doomed, saved = self.out / "doomed", self.out / "at-save.pt"
        _poll(lambda: doomed.exists() and saved.exists() and doomed.read_text(), "the 2-rank job's checkpoints",
              deadline, [self.a, self.b])
        self.b.kill()
        os.kill(int(doomed.read_text()), signal.SIGKILL)
        self.b.wait()

    def finish(self, deadline: float) -> tuple[int, str]:
        try:
            code = self.a.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for agent in (self.a, self.b):
                if agent.poll() is None:
                    agent.kill()
                    agent.wait()
        return code, (self.out / "a.log").read_text()


@pytest.mark.one_core  # two agents and their workers, mostly waiting on the rendezvous: one core's worth
@pytest.mark.timeout(DEADLINE + 30)
def test_an_elastic_job_that_loses_a_node_resumes_at_the_new_world_size(tmp_path):
    deadline = time.monotonic() + DEADLINE
    job = Job(tmp_path / "allow", allow=True)
    try:
        job.lose_node_b(deadline)
    finally:
        code, log = job.finish(deadline)
    assert code == 0, log[-4000:]
    result = json.loads((tmp_path / "allow" / "result.json").read_text())
    at_save = torch.load(tmp_path / "allow" / "at-save.pt", weights_only=False)
    assert (result["saved_world_size"], result["world_size"], result["repartitioned"]) == (2, 1, True)
    assert result["resumed_from"] == 3 and result["same_parameters"]
    assert result["losses"][:3] == at_save["losses"]        # the 2-rank steps, kept in the checkpoint
    assert torch.allclose(torch.tensor(result["losses"]), torch.tensor(result["reference"]), rtol=1e-5, atol=1e-6)
