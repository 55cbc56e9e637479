r"""Index lists of a graph's nodes (OGB's ``split_idx``, ``data.train_idx``), read on a shard.

A single-process script selects nodes by a bool mask (``data.train_mask``) or by a list of node ids
(``split_idx = dataset.get_idx_split()``, ``Entities``' ``data.train_idx``) and indexes its tensors
with it: ``out[train_idx]``, ``data.y[train_idx]``.  On a shard the tensors hold this rank's rows,
so the list must hold rows too: the rows of the owned nodes among its ids,

.. math::
    \text{rows}_r = \big(\, l : n\_id_l = i \,\big)_{i \in \text{ids},\ i \text{ owned by } r},

in the order of the list (duplicates kept), so ``out[rows]`` and ``y[rows]`` stay aligned and,
over all ranks, select every listed node once per entry.  A :class:`ShardIndex` holds such rows
and says so: the package tells it from a plain integer tensor, which on a shard could be either
global ids or rows (the two select different nodes, silently when every id is below the rank's
number of rows), and refuses the plain one (:func:`node_selection`).

Which attributes of a ``Data`` are index lists (:func:`is_node_index`), so that ``shard()`` turns
them into :class:`ShardIndex` rows:

* the name is ``idx``, ends in ``_idx`` or starts with ``idx_`` and holds no ``edge``
  (``train_idx``, ``idx_test``, ``split_idx``; ``edge_idx`` would index edges);
* the value is a one-dimensional integer tensor (not bool), or a dict of them (``split_idx``,
  also nested), and
* its length is not the number of nodes (a tensor of one entry per node is a node attribute, as
  PyG reads it), unless the name is one of :data:`SPLIT_INDEX_KEYS` (``train_idx``, ...), a list
  whatever its length.

An attribute named ``<split>_y`` (``y_<split>`` for ``idx_<split>``) of the list's length holds the
labels of its entries (``Entities``' ``train_y``): it is taken at the same entries.
"""
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..compat import torch_function_disabled
from .shard_selection import ShardSelection
from .sorted_lookup import lookup_sorted

#: names that are index lists of nodes whatever their length (PyG's and OGB's split names)
SPLIT_INDEX_KEYS = frozenset({"train_idx", "val_idx", "valid_idx", "test_idx", "idx_train", "idx_val",
                              "idx_valid", "idx_test", "split_idx"})

#: what a script does with a list of global ids before it reaches a shard (the README's first line)
FIX = ("convert the whole graph's ids once, right after the shard is made: split_idx = shard_index(split_idx, "
       "data) (a dict or a tensor; data is the shard), which gives this rank's rows of those nodes, so out[idx] "
       "and data.y[idx] index the shard as the ids index the whole graph")


def _indexes_rows(func: Any, args: tuple) -> tuple[Tensor, Any] | None:
    """``(indexed tensor, index)`` when ``func(*args)`` indexes the first dimension of a tensor."""
    if func in (Tensor.__getitem__, Tensor.__setitem__, Tensor.index_put_, Tensor.index_put) and len(args) > 1:
        index = args[1]
        return args[0], index[0] if isinstance(index, (tuple, list)) and index else index
    if func in (Tensor.index_select, torch.index_select, Tensor.index_fill_, Tensor.index_add_, Tensor.index_copy_) \
            and len(args) > 2 and args[1] == 0:
        return args[0], args[2]
    return None


#: operations whose result, computed from a :class:`ShardIndex`, is again rows of the same shard
_KEEPS = {Tensor.to, Tensor.cpu, Tensor.cuda, Tensor.clone, Tensor.detach, Tensor.contiguous, Tensor.pin_memory,
          Tensor.long, Tensor.view, Tensor.reshape, Tensor.flatten, Tensor.squeeze, Tensor.__getitem__,
          Tensor.split, Tensor.chunk, torch.split, torch.chunk, Tensor.share_memory_}


