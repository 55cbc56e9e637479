"""Checkpoints of a parameter sharded by owner (issue 55, item 3): LightGCN's ``embedding.weight``.

The drill (``lightgcn_checkpoint_drill.py``) at P = 3 under a real ``torchrun --max-restarts=1`` and at
P = 2 in two launches, each with an equal and an unequal partition of the table's rows: a rank is
killed with SIGKILL while a checkpoint is written, the job starts again, the fresh processes build the model whole and
load before its first call, and the loss curve, the final table and Adam's moments must equal the
uninterrupted run's bitwise.  Before, ``checkpoint.save`` kept one rank's rows per key (DCP writes a
key every rank holds once): loading failed ("Size mismatch between saved torch.Size([35, 8]) and
current: torch.Size([70, 8])"), or with a table already cut and equal shares put one rank's rows
into every rank.  Then the checkpoints' files hold every rank's rows, a checkpoint loads at another
number of ranks by global row id (``allow_repartition=True``), and one of another layout is refused
on every rank, naming what differs.
"""
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from lightgcn_checkpoint_drill import KILL, PARTITIONS, build, drill, recipe_graph
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch_geometric.nn import LightGCN

from pyg_sparsecomm import checkpoint, distribute, shard
from pyg_sparsecomm.testing import launch

HERE = Path(__file__).resolve().parents[1]  # tests/
SIZES = (2, 3)


@pytest.fixture(scope="module")
def drills(tmp_path_factory) -> dict[int, Path]:
    """The output folder of the drill at each P: at P = 3 a real torchrun job restarted once; at P = 2 (to
    keep the suite short) two launches, the first killed as torchrun's first attempt is."""
    from torchrun_job import torchrun
    out = {P: tmp_path_factory.mktemp(f"lightgcn-drill-{P}") for P in SIZES}
    done = torchrun(HERE / "lightgcn_checkpoint_drill.py", 3, str(out[3]), max_restarts=1, timeout=400)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "exitcode: -9" in done.stderr, "no rank was killed: the job was not restarted"
    with pytest.raises(RuntimeError, match="rank [01] of 2 failed"):
        launch(drill, 2, out[2], 0)
    assert (out[2] / "killed-1").is_file()  # rank 1 was killed saving, and rank 0 stopped
    launch(drill, 2, out[2], 1)
    return out


def _rows(path: Path) -> dict:
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("P", SIZES)
@pytest.mark.parametrize("partition", PARTITIONS)
def test_a_killed_lightgcn_job_resumes_bitwise(drills, P, partition):
    result = json.loads((drills[P] / f"{partition}.json").read_text())
    assert result["resumed_from"] == KILL - 1  # the newest complete checkpoint: the killed one is ignored
    assert result["resumed"] == result["reference"]
    counts = result["counts"]
    assert len(set(counts)) == (1 if partition == "equal" else P), counts  # equal and unequal shard sizes
    for rank in range(P):
        final, reference = (_rows(drills[P] / f"{partition}-{kind}-{rank}.pt") for kind in ("final", "reference"))
        for key, value in reference.items():
            assert torch.equal(final[key], value), (rank, key)


@pytest.mark.parametrize("P", SIZES)
def test_the_checkpoint_files_hold_every_ranks_rows(drills, P, tmp_path):
    """The newest checkpoint, converted to one file as a user inspecting it would (DCP's format_utils)."""
    for partition in PARTITIONS:
        newest = checkpoint.complete_checkpoints(drills[P] / f"ckpt-{partition}")[-1]
        dcp_to_torch_save(newest, tmp_path / f"{partition}.pt")
        saved = torch.load(tmp_path / f"{partition}.pt", weights_only=False)
        assert "embedding.weight" not in saved["model"]  # no one rank's copy under the parameter's key
        ids = []
        for rank in range(P):
            final = _rows(drills[P] / f"{partition}-final-{rank}.pt")
            prefix = f"owner_rows/{rank}/embedding.weight"
            assert torch.equal(saved[f"{prefix}/ids"], final["ids"])
            assert torch.equal(saved[f"{prefix}/model"], final["weight"])
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(saved[f"{prefix}/optimizer/{moment}"], final[moment])
            ids.append(final["ids"])
        assert torch.equal(torch.cat(ids).sort().values, torch.arange(72))


def _load_after_a_call(rank, world_size, drill):
    """The equal partition's checkpoint loaded into a model whose table a call cut already (before, one
    rank's rows went silently into every rank's table: they had the same shape)."""
    data, _ = recipe_graph("equal", world_size)
    local = shard(data)
    model, optimizer = build(data.num_nodes)
    model.get_embedding(local.adj)
    point = checkpoint.load(drill / "ckpt-equal", model=model, shard=local, optimizer=optimizer)
    return point.step, model.embedding.weight.detach().clone(), optimizer.state[model.embedding.weight]["exp_avg"]


def test_a_table_already_cut_gets_its_own_rows(drills):
    for rank, (step, weight, exp_avg) in enumerate(launch(_load_after_a_call, 2, drills[2])):
        final = _rows(drills[2] / f"equal-final-{rank}.pt")
        assert step == 6 and torch.equal(weight, final["weight"]) and torch.equal(exp_avg, final["exp_avg"])


