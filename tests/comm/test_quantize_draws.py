"""The fast paths of the integer codecs (``comm/quantize.py``): row and column draws, blocks,
bit-level ``bfloat16`` rounding.

* the rounding errors of one encode are unbiased and pairwise uncorrelated: sums along rows,
  columns and of everything have the variance of independent rounding (the criterion rejects
  draws shared along a row);
* blocked encoding (the CPU path) gives bitwise the payload of one pass, at any width and dtype;
* rounding ``float32`` to ``bfloat16`` by bits equals the cast + ``nextafter`` reference on special
  values and random bit patterns.
"""
import pytest
import torch

from pyg_sparsecomm.comm import quantize
from pyg_sparsecomm.comm.quantize import decode, encode


def _fractional_rows(n, f, seed):
    """Rows on the grid ``{0, ..., 255} * 2^-4`` plus a random fraction of a step per value
    (the first two columns pin the grid: offset 0, scale 2^-4)."""
    g = torch.Generator().manual_seed(seed)
    step = 2.0 ** -4
    x = (torch.randint(1, 254, (n, f), generator=g) + torch.rand(n, f, generator=g)) * step
    x[:, 0], x[:, 1] = 0.0, 255 * step
    return x, step


def _errors(x, step, draws_of, encodes):
    """``[encodes, n, f]`` rounding errors in steps, one independent encode each."""
    return torch.stack([(draws_of(x, k) - x) / step for k in range(encodes)]).double()


def _sums_have_independent_variance(errors, x, step, tolerance=0.15):
    """The variance of every row sum, column sum and of the total equals the sum of the values'
    variances ``p (1 - p)`` (``p``: the fraction of a step): what pairwise uncorrelated errors give.
    The first two columns (the grid's ends, exact) are left out."""
    p = (x[:, 2:] / step).double()
    p = p - p.floor()
    var = p * (1 - p)
    errors = errors[:, :, 2:]
    for dims in ((2,), (1,), (1, 2)):
        observed = errors.sum(dim=dims).var(dim=0)
        expected = var.sum(dim=tuple(d - 1 for d in dims))
        if ((observed / expected - 1).abs() > tolerance).any():
            return False
    return True


def test_rounding_errors_are_pairwise_uncorrelated_within_an_encode():
    x, step = _fractional_rows(12, 16, seed=0)
    gen = torch.Generator().manual_seed(1)
    errors = _errors(x, step, lambda x, k: decode(encode(x, "int8", gen), x.size(1), "int8"), 3000)
    assert torch.equal(errors[:, :, :2], torch.zeros_like(errors[:, :, :2]))  # the grid's ends are exact
    assert errors.mean(dim=0).abs().max() < 6 * 0.5 / 3000 ** 0.5  # unbiased
    assert _sums_have_independent_variance(errors, x, step)


def test_the_variance_criterion_rejects_draws_shared_along_a_row():
    """One draw per row (no column draws) rounds a row's values together: its row sums' variance
    is several times the independent one, which the criterion above must notice."""
    x, step = _fractional_rows(12, 16, seed=0)
    gen = torch.Generator().manual_seed(1)

    def shared(x, k):
        u = (torch.randint(0, 2 ** 16, (x.size(0), 1), generator=gen) + 0.5) * 2.0 ** -16
        return ((x / step + u).floor()) * step

    errors = _errors(x, step, shared, 3000)
    assert errors.mean(dim=0).abs().max() < 6 * 0.5 / 3000 ** 0.5  # unbiased too ...
    assert not _sums_have_independent_variance(errors, x, step)  # ... but correlated


@pytest.mark.parametrize("precision", ["int8", "int4"])
@pytest.mark.parametrize("width", [1, 3, 7, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_blocked_encoding_is_bitwise_one_pass(monkeypatch, precision, width, dtype):
    x = (torch.randn(203, width, generator=torch.Generator().manual_seed(width)) * 3).to(dtype)
    monkeypatch.setattr(quantize, "BLOCK_ELEMENTS", 1 << 40)
    whole = encode(x, precision, torch.Generator().manual_seed(5))
    for block_elements in (1, 8 * width + 3, 64 * width):
        monkeypatch.setattr(quantize, "BLOCK_ELEMENTS", block_elements)
        assert quantize.block_rows(width, x.device) < x.size(0)
        assert torch.equal(encode(x, precision, torch.Generator().manual_seed(5)), whole)


def _float32_specials():
    finfo = torch.finfo(torch.float32)
    values = [0.0, -0.0, 1.0, -1.0, 1.001, -1.001, 3.0e38, -3.0e38, finfo.max, -finfo.max, finfo.tiny,
              -finfo.tiny, 1e-40, -1e-40, 1e-45, -1e-45, float(torch.finfo(torch.bfloat16).max), 2.0 ** -133]
    patterns = torch.randint(-2 ** 31, 2 ** 31, (200_000,), generator=torch.Generator().manual_seed(0),
                             dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([torch.tensor(values), patterns[torch.isfinite(patterns)]])


@pytest.mark.parametrize("down", [True, False])
def test_bfloat16_rounding_by_bits_equals_the_cast_reference(down):
    x = _float32_specials()
    fast, reference = quantize._round_bf16_by_bits(x, down), quantize._round_bf16_by_cast(x, down)
    assert fast.dtype == torch.bfloat16
    assert torch.equal(fast.view(torch.int16), reference.view(torch.int16))
    assert ((fast.float() <= x) if down else (fast.float() >= x)).all()
