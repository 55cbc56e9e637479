"""Counter-based randomness: a uniform number per (seed, stream, id), the same on every rank.

A loader's random choices (which batch a node falls in, which in-edges a node samples) are
functions of global node and edge ids, never of a generator's state, so every rank draws the
same numbers for the same ids without talking, and the batches do not depend on the partition
or on ``P``.  The mixing function is SplitMix64's finaliser (Steele, Lea & Flood, OOPSLA'14),
applied to the id plus a key derived from ``(seed, *stream)``.

The hashes run in torch on the ids' device (int64 arithmetic, which wraps as ``uint64`` does,
with logical shifts), so a sampler on a GPU draws there; NumPy callers get the same numbers.
"""
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

_GOLDEN = 0x9E3779B97F4A7C15
_MUL1, _MUL2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_U64 = 1 << 64


def _signed(value: int) -> int:
    """The int64 of the same 64 bits as the ``uint64`` ``value``."""
    value %= _U64
    return value - _U64 if value >= 1 << 63 else value


def _mix(z: Tensor) -> Tensor:
    """SplitMix64's finaliser, in place, over an int64 tensor read as ``uint64`` (int64 products
    wrap as ``uint64`` ones do; shifts are logical: arithmetic ones masked.  In place and with
    ``bitwise_right_shift``, not ``>>``: both several times faster on the CPU)."""
    shifted = torch.empty_like(z)
    for shift, multiplier in ((30, _MUL1), (27, _MUL2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=shifted)
        z.bitwise_xor_(shifted.bitwise_and_((1 << (64 - shift)) - 1))
        if multiplier is not None:
            z.mul_(_signed(multiplier))
    return z


def _mix_int(z: int) -> int:
    """:func:`_mix` of one ``uint64`` Python integer."""
    z ^= z >> 30
    z = (z * _MUL1) % _U64
    z ^= z >> 27
    z = (z * _MUL2) % _U64
    return z ^ (z >> 31)


def stream_key(seed: int, *stream: int) -> np.uint64:
    """The key of one random stream: ``seed`` followed by integers naming the stream."""
    key = int(seed) % _U64
    for s in stream:
        key = (_mix_int(key ^ (int(s) % _U64)) + _GOLDEN) % _U64
    return np.uint64(_mix_int(key))


class _HashCount:
    """Ids hashed so far in this process (what a sampler's work is measured in, not its time)."""
    items = 0


def hashed_items() -> int:
    """The number of ids hashed by :func:`uniform_tensor` so far in this process (for tests of the
    samplers' work; threads may lose counts)."""
    return _HashCount.items


def raw_bits(key: int | np.uint64, ids: Tensor) -> Tensor:
    """``[n]`` int64: the top 53 of the 64 hashed bits :math:`\\mathrm{mix}(id \\cdot \\phi + k)` of
    every id (non-negative, below :math:`2^{53}`), on the ids' device."""
    _HashCount.items += ids.numel()
    z = _mix(torch.mul(ids.long(), _signed(_GOLDEN)).add_(_signed(int(key))))
    return torch.bitwise_right_shift(z, 11, out=z).bitwise_and_((1 << 53) - 1)


def raw_bits_table(keys: Sequence[int | np.uint64], ids: Tensor) -> Tensor:
    """``[n, len(keys)]`` int64: column ``j`` is :func:`raw_bits` of ``ids`` under ``keys[j]`` (bit for bit),
    hashed in one pass over the table instead of one pass per key."""
    _HashCount.items += ids.numel() * len(keys)
    offsets = torch.tensor([_signed(int(key)) for key in keys], dtype=torch.long, device=ids.device)
    z = _mix(torch.mul(ids.long(), _signed(_GOLDEN)).unsqueeze(1).add(offsets))
    return torch.bitwise_right_shift(z, 11, out=z).bitwise_and_((1 << 53) - 1)


def uniform_tensor(key: int | np.uint64, ids: Tensor) -> Tensor:
    r"""``[n]`` float64 uniforms in :math:`[0, 1)`, one per id: :math:`u = \mathrm{mix}(id \cdot \phi + k) / 2^{64}`
    (the top 53 bits), for int64 ``ids``, on their device."""
    return raw_bits(key, ids).double() * (1.0 / (1 << 53))


def uniform(key: np.uint64, ids: Tensor | np.ndarray) -> np.ndarray:
    """:func:`uniform_tensor` as a NumPy array (ids given as an array or a tensor)."""
    tensor = ids.detach() if isinstance(ids, Tensor) else torch.from_numpy(np.asarray(ids).astype(np.int64, copy=False))
    return uniform_tensor(key, tensor).cpu().numpy()


def bucket(key: np.uint64, ids: Tensor | np.ndarray, num_buckets: int) -> Tensor:
    """``[n]`` int64 bucket in ``[0, num_buckets)`` of every id, uniform and independent (on the
    ids' device; a NumPy array's on the CPU)."""
    tensor = ids if isinstance(ids, Tensor) else torch.from_numpy(np.asarray(ids).astype(np.int64, copy=False))
    return torch.clamp_max((uniform_tensor(key, tensor) * num_buckets).long(), num_buckets - 1)
