r"""The whole graph's index lists and masks on a shard: :func:`shard_index`, and what ``shard()``
does with the index lists that travel with the data.

A script written for the whole graph holds node ids from it: OGB's ``split_idx =
dataset.get_idx_split()``, a list it built (``torch.arange(600)``).  One line right after the shard
is made converts them::

    data = partition_and_shard(dataset[0])
    split_idx = shard_index(dataset.get_idx_split(), data)   # this rank's rows of those nodes
    train_idx = split_idx['train']
    loss = distributed_loss(F.nll_loss, out[train_idx], data.y[train_idx])

An index list becomes a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (the rows of the owned
nodes among its ids, in its order; see :mod:`~pyg_sparsecomm.graph.node_index`), a bool mask over
all nodes the mask of the shard's rows.  Lists stored on the graph (``data.train_idx``,
``data.split_idx``, ``Entities``' ``train_idx`` with its labels ``train_y``;
``data['paper'].train_idx`` of a ``HeteroData``) are converted by ``shard()`` itself
(:func:`index_attributes`).  On a replica of the 1.5D layout both keep only the rows the replica
scores (``owner_mask``), as its masks do.
"""
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..graph.node_index import ShardIndex, is_index_name, is_node_index, label_keys, owned_rows


def _rows_of(value: Any, n_id: Tensor, num_nodes: int, owner_mask: Tensor | None, what: str,
             num_parts: int | None) -> Any:
    """``value`` (ids, a bool mask over all nodes, or a dict of them) on the shard of ``n_id``."""
    if isinstance(value, Mapping):
        return {k: _rows_of(v, n_id, num_nodes, owner_mask, f"{what}[{k!r}]", num_parts) for k, v in value.items()}
    return _selection_rows(value, n_id, num_nodes, owner_mask, what, num_parts)[0]


def _selection_rows(value: Any, n_id: Tensor, num_nodes: int, owner_mask: Tensor | None,
                    what: str, num_parts: int | None) -> tuple[Tensor, Tensor | None]:
    """``(rows or mask, entries of value kept)`` of one tensor (``entries``: for an index list).

    The rows are marked ``partial`` (their tensors' selections a share, see
    :mod:`~pyg_sparsecomm.graph.shard_selection`) on every rank of a partition into more than one
    part, also on a rank that happens to own every node (the others' parts empty): every rank
    then refuses the same conversions, none passes where a peer raises."""
    num_rows = n_id.numel()
    if isinstance(value, ShardIndex):
        if value.num_rows != num_rows or value.num_nodes != num_nodes:
            raise ValueError(f"{what} is already an index of a shard's rows, of another shard ({value.num_rows} rows "
                             f"of {value.num_nodes} nodes; this one has {num_rows} of {num_nodes}): pass the whole "
                             f"graph's ids")
        return value, None
    if not isinstance(value, Tensor):
        raise TypeError(f"{what}: shard_index takes node ids (an integer tensor), a bool mask over all nodes, or a "
                        f"dict of them (OGB's split_idx), got {type(value).__name__}")
    if value.dtype == torch.bool:
        return _mask_rows(value, n_id, num_nodes, owner_mask, what), None
    if value.is_floating_point() or value.is_complex() or value.dim() != 1:
        raise ValueError(f"{what}: node ids are a one-dimensional integer tensor, got shape {list(value.shape)} and "
                         f"dtype {value.dtype}")
    rows, entries = owned_rows(value, n_id, num_nodes, what)
    if owner_mask is not None:  # a replica scores its share of the block row's rows
        kept = owner_mask.to(rows.device)[rows]
        rows, entries = rows[kept], entries[kept]
    partial = (num_rows < num_nodes if num_parts is None else num_parts > 1) or owner_mask is not None
    return ShardIndex.of(rows.to(value.device), num_rows, num_nodes, partial), entries


