"""``python -m pyg_sparsecomm.porting.record SCRIPT [ARGS]``: runs ``SCRIPT`` unmodified, as
``python SCRIPT ARGS`` would (also under ``torchrun``), and records what it trains.

Before the script runs: torch's, Python's and NumPy's random states are seeded alike, dropout is
the identity (:mod:`.switch_off`) and, on the single-process side, PyG's ``NeighborLoader`` draws
the package's batches (:mod:`.stand_ins`).  While it runs, one JSON line per event goes to
``$PYG_SPARSECOMM_CHECK_DIR/<role>-rank<r>.jsonl``:

* ``{"kind": "loss", "step": k, "value": v, "where": "file:line"}``: a loss passed to
  ``backward()`` (``Tensor.backward`` or ``torch.autograd.backward``) before optimizer step
  ``k + 1``;
* ``{"kind": "step", "step": k, "params": {name: [sha1, max_abs, shape]}}``: every parameter
  of the optimizer after its ``k``-th ``step()`` (``k = 0``: before the first), named by its
  qualified name in the largest module holding it; the values go to
  ``<role>-rank<r>-step<k>.pt``;
* ``{"kind": "grads", "step": 0, "params": {...}}``: their gradients before the first step (zeros
  where ``.grad`` is ``None``), the values in ``<role>-rank<r>-grads0.pt``;
* ``{"kind": "error", "type": ..., "message": ..., "where": "file:line", "code": ...}``: the
  script raised (``where``: its own line the traceback passes last);
* ``{"kind": "end", "steps": k, "stopped": bool, "switched_off": {...}, "notes": [...],
  "unreproducible": [...], "first_step_only": [...]}`` (the last: the script stops after its first
  step, see :mod:`.stand_ins`).

``$PYG_SPARSECOMM_CHECK_STEPS`` stops the script after that many optimizer steps (an exception
the recorder catches), ``$PYG_SPARSECOMM_CHECK_SEED`` is the seed (default ``0``),
``$PYG_SPARSECOMM_CHECK_ROLE`` the file prefix (``original`` gets the stand-ins).
"""
import gc
import hashlib
import json
import os
import random
import runpy
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import stand_ins, switch_off


class StopRecording(BaseException):
    """Raised after the last optimizer step to record (a ``BaseException``: the script's own
    ``except Exception`` does not catch it)."""


def _frame_in(script: str, frames: list[traceback.FrameSummary]) -> traceback.FrameSummary | None:
    """The last of ``frames`` in ``script`` (else the last one)."""
    mine = [f for f in frames if os.path.abspath(f.filename) == script]
    return mine[-1] if mine else (frames[-1] if frames else None)


