"""The row-set operations of ``sampling/row_sets.py`` (issue 56, item 3) equal torch's own on sparse and
dense sets (the dense ones go through a mask of the shard's rows instead of a sort)."""
import pytest
import torch

from pyg_sparsecomm.sampling.row_sets import unique_rows, unique_rows_inverse


@pytest.mark.parametrize("num_rows, size", [(1000, 5), (1000, 900), (100, 5000), (10, 0)])
def test_unique_rows_and_their_inverse_equal_torch_unique(num_rows, size):
    rows = torch.randint(0, num_rows, (size,), generator=torch.Generator().manual_seed(size))
    expected, inverse = torch.unique(rows, return_inverse=True)
    got, got_inverse = unique_rows_inverse(rows, num_rows)
    assert torch.equal(got, expected) and torch.equal(got_inverse, inverse)
    assert torch.equal(unique_rows(rows, num_rows), expected)
    assert torch.equal(unique_rows_inverse(rows)[0], expected)  # no shard size: torch's sort
