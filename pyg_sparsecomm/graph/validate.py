"""Input checks shared by the partitioner, the plan and the layer.

Every check raises ``ValueError`` naming the offending argument: a distributed
job that proceeds on bad input either hangs in a collective or returns silently
wrong numbers, both far worse than an early, clear error.
"""

from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import HeteroData


def check_edge_index(edge_index: Tensor, num_nodes: int, name: str = "edge_index") -> None:
    """Raises ``ValueError`` naming ``name`` (the argument the user passed: ``edge_index``,
    ``edge_label_index``, ...) unless it is a ``[2, m]`` integer tensor of ids in ``0..num_nodes - 1``."""
    if not isinstance(edge_index, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(edge_index).__name__}")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer node ids (torch.long), got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{name} must have shape [2, {'num_edges' if name == 'edge_index' else 'num_pairs'}], got "
                         f"{list(edge_index.shape)}")
    if edge_index.numel() > 0:
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"{name} holds node ids in [{lo}, {hi}] but the graph has num_nodes={num_nodes}: "
                f"ids must lie in [0, {num_nodes - 1}]")


def check_edge_ids_within_x(data: Any) -> None:
    """Where ``data.num_nodes`` is not set, PyG counts the nodes as ``x``'s rows, so an ``x`` one row
    short makes the largest id of ``edge_index`` "out of range": name ``x`` then, not ``edge_index``
    (setting ``num_nodes`` alone would not help: ``x`` needs one row per node either way)."""
    x, edge_index = data.get("x"), data.get("edge_index")
    if "num_nodes" in data or not isinstance(x, Tensor) or not isinstance(edge_index, Tensor) \
            or edge_index.numel() == 0 or edge_index.is_floating_point() or edge_index.layout != torch.strided:
        return  # set num_nodes, no x, or an edge_index check_edge_index refuses by itself
    rows, hi = x.size(0), int(edge_index.max())
    if hi >= rows:
        raise ValueError(f"data.x has {rows} rows but data.edge_index holds node ids up to {hi}; data.num_nodes is "
                         f"not set, so PyG counts the nodes as x's rows: give x one row per node ({hi + 1} rows for "
                         f"ids 0..{hi}), or drop the edges to ids >= {rows} if edge_index is what is wrong")


def check_node_tensor(name: str, value: Tensor | None, num_nodes: int) -> None:
    if value is not None and value.size(0) != num_nodes:
        raise ValueError(f"{name} has {value.size(0)} rows but the graph has num_nodes={num_nodes}")


def check_edge_weight(edge_weight: Tensor | None, num_edges: int) -> None:
    if edge_weight is None:
        return
    if not edge_weight.is_floating_point():
        raise ValueError(f"edge_weight must be a floating point tensor, got dtype {edge_weight.dtype}")
    if edge_weight.dim() != 1 or edge_weight.numel() != num_edges:
        raise ValueError(
            f"edge_weight must have shape [{num_edges}] (one weight per edge), got {list(edge_weight.shape)}")


def check_partition(part: Tensor, num_nodes: int, num_parts: int) -> None:
    if not isinstance(part, Tensor):
        raise ValueError(f"the partition must be a LongTensor, got {type(part).__name__}")
    if part.is_floating_point() or part.dtype == torch.bool:
        raise ValueError(f"the partition must hold integer part ids, got dtype {part.dtype}")
    if part.dim() != 1 or part.numel() != num_nodes:
        raise ValueError(
            f"corrupt partition: expected one part id per node ({num_nodes}), got shape {list(part.shape)}")
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    if part.numel() > 0:
        lo, hi = int(part.min()), int(part.max())
        if lo < 0 or hi >= num_parts:
            raise ValueError(
                f"corrupt partition: part ids lie in [{lo}, {hi}] but num_parts={num_parts}")


def check_hetero(data: HeteroData) -> None:
    """Raises ``ValueError`` for a relation without ``edge_index`` or with ids outside its node types."""
    for node_type in data.node_types:
        if data[node_type].num_nodes is None:
            raise ValueError(f"node type {node_type!r} has no num_nodes (set data[{node_type!r}].num_nodes or .x)")
    for edge_type in data.edge_types:
        src, _, dst = edge_type
        edge_index = data[edge_type].get("edge_index")
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2 \
                or edge_index.is_floating_point():
            raise ValueError(f"relation {edge_type} needs an edge_index (LongTensor [2, num_edges]); a sparse "
                             f"adj_t is not supported for heterogeneous graphs yet")
        for row, node_type in ((0, src), (1, dst)):
            n = _declared_num_nodes(data, edge_type, node_type)
            if edge_index.size(1) and (int(edge_index[row].min()) < 0 or int(edge_index[row].max()) >= n):
                raise ValueError(f"relation {edge_type}: edge_index[{row}] holds ids outside [0, {n}) of node type "
                                 f"{node_type!r}")


def _declared_num_nodes(data: HeteroData, edge_type: tuple[str, str, str], node_type: str) -> int:
    """``data[node_type].num_nodes``, or ``ValueError`` naming the relation ending there and the fix
    (without adding ``node_type`` to ``data``, as ``data[node_type]`` would)."""
    n = data[node_type].num_nodes if node_type in data.node_types else None
    if n is None:
        raise ValueError(f"relation {edge_type} ends at node type {node_type!r}, which has no nodes (neither x nor "
                         f"num_nodes): set data[{node_type!r}].num_nodes (or its x), or remove the relation "
                         f"(del data[{edge_type}])")
    return int(n)
