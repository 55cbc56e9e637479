"""Randomness a port cannot draw as the single process does, switched off for a check: dropout of
every kind becomes the identity, in ``torch.nn.functional`` (which ``nn.Dropout`` and PyG's layers'
``dropout=`` arguments call) and in ``torch_geometric.utils`` (``dropout_edge``, ``dropout_adj``,
``dropout_node``, ``dropout_path``).

Each function is replaced in every loaded module that holds it (``from ... import dropout`` copies
included), so the user's script, imported after, sees only the identities.
"""
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

#: how often each switched-off function was called with an effect (``p > 0`` while training)
CALLS: Counter[str] = Counter()


def _active(args: tuple, kwargs: dict, p_at: int = 1, training_at: int = 2, default_training: bool = True) -> bool:
    p = kwargs.get("p", args[p_at] if len(args) > p_at else 0.5)
    training = kwargs.get("training", args[training_at] if len(args) > training_at else default_training)
    return bool(training) and float(p) > 0


def _tensor_identity(name: str, default_training: bool = True) -> Callable[..., Any]:
    def identity(input: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _active((input, *args), kwargs, default_training=default_training):
            CALLS[name] += 1
        return input
    identity.__name__ = name
    return identity


def _dropout_edge(edge_index: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if _active((edge_index, *args), kwargs, p_at=1, training_at=3):
        CALLS["torch_geometric.utils.dropout_edge"] += 1
    return edge_index, torch.ones(edge_index.size(1), dtype=torch.bool, device=edge_index.device)


def _dropout_adj(edge_index: torch.Tensor, edge_attr: torch.Tensor | None = None, *args: Any,
                 **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    if _active((edge_index, edge_attr, *args), kwargs, p_at=2, training_at=5):
        CALLS["torch_geometric.utils.dropout_adj"] += 1
    return edge_index, edge_attr


def _dropout_node(edge_index: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
    if _active((edge_index, *args), kwargs, p_at=1, training_at=3):
        CALLS["torch_geometric.utils.dropout_node"] += 1
    num_nodes = kwargs.get("num_nodes", args[1] if len(args) > 1 else None)
    num_nodes = int(edge_index.max()) + 1 if num_nodes is None and edge_index.numel() else int(num_nodes or 0)
    ones = torch.ones(edge_index.size(1), dtype=torch.bool, device=edge_index.device)
    return edge_index, ones, torch.ones(num_nodes, dtype=torch.bool, device=edge_index.device)


def _dropout_path(edge_index: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    CALLS["torch_geometric.utils.dropout_path"] += 1
    return edge_index, torch.ones(edge_index.size(1), dtype=torch.bool, device=edge_index.device)


def _replacements() -> dict[str, tuple[Any, Callable[..., Any]]]:
    """qualified name -> (the original function, its identity)."""
    out: dict[str, tuple[Any, Callable[..., Any]]] = {}
    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        out[f"torch.nn.functional.{name}"] = (getattr(F, name), _tensor_identity(f"torch.nn.functional.{name}"))
    import torch_geometric.utils as pyg_utils
    for name, identity in (("dropout_edge", _dropout_edge), ("dropout_adj", _dropout_adj),
                           ("dropout_node", _dropout_node), ("dropout_path", _dropout_path)):
        if hasattr(pyg_utils, name):
            out[f"torch_geometric.utils.{name}"] = (getattr(pyg_utils, name), identity)
    return out


def switch_off_dropout() -> list[str]:
    """Replaces every dropout function by the identity wherever a loaded module holds it; returns
    the qualified names switched off."""
    import torch_geometric  # noqa: F401 -- loaded first, so that its copies are replaced too
    replacements = _replacements()
    by_id = {id(original): identity for original, identity in replacements.values()}
    for module in list(sys.modules.values()):
        scope = getattr(module, "__dict__", None)
        if not isinstance(scope, dict):
            continue
        for attribute, value in list(scope.items()):
            if id(value) in by_id and callable(value):
                scope[attribute] = by_id[id(value)]
    return sorted(replacements)