class Recorder:
    """The hooks' state: the record file, the optimizer steps made, the parameters' names."""

    def __init__(self, script: str, directory: Path, role: str, rank: int, steps: int | None) -> None:
        self.script, self.directory, self.prefix = script, directory, f"{role}-rank{rank}"
        self.file = open(directory / f"{self.prefix}.jsonl", "w")  # noqa: SIM115 -- open while the script runs
        self.steps, self.limit = 0, steps
        self.names: dict[int, str] = {}
        self.rows: dict[int, torch.Tensor] = {}  # id -> global row ids of a parameter sharded by owner
        self.in_backward = False

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def where(self) -> str:
        frame = _frame_in(self.script, traceback.extract_stack()[:-2])
        return f"{os.path.basename(frame.filename)}:{frame.lineno}" if frame else "?"

    def loss(self, tensor: Any) -> None:
        value = float(tensor.detach().double().sum()) if torch.is_tensor(tensor) else float("nan")
        self.write({"kind": "loss", "step": self.steps, "value": value, "where": self.where(),
                    "numel": int(tensor.numel()) if torch.is_tensor(tensor) else 0})

    def parameters(self, optimizer: torch.optim.Optimizer, gradients: bool = False) -> None:
        """Saves every parameter of ``optimizer`` (``gradients``: their ``.grad``, zeros where
        ``None``) and writes their digests."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if any(id(p) not in self.names for p in params):
            found_names, found_rows = parameter_names(params)
            self.names.update(found_names)
            self.rows.update(found_rows)
        values = {self.names[id(p)]: _gradient(p) if gradients else p.detach().cpu().clone() for p in params}
        rows = {self.names[id(p)]: self.rows[id(p)] for p in params if id(p) in self.rows}
        kind = "grads" if gradients else "step"
        torch.save({"values": values, "rows": rows}, self.directory / f"{self.prefix}-{kind}{self.steps}.pt")
        digests = {name: [hashlib.sha1(v.contiguous().view(-1).float().numpy().tobytes()).hexdigest()[:16],
                          float(v.abs().max()) if v.numel() else 0.0, list(v.shape), name in rows]
                   for name, v in values.items()}
        self.write({"kind": kind, "step": self.steps, "params": digests})

    def before_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if self.steps == 0 and not getattr(self, "initial_written", False):
            self.initial_written = True
            self.parameters(optimizer)
            self.parameters(optimizer, gradients=True)  # the first step's: a check of one step compares them

    def after_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.steps += 1
        self.parameters(optimizer)
        limit = 1 if stand_ins.FIRST_STEP_ONLY else self.limit  # one fixed batch: its step is all that compares
        if limit is not None and self.steps >= limit:
            raise StopRecording


def _gradient(p: torch.Tensor) -> torch.Tensor:
    return p.grad.detach().cpu().clone() if p.grad is not None else torch.zeros_like(p, device="cpu")


def parameter_names(params: list[torch.Tensor]) -> tuple[dict[int, str], dict[int, torch.Tensor]]:
    """id -> qualified name of each of ``params`` in the largest module tree holding it (ties: the
    shortest name; ``param<i>`` where no module holds it); and id -> global row ids of each one
    sharded by owner (a module's table whose rows are ``module._sparsecomm_rows.n_id``, as
    ``distribute(LightGCN)``'s)."""
    wanted = {id(p) for p in params}
    with warnings.catch_warnings():  # isinstance on deprecated module proxies warns
        warnings.simplefilter("ignore")
        modules = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
    children = {id(c) for m in modules for c in m.modules() if c is not m}
    best: dict[int, tuple[int, int, str]] = {}
    rows: dict[int, torch.Tensor] = {}
    for module in modules:
        named = list(module.named_parameters())
        sharded = getattr(module, "_sparsecomm_rows", None) if hasattr(module, "owner_sharded_rows") else None
        for name, p in named:
            if id(p) in wanted and sharded is not None and p.dim() and p.size(0) == sharded.n_id.numel():
                rows[id(p)] = sharded.n_id.detach().cpu().clone()
            if id(p) in wanted and id(module) not in children:
                rank = (-len(named), len(name), name)
                if id(p) not in best or rank < best[id(p)]:
                    best[id(p)] = rank
    names = {id(p): best[id(p)][2] if id(p) in best else f"param{i}" for i, p in enumerate(params)}
    return names, rows


def _install(recorder: Recorder) -> None:
    """``backward()`` and every optimizer's ``step()`` report to ``recorder``."""
    tensor_backward, autograd_backward = torch.Tensor.backward, torch.autograd.backward

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        return _recorded(lambda: tensor_backward(self, *args, **kwargs), self)

    def any_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        return _recorded(lambda: autograd_backward(tensors, *args, **kwargs), tensors)

    def _recorded(call: Any, loss: Any) -> Any:
        if recorder.in_backward:
            return call()
        recorder.in_backward = True
        try:
            for tensor in (loss if isinstance(loss, (list, tuple)) else [loss]):
                recorder.loss(tensor)
            return call()
        finally:
            recorder.in_backward = False

    torch.Tensor.backward = backward  # type: ignore[method-assign]
    torch.autograd.backward = any_backward
    register_optimizer_step_pre_hook(recorder.before_step)
    register_optimizer_step_post_hook(recorder.after_step)


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:  # pragma: no cover -- torch needs NumPy here
        pass


def _run(recorder: Recorder, argv: list[str]) -> tuple[bool, int]:
    """Runs the script; ``(stopped after the last step, exit status)``."""
    sys.argv = [recorder.script, *argv]
    sys.path.insert(0, os.path.dirname(recorder.script))
    try:
        runpy.run_path(recorder.script, run_name="__main__")
    except StopRecording:
        return True, 0
    except SystemExit as exit_:
        if exit_.code in (0, None):
            return False, 0
        recorder.write({"kind": "error", "type": "SystemExit", "message": str(exit_.code), "where": "?", "code": ""})
        return False, 1
    except BaseException as error:  # noqa: BLE001 -- reported, with the script's line
        frame = _frame_in(recorder.script, traceback.extract_tb(error.__traceback__))
        recorder.write({"kind": "error", "type": type(error).__name__, "message": str(error),
                        "where": f"{frame.filename}:{frame.lineno}" if frame else "?",
                        "code": (frame.line or "") if frame else "", "traceback": traceback.format_exc()})
        return False, 1
    return False, 0


def main(argv: list[str] | None = None) -> int:
    """Records ``SCRIPT ARGS`` (``argv``, default ``sys.argv[1:]``); returns the script's status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m pyg_sparsecomm.porting.record SCRIPT [ARGS]", file=sys.stderr)
        return 2
    directory = Path(os.environ.get("PYG_SPARSECOMM_CHECK_DIR", "."))
    role = os.environ.get("PYG_SPARSECOMM_CHECK_ROLE", "port")
    steps = os.environ.get("PYG_SPARSECOMM_CHECK_STEPS")
    recorder = Recorder(os.path.abspath(argv[0]), directory, role, int(os.environ.get("RANK", "0")),
                        int(steps) if steps else None)
    switched = switch_off.switch_off_dropout()
    if role == "original":
        stand_ins.install()
    _install(recorder)
    _seed(int(os.environ.get("PYG_SPARSECOMM_CHECK_SEED", "0")))
    stopped, status = _run(recorder, argv[1:])
    recorder.write({"kind": "end", "steps": recorder.steps, "stopped": stopped, "switched_off": switched,
                    "dropout_calls": dict(switch_off.CALLS), "notes": stand_ins.REPLACED[:1],
                    "unreproducible": sorted(set(stand_ins.UNREPRODUCIBLE)),
                    "first_step_only": sorted(set(stand_ins.FIRST_STEP_ONLY))})
    recorder.file.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