class ShardIndex(Tensor):
    r"""Rows of a shard selected by an index list of the whole graph's node ids (see the module
    doc): what :func:`~pyg_sparsecomm.shard_index` and ``shard()`` give for OGB's ``split_idx`` or
    ``data.train_idx``.  It indexes the shard's tensors (``out[idx]``, ``data.y[idx]``) as the ids
    indexed the whole graph's; the package's functions read it as rows.  What it selects from a
    tensor of the shard is a :class:`~pyg_sparsecomm.graph.shard_selection.ShardSelection` when the
    shard holds a share of the nodes (``partial``): this rank's share of the selection, which
    refuses ``.numpy()`` and ``np.asarray`` (a metric of it would be a per-rank number).

    It stays a :class:`ShardIndex` through ``.to(device)``, ``clone()``, ``detach()``, slicing
    (``idx[perm]``, ``idx.split(size)``) and ``torch.cat`` of several; arithmetic gives a plain
    tensor.  Indexing a tensor whose first dimension is not the shard's rows (a tensor in global
    node order from ``gather_nodes``, a mini-batch's) raises ``IndexError`` naming the fix.

    Attributes:
        num_rows (int): the rows of the shard it indexes (``local.num_nodes``).
        num_nodes (int): the nodes of the whole graph.
        partial (bool): the shard's rows select a share of the listed nodes (the graph is
            partitioned, or a 1.5D replica scores a share of its rows).
    """

    num_rows: int
    num_nodes: int
    partial: bool

    @staticmethod
    def of(rows: Tensor, num_rows: int, num_nodes: int, partial: bool | None = None) -> "ShardIndex":
        """``rows`` (an integer tensor of rows of a shard of ``num_rows`` rows, of a graph of
        ``num_nodes`` nodes) marked as such.

        Args:
            rows (torch.Tensor): ``[k]`` rows of the shard.
            num_rows (int): the shard's number of rows.
            num_nodes (int): the whole graph's number of nodes.
            partial (bool, optional): the rows select a share of the listed nodes. (default: whether
                ``num_rows < num_nodes``)
        """
        out = rows.as_subclass(ShardIndex) if type(rows) is Tensor else rows.as_subclass(Tensor).as_subclass(ShardIndex)
        out.num_rows, out.num_nodes = int(num_rows), int(num_nodes)
        out.partial = bool(num_rows < num_nodes if partial is None else partial)
        return out

    def rows(self) -> Tensor:
        """The rows as a plain tensor."""
        return self.as_subclass(Tensor)

    def __deepcopy__(self, memo: dict) -> "ShardIndex":
        return ShardIndex.of(self.rows().clone(), self.num_rows, self.num_nodes, self.partial)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        use = _indexes_rows(func, args)
        if use is not None:
            _check_indexed(*use)
        with torch_function_disabled():
            out = func(*args, **kwargs)
        if use is not None and func in _SELECTS and not isinstance(use[0], ShardIndex):
            return _selected(out, use[1])
        source = args[0] if args else None
        if func is torch.cat and isinstance(source, (list, tuple)):
            return _rewrap(out, *source)
        if func in _KEEPS and isinstance(source, ShardIndex):
            if isinstance(out, (tuple, list)):
                return type(out)(_rewrap(o, source) for o in out)
            return _rewrap(out, source)
        return out


def _rewrap(out: Any, *sources: Any) -> Any:
    """``out`` as a :class:`ShardIndex` of the shard of ``sources`` when it is a one-dimensional
    integer tensor and every source is rows of that one shard; ``out`` unchanged otherwise."""
    if not (isinstance(out, Tensor) and out.dim() == 1 and not out.is_floating_point() and out.dtype != torch.bool):
        return out
    if not sources or not all(isinstance(s, ShardIndex) for s in sources):
        return out
    if len({(s.num_rows, s.num_nodes) for s in sources}) != 1:
        return out
    if type(out) is ShardIndex and out is sources[0]:
        return out
    return ShardIndex.of(out, sources[0].num_rows, sources[0].num_nodes, sources[0].partial)


#: the row indexing whose result is what the list selects (``Tensor.__getitem__``: ``y[idx]``)
_SELECTS = {Tensor.__getitem__, Tensor.index_select, torch.index_select}


def _selected(out: Any, index: Any) -> Any:
    """``out``, the rows a :class:`ShardIndex` selected, as this rank's share of the selection
    (:class:`~pyg_sparsecomm.graph.shard_selection.ShardSelection`) when the shard holds a share."""
    if isinstance(index, ShardIndex) and index.partial and type(out) is Tensor and out.dim() >= 1:
        return ShardSelection.of(out)
    return out


def _check_indexed(tensor: Any, index: Any) -> None:
    if not isinstance(index, ShardIndex) or not isinstance(tensor, Tensor) or tensor.dim() == 0:
        return
    if tensor.size(0) != index.num_rows:
        raise IndexError(
            f"an index of a shard's rows (from shard_index() or shard(): {index.num_rows} rows of a graph of "
            f"{index.num_nodes} nodes) indexes a tensor of {tensor.size(0)} rows: it indexes the shard's own tensors "
            f"(out, data.y, data.x); a tensor in global node order (gather_nodes) takes the whole graph's ids (the "
            f"list before shard_index), and local.n_id[idx] gives those of this rank's rows")


torch.serialization.add_safe_globals([ShardIndex])  # a shard saved with torch.save loads with weights_only=True


def _is_id_vector(value: Any) -> bool:
    return isinstance(value, Tensor) and value.dim() == 1 and not value.is_floating_point() \
        and not value.is_complex() and value.dtype != torch.bool


def is_index_name(key: str) -> bool:
    """Whether ``key`` names an index list (see the module doc: ``train_idx``, ``idx_test``, ...).

    Args:
        key (str): the attribute's name.
    """
    return "edge" not in key and (key == "idx" or key.endswith("_idx") or key.startswith("idx_"))