def _mask_rows(mask: Tensor, n_id: Tensor, num_nodes: int, owner_mask: Tensor | None, what: str) -> Tensor:
    num_rows = n_id.numel()
    if mask.dim() < 1 or mask.size(0) not in (num_nodes, num_rows):
        raise ValueError(f"{what}: a bool mask of shape {list(mask.shape)}, but the graph has {num_nodes} nodes "
                         f"(and this shard {num_rows} rows)")
    if mask.size(0) != num_nodes:
        return mask  # already the shard's rows (a shard's own mask)
    local = mask[n_id.to(mask.device)]  # when a rank owns every node its n_id is 0 .. N - 1: the same rows
    if owner_mask is not None:
        local = local & owner_mask.to(mask.device).view((-1,) + (1,) * (local.dim() - 1))
    return local


def shard_index(index: Any, local: Any, node_type: str | None = None, num_parts: int | None = None) -> Any:
    r"""The whole graph's node ids (or masks) on this rank's shard: the rows of the owned nodes among
    them, in their order, as a :class:`~pyg_sparsecomm.graph.node_index.ShardIndex` (a mask: its
    rows of the shard).  Call it on every rank with the same ids; no communication.

    .. math::
        \text{rows}_r = \big(\, l : n\_id_l = i \,\big)_{i \in \text{index},\ i \text{ owned by } r}

    ``out[rows]`` and ``data.y[rows]`` then select on each rank its share of what ``out[index]``
    selected in one process, so ``distributed_loss`` and ``global_accuracy`` of them are the
    single-process values; the package's functions taking masks (``LabelPropagation(mask=)``,
    ``CorrectAndSmooth``, ``MaskLabel``, the loaders' ``input_nodes``, ``global_count``) take it
    as rows, and refuse a plain integer tensor on a partitioned graph.  The ids travelling with the
    data (``data.train_idx``, ``data.split_idx``) are converted by ``shard()`` already.

    Args:
        index (torch.Tensor or dict): global node ids (an integer tensor, e.g. OGB's
            ``split_idx['train']``), a bool mask over all nodes, or a dict of them, nested or not
            (OGB's ``split_idx``; for a ``HeteroData`` keyed by node type at any level, as
            ``ogbn-mag``'s ``{'train': {'paper': ids}}``).
        local (torch_geometric.data.Data or HeteroData): this rank's shard (``partition_and_shard``,
            ``shard``, ``load_shard``).
        node_type (str, optional): the node type of the ids on a heterogeneous shard, where the
            dict's keys do not name it. (default: :obj:`None`)
        num_parts (int, optional): the number of parts of the partition (the world size). (default:
            the shard's, read from its adjacency)

    Returns:
        the same structure, each tensor replaced by its rows on the shard.

    Shapes:
        - **input:** ``index`` :math:`(k)` global ids or :math:`(|\mathcal{V}|)` a mask
        - **output:** :math:`(k_r)` rows of the shard, or :math:`(|\mathcal{V}_r|)` a mask
    """
    node_types = getattr(local, "node_types", None)
    num_parts = _num_parts(local) if num_parts is None else num_parts
    if node_types is None:
        if node_type is not None:
            raise ValueError(f"shard_index(..., node_type={node_type!r}): the shard is homogeneous (a Data)")
        return _on_store(index, local, "index", num_parts)
    return _on_hetero(index, local, node_type, "index", num_parts)


def _num_parts(local: Any) -> int | None:
    """The world size of a shard, read from its adjacency's plan (``None`` without one)."""
    adjs = getattr(local, "adj_dict", None) if getattr(local, "node_types", None) is not None \
        else {"adj": getattr(local, "adj", None)}
    plans = [getattr(adj, "plan", None) for adj in (adjs or {}).values()]
    return next((int(plan.world_size) for plan in plans if plan is not None), None)


def _on_store(index: Any, store: Any, what: str, num_parts: int | None) -> Any:
    n_id = getattr(store, "n_id", None)
    num_nodes = getattr(store, "global_num_nodes", None)
    if n_id is None or num_nodes is None:
        raise ValueError("shard_index takes this rank's shard (partition_and_shard(data), shard(data)), which holds "
                         "n_id and global_num_nodes; call it after sharding, with the shard")
    return _rows_of(index, n_id, int(num_nodes), getattr(store, "owner_mask", None), what, num_parts)


