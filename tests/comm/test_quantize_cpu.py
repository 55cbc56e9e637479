"""The compiled CPU pass of the integer codecs (``comm/quantize_cpu.py``, issue #24), single process:

* encode and decode are bitwise the torch ops' (odd and even widths, float32 / float16 / bfloat16
  rows, zero, constant, tiny and huge rows, rows whose extreme is a signed zero);
* ``index`` encodes the gathered rows: bitwise ``encode(rows[index])`` on both paths, any row
  strides, an index out of range is an ``IndexError``, a non-finite row is refused only when sent;
* payloads split over threads are the one-thread payloads; the baseline (non-AVX2) build codes
  the same bytes too;
* without a compiler (or when the build fails) one ``RuntimeWarning`` names the reason and the
  torch ops code the same bytes; the build is cached per source in ``$TORCH_EXTENSIONS_DIR``.
"""
import warnings

import pytest
import torch

from pyg_sparsecomm.comm import quantize, quantize_cpu
from pyg_sparsecomm.comm.quantize import decode, encode

pytestmark = pytest.mark.skipif(quantize_cpu.library() is None, reason="no C++ compiler to build the codec with")


def _torch_ops(monkeypatch):
    """The codecs use the torch ops from now on (the compiled pass is never asked)."""
    monkeypatch.setattr(quantize_cpu, "usable", lambda rows: False)


def _rows(n, width, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, width, generator=g) * torch.logspace(-6, 4, n).unsqueeze(1)
    x = x + torch.randn(n, 1, generator=g) * 3
    x[0] = 0.0                                  # scale 0: exact
    x[1] = 1.001                                # constant, a tiny grid
    x[2] *= 1e-30                               # gradient-sized
    x[3] = x[3] * (1e2 if dtype == torch.float16 else 1e30)  # huge, finite range
    x[4] = 0.0
    x[4, ::2] = -0.0                            # the minimum and maximum are zeros of both signs
    x[5] = x[5].abs()
    x[5, 0], x[5, -1] = -0.0, 0.0               # minimum a signed zero
    x[6] = -x[6].abs()
    x[6, 0] = -0.0                              # maximum a signed zero
    return x.to(dtype)


