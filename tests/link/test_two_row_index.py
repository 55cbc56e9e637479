"""The pair indices read as PyG's ``edge_label_index`` tensor: ``[0]``/``[1]``, ``row, col = ...``
(a shard's ``PairIndex`` refused unpacking before: indexing with 2 raised ``TypeError``, not the
``IndexError`` unpacking stops at), ``size()``, ``numel()``, ``.to()``; other indices are refused by name."""
import numpy as np
import pytest
import torch

from pyg_sparsecomm.link import PairIndex
from pyg_sparsecomm.link.pair_index import PairEnd


def test_a_shards_pair_index_unpacks_as_row_col():
    ids = torch.tensor([[0, 1, 2], [3, 4, 5]])
    index = PairIndex(ids, np.zeros(6, dtype=np.int64))
    row, col = index
    assert isinstance(row, PairEnd) and isinstance(col, PairEnd)
    assert torch.equal(row.global_ids, ids[0]) and torch.equal(col.global_ids, ids[1])
    assert torch.equal(index[-1].global_ids, ids[1]) and len(index) == 2
    assert index.size() == ids.size() and index.size(1) == 3 and index.shape == ids.shape
    assert index.numel() == 6 and index.dim() == 2 and index.to("cpu") is index and index.cpu() is index
    with pytest.raises(TypeError, match="global_ids"):
        index[2]
