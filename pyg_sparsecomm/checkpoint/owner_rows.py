r"""Parameters sharded by owner in a checkpoint: every rank's rows, restored to their owner by global row id.

A module declares them (:mod:`pyg_sparsecomm.nn.owner_sharded`: LightGCN's ``embedding.weight``).
DCP writes a key every rank holds once, so such a parameter, and its optimizer state, leave the
``model`` and ``optimizer`` entries (:func:`take`) and become entries of the rank holding them::

    owner_rows/<r>/<name>/ids                 [N_r] global ids of rank r's rows
    owner_rows/<r>/<name>/model               [N_r, ...] the parameter's rows
    owner_rows/<r>/<name>/optimizer/<state>   [N_r, ...] each optimizer state of the parameter's shape

(a rank holding no row writes none); scalar optimizer state (Adam's step count) stays in the
``optimizer`` entry, the same on every rank.  ``checkpoint.json`` records the layout
(:func:`saved_layout`: per parameter the table's rows, a row's shape, the optimizer states and
every rank's row count).  :func:`restore` reads, for every row this rank holds now, the row
of the same global id: on the partition saved, from its own entries; on another
(``allow_repartition=True``: another number of ranks or partitioning), from those of every saved
rank, one rank's rows in memory at a time.  A checkpoint of another table (another model, another
number of rows, another row shape, other optimizer states) is refused by name before anything loads.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor

from ..graph.sorted_lookup import lookup_sorted
from ..nn.owner_sharded import OwnerRows

ENTRY = "owner_rows"


@dataclass
class OwnerRowState:
    """This rank's parameters sharded by owner, taken out of DCP's model and optimizer state.

    Attributes:
        ids (dict, optional): per parameter name, the global ids of this rank's rows. (default: ``{}``)
        num_rows (dict, optional): per parameter name, the rows of the whole table. (default: ``{}``)
        tensors (dict, optional): per parameter name, ``{"model": rows, "optimizer/<state>": rows, ...}``:
            the tensors of DCP's state dicts (the parameter's and the optimizer's own storage).
            (default: ``{}``)
    """
    ids: dict[str, Tensor] = field(default_factory=dict)
    num_rows: dict[str, int] = field(default_factory=dict)
    tensors: dict[str, dict[str, Tensor]] = field(default_factory=dict)

    def layout(self) -> dict[str, dict[str, Any]]:
        """This rank's view of the layout: per parameter its rows, a row's shape, its tensors, its count."""
        return {name: {"num_rows": self.num_rows[name], "row_shape": list(tensors["model"].shape[1:]),
                       "tensors": sorted(tensors), "count": int(self.ids[name].numel())}
                for name, tensors in self.tensors.items()}

    def entries(self, rank: int) -> dict[str, Tensor]:
        """The DCP entries this rank writes."""
        out: dict[str, Tensor] = {}
        for name, tensors in self.tensors.items():
            if not self.ids[name].numel():
                continue
            out[f"{ENTRY}/{rank}/{name}/ids"] = self.ids[name]
            out.update({f"{ENTRY}/{rank}/{name}/{kind}": tensor for kind, tensor in tensors.items()})
        return out


def take(declared: dict[str, tuple[torch.nn.Parameter, OwnerRows]], model_state: dict[str, Any],
         optimizer_state: dict[str, Any] | None) -> OwnerRowState:
    """Removes the declared parameters, and their optimizer state of the parameter's rows, from DCP's
    state dicts (``get_state_dict``'s, keyed by the same names; the optimizer's own per-parameter
    dicts are replaced, not changed); returns them."""
    taken = OwnerRowState()
    for name, (parameter, rows) in declared.items():
        key = _state_key(name, parameter, model_state)
        tensors = {"model": model_state.pop(key)}
        if optimizer_state is not None and key in optimizer_state.get("state", {}):
            moments = optimizer_state["state"][key]  # the optimizer's own dict: left as it is
            kept = {s: v for s, v in moments.items() if not (isinstance(v, Tensor) and v.dim() > 0)}
            for state_name, value in moments.items():
                if state_name not in kept:
                    _check_per_row(name, state_name, value, parameter)
                    tensors[f"optimizer/{state_name}"] = value
            optimizer_state["state"][key] = kept
        taken.ids[key], taken.num_rows[key], taken.tensors[key] = rows.global_ids, rows.num_rows, tensors
    return taken


def _check_per_row(name: str, state_name: str, value: Tensor, parameter: Tensor) -> None:
    if value.shape[0] != parameter.shape[0]:
        raise ValueError(f"checkpoint: the optimizer's state {state_name!r} of {name} (sharded by owner, "
                         f"{parameter.shape[0]} rows here) has shape {list(value.shape)}, not one row per row of the "
                         f"parameter: it cannot be saved by owner; use an optimizer whose state is per element "
                         f"(SGD, Adam, AdamW, Adagrad, RMSprop, ...)")


def put_back(taken: OwnerRowState, model_state: dict[str, Any], optimizer_state: dict[str, Any] | None) -> None:
    """Returns :func:`take`'s tensors into DCP's state dicts (for ``set_state_dict``)."""
    for key, tensors in taken.tensors.items():
        for kind, tensor in tensors.items():
            if kind == "model":
                model_state[key] = tensor
            elif optimizer_state is not None:
                optimizer_state["state"][key][kind.split("/", 1)[1]] = tensor


def _state_key(name: str, parameter: Tensor, model_state: dict[str, Any]) -> str:
    """The key of ``parameter`` in DCP's model state dict (its name, or the entry sharing its storage)."""
    value = model_state.get(name)
    if isinstance(value, Tensor) and value.data_ptr() == parameter.data_ptr():
        return name
    for key, value in model_state.items():
        if isinstance(value, Tensor) and value.data_ptr() == parameter.data_ptr() and value.shape == parameter.shape:
            return key
    raise ValueError(f"checkpoint: {name} is declared sharded by owner but is no entry of the model's state dict")


