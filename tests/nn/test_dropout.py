"""NodeDropout: masks depend on global ids only, so every layout drops the same entries."""
import pytest
import torch

from pyg_sparsecomm import NodeDropout
from pyg_sparsecomm.nn.dropout import node_dropout


def test_masks_follow_global_ids_and_rate():
    x = torch.randn(3000, 32)
    full = node_dropout(x, 0.3, None, seed=5, step=1)
    perm = torch.randperm(3000)
    torch.testing.assert_close(node_dropout(x[perm], 0.3, perm, seed=5, step=1), full[perm])
    dropped = (full == 0).float().mean().item()
    assert abs(dropped - 0.3) < 0.01
    torch.testing.assert_close(full[full != 0], x[full != 0] / 0.7)
    assert not torch.equal(node_dropout(x, 0.3, None, seed=5, step=2), full)
    assert not torch.equal(node_dropout(x, 0.3, None, seed=6, step=1), full)


def test_module_steps_and_eval():
    drop = NodeDropout(0.5, seed=1)
    x = torch.ones(100, 8)
    a, b = drop(x), drop(x)
    assert drop.step == 2 and not torch.equal(a, b)
    drop.eval()
    assert torch.equal(drop(x), x) and drop.step == 2
    assert "p=0.5" in repr(drop)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        node_dropout(x, 1.0, None, 0, 1)
