"""Every accessor of :mod:`pyg_sparsecomm.compat` against the installed PyG, torch and pymetis.

Each test calls one accessor and checks it returns what the package needs from it, so a release
that renames or changes one of these private names fails here, by name, instead of as a wrong
result somewhere else.  The last test checks that no other module of the package reads a
private name of these libraries (the accessors are the only way in).
"""
import ast
import ctypes
import pathlib
from datetime import timedelta

import pymetis
import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn import GATConv, GCNConv, GraphSAGE

import pyg_sparsecomm
from pyg_sparsecomm import compat
from pyg_sparsecomm.testing import launch

PACKAGE = pathlib.Path(pyg_sparsecomm.__file__).parent


def test_message_arguments_are_pygs_inspected_arguments():
    assert {"x_j", "edge_weight"} <= set(compat.message_arguments(GCNConv(4, 4)))
    gat = GATConv(4, 4, heads=2)
    assert {"x_j", "alpha"} <= set(compat.message_arguments(gat))
    assert {"alpha_j", "alpha_i"} <= set(compat.edge_update_arguments(gat))
    assert compat.edge_update_arguments(GCNConv(4, 4)) == []


def test_missing_private_name_fails_loudly():
    with pytest.raises(compat.PrivateAPIChanged, match="MessagePassing._user_args"):
        compat.message_arguments(torch.nn.Linear(1, 1))
    with pytest.raises(compat.PrivateAPIChanged, match="_edge_user_args"):
        compat.edge_update_arguments(object())


def test_gcn_norm_cache_is_the_one_pyg_layers_fill_and_read():
    """``cached=True`` fills it; a filled cache is used instead of normalising (so the weights
    written here are the ones propagated); ``reset_parameters`` empties it; every class whose rule
    says ``pyg_cache`` has it."""
    from torch_geometric.nn import conv as c

    from pyg_sparsecomm.nn.rules.pyg import normalisations
    edge_index, x = torch.tensor([[0, 1, 2], [1, 2, 0]]), torch.randn(3, 4)
    conv = GCNConv(4, 4, cached=True)
    assert compat.gcn_norm_cache(conv) is None
    conv(x, edge_index)
    filled = compat.gcn_norm_cache(conv)
    assert isinstance(filled, tuple) and filled[0].shape == (2, 6) and filled[1].shape == (6,)
    compat.set_gcn_norm_cache(conv, (edge_index, torch.zeros(3)))
    torch.testing.assert_close(conv(x, edge_index), conv.bias.expand(3, 4))
    conv.reset_parameters()
    assert compat.gcn_norm_cache(conv) is None
    built = {"GCNConv": lambda: GCNConv(4, 4), "GCN2Conv": lambda: c.GCN2Conv(4, alpha=0.1),
             "APPNP": lambda: c.APPNP(K=2, alpha=0.1), "DNAConv": lambda: c.DNAConv(4), "FAConv": lambda: c.FAConv(4),
             "EGConv": lambda: c.EGConv(4, 8)}
    assert set(built) == {name for name, use in normalisations().items() if use.pyg_cache}
    for name, build in built.items():
        assert compat.gcn_norm_cache(build()) is None, name
    with pytest.raises(compat.PrivateAPIChanged, match="_cached_edge_index"):
        compat.set_gcn_norm_cache(torch.nn.Linear(1, 1), None)


def test_compiled_call_is_the_slot_module_call_dispatches_to():
    from pyg_sparsecomm.compat import compiled_call, module_call, set_compiled_call
    lin = torch.nn.Linear(2, 2)
    x = torch.randn(3, 2)
    assert compiled_call(lin) is None and torch.equal(module_call(lin)(x), lin(x))
    calls = []
    set_compiled_call(lin, lambda *args: calls.append(args) or torch.zeros(1))
    assert torch.equal(lin(x), torch.zeros(1)) and len(calls) == 1  # Module.__call__ ran the slot
    assert torch.equal(module_call(lin)(x), x @ lin.weight.T + lin.bias)  # the plain call, still


def test_trim_to_layer_module_is_the_one_basic_gnn_holds():
    cls = compat.trim_to_layer_module()
    model = GraphSAGE(4, 8, num_layers=2)
    trims = [m for m in model.modules() if isinstance(m, cls)]
    assert len(trims) == 1 and isinstance(trims[0], torch.nn.Module)
    x, edge_index = torch.randn(3, 4), torch.tensor([[0, 1, 2], [1, 2, 0]])  # forward signature used by nn/trim.py
    out = type(trims[0]).forward(trims[0], 0, None, None, x, edge_index, None)
    assert out[0] is x and out[1] is edge_index


