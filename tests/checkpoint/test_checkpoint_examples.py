"""The examples' ``--checkpoint-dir``: a run stopped after a checkpoint and started again continues
as the uninterrupted run, bitwise (losses and accuracies), at P = 2 in one launch: train_gcn.py
(``NodeDropout``), train_gnn.py (GraphSAGE with torch dropout) and train_minibatch.py resumed in
the middle of an epoch; a checkpoint of that 2-rank run is refused at P = 1 without
``--allow-repartition``, naming the option.  (Restarts by torchrun itself: tests/checkpoint/test_checkpoint.py;
an elastic job resuming at another world size with the option: tests/launch/test_elastic.py.)"""
import copy
import functools
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from pyg_sparsecomm import checkpoint
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.testing import launch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_gcn  # noqa: E402
import train_gnn  # noqa: E402
import train_minibatch  # noqa: E402

DETERMINISTIC = ("loss", "batch_loss", "train_acc", "val_acc", "test_acc", "batches")
FULL_GRAPH = {"gcn": (train_gcn, ["--exact-dropout", "--hidden", "8", "--no-progress"]),
              "gnn": (train_gnn, ["--model", "sage", "--hidden", "16"])}


def _run(example, argv, rank, world_size):
    history = example.run(example.parse_args(argv), rank, world_size, verbose=False)
    return {k: v for k, v in history.items() if k in DETERMINISTIC}


def _drop_newest_checkpoint(directory: Path) -> int:
    """Removes the newest checkpoint (as if the job had died before writing it); the step of the one left."""
    if dist.get_rank() == 0:
        newest = checkpoint.complete_checkpoints(directory)[-1]
        for file in newest.iterdir():
            file.unlink()
        newest.rmdir()
    dist.barrier()
    return int(checkpoint.complete_checkpoints(directory)[-1].name.split("-")[1])


def _worker(rank, world_size, tmp):
    graph = functools.cache(load_dataset)  # the same SBM graph for all nine runs, generated once
    for example in (train_gcn, train_gnn, train_minibatch):
        example.load_dataset = lambda *args, **kwargs: copy.copy(graph(*args, **kwargs))
    out = {}
    for name, (example, argv) in FULL_GRAPH.items():
        ckpt = ["--checkpoint-dir", f"{tmp}/{name}", "--checkpoint-every", "1"]
        reference = _run(example, [*argv, "--epochs", "4"], rank, world_size)
        _run(example, [*argv, "--epochs", "2", *ckpt], rank, world_size)        # stops after epoch 2
        out[name] = reference, _run(example, [*argv, "--epochs", "4", *ckpt], rank, world_size)
    argv = ["--hidden", "16", "--epochs", "2"]
    ckpt = ["--checkpoint-dir", f"{tmp}/minibatch", "--checkpoint-every", "2"]
    reference = _run(train_minibatch, argv, rank, world_size)
    _run(train_minibatch, [*argv, *ckpt], rank, world_size)
    left = _drop_newest_checkpoint(Path(tmp) / "minibatch")  # the end of epoch 2: resume within it
    out["minibatch"] = reference, _run(train_minibatch, [*argv, *ckpt], rank, world_size), left
    return out


def test_examples_resume_bitwise(tmp_path):
    result = launch(_worker, 2, str(tmp_path))[0]
    for name in FULL_GRAPH:
        reference, resumed = result[name]
        assert len(reference["loss"]) == 4 and resumed == reference, name
    reference, resumed, left = result["minibatch"]
    first, second = reference["batches"]
    assert first < left < first + second, (left, reference["batches"])   # a checkpoint within epoch 2
    assert resumed == reference
    with pytest.raises(RuntimeError, match=r"(?s)saved on another partition.*pass --allow-repartition"):
        launch(_resume_at_one_rank, 1, str(tmp_path / "gcn"))


def _resume_at_one_rank(rank, world_size, directory):
    example, argv = FULL_GRAPH["gcn"]
    return _run(example, [*argv, "--epochs", "5", "--checkpoint-dir", directory], rank, world_size)
