"""Every private name of PyG, torch and pymetis the package relies on, in one place.

Each accessor reads one private attribute and fails loudly, naming it, when a release of the
library changed it (``tests/test_compat.py`` calls every one of them), so an upgrade shows here
first instead of as a wrong result somewhere else.
"""
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module_file


class PrivateAPIChanged(RuntimeError):
    """A private name of a dependency this package reads is gone or changed."""


def _missing(what: str, error: Exception) -> PrivateAPIChanged:
    return PrivateAPIChanged(f"pyg_sparsecomm reads {what}, which this version of the library no longer "
                             f"provides ({type(error).__name__}: {error}); pin the version pyg_sparsecomm "
                             f"supports (see pyproject.toml) or report it")


def message_arguments(conv: Any) -> list[str]:
    """The arguments of ``conv``'s ``message``/``aggregate``/``update`` PyG's inspector collected
    (``MessagePassing._user_args``: ``["x_j", "edge_weight", ...]``)."""
    try:
        return list(conv._user_args)
    except AttributeError as e:
        raise _missing("torch_geometric MessagePassing._user_args", e) from e


def edge_update_arguments(conv: Any) -> list[str]:
    """The arguments of ``conv``'s ``edge_update`` (``MessagePassing._edge_user_args``)."""
    try:
        return list(conv._edge_user_args)
    except AttributeError as e:
        raise _missing("torch_geometric MessagePassing._edge_user_args", e) from e


def pyg_propagate(conv: Any) -> Any:
    """The ``propagate`` PyG itself runs for ``conv``, bound to it: the class's generated one, or its
    generic ``MessagePassing.propagate`` (``_orig_propagate``) in explain mode or with
    ``decomposed_layers > 1``, as PyG's setters of those choose."""
    cls = type(conv)
    try:
        generic = conv.explain or conv.decomposed_layers > 1
    except AttributeError as e:
        raise _missing("torch_geometric MessagePassing.explain / decomposed_layers", e) from e
    if generic and hasattr(cls, "_orig_propagate"):
        return cls._orig_propagate.__get__(conv)
    return cls.propagate.__get__(conv)


def pyg_edge_updater(conv: Any) -> Any:
    """The class's ``edge_updater`` (PyG's generated one, if any), bound to ``conv``."""
    return type(conv).edge_updater.__get__(conv)


def gcn_norm_cache(conv: Any) -> Any:
    """The normalised graph a PyG layer keeps for ``cached=True`` (``_cached_edge_index``:
    ``(edge_index, edge_weight)``, or ``None`` while empty); its ``forward`` uses it whenever it is
    filled (``GCNConv``, ``GCN2Conv``, ``APPNP``, ``DNAConv``, ``FAConv``, ``EGConv``)."""
    try:
        return conv._cached_edge_index
    except AttributeError as e:
        raise _missing(f"torch_geometric {type(conv).__name__}._cached_edge_index", e) from e


def set_gcn_norm_cache(conv: Any, graph: Any) -> None:
    """Fills (or, with ``None``, empties) the cache :func:`gcn_norm_cache` reads."""
    gcn_norm_cache(conv)  # fails loudly when the attribute is gone
    conv._cached_edge_index = graph


def hgt_source_rows(conv: Any, k_dict: dict, v_dict: dict, edge_index_dict: dict) -> tuple:
    """``HGTConv``'s per-relation source keys and values ``(k, v, src_offset)``: each relation's
    ``k_dict[src]``/``v_dict[src]`` rows through its ``k_rel``/``v_rel`` head transforms, stacked in
    ``edge_index_dict``'s order (``HGTConv._construct_src_node_feat``)."""
    try:
        construct = conv._construct_src_node_feat
    except AttributeError as e:
        raise _missing("torch_geometric HGTConv._construct_src_node_feat", e) from e
    return construct(k_dict, v_dict, edge_index_dict)


def module_call(module: torch.nn.Module) -> Callable[..., Any]:
    """What ``module(...)`` runs without compilation (``Module._call_impl``: hooks, then ``forward``),
    bound to ``module``."""
    try:
        return module._call_impl
    except AttributeError as e:
        raise _missing("torch.nn.Module._call_impl", e) from e


