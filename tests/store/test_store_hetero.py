"""``save_partition``/``load_shard`` of a partitioned ``HeteroData``: the loaded shard equals
``shard(data)`` (same tensors, one shared plan per source type), a model trains the same on it,
and a corrupt or half-written directory refuses to load by name."""
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parents[1] / "nn"))
from test_hetero_models import make_graph  # noqa: E402
from test_hetero_training import build, train  # noqa: E402

from pyg_sparsecomm import SparsityAwarePartitioner, distribute, distributed_loss, load_shard, save_partition, shard  # noqa: E402,E501
from pyg_sparsecomm.comm.grid import ProcessGrid  # noqa: E402
from pyg_sparsecomm.graph.datasets import igbh_like  # noqa: E402
from pyg_sparsecomm.testing import launch  # noqa: E402


def partitioned(num_parts):
    data = igbh_like(90, num_institutes=2, featureless=("institute",), isolated=0.1, seed=4)
    cites = ("paper", "cites", "paper")
    data[cites].edge_attr = torch.randn(data[cites].edge_index.size(1), 3)
    data[cites].edge_weight = torch.rand(data[cites].edge_index.size(1)) + 0.5
    return SparsityAwarePartitioner(num_parts, method="random", seed=1)(data)


def assert_same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b) and all(assert_same(x, y) is None for x, y in zip(a, b, strict=True))
    else:
        assert a == b


def assert_equal_shards(loaded, local):
    assert loaded.node_types == local.node_types and loaded.edge_types == local.edge_types
    for t in local.node_types:
        assert set(loaded[t].keys()) == set(local[t].keys()), t
        for key in local[t].keys():
            assert_same(loaded[t][key], local[t][key])
    plans = {}
    for et in local.edge_types:
        assert set(loaded[et].keys()) == set(local[et].keys()), et
        for key in set(local[et].keys()) - {"adj"}:
            assert_same(loaded[et][key], local[et][key])
        a, b = loaded[et].adj, local[et].adj
        assert type(a) is type(b) and a.edge_type == b.edge_type and a.num_rows == b.num_rows
        for name in ("rowptr", "col", "value"):
            assert_same(getattr(a, name), getattr(b, name))
        for name, value in vars(b.plan).items():
            assert_same(getattr(a.plan, name), value)
        assert plans.setdefault(et[0], a.plan) is a.plan  # one plan object per source type, as shard() makes


def test_loaded_shard_equals_the_in_memory_shard_at_every_world_size(tmp_path):
    for num_parts in (1, 2, 3, 4):
        data = partitioned(num_parts)
        save_partition(data, tmp_path / str(num_parts))
        for rank in range(num_parts):
            local = shard(data, rank=rank, world_size=num_parts)
            assert_equal_shards(load_shard(tmp_path / str(num_parts), rank=rank, world_size=num_parts), local)
    assert sum(load_shard(tmp_path / "4", rank=r, world_size=4)["institute"].num_nodes for r in range(4)) == 2


def test_corrupt_half_written_and_misused_directories_refuse_to_load(tmp_path):
    data = partitioned(3)
    root = tmp_path / "part"
    save_partition(data, root)
    with pytest.raises(ValueError, match="has 3 parts but the world size is 2"):
        load_shard(root, rank=0, world_size=2)
    with pytest.raises(ValueError, match="is of a HeteroData, which has no 1.5D layout"):
        load_shard(root, grid=ProcessGrid(2, world_size=8, rank=0))
    with pytest.raises(ValueError, match="source does not describe data: num_parts=2 given"):
        save_partition(data, tmp_path / "other", source={"num_parts": 2})
    part = root / "part-1.pt"
    part.write_bytes(part.read_bytes()[:-7])  # half-written
    with pytest.raises(ValueError, match=r"checksum mismatch for .*part-1.pt: the file is corrupt"):
        load_shard(root, rank=1, world_size=3)
    (root / "part-2.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing part file .*part-2.pt"):
        load_shard(root, rank=2, world_size=3)
    (root / "manifest.json").write_text('{"format_version": 2')
    with pytest.raises(ValueError, match="corrupt partition manifest"):
        load_shard(root, rank=0, world_size=3)
    unpartitioned = igbh_like(30, seed=0)
    with pytest.raises(ValueError, match="have no partition: apply SparsityAwarePartitioner"):
        save_partition(unpartitioned, tmp_path / "none")


def _train_both(rank, world_size, root):
    data = SparsityAwarePartitioner(world_size, method="metis", seed=1)(make_graph())
    curves = []
    for local in (shard(data), load_shard(root)):
        model = distribute(build(data))
        n_id = {t: local[t].n_id for t in local.node_types}
        curves.append(train(model, local.x_dict, local.adj_dict, n_id, local["paper"].y,
                            local["paper"].train_mask, lambda out, y: distributed_loss(F.cross_entropy, out, y)))
    return curves


def test_training_on_a_loaded_shard_equals_training_on_the_in_memory_shard(tmp_path):
    save_partition(SparsityAwarePartitioner(3, method="metis", seed=1)(make_graph()), tmp_path)
    for in_memory, loaded in launch(_train_both, 3, str(tmp_path)):
        assert loaded == in_memory and len(set(in_memory)) > 1
