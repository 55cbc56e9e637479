r"""The integer halo codecs on CPU as one compiled pass per direction (issue #24).

:func:`encode_int` does in one pass over each row what the torch ops of
:func:`~pyg_sparsecomm.comm.quantize.encode` do in several over the payload: the row's minimum
and maximum (and whether it is finite), the ``bfloat16`` offset (rounded down) and scale (rounded
up) by bits, then per value

.. math::
    q_{rc} = \min\bigl(L, \max\bigl(0, \lfloor (v_{rc} - o_r)\, s_r^{-1}
    + (a_r \oplus b_c)\, 2^{-16} + \tfrac12 + 2^{-17} \rfloor\bigr)\bigr)

with the same draws, packed behind the 4-byte header; it reads the rows where they are
(``x[index]``: the gather of the rows to send happens in the same pass).  :func:`decode_int`
writes :math:`o + s\, q`.  The arithmetic is the torch path's operation by operation (float32,
correctly rounded divisions, no fused multiply-add: ``-ffp-contract=off``), so the payloads and
decoded rows are bitwise those of the torch ops (tested); only the sign of a zero minimum or
maximum is normalised (to ``+0``) on both paths.

The kernel is a small C++ file without dependencies, compiled on first use with the system's
C++ compiler (``$CXX`` or ``c++``; about a second, no torch headers) into
``$TORCH_EXTENSIONS_DIR`` (default: ``~/.cache/torch_extensions``), keyed by a hash of source,
flags and compiler, and loaded with :mod:`ctypes` (which releases the GIL during the call).  On
x86-64 Linux with GCC it is built for AVX2 and baseline x86-64, chosen at load time.  Payloads of
at least two :data:`PARALLEL_GRAIN` values are split by rows over ``torch.get_num_threads()``
threads.  Without a compiler, or if the build fails, a :class:`RuntimeWarning` naming the reason
is issued once and the codecs use the torch ops: the same bytes, about 3x slower.

(Measured alternatives: ``torch.compile`` of the torch ops, ``dynamic=True``, compiles once per
process for 16 s and then codes 1.3 GB/s; :func:`torch.utils.cpp_extension.load_inline` compiles
the torch headers, about a minute.)
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor

SOURCE = r"""
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(CODEC_NO_CLONES)
#define CODEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CODEC_CLONES
#endif
// the helpers are inlined into each clone of the exported functions (compiled for its target)
#if defined(__GNUC__)
#define CODEC_INLINE inline __attribute__((always_inline))
#else
#define CODEC_INLINE inline
#endif

namespace {

inline uint32_t float_bits(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; }
inline float bits_float(uint32_t b) { float x; std::memcpy(&x, &b, 4); return x; }

// x rounded to bfloat16 towards -inf (down) or +inf, as its 16 bits (quantize._round_bf16_by_bits)
inline uint16_t bf16_bits(float x, bool down) {
  uint32_t bits = float_bits(x);
  uint32_t negative = bits >> 31;
  uint32_t away = (down ? negative : 1u - negative) * 0xFFFFu;
  return static_cast<uint16_t>(((away + bits) & 0xFFFF0000u) >> 16);
}

// a monotonic int32 key of a float's order (-0 < +0; NaNs beyond the infinities)
inline int32_t order_key(uint32_t bits) {
  return static_cast<int32_t>(bits ^ ((static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31)) >> 1));
}

inline float key_float(int32_t key) {
  return bits_float(static_cast<uint32_t>(key) ^ (static_cast<uint32_t>(key >> 31) >> 1));
}

// rows ahead of the encoder whose values a gathering encode prefetches
constexpr int64_t kPrefetchRows = 4;

// rows whose grids are computed together (vectorised across the rows: the divisions above all)
constexpr int64_t kBlockRows = 64;

// the row's minimum and maximum (as order keys: exact, vectorised) and whether a value is not finite
CODEC_INLINE void extremes(const float* x, int64_t width, float* lo, float* hi, uint32_t* non_finite) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(x);
  int32_t low = order_key(bits[0]), high = low;
  uint32_t bad = 0;
  for (int64_t c = 0; c < width; ++c) {
    int32_t key = order_key(bits[c]);
    low = key < low ? key : low;
    high = key > high ? key : high;
    bad |= static_cast<uint32_t>((bits[c] & 0x7F800000u) == 0x7F800000u);
  }
  *lo = key_float(low);
  *hi = key_float(high);
  *non_finite = bad;
}

