r"""Row codecs of the compressed halo exchange (issue #16): rows of floats to rows of bytes.

A row of ``width`` values is encoded into :func:`payload_row_bytes` bytes (``uint8``), so a
payload of ``n`` rows is a ``[n, B]`` ``uint8`` tensor that the ordinary row exchange
(:func:`~pyg_sparsecomm.comm.halo.all_to_all_rows`) moves and counts unchanged.

* ``"bf16"`` / ``"fp16"``: the values cast to that dtype (round to nearest even), 2 bytes each.
  ``"fp16"`` cannot represent :math:`|v| > 65504`; such rows raise instead of becoming ``inf``.
* ``"int8"`` / ``"int4"`` (:math:`b = 8, 4` bits, :math:`L = 2^b - 1` levels): per row an offset
  :math:`o` and a scale :math:`s`, then

  .. math::
      q_k = \left\lfloor \frac{v_k - o}{s} + u_k \right\rfloor, \quad u_k \sim U(0, 1), \qquad
      \hat v_k = o + s\, q_k

  (unbiased stochastic rounding, up to the 16-bit draws below: :math:`\mathbb E[\hat v_k] = v_k`,
  :math:`|\hat v_k - v_k| < s`, :math:`\mathrm{Var}[\hat v_k] \le s^2 / 4`).  ``int4`` packs two
  values per byte (low nibble: the even column), an odd width pads one zero nibble.

**Scale and offset** are stored in the row as two ``bfloat16`` (4 bytes, the issue's budget):
``bfloat16`` has float32's exponent range, so neither activations nor tiny gradients
(:math:`< 6 \cdot 10^{-8}`, fp16's smallest subnormal) over- or underflow, at 8 significant bits.
The offset is the row minimum rounded *down* to ``bfloat16`` and the scale
:math:`(\max - o) / L` rounded *up*, so the stored grid :math:`o + s\{0, \dots, L\}` covers
the row and rounding on it stays unbiased.  The price of 8-bit header precision is a slightly
coarser grid:

.. math::
    s \le (1 + 2^{-7}) \frac{\max - \min + 2^{-7} |\min|}{L}

A row whose minimum is a ``bfloat16`` number and whose values are all equal (e.g. a zero row)
gets :math:`s = 0` and is decoded exactly.

**Rounding draws** are 16-bit: :math:`u_{rc} = (j_{rc} + \tfrac12)\, 2^{-16}` with :math:`j_{rc}`
uniform in :math:`\{0, \dots, 2^{16} - 1\}`, so :math:`|\mathbb E[\hat v_{rc}] - v_{rc}| \le 2^{-17} s`
(plus the float rounding of :math:`(v_{rc} - o) / s`).  Per encode the generator draws one 16-bit
number :math:`a_r` per row and one :math:`b_c` per column, and value :math:`(r, c)` uses

.. math::
    j_{rc} = a_r \oplus b_c

(bitwise xor): :math:`n + f` draws instead of :math:`n f`, and the values' draws are uniform
and *pairwise independent* (for :math:`r \ne r'`, :math:`a_{r'}` alone makes :math:`j_{r'c'}`
uniform given :math:`j_{rc}`; for :math:`r = r'`, :math:`b_{c'}` does), so the rounding errors
are unbiased and pairwise uncorrelated: a sum of rounded values (an aggregation, a matrix
product) has the variance of independent rounding.  (Only four values on the corners of a
rectangle are dependent: their :math:`j` xor to 0.)  The draws come from a dedicated
``torch.Generator`` per device (:mod:`~pyg_sparsecomm.comm.rounding`), never from torch's
default generator: a model trained with ``halo_precision="int8"`` sees the same initial
parameters and dropout masks as the same model trained exactly after the same
``torch.manual_seed``.

**Speed.** On CPU, ``float32`` rows (and ``float16``/``bfloat16`` ones, cast exactly) are coded by
one compiled pass per direction (:mod:`~pyg_sparsecomm.comm.quantize_cpu`, built on first use),
which also gathers the rows to send (``index``); on CUDA, with Triton installed, one kernel per
direction (:mod:`~pyg_sparsecomm.comm.quantize_triton`).  Both give bitwise the payload of the torch
ops below, which code the rest (and everything where no compiler is found, after a warning): the
encoder quantizes blocks of :data:`BLOCK_ELEMENTS` values (subtract, scale, add the draws, clamp,
cast), so its temporaries stay in the cache and the allocator's free lists.
"""
import importlib.util
import math
import sys