def compiled_call(module: torch.nn.Module) -> Any:
    """The call implementation ``Module.__call__`` runs instead of :func:`module_call` when set
    (``Module._compiled_call_impl``, which ``Module.compile()`` sets; ``None`` when unset)."""
    if not hasattr(torch.nn.Module, "_compiled_call_impl"):  # a class attribute, None by default
        raise PrivateAPIChanged("torch.nn.Module._compiled_call_impl is gone: torch changed how Module.__call__ "
                                "dispatches to a compiled call; update pyg_sparsecomm.compat")
    return module.__dict__.get("_compiled_call_impl")


def module_hooks(module: torch.nn.Module) -> tuple[dict[int, Any], int]:
    """What ``module(...)`` runs around ``forward``: its forward pre-hooks and forward hooks by their
    handles' ids (``Module._forward_pre_hooks``, ``_forward_hooks``), and how many backward and global
    module hooks there are (``torch.nn.modules.module._global_*_hooks``)."""
    try:
        hooks = {**module._forward_pre_hooks, **module._forward_hooks}
        others = (len(module._backward_pre_hooks) + len(module._backward_hooks)
                  + len(_module_file._global_forward_pre_hooks) + len(_module_file._global_forward_hooks)
                  + len(_module_file._global_backward_pre_hooks) + len(_module_file._global_backward_hooks))
    except AttributeError as e:
        raise _missing("torch.nn.Module's hook dictionaries", e) from e
    return hooks, others


def set_compiled_call(module: torch.nn.Module, call: Callable[..., Any]) -> None:
    """Makes ``module(...)`` run ``call`` (see :func:`compiled_call`)."""
    compiled_call(module)  # fails loudly when the slot is gone
    module._compiled_call_impl = call


def trim_to_layer_module() -> type:
    """PyG's ``TrimToLayer`` module class (``BasicGNN`` holds one), from a private module."""
    try:
        from torch_geometric.utils._trim_to_layer import TrimToLayer
    except ImportError as e:
        raise _missing("torch_geometric.utils._trim_to_layer.TrimToLayer", e) from e
    return TrimToLayer


def torch_function_disabled() -> Any:
    """A context in which a tensor subclass's ``__torch_function__`` is not consulted
    (``torch._C.DisableTorchFunctionSubclass``), so that a subclass can call ``func`` on itself
    without recursing; PyTorch's own subclass examples use it."""
    try:
        return torch._C.DisableTorchFunctionSubclass()
    except AttributeError as e:
        raise _missing("torch._C.DisableTorchFunctionSubclass", e) from e


def _graph_task_id_reader() -> Callable[[], int]:
    """``torch._C._current_graph_task_id`` itself where torch has it (a builtin: a forward hook
    on every layer call reads it, so no Python frame of ours in between), else a function that
    names what changed."""
    reader = getattr(torch._C, "_current_graph_task_id", None)
    if reader is not None:
        return reader

    def missing() -> int:
        raise _missing("torch._C._current_graph_task_id", AttributeError("_current_graph_task_id"))
    return missing


#: the id of the running backward call (``-1`` outside one)
current_graph_task_id: Callable[[], int] = _graph_task_id_reader()


def tensor_version(t: torch.Tensor) -> object:
    """``t._version``, the counter every in-place write bumps, which the package's caches key on.
    A tensor made under ``torch.inference_mode()`` has none: a fresh ``object()`` then, equal to
    no other, so a cache keyed by it misses (recomputes) instead of raising."""
    if t.is_inference():
        return object()
    try:
        return t._version
    except AttributeError as e:
        raise _missing("torch.Tensor._version", e) from e


def will_engine_execute_node(node: Any) -> bool:
    """Whether the running backward call reaches autograd ``node`` (``torch._C._will_engine_execute_node``);
    raises ``RuntimeError`` from torch under ``torch.autograd.grad`` with inputs."""
    try:
        fn = torch._C._will_engine_execute_node
    except AttributeError as e:
        raise _missing("torch._C._will_engine_execute_node", e) from e
    return bool(fn(node))


def queue_backward_callback(callback: Callable[[], None]) -> None:
    """Runs ``callback`` at the end of the running backward call
    (``torch.autograd.Variable._execution_engine.queue_callback``; only valid inside one)."""
    try:
        queue = torch.autograd.Variable._execution_engine.queue_callback
    except AttributeError as e:
        raise _missing("torch.autograd.Variable._execution_engine.queue_callback", e) from e
    queue(callback)


