"""Checkpoint and resume under torchrun's restarts (issue 28).

One real ``torchrun --max-restarts=1`` job (``checkpoint_drill.py``, fixture ``drill`` in conftest.py,
shared with test_attempts.py) runs every configuration:
rank 1 dies once while a checkpoint is written, torchrun restarts the job, every run resumes
from its newest complete checkpoint, and its loss curve must equal the uninterrupted run's
*bitwise*: exact halos with torch dropout (the ranks' random streams), int8 halos (the rounding
streams), ``staleness=1`` (the stale pipelines), ``NodeDropout`` (its step counter) and mini-batch
training killed mid-epoch (the loader's epoch and position).  Each of these fails when its state
is left out of the checkpoint (checked once by hand, see the report of issue 28).  Then the
checkpoints are resumed at another world size, and the single-process API is checked for the
rest (refusals, atomic directories, pruning).
"""
import json
import os
from pathlib import Path

import pytest
import torch
from checkpoint_drill import CONFIGS, KILL, build, drill_graph
from torch_geometric.data import Data

from pyg_sparsecomm import checkpoint, partition_and_shard, shard
from pyg_sparsecomm.checkpoint import directory as layout
from pyg_sparsecomm.testing import launch

HERE = Path(__file__).resolve().parents[1]  # tests/


@pytest.mark.parametrize("name", list(CONFIGS))
def test_resumed_loss_curve_equals_the_uninterrupted_one_bitwise(drill, name):
    result = json.loads((drill / f"{name}.json").read_text())
    kind = "minibatch" if name == "minibatch" else "full"
    assert result["resumed_from"] == KILL[kind] - 1  # the newest complete checkpoint
    assert result["resumed"] == result["reference"], (result["resumed"], result["reference"])


def test_a_checkpoint_half_written_when_a_rank_died_is_not_resumed(drill):
    result = json.loads((drill / "minibatch.json").read_text())   # the configuration rank 1 died in
    assert result["partial_files"] > 0    # the dead attempt left files of step KILL behind ...
    assert result["resumed_from"] == KILL["minibatch"] - 1          # ... and they were not read
    assert not list((drill / "ckpt-minibatch").glob(".partial-*"))  # removed by the next save


def _resume_elsewhere(rank, world_size, drill):
    """Every run's final checkpoint, loaded at another world size (and partition)."""
    local = partition_and_shard(drill_graph(), method="metis")
    out = {}
    for name, config in CONFIGS.items():
        model, optimizer, scheduler, loader = build(config, local)
        objects = {"model": model, "shard": local, "optimizer": optimizer, "scheduler": scheduler, "loader": loader}
        with pytest.raises(ValueError, match="saved on another partition .*allow_repartition=True"):
            checkpoint.load(drill / f"ckpt-{name}", **objects)
        point = checkpoint.load(drill / f"ckpt-{name}", allow_repartition=True, **objects)
        out[name] = (point.step, point.world_size, point.repartitioned, model.state_dict(), optimizer.state_dict(),
                     scheduler.state_dict(), None if loader is None else loader.state_dict())
    return out


def test_resuming_at_another_world_size_continues_from_the_same_parameters(drill):
    per_rank = launch(_resume_elsewhere, 3, drill)
    for name in CONFIGS:
        final = torch.load(drill / f"{name}-final.pt", weights_only=False)
        steps = len(json.loads((drill / f"{name}.json").read_text())["reference"])
        for step, world_size, repartitioned, model, optimizer, scheduler, loader in (r[name] for r in per_rank):
            assert (step, world_size, repartitioned) == (steps, 2, True)
            assert model.keys() == final["model"].keys()
            for key, value in final["model"].items():
                assert torch.equal(model[key], value) if isinstance(value, torch.Tensor) else model[key] == value
            for index, moments in final["optimizer"]["state"].items():
                for key, value in moments.items():
                    assert torch.equal(optimizer["state"][index][key], value), (name, index, key)
            assert scheduler["last_epoch"] > 0
            if name == "minibatch":  # the batches are the whole graph's: the position carries over
                assert loader["epoch"] == 1 and loader["position"] > 0


def _graph(seed: int) -> Data:
    gen = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(30, 8, generator=gen), edge_index=torch.randint(0, 30, (2, 90), generator=gen),
                y=torch.randint(0, 4, (30,), generator=gen), train_mask=torch.ones(30, dtype=torch.bool),
                num_nodes=30, part=torch.zeros(30, dtype=torch.long), num_parts=1)


def _linear():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    return model, torch.optim.Adam(model.parameters(), lr=0.1)


def test_single_process_save_load_refusals_and_pruning(tmp_path):
    local = shard(_graph(1))
    model, optimizer = _linear()
    assert checkpoint.load(tmp_path, model=model, shard=local, optimizer=optimizer) is None  # a fresh start
    for step in (1, 2, 3):
        model(local.x).sum().backward()
        optimizer.step()
        checkpoint.save(tmp_path, step, model=model, shard=local, optimizer=optimizer, extra={"step": step}, keep=2)
    assert [p.name for p in checkpoint.complete_checkpoints(tmp_path)] == ["step-000000002", "step-000000003"]
    (tmp_path / "step-000000009").mkdir()  # no checkpoint.json: not complete, never read
    (tmp_path / ".partial-000000010-dead").mkdir()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    model, optimizer = _linear()
    point = checkpoint.load(tmp_path, model=model, shard=local, optimizer=optimizer)
    assert (point.step, point.extra, point.repartitioned) == (3, {"step": 3}, False)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in expected.items())
    other = shard(_graph(2))  # another graph: another partition fingerprint
    with pytest.raises(ValueError, match="saved on another partition"):
        checkpoint.load(tmp_path, model=model, shard=other, optimizer=optimizer)
    bare = tmp_path / "bare"
    checkpoint.save(bare, 1, model=model, shard=local)  # no optimizer
    with pytest.raises(ValueError, match="holds no optimizer state"):
        checkpoint.load(bare, model=model, shard=local, optimizer=optimizer)
    with pytest.raises(ValueError, match="a loader was passed to load"):
        checkpoint.load(tmp_path, model=model, shard=local, loader=torch.nn.Identity())
    (tmp_path / "step-000000001").mkdir()
    (tmp_path / "step-000000001" / ".metadata").touch()  # issue 45: what a prune killed midway left
    checkpoint.save(tmp_path, 3, model=model, shard=local, optimizer=optimizer, keep=None)  # the same step again
    assert not list(tmp_path.glob(".partial-*")) and (tmp_path / "step-000000003" / layout.INFO).is_file()
    assert os.path.isdir(tmp_path / "step-000000009")  # not ours to remove
    assert not (tmp_path / "step-000000001").exists()  # DCP's files only: ours, pruned


def test_a_prune_killed_midway_is_finished_by_the_next_save(tmp_path, monkeypatch):
    local = shard(_graph(1))
    model, _ = _linear()
    for step in (1, 2):
        checkpoint.save(tmp_path, step, model=model, shard=local, keep=1)
    real_rmtree = layout.shutil.rmtree

    def killed(path, *args, **kwargs):  # deletes checkpoint.json (and maybe more), then the process dies
        (Path(path) / layout.INFO).unlink(missing_ok=True)
        raise KeyboardInterrupt
    monkeypatch.setattr(layout.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, 3, model=model, shard=local, keep=1)
    monkeypatch.setattr(layout.shutil, "rmtree", real_rmtree)
    checkpoint.save(tmp_path, 4, model=model, shard=local, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000004"]