def _on_hetero(index: Any, local: Any, node_type: str | None, what: str, num_parts: int | None) -> Any:
    if node_type is not None:
        if node_type not in local.node_types:
            raise ValueError(f"shard_index: node type {node_type!r} is not one of the shard's {local.node_types}")
        return _on_store(index, local[node_type], what, num_parts)
    if isinstance(index, Mapping):
        return {k: (_on_store(v, local[k], f"{what}[{k!r}]", num_parts) if k in local.node_types
                    else _on_hetero(v, local, None, f"{what}[{k!r}]", num_parts)) for k, v in index.items()}
    raise ValueError(f"shard_index: {what} of a heterogeneous shard names no node type: pass node_type= "
                     f"(shard_index(ids, data, node_type='paper')) or a dict keyed by node type")


def index_attributes(store: Any, n_id: Tensor, num_nodes: int, num_parts: int,
                     owner_mask: Tensor | None = None) -> dict[str, Any]:
    """``{key: value on the shard}`` of the index lists among ``store``'s attributes (the rule of
    :mod:`~pyg_sparsecomm.graph.node_index`) and of their labels (``train_y``), taken at the same
    entries; what ``shard()`` puts in their place.

    Args:
        store (Any): the whole graph's ``Data`` (or a node store of a ``HeteroData``).
        n_id (torch.Tensor): the global id of every row of the shard.
        num_nodes (int): the whole graph's number of nodes.
        num_parts (int): the partition's number of parts.
        owner_mask (torch.Tensor, optional): the rows a 1.5D replica scores. (default: :obj:`None`)
    """
    out: dict[str, Any] = {}
    for key, value in store.items():
        if not is_node_index(key, value, num_nodes):
            continue
        if isinstance(value, Mapping):
            out[key] = _rows_of(value, n_id, num_nodes, owner_mask, f"data.{key}", num_parts)
            continue
        rows, entries = _selection_rows(value, n_id, num_nodes, owner_mask, f"data.{key}", num_parts)
        out[key] = rows
        for label in label_keys(key):
            labels = store[label] if label in store else None
            if entries is not None and isinstance(labels, Tensor) and labels.dim() >= 1 \
                    and labels.size(0) == value.numel():
                out[label] = labels[entries.to(labels.device)]
    return out


def unplaced_index_keys(store: Any) -> list[str]:
    """Attributes of a ``HeteroData``'s graph-level store named like index lists that hold a tensor
    (no node type says whose ids they are)."""
    return [k for k, v in store.items() if is_index_name(k) and isinstance(v, Tensor) and v.dim() == 1
            and not v.is_floating_point() and v.dtype != torch.bool]


def owned_by_replica(local: Any, owner_mask: Tensor) -> None:
    """Keeps, in the index lists of a block-row shard (and their labels), the rows a 1.5D replica
    scores (``owner_mask``), as :func:`~pyg_sparsecomm.store.rank_data.replicate` does for masks."""
    for key, value in list(local.items()):
        if isinstance(value, Mapping) and is_index_name(key):
            local[key] = _replica_rows(value, owner_mask)
        elif isinstance(value, ShardIndex):
            kept = owner_mask.to(value.device)[value.rows()]
            local[key] = _replica_rows(value, owner_mask)
            for label in label_keys(key):
                labels = local[label] if label in local else None
                if isinstance(labels, Tensor) and labels.dim() >= 1 and labels.size(0) == kept.numel():
                    local[label] = labels[kept.to(labels.device)]


def _replica_rows(value: Any, owner_mask: Tensor) -> Any:
    if isinstance(value, Mapping):
        return {k: _replica_rows(v, owner_mask) for k, v in value.items()}
    if not isinstance(value, ShardIndex):
        return value
    rows = value.rows()
    return ShardIndex.of(rows[owner_mask.to(rows.device)[rows]], value.num_rows, value.num_nodes, partial=True)