@pytest.mark.parametrize("precision", ["int8", "int4"])
@pytest.mark.parametrize("width", [1, 2, 3, 7, 64, 129, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_compiled_pass_is_bitwise_the_torch_ops(monkeypatch, precision, width, dtype):
    x = _rows(40, width, seed=width, dtype=dtype)
    compiled = encode(x, precision, torch.Generator().manual_seed(7))
    decoded = decode(compiled, width, precision)
    _torch_ops(monkeypatch)
    reference = encode(x, precision, torch.Generator().manual_seed(7))
    assert torch.equal(compiled, reference), int((compiled != reference).sum())
    assert torch.equal(decoded.view(torch.int32), decode(reference, width, precision).view(torch.int32))


@pytest.mark.parametrize("precision", ["int8", "int4", "bf16"])
@pytest.mark.parametrize("compiled", [True, False])
def test_index_encodes_the_gathered_rows(monkeypatch, precision, compiled):
    if not compiled:
        _torch_ops(monkeypatch)
    x = _rows(50, 33, seed=3)
    index = torch.tensor([7, 0, 49, 7, 12, 3, 3, 5])
    # row strides: contiguous, column-major, rows of a wider tensor, every other column
    for rows in (x, x.t().contiguous().t(), torch.cat([x, x], dim=1)[:, :33], torch.cat([x, x], dim=1)[:, ::2]):
        gathered = encode(rows, precision, torch.Generator().manual_seed(2), index=index)
        assert torch.equal(gathered, encode(rows[index], precision, torch.Generator().manual_seed(2)))
    assert encode(x, precision, index=index[:0]).shape == (0, quantize.payload_row_bytes(33, precision))
    with pytest.raises(IndexError):
        encode(x, precision, index=torch.tensor([0, 50]))
    with pytest.raises(IndexError):
        encode(x, precision, index=torch.tensor([-1]))


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_non_finite_row_is_refused_only_when_it_is_sent(precision):
    x = _rows(10, 16, seed=1)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[4, 3] = bad
        encode(y, precision, index=torch.tensor([0, 5, 9]))
        with pytest.raises(ValueError, match=f"halo precision {precision}: a row has a non-finite value"):
            encode(y, precision, index=torch.tensor([0, 4]))
    y = x.clone()
    y[2, 0], y[2, 1] = -3e38, 3e38  # finite values, a range that overflows float32
    with pytest.raises(ValueError, match="overflows"):
        encode(y, precision)


def test_the_baseline_build_is_bitwise_the_torch_ops_too(monkeypatch, tmp_path):
    """The kernel built for the compiler's default target only (on x86-64 GCC the library holds an
    AVX2 and a baseline clone; this machine runs the AVX2 one in the other tests)."""
    x = _rows(40, 129, seed=8)
    _torch_ops(monkeypatch)
    reference = {p: encode(x, p, torch.Generator().manual_seed(4)) for p in ("int8", "int4")}
    decoded = {p: decode(reference[p], 129, p) for p in reference}
    monkeypatch.undo()
    _fresh_build(monkeypatch, tmp_path)
    monkeypatch.setattr(quantize_cpu, "FLAGS", [*quantize_cpu.FLAGS, "-DCODEC_NO_CLONES"])
    assert quantize_cpu.library() is not None
    for p in reference:
        assert torch.equal(encode(x, p, torch.Generator().manual_seed(4)), reference[p])
        assert torch.equal(decode(reference[p], 129, p).view(torch.int32), decoded[p].view(torch.int32))


def _fresh_build(monkeypatch, tmp_path, cxx=None):
    monkeypatch.setattr(quantize_cpu, "_STATE", [None])
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    if cxx is not None:
        monkeypatch.setenv("CXX", cxx)


@pytest.mark.parametrize("cxx, reason", [("/nonexistent/c++", "no C\\+\\+ compiler found"),
                                         ("false", "building it with .*false failed")])
def test_without_a_compiler_one_warning_names_the_reason_and_the_bytes_stay(monkeypatch, tmp_path, cxx, reason):
    x = _rows(30, 64, seed=5)
    expected = {p: encode(x, p, torch.Generator().manual_seed(1)) for p in ("int8", "int4")}
    decoded = decode(expected["int4"], 64, "int4")
    _fresh_build(monkeypatch, tmp_path, cxx)
    with pytest.warns(RuntimeWarning, match=f"compiled CPU halo codec is unavailable \\({reason}.*torch ops"):
        assert torch.equal(encode(x, "int8", torch.Generator().manual_seed(1)), expected["int8"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the later calls are silent
        assert torch.equal(encode(x, "int4", torch.Generator().manual_seed(1)), expected["int4"])
        assert torch.equal(decode(expected["int4"], 64, "int4"), decoded)
    assert quantize_cpu.library() is None


def test_the_build_is_cached_per_source(monkeypatch, tmp_path):
    _fresh_build(monkeypatch, tmp_path)
    assert quantize_cpu.library() is not None
    built = list((tmp_path / "pyg_sparsecomm_codec").glob("codec_*.so"))
    assert len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(quantize_cpu, "_STATE", [None])  # a new process
    assert quantize_cpu.library() is not None
    assert [p.stat().st_mtime_ns for p in built] == [stamp]  # loaded, not rebuilt


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_payloads_split_over_threads_are_the_one_thread_payloads(monkeypatch, precision):
    x = _rows(101, 64, seed=4)
    index = torch.randint(0, 101, (77,), generator=torch.Generator().manual_seed(0))
    one = encode(x, precision, torch.Generator().manual_seed(3), index=index)
    decoded = decode(one, 64, precision)
    threads = torch.get_num_threads()
    monkeypatch.setattr(quantize_cpu, "PARALLEL_GRAIN", 64 * 10)  # 10 rows per thread at least
    try:
        torch.set_num_threads(3)
        spans = []
        run = quantize_cpu.in_threads
        monkeypatch.setattr(quantize_cpu, "in_threads", lambda f, n, w: spans.append(n) or run(f, n, w))
        assert torch.equal(encode(x, precision, torch.Generator().manual_seed(3), index=index), one)
        assert torch.equal(decode(one, 64, precision), decoded)
        assert torch.get_num_threads() == 3 and spans == [77, 77]
        assert quantize_cpu._POOL[1] >= 3  # a pool of three threads did it
    finally:
        torch.set_num_threads(threads)
