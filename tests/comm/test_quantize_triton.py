"""The CUDA kernels of the integer codecs (``comm/quantize_triton.py``), run on CPU by Triton's
interpreter (``TRITON_INTERPRET=1``, set before ``triton`` is imported: in a fresh process):

* encode: bitwise the payload of the torch path for the same draws (int8 / int4, odd and even
  widths, rows with a tiny or zero range, a row at float32's extremes);
* decode: bitwise the torch path's rows;
* the rows with a NaN, an infinity or an overflowing range are flagged, the others are not.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import torch
    from pyg_sparsecomm.comm import quantize as q
    from pyg_sparsecomm.comm import quantize_triton as qt

    def draws(n, width, seed):
        g = torch.Generator().manual_seed(seed)
        return q.random_int16((n, 1), g).view(-1), q.random_int16((1, width), g).view(-1)

    for precision, bits in (("int8", 8), ("int4", 4)):
        for width in (1, 2, 7, 64, 129):
            g = torch.Generator().manual_seed(width)
            x = torch.randn(45, width, generator=g) * 3 + torch.randn(45, 1, generator=g) * 100
            x[0] = 0.0                                   # scale 0: exact
            x[1] = 1.001                                 # a tiny grid
            x[2] = torch.linspace(-3e38, 3e38, width)    # float32's extremes (finite range only if width 1)
            x[3] *= 1e-30                                # gradient-sized
            rows = x if width == 1 else torch.cat([x[:2], x[3:]])
            ref = q.encode(rows, precision, torch.Generator().manual_seed(9))
            out = torch.empty_like(ref)
            ok = qt.encode_int(rows, bits, *draws(rows.size(0), width, 9), out)
            assert bool(ok.all()), (precision, width)
            assert torch.equal(out, ref), (precision, width, int((out != ref).sum()))
            assert torch.equal(qt.decode_int(ref, width, bits), q.decode(ref, width, precision)), (precision, width)
            bad = torch.randn(6, width, generator=g)
            bad[1, 0], bad[3, -1] = float("nan"), float("inf")
            if width > 1:
                bad[5, 0], bad[5, 1] = -3e38, 3e38       # finite values, overflowing range
            ok = qt.encode_int(bad, bits, *draws(6, width, 1), torch.empty(6, ref.size(1), dtype=torch.uint8))
            expected = [1, 0, 1, 0, 1, 0 if width > 1 else 1]
            assert ok.tolist() == expected, (precision, width, ok.tolist())
    print("ok")
""")


@pytest.mark.one_core  # one child process
def test_triton_kernels_match_the_torch_codec_bitwise_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONWARNINGS": "ignore::RuntimeWarning"}
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
