r"""The verdict of a check: the single process's recording against the port's ranks', step by
step, and the port's ranks against each other.

A loss agrees when :math:`|a - b| \le \text{atol} + \text{rtol} \cdot |a|` (``a`` the single
process's); a parameter tensor when :math:`\|a - b\|_2 \le \text{atol} + \text{rtol} \cdot \|a\|_2`
(norm-wise: Adam turns the rounding of a near-zero gradient, another summation order across the
ranks, into a step of up to ``lr`` times that rounding over ``eps``, in single entries).  A
parameter sharded by owner (LightGCN's table) is compared row by row with the original's rows of
the same global ids.  Ranks are held to the same tolerance against rank 0: a parameter the port replicates
must be equal on every rank.
"""
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .recording import Recording

#: exit statuses: equal; a difference; a script crashed; not comparable past the first step
EQUAL, DIFFERENT, CRASHED, INCOMPARABLE = 0, 1, 3, 4


@dataclass
class Verdict:
    """The check's outcome: ``status`` (the exit status) and the report's ``lines``."""
    status: int = EQUAL
    lines: list[str] = field(default_factory=list)

    def differ(self, line: str) -> None:
        if self.status == EQUAL:
            self.status = DIFFERENT
        self.lines.append(line)


@dataclass(frozen=True)
class Tolerance:
    """``rtol`` and ``atol`` as the module doc uses them."""
    rtol: float
    atol: float

    def loss_gap(self, a: float, b: float) -> float | None:
        """``|a - b|`` where it exceeds the tolerance, else ``None``."""
        gap = abs(a - b)
        return gap if not gap <= self.atol + self.rtol * abs(a) else None

    def tensor_gap(self, a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, int] | None:
        """``(||a - b||, ||a||, flat index of the largest difference)`` where the norm of the
        difference exceeds the tolerance, else ``None``."""
        if a.shape != b.shape:
            return float("inf"), 0.0, -1
        if a.numel() == 0:
            return None
        diff = (a.double() - b.double()).view(-1)
        gap, scale = float(diff.norm()), float(a.double().norm())
        return (gap, scale, int(diff.abs().argmax())) if not gap <= self.atol + self.rtol * scale else None


def _relative(gap: float, scale: float) -> str:
    return f"relative {gap / scale:.2e}" if scale > 0 else "(the original is 0 there)"


def crashes(original: Recording, ranks: list[Recording]) -> list[str]:
    """One paragraph per run that crashed or wrote nothing, with the script's line."""
    lines = []
    for run in [original, *ranks]:
        if not run.exists:
            lines.append(f"{run.label}: wrote no record (the process did not start the script; see its output above)")
        elif run.error is not None:
            e = run.error
            lines.append(f"{run.label} crashed at {e['where']}: {e['type']}: {e['message']}")
            if e.get("code"):
                lines.append(f"    {e['code']}")
        elif run.end is None:
            lines.append(f"{run.label}: stopped without finishing (killed when another rank failed?)")
    return lines


def _loss_label(record: dict, step: int, index: int) -> str:
    return f"step {step + 1}, loss #{index + 1} (backward() at {record['where']})"


def compare_losses(verdict: Verdict, tol: Tolerance, a: Recording, b: Recording, step: int) -> bool:
    """Compares the losses before step ``step + 1``; ``True`` if they agree."""
    la, lb = a.losses.get(step, []), b.losses.get(step, [])
    if len(la) != len(lb):
        verdict.differ(f"step {step + 1}: {a.label} passed {len(la)} loss(es) to backward(), {b.label} {len(lb)}")
        return False
    for i, (ra, rb) in enumerate(zip(la, lb, strict=True)):
        gap = tol.loss_gap(ra["value"], rb["value"])
        if gap is not None:
            verdict.differ(f"{_loss_label(rb, step, i)}: {a.label} {ra['value']:.8g}, {b.label} {rb['value']:.8g}: "
                           f"|difference| {gap:.3e}, {_relative(gap, abs(ra['value']))}")
            return False
    return True


def match_names(a: dict[str, list], b: dict[str, list]) -> tuple[dict[str, str], str | None]:
    """``b``'s name for each of ``a``'s parameters: by name, else by optimizer order and shape;
    and a note on how (``None``: by name)."""
    if set(a) == set(b):
        return {k: k for k in a}, None
    shapes_a = [v[2][1:] if v[3] else v[2] for v in a.values()]  # a table sharded by owner: its rows vary
    shapes_b = [v[2][1:] if v[3] else v[2] for v in b.values()]
    if shapes_a == shapes_b:
        pairs = dict(zip(a, b, strict=True))
        return pairs, "parameter names differ; matched by optimizer order and shape: " + ", ".join(
            f"{k} ~ {v}" for k, v in list(pairs.items())[:4] if k != v)
    raise ValueError(f"the optimizers hold different parameters: {_listing(a)} against {_listing(b)}")


def _listing(params: dict[str, list]) -> str:
    return "[" + ", ".join(f"{k} {tuple(v[2])}" for k, v in params.items()) + "]"


