"""What ``distribute()`` does with every entry of ``torch_geometric.nn.models``: one table, read by
the refusals (:func:`~pyg_sparsecomm.nn.rules.pyg.module_rules` registers a refusing rule for each
``"refused"`` entry) and by the README's table (:func:`model_table`).

Each entry is ``(verdict, text)``:

* ``"exact"``: the single process's outputs, the class's own losses, gradients and evaluation
  helpers on nodes, at any P (the text says how and where it is tested);
* ``"refused"``: ``distribute()`` raises ``NotImplementedError`` naming the class; the text
  completes "it ..." (why, and what to use instead);
* ``"n/a"``: not a model class (a function), nothing for ``distribute()`` to judge.

This module is a leaf: it imports nothing of the package, so the rules and the README read the
same text.  ``tests/nn/test_model_verdicts.py`` fails when PyG adds a class this table lacks.
"""

EXACT, REFUSED, NOT_APPLICABLE = "exact", "refused", "n/a"

_GRAPH_LEVEL = ("works on batches of small graphs (molecules: {what}, pooled per graph over `batch`), which "
                "distribute() does not partition: graph-level models parallelise over graphs, train it with "
                "torch's DistributedDataParallel and a DistributedSampler over the dataset")
_BASIC = ("exact: every conv by its rule, `norm=` reduced over all ranks, `jk=` node-wise "
          "(tests/nn/test_distribute_models.py)")
_CAPTUM = "a function of PyG's Captum explainability bridge, not a model class: nothing for distribute() to convert"

