r"""``DistributedNeighborLoader``: PyG's ``NeighborLoader`` over a partitioned graph, homogeneous
(``Data``) or heterogeneous (``HeteroData``), as PyG's takes both."""
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..sampling.rules import NeighborSampling
from .base import DistributedLoader
from .hetero_neighbor_sampler import HeteroNeighborSampler
from .neighbor_sampler import HomoNeighborSampler


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

    A ``HeteroData`` shard (``shard(hetero_data)``) is sampled by
    :class:`~.hetero_neighbor_sampler.HeteroNeighborSampler`: the batches are those of
    :class:`~pyg_sparsecomm.sampling.hetero_rules.HeteroNeighborSampling` (seeds of one node type,
    ``num_neighbors`` per relation), one request exchange per hop for all source types.  A yielded
    batch (:func:`~.hetero_batch.hetero_batch_attributes`) is this rank's ``HeteroData``:
    ``batch.x_dict`` (rows of every type ordered by hop, the seeds first in the input type) and
    ``batch.adj_dict``, which ``distribute(to_hetero(model))`` / ``distribute(HeteroConv(...))``
    take as ``edge_index_dict`` (one exchange per source type and layer); score
    ``out[input_type][:batch[input_type].batch_size]``.  Before layer ``i``,
    :func:`~pyg_sparsecomm.sampling.trim_to_layer` ``(i, batch.num_sampled_nodes_dict,
    batch.num_sampled_edges_dict, x_dict, adj_dict)`` keeps the hops that layer needs (PyG's
    heterogeneous ``trim_to_layer``), and its exchanges shrink with them.

    Args:
        local (torch_geometric.data.Data or torch_geometric.data.HeteroData): the rank's shard (``shard(data)`` /
            ``load_shard``, or ``shard(hetero_data)``).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]): fanout per hop, integers (``-1``: all
            in-edges); on a heterogeneous shard one list for every relation, or a dict ``{edge type: list}``
            naming every relation (``0``: none).
        batch_size (int, optional): seeds per batch, on average over the epoch's batches (each input node
            falls in one of ``ceil(n_inputs / batch_size)`` batches uniformly at random). (default: :obj:`1`)
        input_nodes (torch.Tensor or str or Tuple[str, torch.Tensor or None], optional): the seed candidates, as
            PyG's ``NeighborLoader`` takes them: global node ids (``split_idx["train"]``) or a bool mask over all
            nodes (``data.train_mask``); each rank keeps those it owns.  A bool mask over the shard's rows
            (``local.train_mask``) works too (:mod:`~.seeds`).  On a heterogeneous shard ``(node type, ids or
            mask)`` (ids of that type; ``None``: every node of it) or a node type alone, required.
            (default: every node)
        shuffle (bool, optional): draw new batches every epoch (else the same seeds per batch; neighbours
            are drawn anew every epoch either way). (default: :obj:`False`)
        seed (int, optional): the random stream shared by all ranks. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): the process group (default: the default group).
        transform (Callable[[Data], Data], optional): a function applied to every batch (as PyG loaders'
            ``transform``; ``HeteroData`` batches on a heterogeneous shard). (default: :obj:`None`)
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

    Shapes:
        - **input:** a shard of :math:`|\mathcal{V}_r|` rows (per node type on a heterogeneous shard),
          ``input_nodes`` :math:`(|\mathcal{V}_{in}|)` ids or :math:`(|\mathcal{V}|)` or :math:`(|\mathcal{V}_r|)`
          a mask *(optional)*
        - **output:** batches of :math:`|\mathcal{V}_b|` rows of this rank (``batch.x``
          :math:`(|\mathcal{V}_b|, F)`, ``x_dict`` per type), the first ``batch.batch_size`` the seeds
    """

    sampling: NeighborSampling
    sampler: HomoNeighborSampler | HeteroNeighborSampler  # the strategy of the shard's kind

    def __init__(self, local: Data | HeteroData, num_neighbors: Any, batch_size: int = 1,
                 input_nodes: Any = None, shuffle: bool | None = False, seed: int = 0,
                 group: dist.ProcessGroup | None = None, transform: Callable[[Any], Any] | None = None,
                 prefetch: int | None = None, drop_last: bool = False, **pyg_options: Any) -> None:
        kind = HeteroNeighborSampler if isinstance(local, HeteroData) else HomoNeighborSampler
        sampler = kind(local, num_neighbors, input_nodes, group, batch_size=batch_size, shuffle=bool(shuffle),
                       seed=seed, drop_last=bool(drop_last))
        super().__init__(sampler, group, transform, prefetch, pyg_options)
        self.input_rows = torch.nonzero(self.input_mask).view(-1)
        self.num_batches = self.sampling.num_batches(len(self.dataset))

    def _batches(self, epoch: int, global_seeds: Tensor) -> Iterator[Any]:
        n_id = self.seed_n_id
        seeds = torch.arange(self.num_nodes, device=n_id.device) if self.global_seeds is None else self.global_seeds
        seed_batch = self.sampling.batch_of(epoch, n_id.index_select(0, self.input_rows), self.num_batches, seeds)
        for b, rows in enumerate(seeds_by_batch(self.input_rows, seed_batch, self.num_batches)):
            if global_seeds[b] == 0:
                continue
            batch = self.sample(epoch, b, rows)
            batch.global_batch_size = int(global_seeds[b])
            yield batch

    def sample(self, epoch: int, b: int, seeds: Tensor) -> Any:
        """Batch ``b`` of ``epoch`` from this rank's ``seeds`` (shard rows, of the input type on a
        heterogeneous shard, ascending); collective: one all-to-all per hop (the strategy's ``sample``).

        Args:
            epoch (int): the epoch.
            b (int): the batch.
            seeds (torch.Tensor): ``[k]`` this rank's seed rows of the batch.
        """
        return self.sampler.sample(epoch, b, seeds, self.sample_group)


def seeds_by_batch(rows: Tensor, batch: Tensor, num_batches: int) -> tuple[Tensor, ...]:
    """``rows`` split by their ``batch`` (``-1``: in none), ascending within each of the
    ``num_batches`` batches; one sort and one read of the device per epoch (not a mask per batch)."""
    order = torch.argsort(batch, stable=True)
    counts = torch.zeros(num_batches + 1, dtype=torch.long, device=batch.device)
    counts.index_add_(0, batch + 1, torch.ones_like(batch))  # (bincount would read the largest batch first)
    return torch.split(rows.index_select(0, order), counts.tolist())[1:]
