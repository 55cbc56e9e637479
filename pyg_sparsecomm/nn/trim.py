"""PyG's ``BasicGNN`` trims its inputs layer by layer (``trim_to_layer``) through a
``TrimToLayer`` module; made distributed, that module trims a mini-batch's
:class:`~pyg_sparsecomm.loader.SampledAdj` (its rows, edges, halo and send lists) and
anything else exactly as before."""
from typing import Any

import torch

from ..compat import trim_to_layer_module
from ..sampling.sampled_adj import SampledAdj, trim_to_layer

TrimToLayer = trim_to_layer_module()


class _DistributedTrim:
    """The ``forward`` of a distributed ``TrimToLayer`` (a picklable bound call)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def __call__(self, layer: int, num_sampled_nodes_per_hop: Any, num_sampled_edges_per_hop: Any,
                 x: Any, edge_index: Any, edge_attr: Any = None) -> Any:
        if isinstance(edge_index, SampledAdj):
            return trim_to_layer(layer, num_sampled_nodes_per_hop, num_sampled_edges_per_hop, x, edge_index,
                                 edge_attr)
        return type(self.module).forward(self.module, layer, num_sampled_nodes_per_hop, num_sampled_edges_per_hop,
                                         x, edge_index, edge_attr)


def install(module: torch.nn.Module) -> None:
    """Makes every ``TrimToLayer`` in ``module`` trim mini-batch adjacencies (idempotent)."""
    for child in module.modules():
        if isinstance(child, TrimToLayer) and not isinstance(child.__dict__.get("forward"), _DistributedTrim):
            child.forward = _DistributedTrim(child)