def is_node_index(key: str, value: Any, num_nodes: int) -> bool:
    """Whether attribute ``key`` holding ``value`` of a graph of ``num_nodes`` nodes is an index
    list of its nodes, or a dict of them (the rule of the module doc).

    Args:
        key (str): the attribute's name.
        value (Any): its value.
        num_nodes (int): the graph's number of nodes.
    """
    if not is_index_name(key):
        return False
    if isinstance(value, Mapping):
        return bool(value) and all(_is_id_vector(v) or is_node_index(key, v, num_nodes) for v in value.values())
    return _is_id_vector(value) and (key in SPLIT_INDEX_KEYS or value.numel() != num_nodes)


def label_keys(key: str) -> tuple[str, ...]:
    """The names of the attributes holding the labels of index list ``key``'s entries
    (``train_idx``: ``train_y``; ``idx_train``: ``y_train``).

    Args:
        key (str): the index list's name.
    """
    if key.endswith("_idx") and len(key) > 4:
        return (key[:-4] + "_y",)
    if key.startswith("idx_") and len(key) > 4:
        return ("y_" + key[4:],)
    return ()


def owned_rows(ids: Tensor, n_id: Tensor, num_nodes: int, what: str = "index") -> tuple[Tensor, Tensor]:
    r"""``(rows, entries)``: the rows of a shard holding the owned nodes among ``ids``, in the order
    of ``ids`` (duplicates kept), and the entries of ``ids`` they come from
    (:math:`\text{ids}[\text{entries}] = n\_id[\text{rows}]`).  :math:`O(k \log n)` time, no
    array over all nodes.

    Args:
        ids (torch.Tensor): global node ids.
        n_id (torch.Tensor): the global id of every row of the shard.
        num_nodes (int): the whole graph's number of nodes (ids must lie in ``[0, num_nodes)``).
        what (str, optional): what ``ids`` is, in errors. (default: :obj:`"index"`)

    Shapes:
        - **input:** ``ids`` :math:`(k)`, ``n_id`` :math:`(|\mathcal{V}_r|)`
        - **output:** ``rows`` and ``entries`` :math:`(k_r)`, :math:`k_r \le k`
    """
    ids = ids.detach().long()
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"{what} holds node ids in [{int(ids.min())}, {int(ids.max())}], but the graph has "
                         f"{num_nodes} nodes: global node ids lie in [0, {num_nodes})")
    n_id = n_id.to(ids.device)
    if n_id.numel() == 0 or ids.numel() == 0:
        empty = torch.zeros(0, dtype=torch.long, device=ids.device)
        return empty, empty
    ascending = bool((n_id[1:] > n_id[:-1]).all())  # a shard's n_id is ascending (plan/homogeneous.py)
    order = None if ascending else torch.argsort(n_id)
    sorted_ids = n_id if order is None else n_id[order]
    position, hit = lookup_sorted(sorted_ids, ids)
    entries = torch.nonzero(hit).view(-1)
    rows = position[entries]
    return (rows if order is None else order[rows]), entries


def node_selection(value: Any, num_rows: int, partitioned: bool, who: str) -> Any:
    """A mask or index argument of a function working on a shard's rows, as PyG's code on the
    shard's tensors needs it: a :class:`ShardIndex` becomes its plain rows, a bool mask over the
    rows stays; anything whose meaning on the shard is not certain raises ``ValueError`` naming the
    fix.  A caller whose ranks may fail apart agrees on the outcome
    (:func:`~pyg_sparsecomm.comm.group.raise_together`).

    Args:
        value (Any): ``None``, a :class:`ShardIndex`, a bool mask or an integer index tensor.
        num_rows (int): the rows the argument selects from (the shard's ``x``).
        partitioned (bool): the graph is cut into more than one part (a plain integer index is then
            refused: global ids and rows select different nodes).
        who (str): the argument, in errors (``"LabelPropagation(mask=...)"``).
    """
    if value is None or not isinstance(value, Tensor):
        return value
    if isinstance(value, ShardIndex):
        if value.num_rows != num_rows:
            raise ValueError(f"{who}: the index holds rows of a shard of {value.num_rows} rows, but the call has "
                             f"{num_rows} rows: pass the index of this shard (shard_index(ids, data) with this data)")
        return value.rows()
    if value.dtype == torch.bool:
        if value.dim() != 1 or value.numel() != num_rows:
            raise ValueError(f"{who}: a bool mask of shape {list(value.shape)}, but the call has {num_rows} rows: "
                             f"pass the shard's own mask (data.train_mask of the shard: partition_and_shard and "
                             f"shard() cut the masks with the graph), or convert a mask over all nodes with "
                             f"shard_index(mask, data)")
        return value
    if partitioned and _is_id_vector(value):
        raise ValueError(f"{who}: a plain integer tensor of {value.numel()} node ids. On a shard it could be the "
                         f"whole graph's node ids (OGB's split_idx['train']) or this rank's rows, which select "
                         f"different nodes: {FIX}; or pass a bool mask over the shard's rows (data.train_mask)")
    return value
