r"""The graph forms that :class:`~pyg_sparsecomm.SparsityAwarePartitioner`, :func:`~pyg_sparsecomm.shard`
and :func:`~pyg_sparsecomm.save_partition` accept.

A homogeneous :class:`~torch_geometric.data.Data` whose connectivity is either

* ``edge_index``: a ``LongTensor[2, num_edges]``, row 0 the sources, row 1 the targets, or
* ``adj_t``: the *transposed* adjacency of PyG's sparse convention, :math:`A^T[i, j] \neq 0`
  for an edge :math:`j \to i` (what ``T.ToSparseTensor()`` stores): a torch sparse tensor in
  CSR, CSC or COO layout, or a ``torch_sparse.SparseTensor`` when torch_sparse is installed.

An ``adj_t`` becomes the equivalent ``edge_index`` in its storage order (the order in which
``T.ToSparseTensor()`` leaves the other edge attributes) and its values the ``edge_weight``.
A torch sparse tensor cannot hold a pattern without values, so values that are all one
mean "unweighted" (no ``edge_weight``; a GCN normalises both alike).
"""
import copy
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.typing import WITH_TORCH_SPARSE, SparseTensor

from .validate import check_edge_ids_within_x

_SPARSE_LAYOUTS = (torch.sparse_csr, torch.sparse_csc, torch.sparse_coo)

ACCEPTED = ("edge_index (a LongTensor [2, num_edges]) or adj_t (the transposed adjacency, adj_t[i, j] "
            "for an edge j -> i, as T.ToSparseTensor() makes it: a torch sparse CSR, CSC or COO tensor"
            + (" or a torch_sparse.SparseTensor" if WITH_TORCH_SPARSE else "") + ")")


def describe(value: Any) -> str:
    """What ``value`` is, for error messages (type, layout, shape)."""
    if isinstance(value, SparseTensor):
        return f"a torch_sparse.SparseTensor of shape {list(value.sizes())}"
    if isinstance(value, Tensor):
        layout = "" if value.layout == torch.strided else f"{str(value.layout).replace('torch.', '')} "
        return f"a {layout}torch.Tensor of shape {list(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def check_homogeneous(data: Any, who: str) -> None:
    """Raises ``ValueError`` unless ``data`` is a homogeneous ``Data``, saying what is supported."""
    if isinstance(data, HeteroData):
        raise ValueError(
            f"{who} takes a homogeneous graph (torch_geometric.data.Data), got HeteroData with node types "
            f"{data.node_types} and edge types {data.edge_types}: convert it with data.to_homogeneous() "
            f"(node_type and edge_type are kept as attributes and sharded like any other) and pass that; "
            f"SparsityAwarePartitioner and shard() take HeteroData directly")
    if not isinstance(data, Data):
        raise ValueError(f"{who} takes a torch_geometric.data.Data, got {describe(data)}")


def adj_t_to_edge_index(adj_t: Any, num_nodes: int, who: str = "adj_t") -> tuple[Tensor, Tensor | None]:
    r"""``(edge_index, edge_weight)`` of a transposed adjacency ``adj_t``.

    Args:
        adj_t (Any): a torch sparse CSR/CSC/COO tensor or a ``torch_sparse.SparseTensor`` of shape
            ``[num_nodes, num_nodes]``; ``adj_t[i, j]`` is the edge :math:`j \to i`.
        num_nodes (int): the number of nodes of the graph.
        who (str, optional): the caller, named in errors. (default: :obj:`"adj_t"`)

    Shapes:
        - **output:** ``edge_index`` :math:`(2, |\mathcal{E}|)` in ``adj_t``'s storage order,
          ``edge_weight`` :math:`(|\mathcal{E}|)` or ``None`` (no values, or all one).
    """
    if isinstance(adj_t, SparseTensor):
        row, col, value = adj_t.coo()
        shape = tuple(adj_t.sizes())
    elif isinstance(adj_t, Tensor) and adj_t.layout in _SPARSE_LAYOUTS \
            and adj_t.dim() - adj_t.dense_dim() == 2:  # not batched
        row, col, value = _torch_sparse_coo(adj_t)
        shape = tuple(adj_t.shape[:2])
    else:
        raise ValueError(f"data.adj_t is {describe(adj_t)}; {who} accepts {ACCEPTED}")
    if shape != (num_nodes, num_nodes):
        raise ValueError(f"data.adj_t has shape {list(shape)} but the graph has num_nodes={num_nodes}: "
                         f"adj_t must be [num_nodes, num_nodes]")
    if value is not None and value.dim() != 1:
        raise ValueError(f"data.adj_t holds values of shape {list(value.shape)} per edge; {who} reads adj_t's "
                         f"values as edge weights (one number per edge): keep multi-dimensional edge features "
                         f"in edge_attr next to an edge_index")
    if value is not None and bool((value == 1).all()):
        value = None
    return torch.stack([col, row]).to(torch.long), value