import torch
from torch import Tensor

from . import quantize_cpu
from .finite_check import require
from .halo_options import PRECISIONS
from .rounding import rounding_generator
from .rounding import seed_rounding as seed_rounding  # re-exported: pyg_sparsecomm.comm.quantize.seed_rounding

_FLOAT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
_INT_BITS = {"int8": 8, "int4": 4}
#: bytes of a row's scale and offset in the integer formats (two bfloat16)
HEADER_BYTES = 4
_LITTLE_ENDIAN = sys.byteorder == "little"
#: values the CPU integer encoder quantizes at a time (:func:`block_rows`): a block's temporaries
#: stay in the cache and in the allocator's free lists, where temporaries of the whole payload
#: would be fresh memory every call (a page fault per 4 KiB, most of the encoder's time)
BLOCK_ELEMENTS = 1 << 18


def check_precision(precision: str | None, what: str = "halo_precision") -> None:
    """ValueError naming the valid values unless ``precision`` is one of them or ``None``."""
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"{what}={precision!r} is not a precision; use None (exact) or one of {list(PRECISIONS)}")


def payload_row_bytes(width: int, precision: str | None, element_size: int = 4) -> int:
    r"""Bytes of one exchanged row of ``width`` values: what :func:`encode` produces per row, what
    the counters record and what the cost model predicts.

    .. math::
        B = \begin{cases} w e & \text{exact} \\ 2 w & \text{bf16, fp16} \\
            w + 4 & \text{int8} \\ \lceil w / 2 \rceil + 4 & \text{int4} \end{cases}

    (``w = 0``: 0 bytes, there is nothing to describe.)
    """
    check_precision(precision)
    width = int(width)
    if precision is None:
        return width * int(element_size)
    if precision in _FLOAT_DTYPES or width == 0:
        return 2 * width
    values = width if precision == "int8" else (width + 1) // 2
    return values + HEADER_BYTES


def encode(rows: Tensor, precision: str, generator: torch.Generator | None = None,
           index: Tensor | None = None) -> Tensor:
    r"""Encodes ``[n, f]`` floating-point rows into a ``[n, payload_row_bytes(f, precision)]``
    ``uint8`` payload.

    Args:
        rows (torch.Tensor): ``[N, f]`` finite floating-point values.
        precision (str): one of :data:`PRECISIONS`.
        generator (torch.Generator, optional): the random numbers of stochastic rounding (integer formats),
            never torch's default one. (default: the dedicated rounding generator of ``rows.device``,
            :func:`~pyg_sparsecomm.comm.rounding.rounding_generator`)
        index (torch.Tensor, optional): encode the ``n`` rows ``rows[index]`` (bitwise the payload of
            ``encode(rows[index], ...)``; on CPU the gather happens in the encoding pass).
            (default: all rows, ``n = N``)
    """
    check_precision(precision)
    if precision is None:
        raise ValueError("encode: precision=None is the exact exchange, there is nothing to encode")
    if rows.dim() != 2 or not rows.is_floating_point():
        raise ValueError(f"encode: expected [n, f] floating-point rows, got {tuple(rows.shape)} {rows.dtype}")
    n, width = rows.size(0) if index is None else index.numel(), rows.size(1)
    if n == 0 or width == 0:
        return rows.new_empty((n, payload_row_bytes(width, precision)), dtype=torch.uint8)
    if precision in _FLOAT_DTYPES:
        return _encode_float(rows if index is None else rows.index_select(0, index), precision)
    if generator is None:
        generator = rounding_generator(rows.device)
    return _encode_int(rows, _INT_BITS[precision], generator, index)