def compare_parameters(verdict: Verdict, tol: Tolerance, a: Recording, b: Recording, step: int,
                       names: dict[str, str], kind: str = "step") -> bool:
    """Compares the parameters after ``step`` (``kind="grads"``: the gradients step ``step + 1``
    takes); ``True`` if every one agrees (all differing ones named)."""
    digests_a, digests_b = (a.steps, b.steps) if kind == "step" else (a.grads, b.grads)
    if all(digests_a[step][k][0] == digests_b[step][names[k]][0] for k in digests_a[step]):
        return True  # bitwise equal (the digests)
    (pa, rows_a), (pb, rows_b) = a.parameters(step, kind), b.parameters(step, kind)
    when = ("before the first step" if step == 0 else f"after step {step}") if kind == "step" else \
        f"step {step + 1}, the gradients optimizer.step() takes"
    found = 0
    for name, tensor in pa.items():
        other = pb.get(names.get(name, name))
        if name in rows_a:  # two ranks' rows of a table sharded by owner: no row in common
            continue
        if other is not None and names.get(name, name) in rows_b:
            tensor = tensor[rows_b[names.get(name, name)]]
        gap = (float("inf"), 0.0, -1) if other is None else tol.tensor_gap(tensor, other)
        if gap is None:
            continue
        found += 1
        if found <= 5:
            verdict.differ(_parameter_line(when, name, tensor, other, gap, a.label, b.label))
    if found > 5:
        verdict.differ(f"    ... and {found - 5} more parameters")
    return found == 0


def _parameter_line(when: str, name: str, a: torch.Tensor, b: torch.Tensor | None, gap: tuple[float, float, int],
                    label_a: str, label_b: str) -> str:
    if b is None:
        return f"{when}: parameter {name} {tuple(a.shape)}: missing in {label_b}"
    if a.shape != b.shape:
        return f"{when}: parameter {name}: shape {tuple(a.shape)} in {label_a}, {tuple(b.shape)} in {label_b}"
    value, scale, flat = gap
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)) if a.dim() else ()
    return (f"{when}: parameter {name} {tuple(a.shape)}: |difference| {value:.3e}, {_relative(value, scale)} "
            f"to |{label_a}| {scale:.3g}; largest at {list(index)} ({label_a} {float(a.reshape(-1)[flat]):.8g}, "
            f"{label_b} {float(b.reshape(-1)[flat]):.8g})")


def _walk(verdict: Verdict, tol: Tolerance, a: Recording, b: Recording, steps: int) -> int | None:
    """Compares ``b`` with ``a`` step by step; the first step that differs (``None``: none)."""
    names_at: dict[int, str] = {}
    for step in range(steps + 1):
        if step not in a.steps or step not in b.steps:
            break
        if step > 0 and not compare_losses(verdict, tol, a, b, step - 1):
            return step
        if step == 1 and 0 in a.grads and 0 in b.grads and not compare_parameters(
                verdict, tol, a, b, 0, match_names(a.grads[0], b.grads[0])[0], "grads"):
            return step
        try:
            names, note = match_names(a.steps[step], b.steps[step])
        except ValueError as error:
            verdict.differ(f"step {step}: {error}")
            return step
        if note and note not in names_at.values():
            names_at[step] = note
            verdict.lines.append(note)
        if not compare_parameters(verdict, tol, a, b, step, names):
            return step
    return None


def _against(tol: Tolerance, a: Recording, b: Recording, steps: int) -> tuple[int | None, list[str]]:
    """The first step ``b`` differs from ``a`` (``None``: none) and the lines naming how."""
    found = Verdict()
    return _walk(found, tol, a, b, steps), found.lines


def compare(directory: Path, world_size: int, tol: Tolerance, limit: int | None = None) -> tuple[Verdict, int]:
    """The verdict of the recordings in ``directory`` (``original-rank0``, ``port-rank0..P-1``),
    and the number of optimizer steps compared."""
    verdict = Verdict()
    original = Recording.read(directory, "original", 0, "original")
    ranks = [Recording.read(directory, "port", r, f"port rank {r}") for r in range(world_size)]
    crashed = crashes(original, ranks)
    if crashed:
        verdict.status, verdict.lines = CRASHED, crashed
        return verdict, 0
    counts = [original.num_steps] + [r.num_steps for r in ranks]
    compared = min(counts if limit is None else [*counts, limit])
    first, lines = _against(tol, original, ranks[0], compared)
    if first is not None:
        verdict.differ(f"first difference at step {first} (the original against the port's rank 0):")
        verdict.lines += ["  " + line for line in lines]
    for rank in ranks[1:]:  # a parameter the port replicates must be equal on every rank
        step, lines = _against(tol, ranks[0], rank, compared)
        if step is not None:
            verdict.differ(f"the port's ranks differ, first at step {step} (rank 0 against {rank.label}): "
                           "every rank must compute the same losses and parameters")
            verdict.lines += ["  " + line for line in lines]
            break
    if verdict.status == EQUAL and limit is None and len(set(counts)) > 1:
        verdict.differ(f"the original made {counts[0]} optimizer steps, the port's ranks {counts[1:]}")
    return verdict, compared