def is_registered_group(group: Any) -> bool:
    """Whether ``group`` is one of the live process groups of ``torch.distributed`` (not destroyed
    by ``destroy_process_group``; ``torch.distributed.distributed_c10d._world.pg_map``)."""
    try:
        return group in torch.distributed.distributed_c10d._world.pg_map
    except AttributeError as e:
        raise _missing("torch.distributed.distributed_c10d._world.pg_map", e) from e


def default_store() -> Any:
    """The key-value store of the default process group (``torch.distributed.distributed_c10d.
    _get_default_store``: the ``TCPStore`` / ``FileStore`` the job rendezvoused on, seen through
    the group's prefix); ``RuntimeError`` when no default group is initialised."""
    try:
        return torch.distributed.distributed_c10d._get_default_store()
    except AttributeError as e:
        raise _missing("torch.distributed.distributed_c10d._get_default_store", e) from e


def symmetric_memory_module() -> Any:
    """``torch.distributed._symmetric_memory`` (symmetric-memory allocation and rendezvous, CUDA);
    ``ImportError`` when this PyTorch build has none."""
    import importlib
    return importlib.import_module("torch.distributed._symmetric_memory")


def process_group_timeout(group: Any, device: torch.device) -> Any:
    """The timeout ``group`` was created with (``ProcessGroup._get_backend(device).options._timeout``),
    or ``None`` when the backend does not expose it (a backend without options)."""
    try:
        return group._get_backend(device).options._timeout
    except RuntimeError:  # no backend for that device type
        return None
    except AttributeError as e:
        raise _missing("ProcessGroup._get_backend(device).options._timeout", e) from e


def _pymetis_internal() -> Any:
    import pymetis  # noqa: F401  (ImportError when pymetis is not installed: the caller names the extra)
    try:
        import pymetis._internal as internal
    except ImportError as e:
        raise _missing("pymetis._internal (the compiled extension module)", e) from e
    return internal


def metis_library_path() -> str:
    """The file of ``pymetis``'s compiled extension module (``pymetis._internal.__file__``), which
    exports METIS's C functions (``METIS_PartGraphKway``) for ``ctypes``; ``ImportError`` without pymetis."""
    return str(_pymetis_internal().__file__)


def metis_idx_type_width() -> int | None:
    """Bits of METIS's ``idx_t`` in that library (``pymetis._internal._idx_type_width()``, pymetis
    >= 2025.2.1), or ``None`` when this pymetis does not report it (the ABI probe decides then)."""
    width = getattr(_pymetis_internal(), "_idx_type_width", None)
    return None if width is None else int(width())


def metis_option_slot(name: str) -> int:
    """The index of ``METIS_OPTION_<name>`` (e.g. ``"SEED"``, ``"OBJTYPE"``) in METIS's options array,
    from the ``metis.h`` pymetis was built with (``pymetis._internal.options_indices``: METIS 5.1
    and 5.2 number the slots differently)."""
    try:
        return int(getattr(_pymetis_internal().options_indices, name))
    except AttributeError as e:
        raise _missing(f"pymetis._internal.options_indices.{name}", e) from e


def tensor_rebuilder() -> Callable[..., Any]:
    """``torch._utils._rebuild_tensor_v2``: the function ``torch.save``'s pickle calls to rebuild a
    dense tensor from its storage (what ``torch.load(weights_only=True)`` allows)."""
    try:
        return torch._utils._rebuild_tensor_v2
    except AttributeError as e:
        raise _missing("torch._utils._rebuild_tensor_v2", e) from e


def storage_type(dtype: torch.dtype) -> Any:
    """The legacy storage class ``torch.save``'s pickle names for ``dtype`` (``torch.LongStorage``
    for ``torch.int64``: ``TypedStorage._pickle_storage_type``)."""
    try:
        with warnings.catch_warnings():  # TypedStorage's deprecation: torch.save names these classes still
            warnings.simplefilter("ignore", UserWarning)
            return getattr(torch, torch.TypedStorage(dtype=dtype, device="cpu")._pickle_storage_type())
    except (AttributeError, KeyError) as e:
        raise _missing("torch.TypedStorage._pickle_storage_type", e) from e


def reset_compiled_code(code: Any) -> None:
    """Drops what ``torch.compile`` cached for the frames of ``code`` (``torch._dynamo.reset_code``): the
    next frame of it is traced again."""
    try:
        from torch._dynamo import reset_code
    except ImportError as e:
        raise _missing("torch._dynamo.reset_code", e) from e
    reset_code(code)
