"""The :class:`~pyg_sparsecomm.nn.rules.registry.LayerRule` of every PyG (and torch) class
``distribute`` treats specially, by class name in the module that defines it (names a PyG version
lacks are skipped).  Classes not listed run the default exchange (see :mod:`.registry`).

Importing this module registers them (:func:`register_pyg_rules`); :func:`~pyg_sparsecomm.distribute`
imports it, and :mod:`pyg_sparsecomm.nn` exports ``layer_rule`` and ``layer_table`` from here, so every
lookup of a rule sees PyG's (a user's rule registered before is kept).  It sits above the registry: the rules
name the distributed classes and adapters they swap in."""
from typing import Any

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.nn import conv, norm
from torch_geometric.nn.models import linkx

from .. import norms
from ..correct_and_smooth import DistributedCorrectAndSmooth
from ..han_conv import DistributedHANConv
from ..hgt_conv import DistributedHGTConv
from ..lightgcn import DistributedLightGCN
from ..mask_label import DistributedMaskLabel
from ..models.classes import MODELS
from ..models.rect import DistributedRECT_L
from ..models.sparse_linear import DistributedSparseLinear
from ..models.verdicts import SUBMODULE_CLASSES, refused_models
from ..runtime.adapters import cheb_laplacian, label_propagation_inputs, node_embedding_ids
from .registry import GcnNormalisation, LayerRule, register_named
from .registry import layer_rule as layer_rule  # re-exported: pyg_sparsecomm.nn.layer_rule sees PyG's rules
from .registry import layer_table as layer_table

_KNN = "builds a k-nearest-neighbour graph from the features of all nodes"
_CUGRAPH = "runs in cugraph-ops on the whole graph (CUDA only)"
_TOP_K = "keeps the top-scoring ratio of all nodes of the graph"
_ATTENDS = "attends from every node to all nodes of the graph"


def _weighted(weight: str = "edge_weight", **kwargs: Any) -> LayerRule:
    return LayerRule(aggregation="spmm", weight=weight, **kwargs)


def _symnorm(conv: Any) -> bool:
    return "symnorm" in conv.aggregators


def normalisations() -> dict[str, GcnNormalisation]:
    """How each layer of ``torch_geometric.nn`` that calls ``gcn_norm`` in its forward calls it (see
    :mod:`~pyg_sparsecomm.nn.runtime.normalisation` for what each delivery does)."""
    cached = GcnNormalisation("arguments", pyg_cache=True)
    placeholder = GcnNormalisation("placeholder")
    return {
        "GCNConv": GcnNormalisation("arguments", improved=True, pyg_cache=True, folds_degrees=True),
        "GCN2Conv": cached, "APPNP": cached, "DNAConv": cached,
        "FAConv": GcnNormalisation("arguments", weight=None, pyg_cache=True),
        "TAGConv": GcnNormalisation("arguments", self_loops=False),
        "LGConv": GcnNormalisation("arguments", self_loops=False),
        "PDNConv": GcnNormalisation("propagate"),
        "SGConv": placeholder, "SSGConv": placeholder, "MixHopConv": placeholder,
        "ARMAConv": GcnNormalisation("placeholder", self_loops=False),
        "EGConv": GcnNormalisation("placeholder", weight=None, target="symnorm_weight", pyg_cache=True,
                                   applies=_symnorm),
        "LabelPropagation": GcnNormalisation("placeholder", weight=None, self_loops=False, dtype_of=None),
    }


def conv_rules() -> dict[str, LayerRule]:
    """``torch_geometric.nn.conv``: linear aggregations, attention, adapters, normalisations, refusals."""
    normalisation = normalisations()
    rules = {name: _weighted(normalisation=normalisation.get(name)) for name in (
        "GCNConv", "SGConv", "APPNP", "TAGConv", "ARMAConv", "GCN2Conv", "SSGConv", "LGConv", "MixHopConv",
        "SimpleConv", "GatedGraphConv", "PDNConv")}
    rules.update({name: LayerRule(normalisation=normalisation[name]) for name in ("DNAConv", "FAConv", "EGConv")})
    rules.update({
        "GraphConv": _weighted(post_linear="lin_rel"),
        "ClusterGCNConv": _weighted(drops_adj_values=True),
        "ChebConv": _weighted("norm", adapter=cheb_laplacian),
        "SAGEConv": _weighted("", post_linear="lin_l", drops_adj_values=True),
        "GINConv": _weighted("", input_linear="nn", drops_adj_values=True),
        "MFConv": _weighted("", drops_adj_values=True),
        "RGCNConv": LayerRule(drops_adj_values=True, adapter=node_embedding_ids),
        "GATConv": LayerRule(aggregation="attention", weight="alpha", fused_source=("lin_src", "lin")),
        "GATv2Conv": LayerRule(aggregation="attention", weight="alpha"),
        # their forward on a heterogeneous shard's adj_dict: one exchange per source node type
        "HGTConv": LayerRule(distributed_class=DistributedHGTConv),
        "HANConv": LayerRule(distributed_class=DistributedHANConv),
    })
    refused = {
        "DynamicEdgeConv": _KNN, "GravNetConv": _KNN,
        "XConv": "builds a k-nearest-neighbour graph from the positions of all nodes",
        "DirGNNConv": "also propagates along reversed edges (flow='target_to_source'), whose messages the "
                      "owner of the target does not hold",
        "GPSConv": "runs global attention over all nodes of the graph",
        "HypergraphConv": "propagates over a node-hyperedge incidence, not a graph's edge_index",
        "SignedConv": "takes two adjacencies (positive and negative edges)",
        "SuperGATConv": "samples negative edges over the whole graph while training",
        "WLConv": "numbers colours in the order it meets them, which differs between ranks",
        "PANConv": "builds powers of the whole adjacency matrix (a torch_sparse path integral)",
        "MeshCNNConv": "reads each mesh edge's four neighbours by their position in the global edge_index",
        "CuGraphSAGEConv": _CUGRAPH, "CuGraphGATConv": _CUGRAPH, "CuGraphRGCNConv": _CUGRAPH,
        "FusedGATConv": "runs in dgNN's fused CUDA kernel on the whole graph",
    }
    rules.update({name: LayerRule(refused=reason) for name, reason in refused.items()})
    return rules


