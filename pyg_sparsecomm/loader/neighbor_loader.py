r"""``DistributedNeighborLoader``: PyG's ``NeighborLoader`` over a partitioned graph."""
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..sampling import host_reads
from ..sampling.frontier import frontiers
from ..sampling.in_edge_sample import sample_in_edges, shard_in_edge_order
from ..sampling.row_sets import difference, disjoint_union
from ..sampling.rules import NeighborSampling
from .base import DistributedLoader
from .batch import Sampled, build_batch
from .halo_requests import HaloRequests


class DistributedNeighborLoader(DistributedLoader):
    r"""Mini-batches of sampled neighbourhoods, drawn by all ranks together from their shards.

    The batches are those of :class:`~.sampling.NeighborSampling` on the whole graph (the same
    for any partition and any ``P``): seeds from ``input_nodes``, about ``batch_size`` per batch,
    and for each hop ``h`` at most ``num_neighbors[h]`` uniformly sampled in-edges of every node
    first reached at the hop before.  Each rank owns a batch's nodes of its shard: it samples
    their in-edges itself (it holds them) and asks the owners of new remote sources to sample
    theirs, in one request exchange per hop; one reply then fixes the batch's plan.  A yielded
    batch (see :func:`~.batch.batch_attributes`) holds this rank's rows ordered by hop -- seeds
    first, ``out[:batch.batch_size]`` are the rows to score -- and ``batch.adj``, whose halo is
    exactly the remote rows the batch's edges read.  Pass ``batch.num_sampled_nodes`` and
    ``batch.num_sampled_edges`` to a PyG ``BasicGNN`` made distributed to trim each layer to
    the hops it needs (its exchanges shrink too).

    Every rank must iterate the loader together (the same number of batches, in order).
    ``len(loader)`` (the batches of the epoch, :mod:`~.base`), ``len(loader.dataset)`` (the
    global number of seeds) and ``batch.global_batch_size`` are the same on every rank: a
    progress bar counts ``tqdm(loader)``, or ``pbar.update(batch.global_batch_size)`` towards
    ``len(loader.dataset)``.  A rank's share of a batch may hold 0 or 1 seeds: the batch's
    tensors keep their dimensions (``out[:batch.batch_size]`` is ``[0, C]`` or ``[1, C]``; a
    ``.squeeze()`` on it would drop a dimension at 1 seed only), and a rank without seeds
    still takes part (its rows feed the others' seeds).

    Args:
        local (torch_geometric.data.Data): the rank's shard (``shard(data)`` / ``load_shard``).
        num_neighbors (Sequence[int]): fanout per hop, integers (``-1``: all in-edges).
        batch_size (int, optional): seeds per batch, on average over the epoch's batches (each input node
            falls in one of ``ceil(n_inputs / batch_size)`` batches uniformly at random). (default: :obj:`1`)
        input_nodes (torch.Tensor, optional): the seed candidates, as PyG's ``NeighborLoader`` takes them: global node
            ids (``split_idx["train"]``) or a bool mask over all nodes (``data.train_mask``);
            each rank keeps those it owns.  A bool mask over the shard's rows
            (``local.train_mask``) works too (:mod:`~.seeds`). (default: every node)
        shuffle (bool, optional): draw new batches every epoch (else the same seeds per batch; neighbours
            are drawn anew every epoch either way). (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group (default: the default group).
        transform (Callable[[Data], Data], optional): a function applied to every batch (as PyG loaders' ``transform``).
            (default: :obj:`None`)
        prefetch (int, optional): batches sampled ahead on a background thread while the current one trains
            (:mod:`~.prefetch`; its exchanges use a process group of their own, made here);
            ``0``: sample in the iterating thread. (default: :obj:`1`, or PyG's ``num_workers``)
        drop_last (bool, optional): PyG's meaning over global batches: every batch holds exactly ``batch_size``
            seeds over all ranks (a rank's share still varies), ``len(loader)`` is
            ``len(loader.dataset) // batch_size`` and the ``len(loader.dataset) % batch_size``
            seeds left over are not drawn that epoch (others each epoch with ``shuffle``, the
            same ones without; :class:`~.sampling.NeighborSampling`).  Without it, a batch holds
            ``batch_size`` seeds on average. (default: :obj:`False`)
        **pyg_options (optional): PyG ``NeighborLoader`` keywords (``num_workers``, ``persistent_workers``,
            ``replace``, ``disjoint``, ...): taken where they mean the same, else refused by
            name with the reason (:mod:`~.pyg_options`).
    """

    sampling: NeighborSampling
    #: the subclass a heterogeneous shard gets (:mod:`.hetero_neighbor_loader` registers itself)
    _heterogeneous: type["DistributedNeighborLoader"] | None = None

    def __init_subclass__(cls, heterogeneous: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if heterogeneous:
            DistributedNeighborLoader._heterogeneous = cls

    def __new__(cls, local: Any = None, *args: Any, **kwargs: Any) -> "DistributedNeighborLoader":
        """A ``HeteroData`` shard gets the heterogeneous loader, as PyG's ``NeighborLoader`` takes both."""
        if isinstance(local, HeteroData) and cls is DistributedNeighborLoader and cls._heterogeneous is not None:
            return object.__new__(cls._heterogeneous)
        return object.__new__(cls)

    def __init__(self, local: Data, num_neighbors: Sequence[int], batch_size: int = 1,
                 input_nodes: Tensor | None = None, shuffle: bool | None = False, seed: int = 0,
                 group: dist.ProcessGroup | None = None, transform: Callable[[Data], Data] | None = None,
                 prefetch: int | None = None, drop_last: bool = False, **pyg_options: Any) -> None:
        sampling, input_nodes = self._rule(local, num_neighbors, input_nodes, batch_size=batch_size,
                                           shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
        super().__init__(local, sampling, input_nodes, group, transform, prefetch, pyg_options)
        self.input_rows = torch.nonzero(self.input_mask).view(-1)
        self.num_batches = sampling.num_batches(len(self.dataset))

    def _rule(self, local: Data, num_neighbors: Any, input_nodes: Any,
              **batching: Any) -> tuple[NeighborSampling, Tensor | None]:
        """The batch rule of the arguments, and the seed candidates as :mod:`~.seeds` reads them."""
        if isinstance(num_neighbors, dict):
            raise ValueError("num_neighbors is a dict (per edge type, heterogeneous graphs): pass a HeteroData shard "
                             "(shard(hetero_data)), or one list of fanouts, one per hop")
        if not isinstance(num_neighbors, Sequence) or isinstance(num_neighbors, str):
            raise ValueError(f"num_neighbors must be a list of fanouts, one per hop (e.g. [10, 5]), "
                             f"got {num_neighbors!r}")
        return NeighborSampling(num_neighbors=tuple(num_neighbors), **batching), input_nodes

    def _seed_rows(self, local: Data, group: dist.ProcessGroup | None) -> tuple[Tensor, int]:
        """As the base class; also puts every row's in-edges in the canonical order they are drawn
        from (:mod:`~pyg_sparsecomm.sampling.in_edge_sample`), once, on the shard's device."""
        seed_n_id, num_nodes = super()._seed_rows(local, group)
        self.in_order = shard_in_edge_order(self.adj, self.e_id)
        self.degree = self.adj.rowptr.diff()
        self.halo_requests = HaloRequests([self.adj.plan])
        return seed_n_id, num_nodes

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[Data]:
        n_id = self.seed_n_id
        seeds = torch.arange(self.num_nodes, device=n_id.device) if self.global_seeds is None else self.global_seeds
        seed_batch = self.sampling.batch_of(epoch, n_id.index_select(0, self.input_rows), self.num_batches, seeds)
        for b, rows in enumerate(seeds_by_batch(self.input_rows, seed_batch, self.num_batches)):
            if global_seeds[b] == 0:
                continue
            batch = self.sample(epoch, b, rows)
            batch.global_batch_size = int(global_seeds[b])
            yield batch

    def sample(self, epoch: int, b: int, seeds: Tensor) -> Data:
        """Batch ``b`` of ``epoch`` from this rank's ``seeds`` (shard rows, ascending); collective: one
        all-to-all per hop.  On the host every set of rows a hop keeps (its frontier, the rows reached,
        the batch's rows so far) is a sorted tensor of the batch's rows
        (:mod:`~pyg_sparsecomm.sampling.row_sets`): O(batch) memory and work per hop, no mask of the
        shard's rows.  On an accelerator, masks of the shard's rows, read once per hop
        (:mod:`~pyg_sparsecomm.sampling.frontier`): finding a set's size would wait for the device."""
        if host_reads.waits_for_device(self.adj.device):  # (looked up here: tests stand in for a GPU)
            return self._sample_masks(epoch, b, seeds)
        adj, num_hops = self.adj, self.sampling.num_hops
        asks, edges, hops = self.halo_requests.batch_sets(self.sample_group), [], []
        frontier, in_batch, hop_rows = seeds, seeds, [seeds]
        for h in range(1, num_hops + 1):
            key, fanout = self.sampling.draw(epoch, b, h)
            pos = sample_in_edges(key, fanout, adj.rowptr, self.in_order, frontier,
                                  self.seed_n_id.index_select(0, frontier))
            edges.append(pos)
            hops.append(torch.full_like(pos, h))
            (reached,) = asks.hop_rows([[adj.col.index_select(0, pos)]], h)
            frontier = difference(reached, in_batch, adj.num_owned)
            in_batch = disjoint_union(in_batch, frontier)
            hop_rows.append(frontier)
        sampled = Sampled(hop_rows, torch.cat(edges), torch.cat(hops), int(seeds.numel()))
        return build_batch(self.local, adj, sampled, asks.requests(), num_hops, self.sample_group)

    def _sample_masks(self, epoch: int, b: int, seeds: Tensor) -> Data:
        """:meth:`sample` with masks of the shard's rows (the path an accelerator takes)."""
        adj, num_hops = self.adj, self.sampling.num_hops
        row_hop = torch.full((adj.num_owned,), -1, dtype=torch.long, device=adj.device)
        row_hop.index_fill_(0, seeds, 0)
        newly, asks, edges, hops = row_hop == 0, self.halo_requests.batch(self.sample_group), [], []
        for h in range(1, num_hops + 1):
            key, fanout = self.sampling.draw(epoch, b, h)
            frontier, sizes = frontiers({0: newly}, {0: (0, self.degree, fanout)})
            pos = sample_in_edges(key, fanout, adj.rowptr, self.in_order, frontier[0],
                                  self.seed_n_id.index_select(0, frontier[0]), sizes[0])
            edges.append(pos)
            hops.append(torch.full_like(pos, h))
            (reached,) = asks.hop([[adj.col.index_select(0, pos)]], h)
            newly = reached.logical_and_(row_hop < 0)
            row_hop.masked_fill_(newly, h)
        sampled = Sampled(row_hop, torch.cat(edges), torch.cat(hops), int(seeds.numel()))
        return build_batch(self.local, adj, sampled, asks.requests(), num_hops, self.sample_group)


def seeds_by_batch(rows: Tensor, batch: Tensor, num_batches: int) -> tuple[Tensor, ...]:
    """``rows`` split by their ``batch`` (``-1``: in none), ascending within each of the
    ``num_batches`` batches; one sort and one read of the device per epoch (not a mask per batch)."""
    order = torch.argsort(batch, stable=True)
    counts = torch.zeros(num_batches + 1, dtype=torch.long, device=batch.device)
    counts.index_add_(0, batch + 1, torch.ones_like(batch))  # (bincount would read the largest batch first)
    return torch.split(rows.index_select(0, order), counts.tolist())[1:]