def test_graph_task_id_and_engine_queries_inside_backward():
    assert compat.current_graph_task_id() == -1  # outside a backward call
    p = torch.nn.Parameter(torch.ones(2))
    accumulate = (p * 1).grad_fn.next_functions[0][0]  # p's AccumulateGrad node
    seen = []

    def hook(grad):
        seen.append((compat.current_graph_task_id(), compat.will_engine_execute_node(accumulate)))
        compat.queue_backward_callback(lambda: seen.append("callback"))
        return grad

    p.register_hook(hook)
    (p * 2).sum().backward()
    (p * 3).sum().backward()
    (first, reaches), callback, (second, _), _ = seen
    assert callback == "callback"  # ran at the end of the backward call
    assert first >= 0 and second >= 0 and first != second and reaches is True
    # under autograd.grad the gradient goes to the caller: torch refuses the query for the
    # parameter's own node (gradient_sync catches this RuntimeError), answers False for another
    q = torch.nn.Parameter(torch.ones(2))
    q_accumulate = (q * 1).grad_fn.next_functions[0][0]
    errors, answers = [], []

    def query(grad):
        for node in (q_accumulate, accumulate):
            try:
                answers.append(compat.will_engine_execute_node(node))
            except RuntimeError as e:
                errors.append(e)
        return grad

    q.register_hook(query)
    torch.autograd.grad((q * p).sum(), [q])
    assert len(errors) == 1 and answers == [False]


def _timeouts(rank, world_size):
    group = dist.new_group([0], timeout=timedelta(seconds=23))
    cpu = torch.device("cpu")
    found = (compat.process_group_timeout(dist.group.WORLD, cpu),
             compat.process_group_timeout(group, cpu) if rank == 0 else None,
             compat.is_registered_group(dist.group.WORLD), compat.is_registered_group(group) if rank == 0 else None)
    if rank == 0:
        dist.destroy_process_group(group)
        found += (compat.is_registered_group(group),)
    compat.default_store().set(f"seen by {rank}", "yes")  # the store every rank of the job shares
    dist.barrier()
    return found + (compat.default_store().get(f"seen by {1 - rank}"),)


def test_process_group_timeout_and_registration():
    results = launch(_timeouts, 2, pg_timeout=37.0)
    assert results[0][-1] == results[1][-1] == b"yes"
    results = [r[:-1] for r in results]
    assert results[0] == (timedelta(seconds=37), timedelta(seconds=23), True, True, False)
    assert results[1][0] == timedelta(seconds=37)


def test_hgt_source_rows_are_the_relations_transformed_keys_and_values():
    """``HGTConv._construct_src_node_feat``: per relation of ``edge_index_dict`` (in its order) the
    source type's rows through ``k_rel``/``v_rel``, at the offsets returned."""
    from torch_geometric.nn import HGTConv
    metadata = (["a", "b"], [("a", "to", "b"), ("b", "to", "a"), ("a", "self", "a")])
    conv = HGTConv(4, 4, metadata, heads=2)
    k_dict = {"a": torch.randn(3, 2, 2), "b": torch.randn(5, 2, 2)}
    v_dict = {t: torch.randn_like(k) for t, k in k_dict.items()}
    relations = {et: None for et in metadata[1]}
    k, v, offset = compat.hgt_source_rows(conv, k_dict, v_dict, relations)
    assert offset == {("a", "to", "b"): 0, ("b", "to", "a"): 3, ("a", "self", "a"): 8}
    assert k.shape == v.shape == (11, 2, 2)
    head = 1  # k_rel's type of head h, relation r: h * num_relations + r
    expected = conv.k_rel(k_dict["b"][:, head], torch.full((5,), head * 3 + 1))
    torch.testing.assert_close(k[3:8, head], expected)


def test_metis_library_exports_part_graph_kway():
    lib = ctypes.CDLL(compat.metis_library_path())
    assert lib.METIS_PartGraphKway is not None
    assert compat.metis_idx_type_width() in (None, 64)  # the ABI multiconstraint.py calls METIS with
    assert compat.metis_idx_type_width() is not None  # pymetis >= 2025.2.1, what the 'metis' extra installs


def test_metis_option_slots_are_metis_h_ones():
    for name in ("SEED", "OBJTYPE", "PTYPE", "UFACTOR"):
        assert compat.metis_option_slot(name) == int(getattr(pymetis.OptionKey, name))
    with pytest.raises(compat.PrivateAPIChanged, match="options_indices.NOT_AN_OPTION"):
        compat.metis_option_slot("NOT_AN_OPTION")


def test_symmetric_memory_module_has_the_calls_the_backend_makes():
    symm_mem = compat.symmetric_memory_module()
    for name in ("empty", "rendezvous"):
        assert callable(getattr(symm_mem, name)), name


# -- no private name of torch / PyG / pymetis outside compat.py ------------------------------------

_LIBRARIES = ("torch", "torch_geometric", "pymetis")
#: private names of torch objects the package may read, each public in all but name:
#: ``_version`` (a tensor's version counter: autograd's documented in-place check compares it; it
#: tells whether a halo source changed in place), ``_base`` (the tensor a view was made from, as
#: torch's "Tensor Views" notes describe), ``_nnz`` (a sparse tensor's stored entries, what
#: torch's own sparse docstrings call), ``_modules`` (``nn.Module``'s child dict, which
#: ``named_children``/``__setattr__`` are views of and PyG's own ``fx`` code reads and writes).
ALLOWED = {"_version", "_base", "_nnz", "_modules"}


