"""Graphs that need no download (the default of the examples and benchmarks), and Planetoid."""
import torch
import torch.distributed as dist
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph


def sbm_graph(num_nodes: int = 4000, num_classes: int = 8, num_features: int = 64,
              avg_degree: float = 12.0, p_in_ratio: float = 0.6, feature_noise: float = 6.0,
              seed: int = 0) -> Data:
    """A stochastic-block-model node-classification graph, identical for a fixed seed.

    Blocks are classes; a fraction ``p_in_ratio`` of each node's expected edges
    stay inside its block.  Features are a noisy class centroid, so a GCN learns
    something real (and beats an MLP through the graph).  20 training nodes
    per class, 500 validation and 1000 test nodes, as in Planetoid's split.
    """
    gen = torch.Generator().manual_seed(seed)
    sizes = [num_nodes // num_classes + (1 if c < num_nodes % num_classes else 0) for c in range(num_classes)]
    block = num_nodes / num_classes
    p_in = avg_degree * p_in_ratio / block
    p_out = avg_degree * (1 - p_in_ratio) / (num_nodes - block)
    probs = torch.full((num_classes, num_classes), p_out)
    probs.fill_diagonal_(p_in)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # stochastic_blockmodel_graph draws from the global generator
    try:
        edge_index = stochastic_blockmodel_graph(sizes, probs.clamp(max=1.0), directed=False)
    finally:
        torch.random.set_rng_state(state)
    y = torch.repeat_interleave(torch.arange(num_classes), torch.tensor(sizes))
    centroids = torch.randn(num_classes, num_features, generator=gen)
    x = centroids[y] + feature_noise * torch.randn(num_nodes, num_features, generator=gen)

    perm = torch.randperm(num_nodes, generator=gen)
    train = torch.cat([perm[y[perm] == c][:20] for c in range(num_classes)])
    rest = perm[~torch.isin(perm, train)]
    masks = {}
    for name, idx in (("train_mask", train), ("val_mask", rest[:500]), ("test_mask", rest[500:1500])):
        m = torch.zeros(num_nodes, dtype=torch.bool)
        m[idx] = True
        masks[name] = m
    return Data(x=x, y=y, edge_index=edge_index, num_nodes=num_nodes, **masks)


def rmat_graph(scale: int = 14, edge_factor: int = 8, a: float = 0.57, b: float = 0.19,
               c: float = 0.19, seed: int = 0, directed: bool = True) -> Data:
    """An R-MAT graph with ``2**scale`` nodes and about ``edge_factor * 2**scale`` edges.

    Each edge picks one of the four quadrants with probabilities ``a, b, c,
    1 - a - b - c`` at every one of ``scale`` levels (Chakrabarti et al.),
    giving the skewed degree distribution of web and social graphs.  Duplicate
    edges and self-loops are removed; ``directed=False`` adds reverse edges.
    """
    import numpy as np
    d = 1.0 - a - b - c
    if min(a, b, c, d) < 0:
        raise ValueError("R-MAT probabilities a, b, c must sum to at most 1")
    rng = np.random.default_rng(seed)
    n, m = 1 << scale, edge_factor << scale
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for level in range(scale):  # one vectorised draw per bit
        q = rng.choice(4, size=m, p=[a, b, c, d])
        src |= (q >> 1).astype(np.int64) << level
        dst |= (q & 1).astype(np.int64) << level
    keep = src != dst
    key = np.unique(src[keep] * n + dst[keep])
    edge_index = torch.from_numpy(np.stack([key // n, key % n]))
    if not directed:
        from torch_geometric.utils import to_undirected
        edge_index = to_undirected(edge_index, num_nodes=n)
    return Data(edge_index=edge_index, num_nodes=n)


def load_dataset(name: str, root: str = "data", seed: int = 0, barrier: bool = True) -> Data:
    """``"SBM"`` (:func:`sbm_graph`, generated) or a Planetoid set (``"Cora"``, ``"CiteSeer"``,
    ``"PubMed"``) with normalised features from ``root``.

    Under a process group (and ``barrier=True``; pass ``False`` when only one rank calls it)
    rank 0 processes the raw files first while the others wait, so that ranks never write
    the same processed file at once.
    """
    if name == "SBM":
        return sbm_graph(seed=seed)
    import torch_geometric.transforms as T
    from torch_geometric.datasets import Planetoid
    sync = barrier and dist.is_available() and dist.is_initialized()
    if sync and dist.get_rank() != 0:
        dist.barrier()
    dataset = Planetoid(root, name, transform=T.NormalizeFeatures())
    if sync and dist.get_rank() == 0:
        dist.barrier()
    return dataset[0]