// per row of a block: the bfloat16 offset (minimum rounded down) and scale ((max - o) / L rounded
// up), the inverse scale (0 for scale 0), and whether the range is finite (bad |= 1 otherwise)
CODEC_INLINE void grids(int64_t m, const float* lo, const float* hi, float levels, uint16_t* offset_bits,
                        uint16_t* scale_bits, float* offset, float* inv, uint32_t* bad) {
  for (int64_t r = 0; r < m; ++r) {
    // a zero extreme counts as +0 whichever zero the row holds (quantize.row_grid does the same)
    float low = lo[r] + 0.0f, high = hi[r] + 0.0f;
    bad[r] |= static_cast<uint32_t>((float_bits(high - low) & 0x7F800000u) == 0x7F800000u);
    uint16_t o = bf16_bits(low, true);
    offset_bits[r] = o;
    offset[r] = bits_float(static_cast<uint32_t>(o) << 16);
    uint16_t s = bf16_bits((high - offset[r]) / levels, false);
    scale_bits[r] = s;
    float scale = bits_float(static_cast<uint32_t>(s) << 16);
    inv[r] = scale > 0.0f ? 1.0f / scale : 0.0f;
  }
}

// the levels floor((v - o) / s + u) clamped to [0, L], u = (a_r ^ b_c + 2^15 + 1/2) 2^-16
CODEC_INLINE void levels(const float* x, int64_t width, float offset, float inv, int16_t row_draw,
                         const int16_t* column_draws, float top, int32_t* out) {
  for (int64_t c = 0; c < width; ++c) {
    float v = (x[c] - offset) * inv;
    v = v + static_cast<float>(static_cast<int16_t>(row_draw ^ column_draws[c])) * 0x1p-16f;
    v = v + (0.5f + 0x1p-17f);
    v = v > 0.0f ? v : 0.0f;
    v = v < top ? v : top;
    out[c] = static_cast<int32_t>(v);
  }
}

CODEC_INLINE void pack(const int32_t* q, int64_t width, int bits, uint8_t* out) {
  if (bits == 8) {
    for (int64_t c = 0; c < width; ++c) out[c] = static_cast<uint8_t>(q[c]);
    return;
  }
  int64_t pairs = width / 2;
  for (int64_t k = 0; k < pairs; ++k) out[k] = static_cast<uint8_t>(q[2 * k] | (q[2 * k + 1] << 4));
  if (width % 2) out[pairs] = static_cast<uint8_t>(q[width - 1]);
}

CODEC_INLINE void unpack_scale(const uint8_t* in, int64_t width, int bits, float scale, float offset, float* out) {
  if (bits == 8) {
    for (int64_t c = 0; c < width; ++c) out[c] = static_cast<float>(in[c]) * scale + offset;
    return;
  }
  int64_t pairs = width / 2;
  for (int64_t k = 0; k < pairs; ++k) {
    out[2 * k] = static_cast<float>(in[k] & 0x0F) * scale + offset;
    out[2 * k + 1] = static_cast<float>(in[k] >> 4) * scale + offset;
  }
  if (width % 2) out[width - 1] = static_cast<float>(in[pairs] & 0x0F) * scale + offset;
}

}  // namespace