def module_rules() -> dict[str, LayerRule]:
    """Models, attention and pooling modules of ``torch_geometric.nn`` computing over all nodes;
    ``LabelPropagation``'s normalisation and inputs, ``CorrectAndSmooth``'s and ``MaskLabel``'s
    distributed classes; ``LightGCN``'s sharded embedding table; the distributed classes of
    ``DeepGraphInfomax``, ``GAE``, ``VGAE``, ``ARGA``, ``ARGVA`` and ``InnerProductDecoder``."""
    refused = {
        **{name: why for name, why in refused_models().items() if name not in SUBMODULE_CLASSES},
        "SGFormerAttention": _ATTENDS,
        "PolynormerAttention": _ATTENDS,
        "PerformerAttention": "attends from every node to all nodes of the graph (kernelised attention)",
        "TopKPooling": _TOP_K, "SAGPooling": _TOP_K, "ASAPooling": _TOP_K, "PANPooling": _TOP_K,
        "EdgePooling": "contracts edges chosen greedily over the whole graph",
        "ClusterPooling": "contracts edges chosen over the whole graph",
        "MemPooling": "soft-assigns all nodes of the graph to clusters",
        "DMoNPooling": "soft-assigns all nodes of a dense graph to clusters",
    }
    rules = {name: LayerRule(refused=reason) for name, reason in refused.items()}
    # its labels one-hot over the whole graph's classes, its mask the shard's rows (adapters.py)
    rules["LabelPropagation"] = LayerRule(normalisation=normalisations()["LabelPropagation"],
                                          adapter=label_propagation_inputs)
    rules["CorrectAndSmooth"] = LayerRule(distributed_class=DistributedCorrectAndSmooth)  # its scale over all ranks
    rules["MaskLabel"] = LayerRule(distributed_class=DistributedMaskLabel)  # its mask the shard's rows
    rules["LightGCN"] = LayerRule(distributed_class=DistributedLightGCN)  # its embedding table sharded by owner
    rules["RECT_L"] = LayerRule(distributed_class=DistributedRECT_L)  # its class centres over all ranks
    for model, distributed, _ in MODELS:  # DeepGraphInfomax, GAE and kin: their whole-graph terms over all ranks
        rules[model.__name__] = LayerRule(distributed_class=distributed)
    return rules


def norm_rules() -> dict[str, LayerRule]:
    """``torch_geometric.nn.norm``: norms reduced over all ranks, norms refused."""
    unreduced = "normalises with whole-graph statistics that distribute() does not reduce"
    hetero = "normalises per node type of a heterogeneous graph, which is not supported"
    return {
        "InstanceNorm": LayerRule(distributed_class=norms.DistributedInstanceNorm),
        "GraphNorm": LayerRule(distributed_class=norms.DistributedGraphNorm),
        "LayerNorm": LayerRule(distributed_class=norms.DistributedLayerNorm),
        "PairNorm": LayerRule(refused=unreduced),
        "MeanSubtractionNorm": LayerRule(refused="subtracts a whole-graph mean that distribute() does not reduce"),
        "HeteroBatchNorm": LayerRule(refused=hetero),
        "HeteroLayerNorm": LayerRule(refused=hetero),
    }


def torch_rules() -> dict[str, LayerRule]:
    """``torch.nn``: ``BatchNorm1d`` reduced over all ranks, ``SyncBatchNorm`` refused."""
    return {
        "BatchNorm1d": LayerRule(distributed_class=norms.DistributedBatchNorm),
        "SyncBatchNorm": LayerRule(refused="is torch's CUDA-only synchronised BatchNorm; use torch.nn.BatchNorm1d, "
                                           "which distribute() synchronises on every backend"),
    }


def pyg_rules() -> list[tuple[Any, dict[str, LayerRule]]]:
    """``[(module, {class name: rule})]`` of the built-in rules."""
    return [(conv, conv_rules()), (pyg_nn, module_rules()), (norm, norm_rules()), (torch.nn, torch_rules()),
            (linkx, {"SparseLinear": LayerRule(distributed_class=DistributedSparseLinear)})]  # rows read by global id


def register_pyg_rules() -> None:
    """Registers :func:`pyg_rules` (a rule registered before for a class, e.g. the user's, is kept)."""
    for module, rules in pyg_rules():
        register_named(module, rules)


register_pyg_rules()
