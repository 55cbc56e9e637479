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


def _reference_masks(n_id, cols, p, seed, step):
    """The masks as the hash is defined: ``mix(lo ^ mix(hi ^ salt))`` of each element id, compared in float64."""
    from pyg_sparsecomm.nn.dropout import _M32, _mix32
    ids = n_id.view(-1, 1) * cols + torch.arange(cols)
    salt = _mix32(torch.tensor([(seed * 0x9E3779B1 + step) & _M32]))
    h = _mix32((ids & _M32) ^ _mix32(((ids >> 32) & _M32) ^ salt))
    return (h.to(torch.float64) / 2.0 ** 32) >= p


@pytest.mark.parametrize("p", [0.5, 0.1234567, 1e-9, 0.999])
def test_masks_are_the_defined_hash_for_small_and_huge_ids(p):
    """The in-place path for ids below 2**32 and the general one (ids of a graph with more elements)
    both give the defined masks: a layout's ids on either side of 2**32 drop what one process drops."""
    x = torch.randn(700, 5) + 10.0  # no zero entries: a zero in the output is a dropped element
    for n_id in (torch.randperm(2000)[:700], torch.randint(2 ** 31, 2 ** 33, (700,)),
                 torch.full((700,), 2 ** 32 // 5 - 1), torch.arange(700) + (2 ** 32 // 5 - 350)):
        kept = node_dropout(x, p, n_id, seed=3, step=7) != 0
        assert torch.equal(kept, _reference_masks(n_id, 5, p, seed=3, step=7)), n_id[:3]
