"""The ids ``LightGCN.recommend`` takes on a shard, checked: global node ids of the one graph LightGCN runs on.

``src_index`` and ``dst_index`` are index tensors of node ids in :math:`0..N-1` (a boolean mask or
floating ids are refused, not read as ids), ``dst_index`` without repeats; ``exclude`` is ``[2, m]``
(source, target) pairs of those ids.  PyG's recipe runs LightGCN on ``to_homogeneous()`` of a
user-item graph: users :math:`0..U-1`, items from :math:`U`.  Pairs of a ``HeteroData`` relation are
numbered per node type (items from 0); passed as ``exclude`` they would name other nodes, and the
training pairs would be recommended again.  Hence every excluded target must be a candidate of
``dst_index`` when it is given: targets outside it are refused, and when all of those lie below its
first id the error names the per-type numbering and its fix (items + :math:`U`).
"""
from typing import Any

import torch
from torch import Tensor


def check_recommend_ids(src_index: Any, dst_index: Any, exclude: Any, num_nodes: int) -> None:
    """Raises ``ValueError`` naming the argument and its fix unless the ids are as the module doc says."""
    for name, ids in (("src_index", src_index), ("dst_index", dst_index)):
        if ids is not None:
            _check_index(name, ids, num_nodes)
    if dst_index is not None and dst_index.unique().numel() != dst_index.numel():
        raise ValueError("LightGCN.recommend: dst_index repeats a node: pass distinct candidate targets")
    if exclude is None:
        return
    if not isinstance(exclude, Tensor) or exclude.dim() != 2 or exclude.size(0) != 2 or exclude.is_floating_point() \
            or exclude.dtype == torch.bool:
        raise ValueError(f"LightGCN.recommend: exclude must be integer [2, m] (source, target) pairs of global ids, "
                         f"got {getattr(exclude, 'dtype', type(exclude).__name__)} of shape "
                         f"{list(getattr(exclude, 'shape', []))}")
    if exclude.numel() and (int(exclude.min()) < 0 or int(exclude.max()) >= num_nodes):
        raise ValueError(f"LightGCN.recommend: exclude holds ids in [{int(exclude.min())}, {int(exclude.max())}] but "
                         f"the graph has {num_nodes} nodes: pass (source, target) pairs of its global node ids, "
                         f"0..{num_nodes - 1} (items after the users, as to_homogeneous() numbers them)")
    if dst_index is not None and exclude.numel():
        _check_targets(exclude[1].detach().cpu().long(), dst_index.detach().cpu().long())


def _check_index(name: str, ids: Any, num_nodes: int) -> None:
    if not isinstance(ids, Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
        hint = " (a boolean mask? pass mask.nonzero().view(-1))" if getattr(ids, "dtype", None) == torch.bool else ""
        raise ValueError(f"LightGCN.recommend: {name} must be a vector of integer global node ids, got "
                         f"{getattr(ids, 'dtype', type(ids).__name__)} of shape {list(getattr(ids, 'shape', []))}"
                         f"{hint}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"LightGCN.recommend: {name} holds ids in [{int(ids.min())}, {int(ids.max())}], outside "
                         f"0..{num_nodes - 1}: pass global node ids of the graph")


def _check_targets(targets: Tensor, dst: Tensor) -> None:
    """Every excluded target is a candidate of ``dst``; else the error, naming the per-type numbering
    when every stray target lies below the first candidate."""
    stray = targets[~torch.isin(targets, dst)]
    if not stray.numel():
        return
    first, last = (int(dst.min()), int(dst.max())) if dst.numel() else (0, -1)
    message = (f"LightGCN.recommend: exclude names {stray.unique().numel()} targets that are no candidate of "
               f"dst_index (e.g. {int(stray[0])}; dst_index holds ids {first}..{last})")
    if dst.numel() and int(stray.max()) < first:
        raise ValueError(f"{message}: are the items numbered from 0 per node type (a HeteroData relation's pairs)? "
                         f"LightGCN numbers the nodes of one graph (to_homogeneous(): users 0..{first - 1}, items "
                         f"from {first}) and exclude takes those ids: pass torch.stack([pairs[0], pairs[1] + "
                         f"{first}]); or, if they are global ids of other nodes, only the pairs of candidates: "
                         f"exclude[:, torch.isin(exclude[1], dst_index)]")
    raise ValueError(f"{message}: pass only the pairs of candidate targets, exclude[:, torch.isin(exclude[1], "
                     f"dst_index)] (global node ids of the graph LightGCN runs on)")