def _messages(call) -> str:
    try:
        call()
    except (ValueError, RuntimeError) as error:
        return str(error)
    return "no error"


def _elsewhere(rank, world_size, drill, scratch):
    """Every drill checkpoint of the other P, loaded here; the refusals of layouts that do not fit."""
    out = {}
    for partition in PARTITIONS:
        data, _ = recipe_graph(partition, world_size)
        local = shard(data)
        model, optimizer = build(data.num_nodes)
        ckpt = drill / f"ckpt-{partition}"
        out[f"{partition}/refused"] = _messages(lambda: checkpoint.load(ckpt, model=model, shard=local,
                                                                         optimizer=optimizer))
        point = checkpoint.load(ckpt, model=model, shard=local, optimizer=optimizer, allow_repartition=True)
        moments = optimizer.state[model.embedding.weight]
        out[partition] = {"point": (point.step, point.world_size, point.repartitioned), "ids": local.n_id,
                          "weight": model.embedding.weight.detach().clone(), "exp_avg": moments["exp_avg"].clone(),
                          "exp_avg_sq": moments["exp_avg_sq"].clone()}
    data, _ = recipe_graph("equal", world_size)
    local, ckpt = shard(data), drill / "ckpt-equal"
    wider, wider_optimizer = build(data.num_nodes, dim=16)
    out["another dim"] = _messages(lambda: checkpoint.load(ckpt, model=wider, shard=local, optimizer=wider_optimizer,
                                                           allow_repartition=True))
    plain = distribute(torch.nn.Linear(4, 4))
    out["another model"] = _messages(lambda: checkpoint.load(ckpt, model=plain, shard=local, allow_repartition=True))
    old = scratch / "format-1"
    if rank == 0:  # the newest checkpoint as the package wrote it before: no layout of the sharded table
        shutil.copytree(checkpoint.complete_checkpoints(ckpt)[-1], old / "step-000000006")
        info = json.loads((old / "step-000000006" / "checkpoint.json").read_text())
        info.pop("owner_rows")
        info["format_version"] = 1
        (old / "step-000000006" / "checkpoint.json").write_text(json.dumps(info))
    dist.barrier()
    model, optimizer = build(data.num_nodes)
    out["format 1"] = _messages(lambda: checkpoint.load(old, model=model, shard=local, optimizer=optimizer,
                                                        allow_repartition=True))
    return out


@pytest.mark.parametrize(("P", "saved_at"), [(2, 3), (4, 2)])
def test_a_lightgcn_checkpoint_loads_at_another_world_size_by_global_row_id(drills, P, saved_at, tmp_path):
    per_rank = launch(_elsewhere, P, drills[saved_at], tmp_path)
    for partition in PARTITIONS:
        saved = [_rows(drills[saved_at] / f"{partition}-final-{q}.pt") for q in range(saved_at)]
        by_id = {key: torch.cat([s[key] for s in saved])[torch.cat([s["ids"] for s in saved]).argsort()]
                 for key in ("weight", "exp_avg", "exp_avg_sq")}
        for out in per_rank:
            assert "saved on another partition" in out[f"{partition}/refused"]
            got = out[partition]
            assert got["point"] == (6, saved_at, True)
            for key, rows in by_id.items():
                assert torch.equal(got[key], rows[got["ids"]]), (partition, key)
    for out in per_rank:  # every rank raises the same refusal, naming the table and what differs
        assert "embedding.weight (sharded by owner)" in out["another dim"] and "'row_shape': [8]" in out["another dim"]
        assert "holds the parameters sharded by owner ['embedding.weight'], this model declares []" in \
            out["another model"]
        assert "kept one rank's rows of a parameter sharded by owner (embedding.weight)" in out["format 1"]


def test_a_single_process_lightgcn_checkpoint_round_trips(tmp_path):
    """P = 1 without a process group: the shard's order is another order of the rows; saved and loaded."""
    data, train = recipe_graph("equal", 1)
    local = shard(data)
    model, optimizer = build(data.num_nodes)
    pairs = torch.cat([train[:, :8], torch.stack([train[0, :8], train[1, 8:16]])], dim=1)
    pos, neg = model(local.adj, pairs).chunk(2)
    model.recommendation_loss(pos, neg, node_id=pairs.unique()).backward()
    optimizer.step()
    checkpoint.save(tmp_path, 1, model=model, shard=local, optimizer=optimizer)
    fresh, fresh_optimizer = build(data.num_nodes)
    checkpoint.load(tmp_path, model=fresh, shard=local, optimizer=fresh_optimizer)
    assert torch.equal(fresh.embedding.weight, model.embedding.weight)
    assert torch.equal(fresh_optimizer.state[fresh.embedding.weight]["exp_avg"],
                       optimizer.state[model.embedding.weight]["exp_avg"])
    with pytest.raises(ValueError, match=r"LightGCN\(num_nodes=80\) but the shard's graph has 72 nodes"):
        checkpoint.load(tmp_path, model=distribute(LightGCN(80, 8, num_layers=2)), shard=local)