def _torch_sparse_coo(adj_t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(row, col, value)`` of a 2-D torch sparse tensor, in its storage order."""
    if adj_t.layout == torch.sparse_csr:
        row = _expand(adj_t.crow_indices(), adj_t.size(0))
        return row, adj_t.col_indices(), adj_t.values()
    if adj_t.layout == torch.sparse_csc:
        col = _expand(adj_t.ccol_indices(), adj_t.size(1))
        return adj_t.row_indices(), col, adj_t.values()
    adj_t = adj_t.coalesce()  # duplicates of an uncoalesced COO become one summed weight
    row, col = adj_t.indices()
    return row, col, adj_t.values()


def _expand(ptr: Tensor, n: int) -> Tensor:
    return torch.repeat_interleave(torch.arange(n, device=ptr.device), (ptr[1:] - ptr[:-1]).to(torch.long))


#: graph-level attribute of a graph converted from ``adj_t`` (and of its shards): its :func:`graph_form`
FORM_KEY = "graph_form"

#: supervision pairs of a link split (``RandomLinkSplit``): no edges of the graph, so ``shard()`` keeps
#: them whole, in global ids, on every rank (slicing them as edge attributes would pair labels with
#: the wrong pairs whenever there are as many pairs as edges)
SUPERVISION_KEYS = ("edge_label_index", "edge_label", "edge_label_time")


def graph_form(graph: Any) -> str:
    """The form of a graph argument: ``"SparseTensor"`` (a ``torch_sparse.SparseTensor``),
    ``"torch.sparse"`` (a torch sparse tensor) or ``"edge_index"``.

    PyG's layers differ between the three on graphs with self-loops or weights, e.g. ``gcn_norm``
    adds the missing self-loops to an ``edge_index`` (an existing loop keeps its weight), a loop on
    top of every node's to a torch sparse ``adj_t``, and replaces the diagonal of a
    ``SparseTensor``.  The shard records the form (``HaloAdj.given_as``) and distributed layers
    follow it, so they equal the single-process script whichever form it used."""
    if isinstance(graph, SparseTensor):
        return "SparseTensor"
    if isinstance(graph, Tensor) and graph.layout in _SPARSE_LAYOUTS:
        return "torch.sparse"
    return "edge_index"


def with_edge_index(data: Any, who: str) -> Data:
    """``data`` itself when it holds ``edge_index``; for a graph given as ``adj_t``, a shallow copy
    holding the equivalent ``edge_index`` (and ``edge_weight``) instead of ``adj_t``.

    Raises ``ValueError`` naming what was found and what is accepted (see the module doc), or
    naming ``x`` where ``num_nodes`` is counted from its rows and an edge reaches beyond them."""
    check_homogeneous(data, who)
    edge_index = data.edge_index
    if edge_index is not None:
        if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
            hint = (": a sparse adjacency goes in data.adj_t (transposed), not in data.edge_index"
                    if isinstance(edge_index, (Tensor, SparseTensor)) else "")
            raise ValueError(f"data.edge_index is {describe(edge_index)}; {who} accepts {ACCEPTED}{hint}")
        check_edge_ids_within_x(data)
        return data
    adj_t = getattr(data, "adj_t", None)
    if adj_t is None:
        raise ValueError(f"data has no graph (attributes {sorted(data.keys())}): {who} accepts {ACCEPTED}")
    num_nodes = data.num_nodes
    edge_index, weight = adj_t_to_edge_index(adj_t, num_nodes, who)
    out = copy.copy(data)
    del out.adj_t
    out.edge_index = edge_index
    out[FORM_KEY] = graph_form(adj_t)
    if weight is not None:
        if data.edge_weight is not None and not torch.equal(data.edge_weight, weight):
            raise ValueError("data holds both edge_weight and an adj_t with other values: delete one of them")
        out.edge_weight = weight
    if "num_nodes" not in data and data.x is None:
        out.num_nodes = num_nodes  # read off adj_t's shape, which leaves with it
    return out
