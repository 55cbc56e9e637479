r"""The random numbers of stochastic rounding (``halo_precision="int8"`` / ``"int4"``).

Rounding draws come from one dedicated ``torch.Generator`` per device and process, never from
torch's default generator, so compressing the halo does not shift the default random stream:
with the same ``torch.manual_seed``, an ``int8`` run and an exact run get identical initial
parameters and identical dropout masks (their accuracies are a paired comparison).

**Seeding.** The generator of a device is seeded with

.. math::
    \mathrm{seed} = H(\mathrm{base}, \mathrm{rank})

(:math:`H`: the first 63 bits of BLAKE2b of both numbers), where ``base`` is
:func:`torch.initial_seed` (what the last ``torch.manual_seed`` set) and ``rank`` is the rank in
the default process group (0 without one), so ranks draw independent numbers.  It is seeded on
first use and re-seeded whenever ``torch.initial_seed()`` or the rank changed since, so
``torch.manual_seed(s)`` in a fresh process (e.g. every process of
:func:`~pyg_sparsecomm.testing.processes.launch`) makes the draws reproducible.  Layers and call sites
share the device's stream: they draw one after the other in program order (every encode runs
on the calling thread), which is deterministic.

Seeding the same ``s`` twice *in one process* does not change ``torch.initial_seed()``, so the
stream would continue; call :func:`seed_rounding` (after ``torch.manual_seed(s)``) to restart
it.  :func:`seed_rounding` with an explicit ``seed`` pins the base until the next call.

**Restarts.** :func:`state_dict` / :func:`load_state_dict` carry the streams over a restart (a
checkpoint, :mod:`~pyg_sparsecomm.checkpoint`): re-seeding would draw the first step's numbers again.
"""
import hashlib

import torch
import torch.distributed as dist

#: device -> (its generator, the (base, rank) it was seeded from)
_GENERATORS: dict[torch.device, tuple[torch.Generator, tuple[int, int]]] = {}
#: the base set by :func:`seed_rounding` (``None``: follow ``torch.initial_seed()``)
_PINNED_BASE: list[int | None] = [None]


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def rounding_seed(base: int, rank: int) -> int:
    """The 63-bit seed of the rounding generator of ``rank`` for the base seed ``base``."""
    digest = hashlib.blake2b(f"pyg_sparsecomm.rounding:{int(base)}:{int(rank)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def rounding_generator(device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of the stochastic rounding on ``device``, (re-)seeded as the module
    describes; it never touches torch's default generator."""
    device = torch.device(device)
    if device.type != "cpu" and device.index is None:
        device = torch.device(device.type, torch.get_device_module(device.type).current_device())
    base = _PINNED_BASE[0] if _PINNED_BASE[0] is not None else torch.initial_seed()
    key = (base, _rank())
    entry = _GENERATORS.get(device)
    if entry is None or entry[1] != key:
        generator = entry[0] if entry is not None else torch.Generator(device=device)
        generator.manual_seed(rounding_seed(*key))
        _GENERATORS[device] = entry = (generator, key)
    return entry[0]


def seed_rounding(seed: int | None = None) -> None:
    """Restarts the rounding streams of every device.

    Args:
        seed (int, optional): the base seed of every rank's stream (each rank still draws its own numbers);
            ``None``: follow ``torch.initial_seed()`` again (call it after ``torch.manual_seed(s)``
            to repeat a run's draws in the same process). (default: :obj:`None`)
    """
    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"seed_rounding: seed must be an int or None, got {type(seed).__name__}")
    _PINNED_BASE[0] = seed
    _GENERATORS.clear()


def state_dict() -> dict:
    """This process's rounding streams, to continue them after a restart (:mod:`~pyg_sparsecomm.checkpoint`):
    the pinned base and, per device, the generator's state and the ``(base, rank)`` it was seeded from."""
    generators = {str(device): (generator.get_state(), key) for device, (generator, key) in _GENERATORS.items()}
    return {"pinned_base": _PINNED_BASE[0], "generators": generators}


def load_state_dict(state: dict) -> None:
    """Continues the rounding streams :func:`state_dict` saved (in a new process: the draws go on where
    they stopped, as long as ``torch.initial_seed()`` and the rank are those the streams were seeded from,
    else :func:`rounding_generator` re-seeds them as usual)."""
    _PINNED_BASE[0] = state["pinned_base"]
    _GENERATORS.clear()
    for name, (generator_state, key) in state["generators"].items():
        generator = torch.Generator(device=name)
        generator.set_state(generator_state)
        _GENERATORS[torch.device(name)] = (generator, tuple(key))
