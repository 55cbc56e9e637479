"""The row codecs of the compressed halo exchange (``pyg_sparsecomm.comm.quantize``), single process:
round-trip error bounds, unbiasedness of stochastic rounding, int4 packing, byte counts, bad input."""
import math

import pytest
import torch

from pyg_sparsecomm.comm.quantize import (
    PRECISIONS,
    add_rounding_noise_,
    bytes_as,
    decode,
    encode,
    payload_row_bytes,
    random_int16,
    row_grid,
)

BITS = {"int8": 8, "int4": 4}


def _rows(n=64, f=33, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g, dtype=dtype) * torch.logspace(-6, 4, n, dtype=dtype).unsqueeze(1)
    return x + torch.randn(n, 1, generator=g, dtype=dtype) * 3  # rows with offsets, some |min| >> range


def _header(payload):
    return bytes_as(payload[:, :4], torch.bfloat16).float().unbind(1)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("width", [0, 1, 2, 7, 64])
def test_payload_shape_is_payload_row_bytes(precision, width):
    x = torch.randn(5, width)
    payload = encode(x, precision)
    assert payload.dtype == torch.uint8 and payload.shape == (5, payload_row_bytes(width, precision))
    assert decode(payload, width, precision).shape == (5, width)
    assert encode(x[:0], precision).shape == (0, payload_row_bytes(width, precision))
    assert decode(encode(x[:0], precision), width, precision).shape == (0, width)


def test_payload_row_bytes_formula():
    assert payload_row_bytes(64, None, 4) == 256 and payload_row_bytes(64, None, 8) == 512
    assert payload_row_bytes(64, "bf16") == payload_row_bytes(64, "fp16") == 128
    assert payload_row_bytes(64, "int8") == 68 and payload_row_bytes(64, "int4") == 36
    assert payload_row_bytes(7, "int4") == 8 and payload_row_bytes(1, "int4") == 5
    assert payload_row_bytes(0, "int8") == 0
    assert payload_row_bytes(64, "int8") / payload_row_bytes(64, None) <= 0.27  # the target


