r"""The integer halo codecs as one Triton kernel per direction (CUDA; issue #24).

:func:`encode_int` does in one pass what :func:`~pyg_sparsecomm.comm.quantize.encode` does with
torch ops: per row the minimum and maximum, the ``bfloat16`` offset (rounded down) and scale
(rounded up) by bits, then per value :math:`q = \lfloor (v - o) / s + u \rfloor` clamped to
:math:`[0, L]` with the 16-bit draw :math:`a_r \oplus b_c` of the row and column draws, packed
(int4: two values per byte, the even column in the low nibble) behind the 4-byte header.
:func:`decode_int` reads header and levels and writes :math:`o + s\, q`.  Same wire format and
the same arithmetic as the torch path, operation by operation (divisions correctly rounded), so
under ``TRITON_INTERPRET=1`` on CPU the payloads are bitwise equal (tested); on a GPU the
compiler may contract a multiply and an add into one FMA, which moves a level only where
:math:`(v - o) / s + u` lies within a float rounding of an integer.

Rows of up to :data:`MAX_WIDTH` values, ``float32`` only (the caller uses the torch ops
otherwise).  ``triton`` is in the ``cuda`` and ``test`` extras.
"""
import torch
import triton
import triton.language as tl
from torch import Tensor

#: the widest row a program holds in registers
MAX_WIDTH = 8192
_ELEMENTS_PER_PROGRAM = 4096


@triton.jit
def _bf16_bits(x, DOWN: tl.constexpr):
    """``x`` (float32) rounded to bfloat16 towards -inf (``DOWN``) or +inf, as its 16 bits in an
    int32 (``quantize._round_bf16_by_bits``)."""
    bits = x.to(tl.int32, bitcast=True)
    if DOWN:
        away = ((bits & 0xFFFF) != 0) & (bits < 0)
    else:
        away = ((bits & 0xFFFF) != 0) & (bits >= 0)
    kept = (bits & -0x10000) + away.to(tl.int32) * 0x10000
    return (kept >> 16) & 0xFFFF


@triton.jit
def _bf16_value(bits16):
    return (bits16 << 16).to(tl.float32, bitcast=True)


@triton.jit
def _levels(x, offset, inv, draws, mask, LEVELS: tl.constexpr):
    v = (x - offset[:, None]) * inv[:, None]
    v = v + draws.to(tl.float32) * (2.0 ** -16)
    v = v + (0.5 + 2.0 ** -17)
    v = tl.minimum(tl.maximum(v, 0.0), LEVELS)
    return tl.where(mask, v.to(tl.int32), 0)


@triton.jit
def _encode_kernel(x_ptr, row_draws_ptr, col_draws_ptr, out_ptr, ok_ptr, n, width, out_stride,
                   LEVELS: tl.constexpr, PER_BYTE: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                   BLOCK_BYTES: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    k = tl.arange(0, BLOCK_BYTES)
    in_rows = rows < n
    r2 = rows[:, None].to(tl.int64)
    c0 = k[None, :] * PER_BYTE  # the value of byte k (int4: and the next one)
    c1 = c0 + 1
    m0 = in_rows[:, None] & (c0 < width)
    m1 = in_rows[:, None] & (c1 < width * (PER_BYTE - 1))  # int8: no second value
    x0 = tl.load(x_ptr + r2 * width + c0, mask=m0, other=0.0)
    x1 = tl.load(x_ptr + r2 * width + c1, mask=m1, other=0.0)
    lo = tl.minimum(tl.min(tl.where(m0, x0, float("inf")), axis=1), tl.min(tl.where(m1, x1, float("inf")), axis=1))
    hi = tl.maximum(tl.max(tl.where(m0, x0, -float("inf")), axis=1), tl.max(tl.where(m1, x1, -float("inf")), axis=1))
    nan = tl.max(((x0 != x0) & m0).to(tl.int32) + ((x1 != x1) & m1).to(tl.int32), axis=1)
    span = hi - lo
    tl.store(ok_ptr + rows, ((nan == 0) & (span == span) & (tl.abs(span) < float("inf"))).to(tl.uint8), mask=in_rows)
    offset_bits = _bf16_bits(lo, DOWN=True)
    offset = _bf16_value(offset_bits)
    scale_bits = _bf16_bits(tl.math.div_rn(hi - offset, LEVELS * 1.0), DOWN=False)
    scale = _bf16_value(scale_bits)
    positive = scale > 0
    inv = tl.where(positive, tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), tl.where(positive, scale, 1.0)), 0.0)
    row_draws = tl.load(row_draws_ptr + rows, mask=in_rows, other=0)
    q0 = _levels(x0, offset, inv, row_draws[:, None] ^ tl.load(col_draws_ptr + c0, mask=c0 < width, other=0),
                 m0, LEVELS)
    q1 = _levels(x1, offset, inv, row_draws[:, None] ^ tl.load(col_draws_ptr + c1, mask=c1 < width, other=0),
                 m1, LEVELS)
    row_out = out_ptr + rows.to(tl.int64) * out_stride
    tl.store(row_out, (offset_bits & 0xFF).to(tl.uint8), mask=in_rows)  # two little-endian bfloat16
    tl.store(row_out + 1, (offset_bits >> 8).to(tl.uint8), mask=in_rows)
    tl.store(row_out + 2, (scale_bits & 0xFF).to(tl.uint8), mask=in_rows)
    tl.store(row_out + 3, (scale_bits >> 8).to(tl.uint8), mask=in_rows)
    tl.store(row_out[:, None] + 4 + k[None, :], (q0 | (q1 << 4)).to(tl.uint8),
             mask=in_rows[:, None] & (k[None, :] < out_stride - 4))


