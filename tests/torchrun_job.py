"""Scripts run as ``torchrun`` runs them: under the real ``torchrun --standalone`` (tests of
restarts and resuming: :func:`torchrun`), or with torchrun's environment in processes forked from
the tests' warm fork server (:func:`launch_as_torchrun`: a spawned rank spends seconds importing
torch and PyG before the script starts)."""
import os
import random
import runpy
import socket
import subprocess
import sys
from pathlib import Path

import torch.distributed as dist

from pyg_sparsecomm.testing import launch

ROOT = Path(__file__).resolve().parents[1]
#: the environment of the commands the tests run: nothing downloads, one thread per process
OFFLINE = {"PYG_SPARSECOMM_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def torchrun(script: Path, nproc: int, *args: str, max_restarts: int = 0, timeout: float = 240,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node NPROC --max-restarts N SCRIPT ARGS`` with this
    worktree's package first on the path; the completed process (output captured)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               f"--max-restarts={max_restarts}", "--monitor-interval=0.2", str(script), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for ``MASTER_PORT`` or a rendezvous
    endpoint), below the kernel's ephemeral range: under ``pytest -n 2`` a test running beside
    (a ``TCPStore`` client, a gloo connection) may take a port ``bind(0)`` returned for its own
    outgoing connection before the server binds it (seen: ``EADDRINUSE`` in a README command)."""
    first_ephemeral = 32768
    if os.path.exists("/proc/sys/net/ipv4/ip_local_port_range"):
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first_ephemeral = int(f.read().split()[0])
    choices = random.Random()  # not the global stream, which tests seed
    for _ in range(200):
        port = choices.randrange(20000, max(first_ephemeral, 20001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free TCP port found in 20000.." + str(first_ephemeral))


def _run_python(rank, world_size, target, args, cwd, env, log_dir):
    """One process of a command: ``python [-m] TARGET ARGS`` with ``env``, output to a log file."""
    dist.barrier()  # every rank has connected launch()'s group before any rank closes it
    dist.destroy_process_group()  # the script makes its own, as under torchrun
    os.chdir(cwd)
    os.environ.update({k: v.replace("{rank}", str(rank)) for k, v in env.items()})
    sys.argv = [target, *args]
    log = open(Path(log_dir) / f"rank{rank}.log", "w")  # open to the end: fds 1 and 2 point at it
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(log.fileno(), stream.fileno())
    try:
        if target.endswith(".py"):
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path.insert(0, cwd)
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"SystemExit: {e.code}") from None
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()


def torchrun_words(words: list[str]) -> tuple[int, list[str]]:
    """``torchrun [--standalone] --nproc-per-node N SCRIPT ARGS`` -> (N, [SCRIPT, *ARGS])."""
    nproc, i = 1, 1
    while i < len(words) and words[i].startswith("-"):
        option, _, value = words[i].partition("=")
        if option in ("--nproc-per-node", "--nproc_per_node"):
            if not value:
                i, value = i + 1, words[i + 1]
            nproc = int(value)
        elif option in ("--max-restarts", "--max_restarts"):  # restarts only after a failure: runs once here
            i += 0 if value else 1
        elif option != "--standalone":
            raise AssertionError(f"torchrun option {words[i]} in the README: teach tests/test_readme.py to run it")
        i += 1
    return nproc, words[i:]


def launch_as_torchrun(nproc: int, target: str, args: list[str], cwd: Path, log_dir: Path,
                       torchrun: bool = True) -> list[str]:
    """Runs ``python [-m] TARGET ARGS`` in ``cwd`` on ``nproc`` processes forked from the fork server,
    with torchrun's environment when ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, a free
    ``MASTER_PORT``, ...), ``OFFLINE`` and ``PYTHONPATH=cwd``; what each rank printed, by rank (an
    ``AssertionError`` with every rank's output if one failed)."""
    env = dict(OFFLINE, PYTHONPATH=str(cwd))
    if torchrun:
        env.update(RANK="{rank}", LOCAL_RANK="{rank}", WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        launch(_run_python, nproc, target, args, str(cwd), env, str(log_dir), timeout=600)
    except RuntimeError as e:
        logs = "\n".join(f"--- rank {p.stem}:\n{p.read_text()[-3000:]}" for p in sorted(log_dir.glob("rank*.log")))
        raise AssertionError(f"{target} {' '.join(args)}\n{logs}\n{e}") from None
    return [(log_dir / f"rank{r}.log").read_text() for r in range(nproc)]