@pytest.mark.parametrize("precision,unit", [("bf16", 2.0 ** -8), ("fp16", 2.0 ** -11)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_formats_round_to_nearest(precision, unit, dtype):
    x = torch.randn(50, 17, dtype=dtype) * 100
    y = decode(encode(x, precision), 17, precision, dtype)
    assert y.dtype == dtype
    assert ((y - x).abs() <= unit * x.abs()).all()
    target = torch.bfloat16 if precision == "bf16" else torch.float16
    assert torch.equal(y, x.to(target).to(dtype))  # exactly the cast (what the layer tests rely on)


@pytest.mark.parametrize("precision", ["int8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_integer_round_trip_error_is_below_the_row_scale(precision, dtype):
    x = _rows(dtype=dtype)
    payload = encode(x, precision, torch.Generator().manual_seed(1))
    offset, scale = _header(payload)
    y = decode(payload, x.size(1), precision, dtype)
    levels = (1 << BITS[precision]) - 1
    err = (y - x).abs()
    eps = 4 * torch.finfo(dtype).eps * x.abs().amax(dim=1, keepdim=True)  # the decode's own arithmetic
    assert (err <= scale.to(dtype).unsqueeze(1) + eps).all()
    low, high = x.amin(dim=1), x.amax(dim=1)
    assert (offset.to(dtype) <= low).all()
    bound = (1 + 2 ** -7) * (high - low + 2 ** -7 * low.abs()) / levels  # the documented scale bound
    assert (scale.to(dtype) <= bound).all()
    assert (scale.to(dtype) * levels + offset.to(dtype) >= high - eps.squeeze(1)).all()  # grid covers row


def _unbiased(draws, x, scale, offset, z=6.0):
    """Every element's mean over the draws is within ``z`` standard errors of ``x``: a draw is
    ``o + s q`` with ``q`` Bernoulli between the two grid points around ``x`` (``p`` = the fraction),
    so the standard error of the mean is ``s sqrt(p (1 - p) / N)``."""
    v = (x - offset.unsqueeze(1)) / scale.unsqueeze(1)
    p = v - v.floor()
    sem = scale.unsqueeze(1) * (p * (1 - p) / draws.size(0)).sqrt()
    slack = 1e-5 * scale.unsqueeze(1)  # float arithmetic of v and of the decode
    # the mean in float64: a float32 sum of 20,000 values near 1 is off by more than 0.01 s of a small s
    return bool(((draws.double().mean(dim=0) - x.double()).abs() <= z * sem + slack).all())


def _draws(x, precision, n, seed=0):
    """``n`` independent encodings of every row of ``x``, decoded: ``[n, rows, f]``."""
    repeated = x.unsqueeze(0).expand(n, -1, -1).reshape(-1, x.size(1))
    payload = encode(repeated, precision, torch.Generator().manual_seed(seed))
    offset, scale = _header(payload[: x.size(0)])
    return decode(payload, x.size(1), precision).view(n, *x.shape), offset, scale


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_stochastic_rounding_is_unbiased(precision):
    x = _rows(n=8, f=40, seed=3)
    draws, offset, scale = _draws(x, precision, 20000)
    assert _unbiased(draws, x, scale, offset)


def test_the_unbiasedness_criterion_rejects_round_to_nearest():
    """On a row whose every value sits 0.3 of a step above a grid point, round-to-nearest is off by
    0.3 s everywhere; the criterion of the test above must notice (else it could not fail)."""
    step, levels = 0.0625, 255
    x = torch.cat([torch.tensor([0.0, levels * step]), (torch.arange(1, 60) + 0.3) * step]).unsqueeze(0)
    draws, offset, scale = _draws(x, "int8", 20000)
    assert float(offset) == 0.0 and float(scale) == step  # the crafted grid is the stored one
    assert _unbiased(draws, x, scale, offset)
    nearest = offset + scale * torch.round((x - offset) / scale)
    assert not _unbiased(nearest.expand(20000, -1, -1), x, scale, offset)
    assert not _unbiased(torch.floor((x - offset) / scale).expand(20000, -1, -1) * scale, x, scale, offset)


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 31])
def test_int4_packs_two_values_per_byte(width):
    g = torch.Generator().manual_seed(width)
    levels = torch.randint(0, 16, (6, width), generator=g)
    levels[:, 0] = 0
    if width > 1:
        levels[:, 1] = 15  # min 0 and max 15: offset 0, scale 1, every value on the grid
    x = levels.float() * 0.5 - 2.0
    payload = encode(x, "int4")
    assert payload.shape == (6, 4 + math.ceil(width / 2))
    assert torch.equal(decode(payload, width, "int4"), x)  # on-grid values are exact (u < 1)
    if width > 1:
        assert torch.equal(payload[:, 4], (levels[:, 0] | (levels[:, 1] << 4)).to(torch.uint8))
    if width % 2:
        assert torch.equal(payload[:, -1] >> 4, torch.zeros(6, dtype=torch.uint8))  # the pad nibble


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_and_zero_rows(precision):
    x = torch.stack([torch.zeros(9), torch.full((9,), 0.5), torch.full((9,), -3.0)])
    assert torch.equal(decode(encode(x, precision), 9, precision), x)  # bf16-representable: exact
    c = torch.full((3, 9), 1.001)  # not a bf16 number: int formats round on a tiny grid
    y = decode(encode(c, precision), 9, precision)
    if precision in BITS:
        _, scale = row_grid(c, BITS[precision])
        assert ((y - c).abs() <= scale.float().unsqueeze(1)).all() and (scale < 1e-4).all()


def test_the_same_generator_seed_gives_the_same_payload():
    x = _rows()
    a = encode(x, "int8", torch.Generator().manual_seed(7))
    b = encode(x, "int8", torch.Generator().manual_seed(7))
    c = encode(x, "int8", torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_tiny_and_huge_rows_keep_their_range():
    """bf16 scale/offset: gradient-sized rows do not underflow, 1e30-sized rows do not overflow."""
    for magnitude in (1e-30, 1e-9, 1e30):
        x = torch.randn(4, 16) * magnitude
        payload = encode(x, "int8")
        _, scale = _header(payload)
        assert ((decode(payload, 16, "int8") - x).abs() <= scale.unsqueeze(1)).all()
        assert (scale > 0).all() and torch.isfinite(scale).all()


@pytest.mark.parametrize("precision", PRECISIONS)
def test_non_finite_rows_are_refused(precision):
    for bad in (float("nan"), float("inf")):
        x = torch.randn(3, 4)
        x[1, 2] = bad
        with pytest.raises(ValueError, match="finite"):
            encode(x, precision)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="fp16.*range.*bf16"):
        encode(torch.tensor([[1e5]]), "fp16")
    with pytest.raises(ValueError, match="halo_precision='int2'.*int8"):
        payload_row_bytes(4, "int2")
    with pytest.raises(ValueError, match=r"\[n, 8\] uint8"):
        decode(torch.zeros(2, 7, dtype=torch.uint8), 4, "int8")
    with pytest.raises(ValueError, match="floating-point"):
        encode(torch.ones(2, 3, dtype=torch.long), "int8")
    with pytest.raises(ValueError, match="exact"):
        encode(torch.ones(2, 3), None)  # type: ignore[arg-type]


def test_the_16_bit_rounding_noise_is_unbiased_to_2_to_the_minus_17_of_a_step():
    """Exhaustively over all 2^16 draws: E[floor(v + u)] - v is within 2^-17 (the documented bound)
    for fractions across [0, 1), in the float32 arithmetic of the encoder."""
    v = (torch.arange(1001, dtype=torch.float32) / 1000 + 3).unsqueeze(1)  # values 3 ... 4 in steps
    draws = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).unsqueeze(0)
    noisy = add_rounding_noise_(v.expand(-1, draws.size(1)).clone(), draws)
    bias = noisy.floor().double().mean(dim=1) - v.squeeze(1).double()
    assert bias.abs().max() <= 2 ** -17 + 1e-9
    assert (noisy - v).min() > 0 and (noisy - v).max() < 1  # u in (0, 1)


def test_random_int16_uses_all_sixteen_bits_uniformly():
    draws = random_int16((1000, 257), torch.Generator().manual_seed(0)).to(torch.int32)
    assert draws.shape == (1000, 257) and int(draws.min()) < -32000 and int(draws.max()) > 32000
    bits = torch.stack([(draws >> b) & 1 for b in range(16)]).float().mean(dim=(1, 2))
    assert ((bits - 0.5).abs() < 0.01).all()  # 257,000 draws: the standard error is 0.001