def saved_layout(every: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """``checkpoint.json``'s layout from every rank's :meth:`OwnerRowState.layout` (rank order), after
    checking the ranks agree and hold every row once in all (the same check on every rank)."""
    names = sorted(every[0]) if every else []
    for rank, layout in enumerate(every):
        if sorted(layout) != names:
            raise ValueError(f"checkpoint: ranks declare different parameters sharded by owner (rank 0: {names}, "
                             f"rank {rank}: {sorted(layout)}): every rank must run the same model")
    out = {}
    for name in names:
        first = {k: v for k, v in every[0][name].items() if k != "count"}
        if any({k: v for k, v in layout[name].items() if k != "count"} != first for layout in every):
            raise ValueError(f"checkpoint: the ranks' {name} (sharded by owner) differ in table size, row shape or "
                             f"optimizer state: {[layout[name] for layout in every]}")
        counts = [layout[name]["count"] for layout in every]
        if sum(counts) != first["num_rows"]:
            raise ValueError(f"checkpoint: the ranks hold {sum(counts)} rows of {name} (sharded by owner), whose table "
                             f"has {first['num_rows']}: every row must be held by exactly one rank")
        out[name] = {**first, "rows_per_rank": counts}
    return out


def check_layout(path: Path, saved: dict[str, dict[str, Any]] | None, taken: OwnerRowState) -> None:
    """Refuses, naming what differs, a checkpoint whose sharded tables are not this model's."""
    mine = {name: {k: v for k, v in layout.items() if k != "count"} for name, layout in taken.layout().items()}
    if saved is None:
        if mine:
            raise ValueError(f"checkpoint {path} was written by a version of pyg_sparsecomm that kept one rank's rows "
                             f"of a parameter sharded by owner ({', '.join(sorted(mine))}): it cannot be resumed "
                             f"exactly; start from an earlier non-sharded model or anew")
        return
    if sorted(saved) != sorted(mine):
        raise ValueError(f"checkpoint {path} holds the parameters sharded by owner {sorted(saved)}, this model "
                         f"declares {sorted(mine)}: another model? resume with the model it was saved from")
    for name, layout in mine.items():
        expected = {k: v for k, v in saved[name].items() if k != "rows_per_rank"}
        if layout != expected:
            raise ValueError(f"checkpoint {path} holds {name} (sharded by owner) as {expected}, this model and "
                             f"optimizer have {layout}: another model or optimizer? (num_rows: the table's rows, "
                             f"row_shape: a row's shape, tensors: the parameter and its optimizer states)")


def restore(path: Path, saved: dict[str, dict[str, Any]], taken: OwnerRowState, rank: int, same: bool) -> None:
    """Fills ``taken``'s tensors with the saved rows of their global ids (rank-local reads, no collective):
    from this rank's own entries when ``same`` (the partition saved), else from every saved rank's."""
    for name, tensors in taken.tensors.items():
        counts = saved[name]["rows_per_rank"]
        ranks = [rank] if same else [q for q, n in enumerate(counts) if n]
        ids = taken.ids[name]
        filled = torch.zeros(ids.numel(), dtype=torch.bool)
        if ranks and ids.numel():
            saved_ids = _read(path, {f"{ENTRY}/{q}/{name}/ids": torch.empty(counts[q], dtype=torch.long)
                                     for q in ranks if counts[q]})
            for q in ranks:
                key = f"{ENTRY}/{q}/{name}/ids"
                if key in saved_ids:
                    _copy_rows(path, f"{ENTRY}/{q}/{name}", saved_ids[key], ids, tensors, filled)
        if not bool(filled.all()):
            missing = ids[~filled]
            raise ValueError(f"checkpoint {path} holds no row of {name} (sharded by owner) for the global ids "
                             f"{missing[:5].tolist()}{' ...' if missing.numel() > 5 else ''} this rank holds "
                             f"({int(missing.numel())} of {ids.numel()}): "
                             + ("its partition differs from the saved one; pass allow_repartition=True"
                                if same else "another graph or numbering?"))


def _copy_rows(path: Path, prefix: str, saved_ids: Tensor, ids: Tensor, tensors: dict[str, Tensor],
               filled: Tensor) -> None:
    """Copies the rows of ``ids`` that one saved rank held (entries under ``prefix``) into ``tensors``."""
    sorted_saved, order = saved_ids.sort()
    at, hit = lookup_sorted(sorted_saved, ids)
    if not bool(hit.any()):
        return
    here, there = hit.nonzero().view(-1), order[at[hit]]
    buffers = {kind: torch.empty((saved_ids.numel(), *t.shape[1:]), dtype=t.dtype) for kind, t in tensors.items()}
    loaded = _read(path, {f"{prefix}/{kind}": buffer for kind, buffer in buffers.items()})
    with torch.no_grad():
        for kind, tensor in tensors.items():
            tensor[here.to(tensor.device)] = loaded[f"{prefix}/{kind}"][there].to(tensor.device)
    filled[here] = True


def _read(path: Path, state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` loaded from the checkpoint at ``path`` by this rank alone."""
    if state:
        dcp.load(state, checkpoint_id=path, no_dist=True)
    return state
