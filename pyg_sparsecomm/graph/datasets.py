"""Graphs that need no download (the default of the examples and benchmarks): SBM, R-MAT, IGBH-, MovieLens- and
Amazon-Book-shaped; the Planetoid sets are loaded by name in :mod:`pyg_sparsecomm.launch.datasets`."""
import functools

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected


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
    edge_index = _seeded_sbm_edges(tuple(sizes), tuple(probs.clamp(max=1.0).view(-1).tolist()), seed).clone()
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


def sbm_edges(block_sizes: list[int], edge_probs: torch.Tensor) -> torch.Tensor:
    """PyG's undirected ``stochastic_blockmodel_graph(block_sizes, edge_probs)``, edge for edge.

    Pair ``(i, j)``, ``i < j``, is an edge with probability ``edge_probs[b_i, b_j]``: one
    Bernoulli draw per pair from the global generator, in the row-major order of PyG's
    ``torch.combinations``, then both directions.  The pairs' probabilities are the upper
    triangle of the :math:`N \times N` matrix ``edge_probs[b][:, b]`` (two row gathers), read
    in row-major order by a mask; the kept pairs are the nonzeros of the mask's triangle
    filled with the draws (row-major again), without listing the pairs' indices.
    """
    block = torch.repeat_interleave(torch.arange(len(block_sizes)), torch.tensor(block_sizes))
    n = block.numel()
    upper = torch.ones(n, n, dtype=torch.bool).triu_(1)
    pair_probs = edge_probs.index_select(0, block).index_select(1, block).masked_select(upper)
    keep = torch.bernoulli(pair_probs).to(torch.bool)
    kept = torch.zeros(n, n, dtype=torch.bool).masked_scatter_(upper, keep)
    return to_undirected(kept.nonzero().t(), num_nodes=n)


@functools.lru_cache(maxsize=2)
def _seeded_sbm_edges(block_sizes: tuple[int, ...], edge_probs: tuple[float, ...], seed: int) -> torch.Tensor:
    """:func:`sbm_edges` drawn after ``torch.manual_seed(seed)`` (the graph of PyG's
    ``stochastic_blockmodel_graph``, which draws from the global generator), whose state is put
    back after.  The last two graphs are kept per process: a script or test suite that loads
    ``"SBM"`` once per model or run would regenerate the same graph each time; :func:`sbm_graph`
    hands out a copy."""
    num_classes = len(block_sizes)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return sbm_edges(list(block_sizes), torch.tensor(edge_probs).view(num_classes, num_classes))
    finally:
        torch.random.set_rng_state(state)


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
        edge_index = to_undirected(edge_index, num_nodes=n)
    return Data(edge_index=edge_index, num_nodes=n)


IGBH_RELATIONS = (("paper", "cites", "paper"), ("paper", "written_by", "author"),
                  ("author", "affiliated_to", "institute"), ("paper", "topic", "fos"))


