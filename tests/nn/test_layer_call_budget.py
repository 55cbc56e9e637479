"""What a steady-state layer call on a shard may cost besides its arithmetic (issue 57): at most
so many distinct package functions entered, and no collective besides the halo's exchange
(``all_to_all_single``).

Counted, not timed (:class:`~pyg_sparsecomm.testing.call_profile.CallProfile`): real gloo runs at
P = 2 of ``distribute(GCNConv)``, ``distribute(SAGEConv)`` and ``distribute(GATConv)``, the third
forward on the shard (the first runs the first-use checks), every rank counted on its own
(``benchmarks/layer_call_profile.py`` prints the same numbers, and the functions entered).
The ceilings are the counts reached; issue 57's floor is 40 functions and no other collective.
"""
import pytest

from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.testing.call_profile import profile_layer_call

#: the most distinct package functions one steady-state call may enter, per layer
MOST_FUNCTIONS = {"GCNConv": 36, "SAGEConv": 33, "GATConv": 40}
#: collectives a call may issue besides the halo's exchange (issue 57's floor: none)
MOST_OTHER_COLLECTIVES = 0
HALO_EXCHANGE = "all_to_all_single"


@pytest.mark.parametrize("name", sorted(MOST_FUNCTIONS))
def test_a_steady_state_layer_call_stays_within_its_budget(name):
    for rank, counts in enumerate(launch(profile_layer_call, 2, name, True)):
        listing = "\n  ".join(counts["names"])
        assert counts["functions"] <= MOST_FUNCTIONS[name], \
            f"rank {rank}: {counts['functions']} package functions (at most {MOST_FUNCTIONS[name]}):\n  {listing}"
        others = {k: v for k, v in counts["collectives"].items() if k != HALO_EXCHANGE}
        assert sum(others.values()) <= MOST_OTHER_COLLECTIVES, f"rank {rank}: collectives besides the halo's: {others}"
        assert counts["collectives"].get(HALO_EXCHANGE, 0) >= 1, f"rank {rank}: no halo exchange counted"
