"""``lookup_sorted``: the one lookup of global ids in an ascending id tensor, and the two callers that
indexed an empty tensor before it (a rank holding no items, a saved rank holding no rows)."""
import torch

from pyg_sparsecomm.graph.sorted_lookup import lookup_sorted
from pyg_sparsecomm.nn.lightgcn import _owned_exclusions


def test_positions_and_matches():
    keys = torch.tensor([2, 5, 9])
    at, found = lookup_sorted(keys, torch.tensor([9, 0, 5, 10, 2, 6]))
    assert found.tolist() == [True, False, True, False, True, False]
    assert at[found].tolist() == [2, 1, 0]
    assert int(at.min()) >= 0 and int(at.max()) < keys.numel()  # in range where not found too


def test_no_keys():
    at, found = lookup_sorted(torch.zeros(0, dtype=torch.long), torch.tensor([3, 1]))
    assert at.tolist() == [0, 0] and found.tolist() == [False, False]


def test_exclusions_on_a_rank_without_items():
    exclude = torch.tensor([[0, 1], [4, 7]])
    out = _owned_exclusions(exclude, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert out.shape == (2, 0)
    dst = torch.tensor([7, 3, 4])  # positions 0, 1, 2 of dst_index; the rank owns positions 0 and 2
    out = _owned_exclusions(exclude, dst, torch.tensor([0, 2]))
    assert sorted(out.t().tolist()) == [[0, 2], [1, 0]]
