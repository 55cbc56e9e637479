"""The loaders' ``state_dict`` / ``load_state_dict`` (issue 28): a loader restored in the middle of
an epoch yields the rest of that epoch's batches, then the next epochs, as the loader it was
saved from; ``len`` counts what is left; saving again before iterating keeps the position."""
import pytest
from test_loader import make_graph

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import DistributedNeighborLoader, DistributedNodeSubsetLoader

LOADERS = {"neighbor": lambda local: DistributedNeighborLoader(local, [3, 2], batch_size=7, shuffle=True, seed=3,
                                                               input_nodes=local.train_mask, prefetch=1),
           "subset": lambda local: DistributedNodeSubsetLoader(local, batch_size=12, shuffle=True, seed=3,
                                                               prefetch=0)}


def _ids(batches):
    return [batch.n_id.tolist() for batch in batches]


@pytest.mark.parametrize("kind", list(LOADERS))
def test_a_restored_loader_continues_within_the_epoch(kind):
    local = shard(make_graph(1))
    saved = LOADERS[kind](local)
    epoch0 = _ids(saved)
    iterator = iter(saved)
    first = _ids(next(iterator) for _ in range(3))
    state = saved.state_dict()
    assert state == {"epoch": 1, "position": 3}
    rest, epoch2 = _ids(iterator), _ids(saved)

    restored = LOADERS[kind](local)
    restored.load_state_dict(state)
    assert restored.state_dict() == state        # a save right after loading keeps the position
    assert len(restored) == len(first) + len(rest) - 3
    assert _ids(restored) == rest and _ids(restored) == epoch2
    assert restored.state_dict() == {"epoch": 3, "position": 0}
    fresh = LOADERS[kind](local)
    assert _ids(fresh) == epoch0 and first + rest == _ids(fresh)   # the epochs, drawn whole


def test_load_state_dict_refuses_negative_positions():
    loader = LOADERS["subset"](shard(make_graph(1)))
    with pytest.raises(ValueError, match="epoch and position must be >= 0"):
        loader.load_state_dict({"epoch": 0, "position": -1})
