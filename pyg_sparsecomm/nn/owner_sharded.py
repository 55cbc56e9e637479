r"""Parameters sharded by owner: how a module declares them, so that a checkpoint keeps every rank's rows.

A parameter is *sharded by owner* when each rank holds only the rows of a table that belong to it
(PyG's ``LightGCN`` under ``distribute()``: the rows of ``embedding.weight`` of the nodes the rank
owns, :mod:`.lightgcn`).  It is no replicated tensor: a checkpoint writing each key once, as
``torch.distributed.checkpoint`` writes a key every rank holds, would keep one rank's rows.  A module
says which of its parameters are so, and which rows this rank holds, with one method::

    def owner_sharded_rows(self, shard: Data) -> dict[str, OwnerRows]:
        return {"embedding.weight": OwnerRows(global_ids=self.rows.n_id, num_rows=self.num_nodes)}

keyed by the parameter's name in the module (as ``module.get_parameter`` takes it).  Row :math:`i`
of the parameter (its first dimension) is row ``global_ids[i]`` of a table of ``num_rows`` rows;
over the ranks every row is held once.  The method gets the rank's shard and may shard the
parameter there (``LightGCN`` cuts its table to the shard's rows if no call did yet), so it is
called before an optimizer state of the parameter is made.
:mod:`pyg_sparsecomm.checkpoint` reads it (:func:`owner_sharded_parameters`): every rank's rows,
and every optimizer state of the parameter's shape (Adam's moments), are saved and restored to
their owner by global row id.
"""
from typing import NamedTuple, Protocol, runtime_checkable

import torch
from torch import Tensor
from torch_geometric.data import Data


class OwnerRows(NamedTuple):
    r"""The rows of a parameter sharded by owner that this rank holds.

    Attributes:
        global_ids (torch.Tensor): ``[N_r]`` the global id of each row, in the parameter's row order.
        num_rows (int): :math:`N`, the rows of the whole table (of all ranks).
    """
    global_ids: Tensor
    num_rows: int


@runtime_checkable
class OwnerSharded(Protocol):
    """A module with parameters sharded by owner (see the module doc)."""

    def owner_sharded_rows(self, shard: Data) -> dict[str, OwnerRows]:
        ...


def owner_sharded_parameters(model: torch.nn.Module, shard: Data) -> dict[str, tuple[torch.nn.Parameter, OwnerRows]]:
    """Every parameter of ``model`` sharded by owner, by its name in ``model``, with its rows (checked).

    Args:
        model (torch.nn.Module): the model; its modules declare their parameters sharded by owner.
        shard (torch_geometric.data.Data): the rank's shard, passed to every declaring module.
    """
    found: dict[str, tuple[torch.nn.Parameter, OwnerRows]] = {}
    for prefix, module in model.named_modules():
        if not isinstance(module, OwnerSharded):
            continue
        for name, rows in module.owner_sharded_rows(shard).items():
            full = f"{prefix}.{name}" if prefix else name
            parameter = model.get_parameter(full)
            _check_rows(full, parameter, rows)
            found[full] = (parameter, OwnerRows(rows.global_ids.detach().cpu().long(), int(rows.num_rows)))
    return found


def _check_rows(name: str, parameter: Tensor, rows: OwnerRows) -> None:
    ids = rows.global_ids
    if ids.dim() != 1 or ids.is_floating_point() or parameter.dim() == 0 or ids.numel() != parameter.size(0):
        raise ValueError(f"{name} is declared sharded by owner with global_ids of shape {list(ids.shape)} for a "
                         f"parameter of shape {list(parameter.shape)}: pass one integer global id per row")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= rows.num_rows):
        raise ValueError(f"{name} is declared sharded by owner with global ids in [{int(ids.min())}, "
                         f"{int(ids.max())}] of a table of num_rows={rows.num_rows}: ids are 0..num_rows - 1")