extern "C" {

// Encodes rows x[index[i]] (index null: x[i]) of `width` float32 values (row stride x_stride) into
// out[i] (4 header bytes: offset and scale as native-order bfloat16, then the packed levels).
// Returns the number of rows whose range is not finite.
CODEC_CLONES int64_t codec_encode_f32(const float* x, int64_t x_stride, const int64_t* index, int64_t n,
                                      int64_t width, const int16_t* row_draws, const int16_t* column_draws, int bits,
                                      uint8_t* out, int64_t out_stride) {
  const float top = static_cast<float>((1 << bits) - 1);
  std::vector<int32_t> levels_of_row(width);
  int32_t* work = levels_of_row.data();
  float lo[kBlockRows], hi[kBlockRows], offset[kBlockRows], inv[kBlockRows];
  uint16_t offset_bits[kBlockRows], scale_bits[kBlockRows];
  uint32_t bad[kBlockRows];
  int64_t bad_rows = 0;
  auto row_at = [&](int64_t i) { return x + (index ? index[i] : i) * x_stride; };
  for (int64_t start = 0; start < n; start += kBlockRows) {
    int64_t m = n - start < kBlockRows ? n - start : kBlockRows;
    for (int64_t r = 0; r < m; ++r) {
      int64_t i = start + r;
      if (index && i + kPrefetchRows < n) {  // gathered rows: the hardware cannot guess the next ones
        const char* next = reinterpret_cast<const char*>(row_at(i + kPrefetchRows));
        for (int64_t b = 0; b < width * 4; b += 64) __builtin_prefetch(next + b);
      }
      extremes(row_at(i), width, lo + r, hi + r, bad + r);
    }
    grids(m, lo, hi, top, offset_bits, scale_bits, offset, inv, bad);
    for (int64_t r = 0; r < m; ++r) {
      int64_t i = start + r;
      uint8_t* dst = out + i * out_stride;
      bad_rows += bad[r] != 0;
      std::memcpy(dst, offset_bits + r, 2);
      std::memcpy(dst + 2, scale_bits + r, 2);
      levels(row_at(i), width, offset[r], inv[r], row_draws[i], column_draws, top, work);
      pack(work, width, bits, dst + 4);
    }
  }
  return bad_rows;
}

// The rows o + s q of a payload of codec_encode_f32 (row stride `stride` bytes) into out [n, width].
CODEC_CLONES void codec_decode_f32(const uint8_t* payload, int64_t stride, int64_t n, int64_t width, int bits,
                                   float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* src = payload + i * stride;
    uint16_t offset_bits, scale_bits;
    std::memcpy(&offset_bits, src, 2);
    std::memcpy(&scale_bits, src + 2, 2);
    float offset = bits_float(static_cast<uint32_t>(offset_bits) << 16);
    float scale = bits_float(static_cast<uint32_t>(scale_bits) << 16);
    unpack_scale(src + 4, width, bits, scale, offset, out + i * width);
  }
}

}
"""
#: flags of the build: float32 arithmetic exactly as written (no contraction into FMA, no errno), and
#: float bits read as integers (no strict aliasing)
FLAGS = ["-O3", "-shared", "-fPIC", "-std=c++17", "-ffp-contract=off", "-fno-math-errno",
         "-fno-strict-aliasing"]

#: values per thread below which a call stays on the calling thread
PARALLEL_GRAIN = 1 << 18

_LOCK = threading.Lock()
#: the loaded library, or the reason there is none (``None``: not tried yet)
_STATE: list = [None]
#: the thread pool of calls split over ``torch.get_num_threads()`` threads, and its size (:func:`in_threads`)
_POOL: list = [None, 0]
T = TypeVar("T")


def compiler() -> str | None:
    """The C++ compiler of the build: ``$CXX`` or ``c++``, ``None`` if it is not on the ``PATH``."""
    return shutil.which(os.environ.get("CXX", "c++"))


def _build_directory() -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        from torch.utils.cpp_extension import get_default_build_root
        root = get_default_build_root()
    return Path(root) / "pyg_sparsecomm_codec"


def _build() -> ctypes.CDLL:
    """Compiles :data:`SOURCE` (once per source, flags and compiler) and loads it; raises
    ``RuntimeError`` naming what failed."""
    cxx = compiler()
    if cxx is None:
        raise RuntimeError(f"no C++ compiler found ({os.environ.get('CXX', 'c++')!r} is not on the PATH; set CXX)")
    key = hashlib.sha256("\0".join([SOURCE, *FLAGS, os.path.realpath(cxx)]).encode()).hexdigest()[:16]
    directory = _build_directory()
    library = directory / f"codec_{key}.so"
    if not library.exists():
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            source = Path(tmp) / "codec.cpp"
            source.write_text(SOURCE)
            built = Path(tmp) / "codec.so"
            result = subprocess.run([cxx, *FLAGS, str(source), "-o", str(built)], capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"building it with {cxx} failed (exit code {result.returncode}): "
                                   f"{result.stderr.strip()[-2000:]}")
            os.replace(built, library)  # atomic: processes building at once each load a whole file
    lib = ctypes.CDLL(str(library))
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    lib.codec_encode_f32.argtypes = [pointer, size, pointer, size, size, pointer, pointer, ctypes.c_int, pointer,
                                     size]
    lib.codec_encode_f32.restype = size
    lib.codec_decode_f32.argtypes = [pointer, size, size, size, ctypes.c_int, pointer]
    lib.codec_decode_f32.restype = None
    return lib


def library() -> ctypes.CDLL | None:
    """The compiled codec, built on first use; ``None`` (after one ``RuntimeWarning`` naming
    the reason) where it cannot be built."""
    if _STATE[0] is None:
        with _LOCK:
            if _STATE[0] is None:
                try:
                    _STATE[0] = _build()
                except (OSError, RuntimeError) as error:
                    _STATE[0] = str(error)
                    warnings.warn(f"pyg_sparsecomm: the compiled CPU halo codec is unavailable ({error}); the int8/"
                                  f"int4 halo formats use the torch ops instead (the same bytes, about 3x slower)",
                                  RuntimeWarning, stacklevel=3)
    return _STATE[0] if isinstance(_STATE[0], ctypes.CDLL) else None


def usable(rows: Tensor) -> bool:
    """Whether :func:`encode_int` takes these rows: on the CPU, float32 (after the exact cast of
    float16 / bfloat16), and the compiled codec is available."""
    return (rows.device.type == "cpu" and rows.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and library() is not None)


def encode_int(rows: Tensor, bits: int, row_draws: Tensor, column_draws: Tensor, out: Tensor,
               index: Tensor | None = None) -> bool:
    """Writes the payload of the rows ``rows[index]`` (``index=None``: all of ``rows``) into
    ``out`` (``[n, 4 + packed width]`` uint8) with the ``[n]`` and ``[f]`` int16 draws; returns
    whether every row's range (max - min) is finite.

    Shapes:
        rows ``[N, f]`` float32 / float16 / bfloat16; index ``[n]`` int64 in ``[0, N)``.
    """
    lib = library()
    assert lib is not None, "encode_int without the compiled codec (check usable() first)"
    if rows.dtype != torch.float32 or rows.stride(1) != 1:  # the cast to float32 is exact
        rows = (rows if index is None else rows.index_select(0, index)).to(torch.float32).contiguous()
        index = None
    if index is not None:
        index = checked_index(index, rows.size(0))
    n, width = (rows.size(0) if index is None else index.numel()), rows.size(1)
    x, row_draws, column_draws = rows.data_ptr(), row_draws.contiguous(), column_draws.contiguous()

    def encode_span(start: int, stop: int) -> int:
        first = x + 4 * start * rows.stride(0) if index is None else x
        return lib.codec_encode_f32(first, rows.stride(0), None if index is None else index.data_ptr() + 8 * start,
                                    stop - start, width, row_draws.data_ptr() + 2 * start, column_draws.data_ptr(),
                                    bits, out.data_ptr() + start * out.stride(0), out.stride(0))

    return sum(in_threads(encode_span, n, width)) == 0


def checked_index(index: Tensor, size: int) -> Tensor:
    """``index`` as contiguous int64; IndexError (as :meth:`Tensor.index_select`'s) for an entry
    outside ``[0, size)``, which the kernel would read out of bounds."""
    index = index.to(torch.int64).contiguous()
    if index.numel() > 0:
        low, high = torch.stack(torch.aminmax(index)).numpy().tolist()  # host memory: nothing to wait for
        if low < 0 or high >= size:
            raise IndexError(f"encode: index out of range: entries in [{low}, {high}] for {size} rows")
    return index


def decode_int(payload: Tensor, width: int, bits: int) -> Tensor:
    """The ``[n, width]`` float32 rows of a payload of :func:`encode_int`."""
    lib = library()
    assert lib is not None, "decode_int without the compiled codec"
    payload = payload.contiguous()
    out = torch.empty((payload.size(0), width), dtype=torch.float32)
    stride = payload.stride(0)

    def decode_span(start: int, stop: int) -> None:
        lib.codec_decode_f32(payload.data_ptr() + start * stride, stride, stop - start, width, bits,
                             out.data_ptr() + 4 * start * width)

    in_threads(decode_span, payload.size(0), width)
    return out


def in_threads(run: Callable[[int, int], T], n: int, width: int) -> list[T]:
    """``run(start, stop)`` over consecutive spans of the ``n`` rows: on the calling thread, or
    on up to ``torch.get_num_threads()`` threads of at least :data:`PARALLEL_GRAIN` values each
    (the kernel releases the GIL; its result does not depend on the split)."""
    threads = max(1, min(torch.get_num_threads(), n * width // PARALLEL_GRAIN, n))
    if threads == 1:
        return [run(0, n)]
    step = -(-n // threads)
    spans = [(start, min(n, start + step)) for start in range(0, n, step)]
    with _LOCK:
        pool, workers = _POOL
        if pool is None or workers < len(spans):
            pool = ThreadPoolExecutor(max_workers=len(spans), thread_name_prefix="pyg_sparsecomm_codec")
            if _POOL[0] is not None:
                _POOL[0].shutdown(wait=False)
            _POOL[:] = [pool, len(spans)]
    return list(pool.map(lambda span: run(*span), spans))


def _forget_pool() -> None:
    _POOL[:] = [None, 0]  # a forked child has none of the parent's threads


os.register_at_fork(after_in_child=_forget_pool)