@triton.jit
def _decode_kernel(payload_ptr, out_ptr, n, width, stride, PER_BYTE: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                   BLOCK_BYTES: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    k = tl.arange(0, BLOCK_BYTES)
    in_rows = rows < n
    row_in = payload_ptr + rows.to(tl.int64) * stride
    offset = _bf16_value(tl.load(row_in, mask=in_rows, other=0).to(tl.int32)
                         | (tl.load(row_in + 1, mask=in_rows, other=0).to(tl.int32) << 8))
    scale = _bf16_value(tl.load(row_in + 2, mask=in_rows, other=0).to(tl.int32)
                        | (tl.load(row_in + 3, mask=in_rows, other=0).to(tl.int32) << 8))
    byte = tl.load(row_in[:, None] + 4 + k[None, :], mask=in_rows[:, None] & (k[None, :] < stride - 4), other=0)
    byte = byte.to(tl.int32)
    row_out = out_ptr + rows[:, None].to(tl.int64) * width
    c0 = k[None, :] * PER_BYTE
    if PER_BYTE == 1:
        tl.store(row_out + c0, byte.to(tl.float32) * scale[:, None] + offset[:, None],
                 mask=in_rows[:, None] & (c0 < width))
    else:
        tl.store(row_out + c0, (byte & 0x0F).to(tl.float32) * scale[:, None] + offset[:, None],
                 mask=in_rows[:, None] & (c0 < width))
        tl.store(row_out + c0 + 1, (byte >> 4).to(tl.float32) * scale[:, None] + offset[:, None],
                 mask=in_rows[:, None] & (c0 + 1 < width))


def usable(width: int, dtype: torch.dtype) -> bool:
    """Whether the kernels take rows of ``width`` values of ``dtype``."""
    return dtype == torch.float32 and 0 < width <= MAX_WIDTH


def _blocks(packed_width: int) -> tuple[int, int]:
    block_bytes = triton.next_power_of_2(packed_width)
    return max(1, _ELEMENTS_PER_PROGRAM // block_bytes), block_bytes


def encode_int(rows: Tensor, bits: int, row_draws: Tensor, column_draws: Tensor, out: Tensor) -> Tensor:
    """Writes the payload of ``[n, f]`` float32 rows into ``out`` (``[n, 4 + packed width]``
    uint8) with the ``[n]`` and ``[f]`` int16 draws; returns the ``[n]`` uint8 flags of the rows
    whose range (max - min) is finite."""
    n, width = rows.shape
    per_byte = 1 if bits == 8 else 2
    block_rows, block_bytes = _blocks(out.size(1) - 4)
    ok = torch.empty(n, dtype=torch.uint8, device=rows.device)
    _encode_kernel[(triton.cdiv(n, block_rows),)](
        rows.contiguous(), row_draws.contiguous(), column_draws.contiguous(), out, ok, n, width, out.size(1),
        LEVELS=(1 << bits) - 1, PER_BYTE=per_byte, BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes)
    return ok


def decode_int(payload: Tensor, width: int, bits: int) -> Tensor:
    """The ``[n, width]`` float32 rows of a payload of :func:`encode_int`."""
    n = payload.size(0)
    out = torch.empty((n, width), dtype=torch.float32, device=payload.device)
    block_rows, block_bytes = _blocks(payload.size(1) - 4)
    _decode_kernel[(triton.cdiv(n, block_rows),)](
        payload.contiguous(), out, n, width, payload.size(1), PER_BYTE=1 if bits == 8 else 2,
        BLOCK_ROWS=block_rows, BLOCK_BYTES=block_bytes)
    return out