def igbh_like(num_papers: int = 1000, num_authors: int | None = None, num_institutes: int | None = None,
              num_fos: int | None = None, num_features: int = 32, num_classes: int = 8,
              avg_degree: float = 4.0, exponent: float = 1.0, featureless: tuple[str, ...] = (),
              isolated: float = 0.0, without_reverse: tuple[str, ...] = ("cites",), seed: int = 0):
    r"""A synthetic graph shaped like IGB-Heterogeneous (MLPerf's RGAT benchmark), no download.

    Node types ``paper``, ``author``, ``institute``, ``fos``; relations ``cites``
    (paper -> paper), ``written_by`` (paper -> author), ``affiliated_to`` (author -> institute),
    ``topic`` (paper -> fos) and the reverse ``rev_<relation>`` of every relation not named in
    ``without_reverse`` (so by default ``cites`` stays directed, as in IGBH).  Each relation has
    about ``avg_degree`` edges per source node; both endpoints are drawn with probability

    .. math:: p_i \propto (1 + \pi(i))^{-\mathrm{exponent}}

    for a random permutation :math:`\pi` of each node type, so degrees follow a power law
    (duplicates removed, self-loops of ``cites`` kept).  Papers carry ``x`` (a class centroid plus
    noise), ``y`` and ``train_mask``/``val_mask``/``test_mask`` (50/25/25 %); the other types carry
    random ``x``, except those in ``featureless`` (``num_nodes`` only: give them a
    ``torch.nn.Embedding``).  The same ``seed`` gives the same graph.

    Args:
        num_papers (int, optional): papers. (default: :obj:`1000`)
        num_authors (int, optional): authors. (default: ``num_papers``)
        num_institutes (int, optional): institutes. (default: ``max(2, num_papers // 50)``)
        num_fos (int, optional): fields of study. (default: ``max(2, num_papers // 10)``)
        num_features (int, optional): width of every ``x``. (default: :obj:`32`)
        num_classes (int, optional): paper classes. (default: :obj:`8`)
        avg_degree (float, optional): edges per source node of every relation. (default: :obj:`4.0`)
        exponent (float, optional): the power law's exponent (0: uniform). (default: :obj:`1.0`)
        featureless (tuple[str, ...], optional): node types without ``x``. (default: :obj:`()`)
        isolated (float, optional): fraction of every node type's nodes without any edge. (default: :obj:`0.0`)
        without_reverse (tuple[str, ...], optional): relations added without their reverse (directed relations).
            (default: :obj:`('cites',)`)
        seed (int, optional): the generator's seed. (default: :obj:`0`)

    Returns:
        a :class:`~torch_geometric.data.HeteroData`.
    """
    from torch_geometric.data import HeteroData
    sizes = {"paper": num_papers, "author": num_papers if num_authors is None else num_authors,
             "institute": max(2, num_papers // 50) if num_institutes is None else num_institutes,
             "fos": max(2, num_papers // 10) if num_fos is None else num_fos}
    unknown = sorted(set(featureless) - set(sizes))
    if unknown or not 0 <= isolated < 1:
        raise ValueError(f"igbh_like: featureless must name node types of {sorted(sizes)} (got {unknown}) and "
                         f"isolated must be in [0, 1) (got {isolated})")
    gen = torch.Generator().manual_seed(seed)
    weights = {t: _power_law_weights(n, exponent, isolated, gen) for t, n in sizes.items()}
    data = HeteroData()
    for node_type, n in sizes.items():
        data[node_type].num_nodes = n
        if node_type not in featureless:
            data[node_type].x = torch.randn(n, num_features, generator=gen)
    y = torch.randint(0, num_classes, (num_papers,), generator=gen)
    if "paper" not in featureless:
        data["paper"].x += 2.0 * torch.randn(num_classes, num_features, generator=gen)[y]
    data["paper"].y = y
    split = torch.randperm(num_papers, generator=gen)
    cuts = [num_papers // 2, 3 * num_papers // 4]
    for name, part in zip(("train_mask", "val_mask", "test_mask"), split.tensor_split(cuts), strict=True):
        data["paper"][name] = torch.zeros(num_papers, dtype=torch.bool).index_fill_(0, part, True)
    for src, rel, dst in IGBH_RELATIONS:
        edge_index = _power_law_edges(weights[src], weights[dst], int(avg_degree * sizes[src]), gen)
        data[src, rel, dst].edge_index = edge_index
        if rel not in without_reverse:
            data[dst, f"rev_{rel}", src].edge_index = edge_index.flip(0)
    return data


def _power_law_weights(n: int, exponent: float, isolated: float, gen: torch.Generator) -> torch.Tensor:
    """Sampling weights ``(1 + rank)^-exponent`` in a random order; a fraction ``isolated`` is 0."""
    w = torch.empty(n)
    w[torch.randperm(n, generator=gen)] = (1.0 + torch.arange(n, dtype=torch.float)) ** -exponent
    w[torch.randperm(n, generator=gen)[:int(isolated * n)]] = 0.0
    return w


def _power_law_edges(src_w: torch.Tensor, dst_w: torch.Tensor, num_edges: int, gen: torch.Generator) -> torch.Tensor:
    """``num_edges`` draws of (source, destination) by their weights, duplicates removed, sorted."""
    if num_edges == 0 or float(src_w.sum()) == 0 or float(dst_w.sum()) == 0:
        return torch.empty(2, 0, dtype=torch.long)
    src = torch.multinomial(src_w, num_edges, replacement=True, generator=gen)
    dst = torch.multinomial(dst_w, num_edges, replacement=True, generator=gen)
    key = torch.unique(src * dst_w.numel() + dst)
    return torch.stack([key // dst_w.numel(), key % dst_w.numel()])


def movielens_like(num_users: int = 200, num_movies: int = 150, num_features: int = 16,
                   avg_ratings: float = 8.0, exponent: float = 1.0, seed: int = 0):
    r"""A synthetic graph shaped like PyG's ``MovieLens`` (``torch_geometric.datasets.MovieLens``), no download.

    Node types ``user`` (``num_nodes`` only, as MovieLens: a script gives users features) and
    ``movie`` (``x``); one relation ``('user', 'rates', 'movie')`` with ``edge_index``,
    ``edge_label`` (the rating, an integer in :math:`0..5`) and ``time`` (a timestamp).  Users and
    movies are drawn with power-law probabilities (as :func:`igbh_like`; duplicates removed, so
    some users and movies have no rating); a rating is
    :math:`\mathrm{round}(3.3 + b_u + q_m + \epsilon)` clipped to :math:`[0, 5]`, with a user
    bias :math:`b_u`, a movie quality :math:`q_m` read from its features and noise
    :math:`\epsilon`, so a model learns something real.  The same ``seed`` gives the same graph.

    Args:
        num_users (int, optional): users. (default: :obj:`200`)
        num_movies (int, optional): movies. (default: :obj:`150`)
        num_features (int, optional): width of the movies' ``x``. (default: :obj:`16`)
        avg_ratings (float, optional): ratings drawn per user (before duplicates are removed).
            (default: :obj:`8.0`)
        exponent (float, optional): the power law's exponent (0: uniform). (default: :obj:`1.0`)
        seed (int, optional): the generator's seed. (default: :obj:`0`)

    Returns:
        a :class:`~torch_geometric.data.HeteroData`.
    """
    from torch_geometric.data import HeteroData
    gen = torch.Generator().manual_seed(seed)
    users = _power_law_weights(num_users, exponent, 0.0, gen)
    movies = _power_law_weights(num_movies, exponent, 0.0, gen)
    edge_index = _power_law_edges(users, movies, int(avg_ratings * num_users), gen)
    x = torch.randn(num_movies, num_features, generator=gen)
    quality = x @ torch.randn(num_features, generator=gen) / num_features ** 0.5
    bias = 0.7 * torch.randn(num_users, generator=gen)
    noise = 0.5 * torch.randn(edge_index.size(1), generator=gen)
    rating = (3.3 + bias[edge_index[0]] + quality[edge_index[1]] + noise).round().clamp(0, 5).to(torch.long)
    data = HeteroData()
    data["user"].num_nodes = num_users
    data["movie"].x = x
    data["user", "rates", "movie"].edge_index = edge_index
    data["user", "rates", "movie"].edge_label = rating
    time = torch.randint(964_982_703, 1_537_799_250, (edge_index.size(1),), generator=gen)
    data["user", "rates", "movie"].time = time
    return data


def amazon_book_like(num_users: int = 300, num_books: int = 400, num_interactions: int = 3000,
                     test_ratio: float = 0.2, exponent: float = 1.0, isolated: float = 0.05, seed: int = 0):
    r"""A synthetic graph shaped like PyG's ``AmazonBook`` (``torch_geometric.datasets.AmazonBook``,
    LightGCN's benchmark), no download.

    Node types ``user`` and ``book`` (``num_nodes`` only); ``('user', 'rates', 'book')`` with the
    training interactions as ``edge_index`` and the test interactions as ``edge_label_index``, and
    ``('book', 'rated_by', 'user')`` the reverse of the training ones, as PyG's dataset.  Users and
    books are drawn with power-law probabilities (as :func:`igbh_like`; duplicates removed), a
    fraction ``isolated`` of each with probability 0 (users without interactions, books nobody
    rated); each interaction is a test one with probability ``test_ratio``.  PyG's
    ``examples/lightgcn.py`` runs on it unchanged after ``data.to_homogeneous()`` (users first,
    books offset by ``num_users``).  The same ``seed`` gives the same graph.

    Args:
        num_users (int, optional): users. (default: :obj:`300`)
        num_books (int, optional): books. (default: :obj:`400`)
        num_interactions (int, optional): interactions drawn (before duplicates are removed).
            (default: :obj:`3000`)
        test_ratio (float, optional): the fraction of interactions held out for testing.
            (default: :obj:`0.2`)
        exponent (float, optional): the power law's exponent (0: uniform). (default: :obj:`1.0`)
        isolated (float, optional): the fraction of users and of books without interactions.
            (default: :obj:`0.05`)
        seed (int, optional): the generator's seed. (default: :obj:`0`)

    Returns:
        a :class:`~torch_geometric.data.HeteroData`.
    """
    from torch_geometric.data import HeteroData
    gen = torch.Generator().manual_seed(seed)
    users = _power_law_weights(num_users, exponent, isolated, gen)
    books = _power_law_weights(num_books, exponent, isolated, gen)
    edge_index = _power_law_edges(users, books, num_interactions, gen)
    test = torch.rand(edge_index.size(1), generator=gen) < test_ratio
    data = HeteroData()
    data["user"].num_nodes, data["book"].num_nodes = num_users, num_books
    data["user", "rates", "book"].edge_index = edge_index[:, ~test]
    data["user", "rates", "book"].edge_label_index = edge_index[:, test]
    data["book", "rated_by", "user"].edge_index = edge_index[:, ~test].flip(0)
    return data