def decode(payload: Tensor, width: int, precision: str, dtype: torch.dtype = torch.float32) -> Tensor:
    """The ``[n, width]`` rows of ``dtype`` a payload of :func:`encode` describes."""
    check_precision(precision)
    if precision is None:
        raise ValueError("decode: precision=None is the exact exchange, there is nothing to decode")
    expected = payload_row_bytes(width, precision)
    if payload.dim() != 2 or payload.dtype != torch.uint8 or payload.size(1) != expected:
        raise ValueError(f"decode: a {precision} payload of width {width} is [n, {expected}] uint8, "
                         f"got {tuple(payload.shape)} {payload.dtype}")
    n = payload.size(0)
    if n == 0 or width == 0:
        return payload.new_empty((n, width), dtype=dtype)
    if precision in _FLOAT_DTYPES:
        return bytes_as(payload, _FLOAT_DTYPES[precision]).to(dtype)
    like = payload.new_empty(0, dtype=dtype)
    if dtype == torch.float32 and quantize_cpu.usable(like):
        return quantize_cpu.decode_int(payload, width, _INT_BITS[precision])
    if dtype == torch.float32 and _fused(like, width):
        from .quantize_triton import decode_int
        return decode_int(payload, width, _INT_BITS[precision])
    offset, scale = bytes_as(payload[:, :HEADER_BYTES], torch.bfloat16).to(dtype).unbind(1)
    levels = _unpack(payload[:, HEADER_BYTES:], width, _INT_BITS[precision]).to(dtype)
    # o + s q in place on the fresh levels (a broadcast addcmul measured several times slower)
    return levels.mul_(scale.unsqueeze(1)).add_(offset.unsqueeze(1))


def _encode_float(rows: Tensor, precision: str) -> Tensor:
    dtype = _FLOAT_DTYPES[precision]
    out = torch.empty((rows.size(0), 2 * rows.size(1)), dtype=torch.uint8, device=rows.device)
    out.view(dtype).copy_(rows)  # cast straight into the payload
    # the cast itself decides: a non-finite value stays one, and beyond the format's largest number
    # becomes inf (values just above it round down to it); checked on the device (finite_check)
    fix = "" if precision == "bf16" else " (use 'bf16', which has float32's range)"
    require(torch.isfinite(out.view(dtype)).all(),
            f"halo precision {precision!r}: a value is not finite or exceeds the range of {precision}{fix}")
    return out


def _encode_int(rows: Tensor, bits: int, generator: torch.Generator, index: Tensor | None) -> Tensor:
    n, width = rows.size(0) if index is None else index.numel(), rows.size(1)
    out = torch.empty((n, HEADER_BYTES + _packed_width(width, bits)), dtype=torch.uint8, device=rows.device)
    row_draws, column_draws = random_int16((n, 1), generator), random_int16((1, width), generator)
    if quantize_cpu.usable(rows):
        if not quantize_cpu.encode_int(rows, bits, row_draws.view(-1), column_draws.view(-1), out, index):
            raise non_finite_error(bits, torch.float32)
        return out
    if index is not None:
        rows = rows.index_select(0, index)
    if _fused(rows, width):
        from .quantize_triton import encode_int
        finite = encode_int(rows, bits, row_draws.view(-1), column_draws.view(-1), out)
        require(finite.all(), str(non_finite_error(bits, rows.dtype)))  # on CUDA: read without waiting
        return out
    offset, scale = row_grid(rows, bits)
    work = torch.promote_types(rows.dtype, torch.float32)
    inv = torch.where(scale > 0, 1 / scale.to(work), torch.zeros((), dtype=work, device=rows.device))
    _write_header(out, torch.stack([offset, scale], dim=1))
    offset = offset.to(work)
    block = block_rows(width, rows.device)
    for start in range(0, n, block):
        b = slice(start, min(start + block, n))
        draws = torch.bitwise_xor(row_draws[b], column_draws)
        _encode_block(rows[b], offset[b], inv[b], draws, bits, out[b, HEADER_BYTES:])
    return out


def _write_header(out: Tensor, header: Tensor) -> None:
    """``[n, 2]`` bfloat16 (offset, scale) into the first 4 bytes of every payload row: as one
    int32 per row when the rows allow it (a strided 4-byte copy per row is several times slower)."""
    if out.size(1) % 4 == 0 and out.data_ptr() % 4 == 0:
        out.view(torch.int32)[:, :1].copy_(header.view(torch.int32))
    else:
        out[:, :HEADER_BYTES].copy_(header.view(torch.uint8))


def _fused(rows: Tensor, width: int) -> bool:
    """Whether the Triton kernels (:mod:`~pyg_sparsecomm.comm.quantize_triton`) code these rows:
    ``float32`` on CUDA with ``triton`` installed, up to its widest row."""
    if rows.device.type != "cuda" or rows.dtype != torch.float32 or importlib.util.find_spec("triton") is None:
        return False
    from .quantize_triton import usable
    return usable(width, rows.dtype)


