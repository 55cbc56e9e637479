r"""Every attempt of a ``torchrun`` job gets a key space of its own in torchrun's store.

``torchrun --max-restarts N`` restarts the whole worker group when a rank dies, and an elastic
job (``--nnodes MIN:MAX``) restarts it when nodes join or leave.  The new workers connect to the
*same* store as the dead ones (the agent's ``TCPStore``, which outlives its workers), and
``init_process_group`` writes its keys under fixed names (``default_pg/...``): the new group reads
the addresses the dead group left there, and gloo's ``connectFullMesh`` fails ("Connection
refused" / "Connect timeout") instead of connecting.

A process group created on ``PrefixStore(f"pyg_sparsecomm/attempt-{g}", store)`` sees only the
keys of its own attempt ``g``.  ``TORCHELASTIC_RESTART_COUNT`` cannot serve as ``g``: it counts
restarts *per agent* (a node whose workers failed counts one more; a healthy node restarted for a
membership change counts none), so after a membership change ranks on different nodes would
disagree.  The attempt number is agreed through the store instead (:func:`attempt_number`):

* rank 0 draws :math:`g` = ``store.add("gen", 1)``, a number no earlier attempt had;
* rank :math:`r > 0` draws :math:`j_r` = ``store.add(f"joins/{r}", 1)``, a number no earlier
  worker of rank :math:`r` had, and waits for ``ack/{r}/{j_r}``, which holds :math:`g`;
* rank 0 acknowledges every value of ``joins/{r}`` it reads, until ``got/{r}/{g}`` shows that
  rank :math:`r` read *this* attempt's :math:`g` (a value rank 0 read before rank :math:`r`
  joined is an earlier attempt's, acknowledged to nobody; rank 0 reads again).

Ranks that died before joining in an earlier attempt leave nothing behind that a later attempt
could mistake for its own.  The key space is that of the store the job's ``env://`` rendezvous
returns; keys of earlier attempts stay in the store (a few bytes per rank and attempt).
"""
import time
from datetime import timedelta

import torch.distributed as dist

_ROOT = "pyg_sparsecomm/attempts/"
_POLL_SECONDS, _MAX_POLL_SECONDS = 0.01, 0.5


def attempt_number(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> int:
    """The number of this attempt of the job, the same on every rank, new in ``store`` (see the
    module docstring); collective over the ``world_size`` ranks that share ``store``.

    Raises:
        RuntimeError: when a rank does not join within ``timeout`` (naming the ranks missing).
    """
    if rank == 0:
        generation = store.add(_ROOT + "gen", 1)
        _acknowledge(store, generation, world_size, timeout)
        return generation
    joined = store.add(f"{_ROOT}joins/{rank}", 1)
    ack = f"{_ROOT}ack/{rank}/{joined}"
    try:
        store.wait([ack], timeout)
    except Exception as error:  # noqa: BLE001 -- the store's timeout, re-raised with what it means
        raise RuntimeError(f"rank {rank}: rank 0 of this attempt did not answer within {timeout} "
                           f"({type(error).__name__}: {error})") from error
    generation = int(store.get(ack))
    store.set(f"{_ROOT}got/{rank}/{generation}", "1")
    return generation


def _acknowledge(store: dist.Store, generation: int, world_size: int, timeout: timedelta) -> None:
    """Rank 0: answers every rank's latest join with ``generation`` until each confirmed it."""
    pending = set(range(1, world_size))
    answered: set[tuple[int, int]] = set()
    deadline, pause = time.monotonic() + timeout.total_seconds(), _POLL_SECONDS
    while pending:
        for rank in sorted(pending):
            joined = store.add(f"{_ROOT}joins/{rank}", 0)
            if joined and (rank, joined) not in answered:
                store.set(f"{_ROOT}ack/{rank}/{joined}", str(generation))
                answered.add((rank, joined))
            if store.check([f"{_ROOT}got/{rank}/{generation}"]):
                pending.discard(rank)
        if pending and time.monotonic() > deadline:
            missing = sorted(pending)
            raise RuntimeError(f"rank 0: ranks {missing[:10]}{'...' if len(missing) > 10 else ''} of {world_size} "
                               f"did not join this attempt of the job within {timeout}")
        if pending:  # ranks still starting (importing torch takes seconds): poll less and less often
            time.sleep(pause)
            pause = min(2 * pause, _MAX_POLL_SECONDS)


def attempt_store(store: dist.Store, rank: int, world_size: int, timeout: timedelta) -> dist.Store:
    """``store`` seen through the key space of this attempt (:func:`attempt_number`)."""
    return dist.PrefixStore(f"{_ROOT}{attempt_number(store, rank, world_size, timeout)}/", store)