def _dependency_private_names() -> set[str]:
    """Private attribute names of the objects of torch and PyG the package handles."""
    objects = [torch.nn.Module(), torch.nn.Linear(1, 1), GCNConv(1, 1), torch.nn.BatchNorm1d(1), torch.zeros(1),
               torch.nn.Parameter(torch.zeros(1)), torch.zeros(1).to_sparse(),
               (torch.zeros(1, requires_grad=True) * 1).grad_fn]
    objects += [dist.ProcessGroup, dist.ProcessGroupGloo.Options]  # classes: their methods and properties
    return {n for o in objects for n in dir(o) if n.startswith("_") and not n.startswith("__")}


def _private_reads(tree: ast.AST, library_names: set[str], private: set[str]):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".") + [a.name for a in node.names]
            if parts[0] in _LIBRARIES and any(p.startswith("_") for p in parts):
                yield node.lineno, f"from {node.module} import ..."
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in _LIBRARIES and any(p.startswith("_") for p in parts):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            if len(parts) > 1 and parts[0] in _LIBRARIES and all(p.isidentifier() for p in parts) \
                    and any(p.startswith("_") and not p.startswith("__") for p in parts):
                yield node.lineno, f"module name {node.value!r}"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            rooted = isinstance(root, ast.Name) and root.id in library_names
            on_object = node.attr in private and not (isinstance(node.value, ast.Name) and node.value.id == "self") \
                and not (isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super")
            if (rooted or on_object) and node.attr not in ALLOWED:
                yield node.lineno, ast.unparse(node)


def _library_aliases(tree: ast.AST) -> set[str]:
    """Names a module binds to torch / PyG / pymetis modules (``torch``, ``dist``, ``F``, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in _LIBRARIES}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in _LIBRARIES:
            names |= {a.asname or a.name for a in node.names}
    return names


def test_no_private_library_name_outside_compat():
    """No module but ``compat.py`` imports a private module of torch, PyG or pymetis, reads a private
    attribute through one of their modules (``torch._C.x``, ``dist.distributed_c10d._x``) or reads a
    private attribute that torch/PyG objects have (``conv._user_args``) on anything but ``self``.

    Allowed (``ALLOWED``): ``_version``, ``_base``, ``_nnz`` and ``_modules``, tensor and Module
    internals that torch's own documentation and PyG's code use as if public (see the comment on
    ``ALLOWED``); overriding a private hook of a base class (``super()._apply``) is the subclass's own
    business and not a read.
    """
    private = _dependency_private_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "compat.py":
            continue
        tree = ast.parse(path.read_text())
        found += [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                  for line, what in _private_reads(tree, _library_aliases(tree), private)]
    assert not found, "private names of torch/PyG/pymetis outside compat.py:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    source = ("import torch\nimport torch.distributed as dist\nfrom torch_geometric.utils._trim_to_layer import T\n"
              "a = torch._C._current_graph_task_id()\nb = conv._user_args\nc = dist.distributed_c10d._world\n"
              "d = self._user_args\ne = t._version\ng = group._get_backend(device).options._timeout\n"
              "f = importlib.import_module('torch.distributed._symmetric_memory')\n")
    tree = ast.parse(source)
    lines = [line for line, _ in _private_reads(tree, _library_aliases(tree), _dependency_private_names())]
    assert sorted(set(lines)) == [3, 4, 5, 6, 9, 10]


def test_tensor_rebuilder_and_storage_type_are_what_torch_save_pickles():
    """``save_streamed`` pickles tensors with these two names: the ones ``torch.save`` writes."""
    import io
    import pickletools
    import zipfile

    buffer = io.BytesIO()
    torch.save({"t": torch.arange(3)}, buffer)
    pickled = zipfile.ZipFile(buffer).read("archive/data.pkl")
    names = [arg for op, arg, _ in pickletools.genops(pickled) if op.name == "GLOBAL"]
    rebuild = compat.tensor_rebuilder()
    assert f"{rebuild.__module__} {rebuild.__name__}" in names
    assert compat.storage_type(torch.int64) is torch.LongStorage and "torch LongStorage" in names
    assert compat.storage_type(torch.bool) is torch.BoolStorage


def test_tensor_version_counts_in_place_writes_and_never_matches_an_inference_tensor():
    t = torch.zeros(3)
    before = compat.tensor_version(t)
    assert compat.tensor_version(t) == before
    t.add_(1)
    assert compat.tensor_version(t) != before
    with torch.inference_mode():
        u = torch.zeros(3)
    assert compat.tensor_version(u) != compat.tensor_version(u)  # no counter: a cache keyed by it misses