def block_rows(width: int, device: torch.device) -> int:
    """Rows the integer encoder quantizes at a time: on CPU about :data:`BLOCK_ELEMENTS` values
    (the draws do not depend on it: the payload is bitwise that of one pass); elsewhere every row
    at once (the caching allocator reuses memory)."""
    if device.type != "cpu":
        return 1 << 62
    return max(1, BLOCK_ELEMENTS // max(width, 1))


def _encode_block(rows: Tensor, offset: Tensor, inv: Tensor, draws: Tensor, bits: int, out: Tensor) -> None:
    """Quantizes ``[b, f]`` rows onto their grids into the ``[b, packed width]`` bytes ``out``."""
    v = torch.sub(rows, offset.unsqueeze(1)).mul_(inv.unsqueeze(1))  # in the work dtype of offset
    add_rounding_noise_(v, draws)
    # v + u lies in [0, L + 1) up to the last float ulp, which the clamp guards; on [0, L] the cast
    # truncates, i.e. floors (to uint8 through int32: the direct cast is not vectorised, 2x slower)
    levels = v.clamp_(0, (1 << bits) - 1).to(torch.int32)
    out.copy_(levels if bits == 8 else _pack_nibbles(levels))


def add_rounding_noise_(v: Tensor, draws: Tensor) -> Tensor:
    r"""Adds :math:`u = (k + \tfrac12)\, 2^{-16}` to ``v`` in place, with :math:`k = r + 2^{15}` for the
    ``int16`` ``draws`` :math:`r`.  For uniform :math:`k`, :math:`P(\lfloor v + u \rfloor > \lfloor v
    \rfloor)` is the fraction of :math:`v` rounded to a multiple of :math:`2^{-16}`: the rounding's
    bias is at most :math:`2^{-17}` of a step (plus the float rounding of ``v`` itself)."""
    return v.add_(draws, alpha=2.0 ** -16).add_(0.5 + 2.0 ** -17)


def random_int16(shape: tuple[int, ...] | torch.Size, generator: torch.Generator) -> Tensor:
    """Uniform 16-bit integers in :math:`[-2^{15}, 2^{15})`: four per 64-bit draw of ``generator``
    (a quarter of the generator's work of one ``float32`` draw per value)."""
    count = math.prod(shape)
    words = torch.empty(((count + 3) // 4,), dtype=torch.int64, device=generator.device)
    words.random_(-(2 ** 63), None, generator=generator)  # the full 64-bit range
    return words.view(torch.int16)[:count].view(shape)


def _packed_width(width: int, bits: int) -> int:
    return width if bits == 8 else (width + 1) // 2


def _pack_nibbles(levels: Tensor) -> Tensor:
    """``[n, f]`` levels in ``[0, 15]`` (integers, or floating point floored by the cast) to ``[n, ceil(f / 2)]``
    bytes, two per byte, the even column in the low nibble."""
    n, width = levels.shape
    pairs = torch.empty((n, width + width % 2), dtype=torch.uint8, device=levels.device)
    pairs[:, :width].copy_(levels)
    pairs[:, width:].zero_()  # the padding nibble of an odd width
    # a pair of bytes (a, b) read as one little-endian int16 is a + 256 b; OR-ing it with itself
    # shifted by 4 puts b in the high nibble of the low byte (a, b < 16), which the cast keeps
    word = pairs.view(torch.int16)
    if not _LITTLE_ENDIAN:
        word = pairs[:, 1::2].to(torch.int16) * 256 + pairs[:, 0::2]
    return (word | (word >> 4)).to(torch.uint8)


def row_grid(rows: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """Per row the ``bfloat16`` offset (the minimum rounded down) and scale (rounded up) whose grid
    ``offset + scale * {0, ..., 2^bits - 1}`` covers the row; ValueError for non-finite rows."""
    low, high = rows.amin(dim=1), rows.amax(dim=1)
    work = torch.promote_types(rows.dtype, torch.float32)
    # + 0: a zero extreme is +0 whichever zero the reduction picked (the compiled codec agrees)
    low, high = low.to(work) + 0.0, high.to(work) + 0.0
    require(torch.isfinite(high - low).all(), str(non_finite_error(bits, work)))
    offset = _round_bf16(low, down=True)
    scale = _round_bf16((high - offset.to(work)) / ((1 << bits) - 1), down=False)
    return offset, scale


def non_finite_error(bits: int, work: torch.dtype) -> ValueError:
    """The error of rows :func:`row_grid` cannot describe."""
    return ValueError(f"halo precision int{bits}: a row has a non-finite value or a range (max - min) that "
                      f"overflows {work}; quantize finite rows only")


def _round_bf16(x: Tensor, down: bool) -> Tensor:
    """``x`` rounded to ``bfloat16`` towards ``-inf`` (``down``) or ``+inf``."""
    return _round_bf16_by_bits(x, down) if x.dtype == torch.float32 else _round_bf16_by_cast(x, down)


def _round_bf16_by_bits(x: Tensor, down: bool) -> Tensor:
    """:func:`_round_bf16` of ``float32``: a ``float32`` is a ``bfloat16`` and 16 more mantissa
    bits, so dropping them rounds towards zero; on the side away from the target, adding
    ``0xFFFF`` to the bit pattern first steps an inexact value to the next ``bfloat16`` away from
    zero (the finite maximum steps to ``inf``, as in the cast).  Measured 10x faster than
    :func:`_round_bf16_by_cast` on CPU."""
    bits = x.contiguous().view(torch.int32)
    away = (bits >> 31) if down else ~bits >> 31  # all ones on that side (an arithmetic shift)
    kept = away.bitwise_and_(0xFFFF).add_(bits).bitwise_and_(-0x10000)
    return (kept >> 16).to(torch.int16).view(torch.bfloat16)


def _round_bf16_by_cast(x: Tensor, down: bool) -> Tensor:
    """:func:`_round_bf16` of any floating dtype: the cast rounds to nearest, ``nextafter`` fixes
    the side."""
    rounded = x.to(torch.bfloat16)
    wrong = rounded.to(x.dtype) > x if down else rounded.to(x.dtype) < x
    target = torch.full_like(rounded, float("-inf") if down else float("inf"))
    return torch.where(wrong, torch.nextafter(rounded, target), rounded)


def as_bytes(rows: Tensor) -> Tensor:
    """``[n, f]`` rows of any dtype as ``[n, f * element_size]`` bytes (a copy: ``Tensor.view(dtype)``
    refuses slices and single rows whose strides are not multiples of the element size)."""
    out = torch.empty((rows.size(0), rows.size(1) * rows.element_size()), dtype=torch.uint8, device=rows.device)
    out.view(rows.dtype).copy_(rows)
    return out


def bytes_as(payload: Tensor, dtype: torch.dtype) -> Tensor:
    """The inverse of :func:`as_bytes`: ``[n, B]`` bytes as ``[n, B / element_size]`` values of ``dtype``."""
    size = torch.empty((), dtype=dtype).element_size()
    out = torch.empty((payload.size(0), payload.size(1) // size), dtype=dtype, device=payload.device)
    out.view(torch.uint8).copy_(payload)
    return out


def _unpack(packed: Tensor, width: int, bits: int) -> Tensor:
    """The ``[n, width]`` levels of :func:`_pack_nibbles`' bytes (int8: the bytes themselves)."""
    if bits == 8:
        return packed
    if not _LITTLE_ENDIAN:
        return torch.stack([packed & 0x0F, packed >> 4], dim=2).reshape(packed.size(0), -1)[:, :width]
    # byte b as int16 becomes (b & 15) + 256 (b >> 4): read as two little-endian bytes, the low and
    # high nibble (in int16 arithmetic: the uint8 shifts measured several times slower)
    word = packed.to(torch.int16)
    word = (word & 0x0F) | ((word << 4) & 0x0F00)
    return word.view(torch.uint8)[:, :width]


def encode_rows(rows: Tensor, precision: str | None, index: Tensor | None = None) -> Tensor:
    """``[N, ...]`` rows (``rows[index]``: ``[n, ...]``, gathered while encoding) as the ``[n, B]``
    payload that goes on the wire (``None``: the rows themselves)."""
    if precision is None:
        return rows.contiguous() if index is None else rows.index_select(0, index)
    return encode(rows.reshape(rows.size(0), math.prod(rows.shape[1:])), precision, index=index)


def decode_rows(payload: Tensor, like: Tensor, precision: str | None) -> Tensor:
    """The received payload as rows shaped and typed like ``like``'s rows (``None``: as received)."""
    if precision is None:
        return payload
    width = math.prod(like.shape[1:])
    return decode(payload, width, precision, like.dtype).reshape((payload.size(0),) + tuple(like.shape[1:]))
