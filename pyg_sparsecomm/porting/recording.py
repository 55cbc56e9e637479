"""One run's recording (:mod:`.record` writes it): its losses, parameter digests, error and end,
read back from ``<role>-rank<r>.jsonl`` and the parameter files beside it."""
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass
class Recording:
    """What one process of a check recorded.

    Attributes:
        label (str): ``"original"`` or ``"port rank r"``.
        path (pathlib.Path): the record file.
        losses (dict[int, list[dict]], optional): step ``k`` -> the losses passed to ``backward()`` before
            step ``k + 1``. (default: none)
        steps (dict[int, dict], optional): step ``k`` -> parameter name -> ``[sha1, max_abs, shape,
            sharded]`` after step ``k``. (default: none)
        grads (dict[int, dict], optional): step ``k`` -> the same of the gradients step ``k + 1`` takes
            (recorded for the first step). (default: none)
        error (dict, optional): the script's error (type, message, where, code). (default: :obj:`None`)
        end (dict, optional): the end record (``None``: the process was killed). (default: :obj:`None`)
        exists (bool, optional): whether the record file was written. (default: :obj:`True`)
    """
    label: str
    path: Path
    losses: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    steps: dict[int, dict[str, list[Any]]] = field(default_factory=dict)
    grads: dict[int, dict[str, list[Any]]] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    exists: bool = True

    @classmethod
    def read(cls, directory: Path, role: str, rank: int, label: str) -> "Recording":
        path = directory / f"{role}-rank{rank}.jsonl"
        out = cls(label, path)
        if not path.exists():
            out.exists = False
            return out
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            kind = record["kind"]
            if kind == "loss":
                out.losses.setdefault(record["step"], []).append(record)
            elif kind == "step":
                out.steps[record["step"]] = record["params"]
            elif kind == "grads":
                out.grads[record["step"]] = record["params"]
            elif kind == "error":
                out.error = record
            elif kind == "end":
                out.end = record
        return out

    @property
    def num_steps(self) -> int:
        """Optimizer steps made (the initial parameters are step 0)."""
        return max(self.steps, default=0)

    def parameters(self, step: int, kind: str = "step") -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The parameters after ``step`` (``0``: before the first step; ``kind="grads"``: the gradients
        step ``step + 1`` takes), and the global row ids of those sharded by owner."""
        saved = torch.load(self.path.with_name(f"{self.path.stem}-{kind}{step}.pt"), weights_only=True)
        return saved["values"], saved["rows"]
