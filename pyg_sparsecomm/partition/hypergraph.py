"""Column-net hypergraph partitioning: its connectivity-1 metric *is* the exchange volume.

Model (Çatalyürek & Aykanat; VLDB'23 §4, ICPP'24 §5): one vertex per row ``i``
of ``A`` (the node whose output it computes), weighted by the row's nonzeros;
one net per column ``j`` holding ``j`` itself and every row ``i`` with an
edge ``j -> i``.  Under a partition, net ``j`` spans ``λ_j`` parts and the
owner of ``j`` must send ``H[j]`` to the other ``λ_j - 1`` of them, so
``km1 = Σ_j (λ_j - 1)`` equals the rows moved per SpMM exactly, also for
directed graphs (no symmetrisation: the nets follow the true columns).
"""
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from .methods import register, row_nnz

_MTK = None  # Mt-KaHyPar may be initialised once per process


def column_nets(edge_index: Tensor, num_nodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """Returns the nets as CSR ``(net_ptr, pins)``; nets of one pin (no remote user) are dropped."""
    src, dst = edge_index.numpy()
    nodes = np.arange(num_nodes, dtype=np.int64)
    key = np.unique(np.concatenate([src * num_nodes + dst, nodes * num_nodes + nodes]))
    net, pin = key // num_nodes, key % num_nodes
    size = np.bincount(net, minlength=num_nodes)
    keep = size[net] > 1
    net, pin = net[keep], pin[keep]
    net_ptr = np.concatenate([[0], np.cumsum(np.bincount(net, minlength=num_nodes)[size > 1])])
    return net_ptr.astype(np.int64), pin.astype(np.int64)


def km1(net_ptr: np.ndarray, pins: np.ndarray, part: np.ndarray) -> int:
    """Connectivity-1 metric of ``part`` on the nets (vectorised)."""
    if pins.size == 0:
        return 0
    net_of_pin = np.repeat(np.arange(net_ptr.size - 1), np.diff(net_ptr))
    P = int(part.max()) + 1
    distinct = np.unique(net_of_pin * P + part[pins]).size
    return int(distinct - (net_ptr.size - 1))


def _mtkahypar(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed, preset):
    global _MTK
    try:
        import mtkahypar
    except ImportError as e:
        raise ImportError("method='hypergraph' with backend='mtkahypar' needs Mt-KaHyPar: "
                          "pip install 'pyg_sparsecomm[hypergraph]' (or pip install mtkahypar)") from e
    if _MTK is None:
        _MTK = mtkahypar.initialize(max(1, torch.get_num_threads()), False)
    presets = {"deterministic": mtkahypar.PresetType.DETERMINISTIC, "default": mtkahypar.PresetType.DEFAULT,
               "quality": mtkahypar.PresetType.QUALITY}
    if preset not in presets:
        raise ValueError(f"unknown Mt-KaHyPar preset {preset!r}; choose one of {sorted(presets)}")
    ctx = _MTK.context_from_preset(presets[preset])
    ctx.set_partitioning_parameters(num_parts, epsilon, mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(seed)
    nets = [pins[a:b].tolist() for a, b in zip(net_ptr[:-1], net_ptr[1:])]
    hg = _MTK.create_hypergraph(ctx, num_nodes, len(nets), nets, weights.tolist(), [1] * len(nets))
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


@register("hypergraph")
def hypergraph_partition(edge_index: Tensor, num_nodes: int, num_parts: int, seed: int,
                         epsilon: float = 0.03, backend: str = "mtkahypar",
                         preset: str = "deterministic") -> Tensor:
    """Minimises the exact exchange volume (km1 of the column-net model).

    Args:
        epsilon: allowed imbalance of the vertex weights (row nonzeros) per part.
        backend: ``"mtkahypar"`` (MIT, default) or ``"kahypar"`` (GPLv3, the project's own
            km1 configuration, run in a child process).
        preset: Mt-KaHyPar preset; ``"deterministic"`` gives the same partition for a seed.
    """
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    net_ptr, pins = column_nets(edge_index, num_nodes)
    part = run_backend(net_ptr, pins, row_nnz(edge_index, num_nodes), num_nodes, num_parts, epsilon, seed,
                       backend, preset)
    return torch.from_numpy(part)


def run_backend(net_ptr: np.ndarray, pins: np.ndarray, weights: np.ndarray, num_nodes: int, num_parts: int,
                epsilon: float, seed: int, backend: str = "mtkahypar", preset: str = "deterministic") -> np.ndarray:
    """Partitions the hypergraph ``(net_ptr, pins)`` for km1 with the chosen backend."""
    if backend == "mtkahypar":
        return _mtkahypar(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed, preset)
    if backend == "kahypar":
        from .kahypar_backend import kahypar_partition
        return kahypar_partition(net_ptr, pins, weights, num_nodes, num_parts, epsilon, seed)
    raise ValueError(f"unknown hypergraph backend {backend!r}; available: 'mtkahypar', 'kahypar'")
