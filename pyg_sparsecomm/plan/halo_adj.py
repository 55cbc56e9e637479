"""``HaloAdj``: a rank's block row of the adjacency, over ``[owned | halo]`` columns.

Row ``i`` is the owned node ``n_id[i]``; column ``c < num_owned`` is owned row
``c``, column ``num_owned + k`` is halo node ``plan.halo_n_id[k]``.  Stored as
CSR (``rowptr``, ``col``, optional ``value``) together with the
:class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` that fills the halo columns, so one
compact SpMM over local and halo columns computes the rank's rows of ``A H``.
"""
import warnings
import weakref
from typing import Any

import torch
from torch import Tensor

from ..graph.foreign_loader import replacement_note
from .homogeneous import RankPlan


def make_csr(rowptr: Tensor, col: Tensor, value: Tensor, shape) -> Tensor:
    """A torch CSR tensor from trusted indices (built here, so invariant checks are skipped)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(rowptr, col, value, shape, check_invariants=False)


def compact_index_dtype(largest: int) -> torch.dtype:
    """``int32`` for indices up to ``largest`` when they fit (half the bytes; torch's CSR kernels and
    indexing take either), else ``int64``."""
    return torch.int32 if largest < 2 ** 31 - 1 else torch.int64


def csr_order(row: Tensor, col: Tensor, num_rows: int, num_cols: int,
              is_sorted: bool = False) -> tuple[Tensor, Tensor | None]:
    r"""The CSR order of COO entries: ``(rowptr, perm)``.

    ``perm`` sorts the entries by ``(row, col)`` (stably, so duplicates keep their
    order; ``None`` when ``is_sorted`` says they already are) and
    :math:`\mathrm{rowptr}_{i + 1} = \sum_{i' \le i} |\{e : \mathrm{row}_e = i'\}|`.

    Args:
        row (torch.Tensor): ``[nnz]`` int64 row indices.
        col (torch.Tensor): ``[nnz]`` int64 column indices.
        num_rows (int): the matrix's rows.
        num_cols (int): the matrix's columns.
        is_sorted (bool, optional): the entries are already in ``(row, col)`` order. (default: :obj:`False`)
    """
    rowptr = torch.zeros(num_rows + 1, dtype=torch.long, device=row.device)
    torch.cumsum(torch.bincount(row, minlength=num_rows), 0, out=rowptr[1:])
    if is_sorted:
        return rowptr, None
    return rowptr, torch.argsort(row * max(num_cols, 1) + col, stable=True)


def sort_coo(row: Tensor, col: Tensor, value: Tensor | None, num_rows: int, num_cols: int,
             is_sorted: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """Sorts COO entries by (row, col); returns ``(rowptr, col, value)`` of the CSR (see :func:`csr_order`)."""
    rowptr, perm = csr_order(row, col, num_rows, num_cols, is_sorted)
    if perm is None:
        return rowptr, col, value
    return rowptr, col[perm], None if value is None else value[perm]


def coo_to_csr(row: Tensor, col: Tensor, value: Tensor, shape: tuple[int, int], is_sorted: bool = False) -> Tensor:
    """The ``shape`` torch CSR tensor of COO entries (duplicates kept as separate entries).

    The one COO -> CSR conversion of the package (adjacency blocks and RDMA tiles).

    Args:
        row (torch.Tensor): ``[nnz]`` int64 row indices.
        col (torch.Tensor): ``[nnz]`` int64 column indices.
        value (torch.Tensor): ``[nnz]`` values.
        shape (tuple[int, int]): ``(num_rows, num_cols)``.
        is_sorted (bool, optional): the entries are already in ``(row, col)`` order (no sort). (default: :obj:`False`)
    """
    rowptr, sorted_col, sorted_value = sort_coo(row, col, value, shape[0], shape[1], is_sorted)
    assert sorted_value is not None  # value was given
    return make_csr(rowptr, sorted_col, sorted_value, shape)


class HaloAdj:
    r"""A rank's block row of the adjacency, over ``[owned | halo]`` columns (what
    ``shard(data).adj`` is; distributed layers take it where PyG's take ``edge_index``).

    Row ``i`` is the owned node ``n_id[i]``; column ``c < num_owned`` is owned row ``c``, column
    ``num_owned + k`` is halo node ``plan.halo_n_id[k]``, so one SpMM over local and halo columns
    computes the rank's rows of :math:`\mathbf{A} \mathbf{H}`:

    .. math::
        \mathbf{H}^{\prime}_r = \mathbf{A}_{r,:} \begin{bmatrix} \mathbf{H}_r \\
        \mathbf{H}_{\mathcal{H}_r} \end{bmatrix}

    Args:
        rowptr (torch.Tensor): ``[num_owned + 1]`` CSR row pointers.
        col (torch.Tensor): ``[nnz]`` local columns (owned rows, then halo rows).
        value (torch.Tensor or None): ``[nnz]`` edge weights, or ``None``.
        plan (RankPlan): the :class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` that fills the halo
            columns.

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}_r|, F)` of the owned rows (the halo rows
          :math:`(|\mathcal{H}_r|, F)` are exchanged)
        - **output:** :math:`(|\mathcal{V}_r|, F)`, the rank's rows of :math:`\mathbf{A}\mathbf{H}`
    """

    #: the form the script gave the graph in (:func:`~pyg_sparsecomm.graph.inputs.graph_form`):
    #: ``"edge_index"``, ``"torch.sparse"`` or ``"SparseTensor"`` (an ``adj_t``); PyG's layers treat
    #: existing self-loops and values differently in each, and distributed layers follow it
    given_as: str = "edge_index"

    def __init__(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan) -> None:
        self.rowptr, self.col, self.value, self.plan = rowptr, col, value, plan
        self._cache: dict[tuple[str, torch.dtype], Tensor] = {}
        # structure-only entries (the transpose's order), shared by every with_value() copy
        self._structure: dict[str, Any] = {}  # tensors, and the moved copy of the structure per device

    @property
    def is_minibatch(self) -> bool:
        """A mini-batch's adjacency (another graph every step), or one derived from it."""
        return self.plan.minibatch

    @classmethod
    def from_coo(cls, row: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan,
                 is_sorted: bool = False) -> "HaloAdj":
        """Builds the CSR from local ``row``/``col`` pairs (sorted by ``(row, col)`` if ``is_sorted``)."""
        rowptr, col, value = sort_coo(row, col, value, plan.num_owned, plan.num_owned + plan.halo_size, is_sorted)
        return cls(rowptr, col, value, plan)

    @classmethod
    def from_ordered_edge_index(cls, rowptr: Tensor, edge_index: Tensor, value: Tensor | None,
                                plan: RankPlan) -> "HaloAdj":
        """The adjacency of a local ``[2, nnz]`` ``edge_index`` already in CSR order (``rowptr``
        its row pointers): its columns and :meth:`edge_index` are ``edge_index``'s memory, not copies."""
        out = cls(rowptr, edge_index[0], value, plan)
        out._structure.update(row=edge_index[1], edge_index=edge_index)
        return out

    # shape ---------------------------------------------------------------
    @property
    def num_owned(self) -> int:
        return self.plan.num_owned

    @property
    def num_rows(self) -> int:
        """Rows of the block (targets): the owned rows, except in a bipartite relation of a
        heterogeneous graph (:class:`~pyg_sparsecomm.plan.relation_adj.RelationAdj`), whose rows are
        the owned nodes of the destination type and whose columns those of the source type."""
        return self.plan.num_owned

    @property
    def halo_size(self) -> int:
        return self.plan.halo_size

    @property
    def num_cols(self) -> int:
        return self.num_owned + self.halo_size

    @property
    def nnz(self) -> int:
        return int(self.col.numel())

    @property
    def device(self) -> torch.device:
        return self.col.device

    def row(self) -> Tensor:
        """Local row of every stored entry (COO view of the CSR); cached."""
        if "row" not in self._structure:
            counts = self.rowptr[1:] - self.rowptr[:-1]
            self._structure["row"] = torch.repeat_interleave(torch.arange(self.num_rows, device=self.device), counts)
        return self._structure["row"]

    def coo(self) -> tuple[Tensor, Tensor]:
        return self.row(), self.col

    def edge_index(self) -> Tensor:
        """``[2, nnz]`` local edge index in PyG's orientation (row 0: source column in
        ``[owned | halo]``, row 1: target owned row), in this adjacency's edge order; cached.
        :meth:`row` is then its row 1 (one copy of the rows, not two)."""
        if "edge_index" not in self._structure:
            out = torch.empty((2, self.nnz), dtype=self.col.dtype, device=self.device)
            out[0] = self.col
            out[1] = self.row()
            self._structure["row"] = out[1]
            self._structure["edge_index"] = out
        return self._structure["edge_index"]

    def shared(self) -> dict:
        """A dictionary kept with this adjacency's structure, shared by its :meth:`with_value`
        copies and dropped by a move or a copy: what layers compute once per shard and share
        (:mod:`~pyg_sparsecomm.nn.runtime.shared_adjacency`)."""
        return self._structure.setdefault("shared", {})

    def with_value(self, value: Tensor | None) -> "HaloAdj":
        if value is not None and value.numel() != self.col.numel():
            raise ValueError(f"edge_weight has {value.numel()} entries but the local adjacency has "
                             f"{self.nnz} edges (pass weights in the adjacency's edge order: local.adj's, "
                             f"or batch.adj's for a mini-batch)")
        out = self._like(self.rowptr, self.col, value, self.plan)
        out._structure = self._structure
        out.given_as = self.given_as
        return out

    def _like(self, rowptr: Tensor, col: Tensor, value: Tensor | None, plan: RankPlan) -> "HaloAdj":
        """An adjacency of this kind over other tensors (subclasses carry their extra fields)."""
        return HaloAdj(rowptr, col, value, plan)

    def to(self, device, non_blocking: bool = False) -> "HaloAdj":
        """This adjacency and its plan on ``device`` (itself if already there).  Takes the
        arguments PyG's ``Data.to`` passes, so ``local.to(device)`` moves ``local.adj`` too."""
        target = torch.device(device)
        held = [self.rowptr, self.col, self.plan.n_id] + ([] if self.value is None else [self.value])
        if all(t.device == target for t in held):
            return self
        moved = self.__dict__.get("_moved")  # the same copy for every attribute holding it (adj, edge_index)
        if moved is not None and moved[0] == torch.device(device) and moved[1]() is not None:
            return moved[1]()
        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)
        value = None if self.value is None else move(self.value)
        # with_value() copies (a shard's weighted adj and its unweighted edge_index) share one moved
        # structure and plan: moved once, not once per attribute
        # held weakly: the original never keeps a device copy alive
        ref = self._structure.get(f"moved_to:{target}")
        twin = ref() if ref is not None else None
        out = (twin.with_value(value) if twin is not None
               else self._like(move(self.rowptr), move(self.col), value, self.plan.to(device)))
        out.given_as = self.given_as
        self._structure[f"moved_to:{target}"] = weakref.ref(out)
        self._moved = (torch.device(device), weakref.ref(out))
        return out

    def cpu(self) -> "HaloAdj":
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False) -> "HaloAdj":
        return self.to(torch.device("cuda", device) if isinstance(device, int) else device or "cuda",
                       non_blocking=non_blocking)

    # sparse tensors --------------------------------------------------------
    def values(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The value of every stored entry as ``dtype``, in CSR order: ones when unweighted,
        else ``value`` (still attached to autograd when it is learnable)."""
        if self.value is None:
            return torch.ones(self.nnz, dtype=dtype, device=self.device)
        return self.value.to(dtype)

    def csr(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``[num_rows, num_cols]`` torch CSR tensor of the (detached) values, cached."""
        key = ("csr", dtype)
        if key in self._cache:
            return self._cache[key]
        csr = make_csr(self.rowptr, self.col, self.values(dtype).detach(), (self.num_rows, self.num_cols))
        if self.value is None or not self.value.requires_grad:  # learnable values change every step
            self._cache[key] = csr
        return csr

    def csr_t(self, dtype: torch.dtype = torch.float32, value: Tensor | None = None) -> Tensor:
        """The transpose ``[num_cols, num_rows]`` as CSR, for the backward SpMM.

        The transposed structure is computed once; with ``value`` given (learnable
        weights) only the values are permuted again.
        """
        if "t_perm" not in self._structure:
            row, col = self.coo()
            t_rowptr, t_perm = csr_order(col, row, self.num_cols, self.num_rows)
            assert t_perm is not None  # not is_sorted: always a permutation
            index = compact_index_dtype(max(self.nnz, self.num_cols))
            t_perm = t_perm.to(index)
            self._structure.update(t_rowptr=t_rowptr.to(index), t_col=row[t_perm].to(index), t_perm=t_perm)
        rowptr, t_col, perm = (self._structure[k] for k in ("t_rowptr", "t_col", "t_perm"))
        shape = (self.num_cols, self.num_rows)
        if value is not None:
            return make_csr(rowptr, t_col, value.detach().to(dtype)[perm], shape)
        key = ("csr_t", dtype)
        if key not in self._cache:
            self._cache[key] = make_csr(rowptr, t_col, self.values(dtype).detach()[perm], shape)
        return self._cache[key]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"], state["_structure"] = {}, {}
        state.pop("_moved", None)
        return state

    # tensor habits: code that takes this for an edge_index tensor (PyG's transforms applied to a
    # shard: T.GDC() reads edge_index.size(1), T.GCNNorm() edge_index[0]) gets an error naming the fix
    def __getattr__(self, name: str) -> Any:
        """Only reached for a name this class lacks: a public attribute of ``torch.Tensor``
        (``size``, ``t``, ``dim``, ...) raises ``AttributeError`` naming the fix; any other
        name PyG's own ``AttributeError`` (``hasattr`` answers as before)."""
        if not name.startswith("_") and (hasattr(Tensor, name) or replacement_note()):  # (a PyG loader: any name)
            raise AttributeError(self._not_a_tensor(f"has no {name!r}"))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getitem__(self, index: Any) -> Any:
        raise TypeError(self._not_a_tensor("is not subscriptable"))

    def _not_a_tensor(self, what: str) -> str:
        return (f"{type(self).__name__} {what}: {replacement_note()}a shard's adjacency is a CSR block of this rank's "
                f"rows over "
                f"[owned | halo] columns, not an edge_index tensor. A PyG transform that reads or rewrites the graph "
                f"(T.GDC(), T.GCNNorm(), T.ToUndirected(), ...) runs on the whole graph: apply it before "
                f"partitioning (the dataset's pre_transform or transform, or on data before partition_and_shard / "
                f"SparsityAwarePartitioner); code that needs this rank's edges as a tensor takes adj.edge_index() "
                f"([2, nnz], local ids)")

    def __repr__(self) -> str:
        return (f"HaloAdj(rank={self.plan.rank}/{self.plan.world_size}, owned={self.num_owned}, "
                f"halo={self.halo_size}, nnz={self.nnz})")


#: 16-bit floats: no CPU CSR kernel takes them (MKL), so their SpMMs compute in float32
HALF_DTYPES = (torch.float16, torch.bfloat16)


def spmm_dtypes(value_dtype: torch.dtype | None, x_dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    r"""``(compute, result)`` dtypes of a local CSR SpMM of values ``value_dtype`` (``None``: ones)
    with rows ``x_dtype``: the dtype rule of mixed precision.

    The result is what PyG's message :math:`w_{ji} x_j` would give, torch's type promotion
    :math:`\mathrm{promote}(w, x)` (``x``'s dtype when unweighted): under ``torch.autocast`` a
    ``GCNConv`` whose ``Linear`` returned ``bfloat16`` rows with ``float32`` normalised weights
    aggregates to ``float32``, a ``SAGEConv`` mean of ``bfloat16`` rows stays ``bfloat16``.  A
    16-bit result is computed in ``float32`` (the sum accumulated in float32, as autocast does for
    reductions) and rounded once: MKL's CSR kernel has no 16-bit version, and cuSPARSE's support
    is not promised by torch's documentation, so every device takes the same path.
    """
    result = x_dtype if value_dtype is None else torch.promote_types(value_dtype, x_dtype)
    return (torch.float32 if result in HALF_DTYPES else result), result


def csr_mm(a: Tensor, x: Tensor, result: torch.dtype | None = None) -> Tensor:
    """``a @ x`` for a CSR ``a`` of the compute dtype (:func:`spmm_dtypes`), returned as ``result``
    (default: ``x``'s dtype); ``x`` is converted to ``a``'s dtype first when they differ.

    Autocast is off for the product: ``torch.sparse.mm`` runs ``addmm``, which autocast would
    cast to its 16-bit dtype, undoing the rule (and failing on CPU)."""
    with torch.autocast(a.device.type, enabled=False):
        out = torch.sparse.mm(a, x if x.dtype == a.dtype else x.to(a.dtype))
    return out.to(result or x.dtype)


class _CSRSpMM(torch.autograd.Function):
    """``Y = A X`` with ``dX = A^T dY`` from a cached transposed CSR and, when the values of
    ``A`` are learnable, ``dA_e = <dY[row_e], X[col_e]>`` for every stored entry ``e``
    (duplicate entries keep separate gradients, unlike torch's sparse autograd).  Dtypes follow
    :func:`spmm_dtypes`; gradients return in their inputs' dtypes."""

    @staticmethod
    def forward(ctx, x: Tensor, value: Tensor | None, adj: HaloAdj) -> Tensor:
        ctx.adj = adj
        values = adj.value if value is None else value  # (spmm_dtypes, inline: a hot path)
        result = x.dtype if values is None else torch.promote_types(values.dtype, x.dtype)
        compute = torch.float32 if result in HALF_DTYPES else result
        ctx.compute, ctx.x_dtype = compute, x.dtype
        if value is None:
            a = adj._cache.get(("csr", compute))  # (csr()'s cache, read inline: a hot path)
            if a is None:
                a = adj.csr(compute)
        else:
            plan = adj.plan  # (num_cols from the plan's fields: a hot path)
            shape = (adj.rowptr.numel() - 1, plan.num_owned + plan.halo_size)  # (num_rows, num_cols)
            a = make_csr(adj.rowptr, adj.col, value.detach().to(compute), shape)
            ctx.save_for_backward(x, value)
        return csr_mm(a, x, result)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        adj, compute, grad_out = ctx.adj, ctx.compute, grad_out.contiguous()
        if not ctx.saved_tensors:
            return csr_mm(adj.csr_t(compute), grad_out, ctx.x_dtype), None, None
        x, value = ctx.saved_tensors
        grad_x = grad_value = None
        if ctx.needs_input_grad[0]:
            grad_x = csr_mm(adj.csr_t(compute, value), grad_out, ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            grad_value = sampled_dot(adj, grad_out.to(compute), x.to(compute)).to(value.dtype)
        return grad_x, grad_value, None


def sampled_dot(adj: HaloAdj, left: Tensor, right: Tensor) -> Tensor:
    """``<left[row_e], right[col_e]>`` for every stored entry ``e`` of ``adj`` (an SDDMM), in its order.

    torch's CSR ``sampled_addmm`` computes it without materialising the ``[nnz, f]`` gathers
    (about 10x faster on CPU than indexing both sides)."""
    if left.dtype not in (torch.float32, torch.float64) or left.size(1) == 0:  # sampled_addmm needs these
        return (left.index_select(0, adj.row()) * right.index_select(0, adj.col)).sum(dim=-1)
    pattern = make_csr(adj.rowptr, adj.col, left.new_zeros(adj.nnz), (adj.num_rows, adj.num_cols))
    return torch.sparse.sampled_addmm(pattern, left, right.t(), beta=0.0).values()


def spmm_values(adj: HaloAdj, value: Tensor, x: Tensor) -> Tensor:
    """``adj.with_value(value) @ x`` without the copy of the adjacency: ``value`` one entry per stored
    entry of ``adj``, in its (CSR) order; differentiable in ``x`` and in ``value`` (attention weights).

    Args:
        adj (HaloAdj): the structure (its own values, if any, are not read).
        value (Tensor): ``[nnz]`` values.
        x (Tensor): ``[num_cols, f]`` rows.
    """
    plan = adj.plan
    if x.size(0) != plan.num_owned + plan.halo_size:
        raise ValueError(f"spmm: x has {x.size(0)} rows, the adjacency has {adj.num_cols} columns")
    if value.numel() != adj.col.numel():
        raise ValueError(f"spmm: {value.numel()} values for an adjacency of {adj.col.numel()} entries")
    return _CSRSpMM.apply(x, value, adj)


def spmm(adj: HaloAdj, x: Tensor) -> Tensor:
    """``adj @ x`` for ``x`` of shape ``[num_cols, f]``; differentiable in ``x`` and in learnable values."""
    plan = adj.plan  # (num_cols from the plan's fields: a hot path)
    if x.size(0) != plan.num_owned + plan.halo_size:
        raise ValueError(f"spmm: x has {x.size(0)} rows, the adjacency has {adj.num_cols} columns")
    learnable = adj.value is not None and adj.value.requires_grad
    return _CSRSpMM.apply(x, adj.value if learnable else None, adj)