#: ``{class name in torch_geometric.nn.models: (verdict, text)}``
MODEL_VERDICTS: dict[str, tuple[str, str]] = {
    "MLP": (EXACT, "exact: node-wise (its `norm=` BatchNorm reduced over all ranks; tests/nn/test_node_models.py)"),
    "GCN": (EXACT, _BASIC), "GraphSAGE": (EXACT, _BASIC), "GIN": (EXACT, _BASIC), "GAT": (EXACT, _BASIC),
    "PNA": (EXACT, _BASIC), "EdgeCNN": (EXACT, _BASIC),
    "JumpingKnowledge": (EXACT, "exact: `cat`, `max` and `lstm` combine each node's layer outputs, node-wise "
                                "(tests/nn/test_node_models.py)"),
    "HeteroJumpingKnowledge": (EXACT, "exact: `JumpingKnowledge` per node type, node-wise "
                                      "(tests/nn/test_node_models.py)"),
    "MetaLayer": (REFUSED, "indexes node tensors by edge_index itself (`x[row]`, `x[col]` for its edge model) and "
                           "pools its global model over `batch`, outside message passing: on a shard edge_index "
                           "holds local ids and halo columns; write the edge and node models as MessagePassing "
                           "layers"),
    "Node2Vec": (REFUSED, "draws random walks over the whole graph's edge_index in its own loader and trains an "
                          "embedding row per node of the whole graph: train it unpartitioned (the walks need the "
                          "whole graph; wrap it in DistributedDataParallel, each rank a share of the start nodes), or "
                          "use distribute(LightGCN(...)), whose embedding table is sharded by owner"),
    "MetaPath2Vec": (REFUSED, "draws metapath walks over the whole heterogeneous graph in its own loader and trains "
                              "an embedding row per node of every type: train it unpartitioned "
                              "(DistributedDataParallel over start nodes)"),
    "DeepGraphInfomax": (EXACT, "exact: `forward` (the user's `summary` and `corruption` see the whole graph's "
                                "node tensors, below), `loss` over all nodes, `test` (PyG's `LogisticRegression` fit "
                                "once on every rank's training rows, gathered; accuracy over every rank's test rows)"),
    "InnerProductDecoder": (EXACT, "exact on a shard's pairs (`PairIndex`); `forward_all` and a tensor `edge_index` "
                                   "take `z` of all nodes (`gather_nodes(z, data, dst=None)`), a shard's `z` refused"),
    "GAE": (EXACT, "exact: `encode`, `decode`, `recon_loss` (PyG's own negatives over the whole graph when none are "
                   "given), `test` (scikit-learn's AUC and AP over every rank's pairs, computed by the package)"),
    "VGAE": (EXACT, "exact: as `GAE`, `kl_loss` over all nodes; `reparametrize` draws its noise per global node id "
                    "(the same for any P; PyG's distribution, not PyG's draws)"),
    "ARGA": (EXACT, "exact: as `GAE`, `reg_loss` and `discriminator_loss` over all nodes (the prior's samples per "
                    "global node id)"),
    "ARGVA": (EXACT, "exact: as `VGAE`, `reg_loss` and `discriminator_loss` over all nodes"),
    "SignedGCN": (REFUSED, "convolves over two adjacencies (positive and negative edges, SignedConv), builds its "
                           "spectral features with a truncated SVD of the whole signed graph and samples its "
                           "negatives over all nodes (structured_negative_sampling): train it in one process"),
    "RENet": (REFUSED, "encodes temporal knowledge-graph events by subject and object histories (a sequence of "
                       "graph snapshots), not a partitioned graph: train it with DistributedDataParallel over "
                       "batches of events"),
    "GraphUNet": (REFUSED, "pools with TopKPooling (keeps the top-scoring ratio of all nodes of the graph) and "
                           "augments its adjacency to A^2 over the whole graph (augment_adj): no partition of the "
                           "graph holds the pooled graph; train it in one process or use a BasicGNN model"),
    "SchNet": (REFUSED, _GRAPH_LEVEL.format(what="radius graph of atom positions")),
    "DimeNet": (REFUSED, _GRAPH_LEVEL.format(what="directional messages over triplets of atoms")),
    "DimeNetPlusPlus": (REFUSED, _GRAPH_LEVEL.format(what="directional messages over triplets of atoms")),
    "ViSNet": (REFUSED, _GRAPH_LEVEL.format(what="a radius graph with vector features")),
    "GNNFF": (REFUSED, _GRAPH_LEVEL.format(what="a radius graph of atoms and triplets of edges")),
    "AttentiveFP": (REFUSED, _GRAPH_LEVEL.format(what="attention over atoms and a per-molecule super node")),
    "NeuralFingerprint": (REFUSED, _GRAPH_LEVEL.format(what="fingerprints summed over atoms")),
    "GPSE": (REFUSED, "encodes the structure of each graph of a batch (a pretrained positional encoder over whole "
                      "small graphs, pooled per graph): compute its encodings before partitioning "
                      "(torch_geometric.transforms.AddGPSE on the whole graph) and pass them as node features"),
    "GPSENodeEncoder": (EXACT, "exact: node-wise (`Linear` of the features and of the precomputed encodings, its "
                               "BatchNorm1d reduced over all ranks; tests/nn/test_node_models.py)"),
    "to_captum_model": (NOT_APPLICABLE, _CAPTUM),
    "to_captum_input": (NOT_APPLICABLE, _CAPTUM),
    "captum_output_to_dicts": (NOT_APPLICABLE, _CAPTUM),
    "DeepGCNLayer": (EXACT, "exact when its conv is (the conv by its rule, the norm and activation node-wise), "
                            "`ckpt_grad=True` too: exact gradients under activation checkpointing "
                            "(tests/nn/test_checkpointing.py)"),
    "TGNMemory": (REFUSED, "keeps a memory row per node of the whole graph, updated from a stream of timed events, "
                           "not a partitioned graph: train it with DistributedDataParallel over event batches"),
    "LabelPropagation": (EXACT, "exact: global degrees, masks and index lists as the shard's rows "
                                "(tests/nn/test_label_models.py)"),
    "CorrectAndSmooth": (EXACT, "exact: its autoscale over all ranks (tests/nn/test_label_models.py)"),
    "MaskLabel": (EXACT, "exact: its mask the shard's rows (tests/nn/test_label_models.py)"),
    "RECT_L": (EXACT, "exact: `forward`, `embed`, and `get_semantic_labels` with its class centres over all ranks "
                      "(tests/nn/test_node_models.py)"),
    "LINKX": (EXACT, "exact: its `SparseLinear` reads its weight row per node of the whole graph at the global ids "
                     "of `local.adj`'s sources (no row exchanged; every rank holds the `[N, H]` weight, as PyG does, "
                     "its gradient all-reduced), its MLPs node-wise, their BatchNorm over all ranks; full-graph only "
                     "(tests/nn/test_node_models.py)"),
    "SparseLinear": (EXACT, "exact: as in `LINKX` (its module `torch_geometric.nn.models.linkx`)"),
    "LightGCN": (EXACT, "exact: its embedding table sharded by owner, `recommendation_loss`, `link_pred_loss`, "
                        "`recommend` over all ranks (tests/nn/test_lightgcn.py)"),
    "GroupAddRev": (EXACT, "exact: its backward inverts its blocks (their halo exchanges run again, on every rank) "
                           "and recomputes them, gradients summed once (PyG's RevGNN; tests/nn/test_node_models.py)"),
    "PMLP": (EXACT, "exact: training is node-wise (its BatchNorm1d reduced over all ranks), evaluation runs its "
                    "SimpleConv as one distributed SpMM (tests/nn/test_node_models.py)"),
    "LPFormer": (REFUSED, "computes personalised PageRank over the whole graph and attends over each target pair's "
                          "neighbourhoods by global ids: train it in one process"),
    "SGFormer": (REFUSED, "mixes every node with all nodes of the graph in its global attention (SGFormerAttention)"),
    "Polynormer": (REFUSED, "mixes every node with all nodes of the graph in its global attention "
                            "(PolynormerAttention)"),
    "ARLinkPredictor": (REFUSED, "has no message passing (an MLP of node features) and decodes pairs by global ids "
                                 "(`z[edge_index[0]]`) and a sum over all nodes (`calculate_r_fraction`): it needs "
                                 "no partitioned graph, train it with DistributedDataParallel over pairs"),
}

#: entries that live in a submodule of ``torch_geometric.nn.models`` but not in its ``__all__``
SUBMODULE_CLASSES = {"SparseLinear": "torch_geometric.nn.models.linkx"}


def refused_models() -> dict[str, str]:
    """``{class name: why}`` of the refused entries (the text completes "it ...")."""
    return {name: text for name, (verdict, text) in MODEL_VERDICTS.items() if verdict == REFUSED}


def model_table(names: list[str] | None = None) -> str:
    """The README's table: every entry of ``torch_geometric.nn.models`` with its verdict.

    Args:
        names (list[str], optional): the entries, in order (default: ``torch_geometric.nn.models.__all__``).
    """
    from torch_geometric.nn import models
    rows = ["| class | under `distribute()` |", "|---|---|"]
    for name in models.__all__ if names is None else names:
        verdict, text = MODEL_VERDICTS[name]
        rows.append(f"| `{name}` | {text if verdict != REFUSED else 'refused: it ' + text} |")
    return "\n".join(rows)
