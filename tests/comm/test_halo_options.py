"""HaloOptions: validation of the opt-in inexact exchanges and refusal by algorithm name."""
import pytest

from pyg_sparsecomm import DistributedGCNConv
from pyg_sparsecomm.algorithms.base import check_options
from pyg_sparsecomm.comm.halo_options import ExchangeSlots, HaloOptions


def test_defaults_are_exact_and_same_follows_precision():
    assert HaloOptions().exact and not HaloOptions().compressed
    options = HaloOptions.from_arguments("int8")
    assert (options.precision, options.grad_precision) == ("int8", "int8") and not options.exact
    assert HaloOptions.from_arguments("bf16", None).grad_precision is None
    assert HaloOptions.from_arguments(None, "fp16").compressed
    assert HaloOptions.from_arguments(staleness=1).describe() == "staleness=1"


@pytest.mark.parametrize("kwargs, message", [
    (dict(halo_precision="int3"), "halo_precision='int3' is not a halo precision"),
    (dict(halo_grad_precision="float8"), "halo_grad_precision='float8'"),
    (dict(staleness=2), "staleness must be 0"),
    (dict(staleness=True), "staleness must be 0"),
    (dict(stale_smoothing=0.9), "needs staleness=1"),
    (dict(staleness=1, stale_smoothing=1.0), r"stale_smoothing must be in \[0, 1\)"),
])
def test_bad_options_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HaloOptions.from_arguments(**kwargs)
    with pytest.raises(ValueError, match=message):
        DistributedGCNConv(4, 4, **kwargs)


def test_oblivious_refuses_inexact_halos_by_name():
    with pytest.raises(ValueError, match="algorithm='oblivious' does not support halo_precision"):
        check_options("oblivious", HaloOptions(precision="int8"))
    with pytest.raises(ValueError, match="algorithm='oblivious' does not support staleness=1"):
        check_options("oblivious", HaloOptions(staleness=1))
    check_options("oblivious", HaloOptions())


def test_slots_are_per_layer_and_not_pickled():
    import pickle
    a, b = DistributedGCNConv(4, 4, staleness=1), DistributedGCNConv(4, 4, staleness=1)
    assert a.exchange_slots is not b.exchange_slots
    a.exchange_slots["x"] = object()
    assert "x" not in pickle.loads(pickle.dumps(a)).exchange_slots
    slots = ExchangeSlots()
    slots["k"] = 1
    slots.clear()
    assert "k" not in slots
