r"""A mini-batch's ``n_id``: the global ids of its rows, which index a shard's tensors at their rows.

PyG's ``NeighborLoader`` batch holds ``n_id``, the ids of its nodes in the graph the loader was
given, which are rows of that graph's tensors: scripts index with them, ``x_all[batch.n_id]``
(layer-wise inference, PyG's ``reddit.py``), ``data.y[batch.n_id]``.  A distributed batch is cut
from a shard, whose tensors hold this rank's rows, while its ``n_id`` names the whole graph's
nodes.  A :class:`BatchNodeIds` holds the global ids (its values: what the batch's nodes are,
for any partition) and the shard rows of the same nodes; used as the index of a tensor of the
shard's rows it selects those rows,

.. math::
    t[\text{n\_id}] = t[\text{rows}] \quad \text{when } t \text{ has the shard's } |\mathcal{V}_r| \text{ rows},

and the global ids otherwise (a tensor over all nodes).  On one process both are the same (a
shard's ``n_id`` is ascending; with every node it is :math:`0 .. N - 1`).
"""
from typing import Any

import torch
from torch import Tensor

from ..compat import torch_function_disabled

_INDEXING = (Tensor.__getitem__, Tensor.index_select, torch.index_select)
#: operations whose result, computed from a :class:`BatchNodeIds`, are the same nodes (rows moved along)
_KEEPS = (Tensor.to, Tensor.cpu, Tensor.cuda, Tensor.clone, Tensor.detach, Tensor.contiguous, Tensor.pin_memory,
          Tensor.long)


class BatchNodeIds(Tensor):
    r"""The global ids of a batch's rows, which index the shard's tensors at their rows (module doc).

    Slicing it (``batch.n_id[:batch.batch_size]``), ``.to(device)``, ``.clone()`` keep it one;
    arithmetic gives a plain tensor of the global ids.

    Attributes:
        num_rows (int): the shard's rows (``local.num_nodes``).
    """

    num_rows: int
    _rows: Tensor

    @staticmethod
    def of(ids: Tensor, rows: Tensor, num_rows: int) -> "BatchNodeIds":
        """``ids`` (global ids of a batch's nodes) whose shard rows are ``rows`` of a shard of
        ``num_rows`` rows.

        Args:
            ids (torch.Tensor): ``[n]`` global node ids.
            rows (torch.Tensor): ``[n]`` the shard rows of the same nodes.
            num_rows (int): the shard's number of rows.
        """
        out = ids.as_subclass(Tensor).as_subclass(BatchNodeIds)
        out._rows, out.num_rows = rows.as_subclass(Tensor), int(num_rows)
        return out

    def rows(self) -> Tensor:
        """The shard rows of the batch's nodes (a plain tensor)."""
        return self._rows

    def __deepcopy__(self, memo: dict) -> "BatchNodeIds":
        return BatchNodeIds.of(self.as_subclass(Tensor).clone(), self._rows.clone(), self.num_rows)

    def __reduce_ex__(self, protocol: Any) -> Any:  # saved and sent as the plain global ids
        return self.as_subclass(Tensor).__reduce_ex__(protocol)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = _rows_where_indexing_the_shard(func, args)
        with torch_function_disabled():
            out = func(*args, **kwargs)
        source = args[0] if args else None
        if not isinstance(source, BatchNodeIds) or not isinstance(out, Tensor) or out.dim() != 1:
            return out.as_subclass(Tensor) if type(out) is BatchNodeIds else out
        if func in _KEEPS:
            return BatchNodeIds.of(out, source._rows.to(out.device), source.num_rows)
        if func is Tensor.__getitem__ and len(args) > 1 and not isinstance(args[1], BatchNodeIds):
            index = args[1].to(source._rows.device) if isinstance(args[1], Tensor) else args[1]
            return BatchNodeIds.of(out, source._rows[index], source.num_rows)
        return out.as_subclass(Tensor)


def _rows_where_indexing_the_shard(func: Any, args: tuple) -> tuple:
    """``args`` with a :class:`BatchNodeIds` index replaced by its rows where ``func`` indexes the
    first dimension of a tensor of the shard's rows."""
    if func not in _INDEXING or len(args) < 2:
        return args
    tensor = args[0]
    position = 1 if func is Tensor.__getitem__ else 2
    if len(args) <= position or isinstance(tensor, BatchNodeIds) or not isinstance(tensor, Tensor):
        return args
    if func is not Tensor.__getitem__ and args[1] != 0:
        return args
    index = args[position]
    if isinstance(index, BatchNodeIds) and tensor.dim() > 0 and tensor.size(0) == index.num_rows:
        return (*args[:position], index._rows.to(index.device), *args[position + 1:])
    return args
