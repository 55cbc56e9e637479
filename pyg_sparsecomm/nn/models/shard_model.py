r"""What PyG's models that compute over all nodes (``DeepGraphInfomax``, ``GAE`` and its kin) share on a
shard: the shard they last ran on, the process group, and their noise.

A model's forward finds the shard's adjacency (a :class:`~pyg_sparsecomm.HaloAdj`: ``data.edge_index``
of :func:`~pyg_sparsecomm.partition_and_shard`) among its arguments; its plan names the rows this rank
holds (``n_id``) of the graph's :math:`N` nodes.  The model's whole-graph terms (means over all nodes,
permutations of all nodes, negatives over all pairs, noise per node) are computed from it.  In a job of
several ranks a call without a shard raises: the model's parameters are synchronised and its terms
are reduced over ranks, so every rank must pass its shard.  On one process without a shard the model
is PyG's.
"""
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from ...comm.group import host_all_gather
from ...comm.group import world_size as group_world_size
from ...plan.halo_adj import HaloAdj
from ...plan.homogeneous import RankPlan
from .node_noise import node_normal


@dataclass
class ShardContext:
    """The shard a model runs on: its plan's rows and the group.

    Args:
        plan (RankPlan): the shard adjacency's plan (``n_id``: the owned rows' global ids).
        group (torch.distributed.ProcessGroup, optional): the ranks the graph is sharded over.
            (default: :obj:`None`, all)
    """
    plan: RankPlan
    group: dist.ProcessGroup | None = None
    _part: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_id(self) -> Tensor:
        return self.plan.n_id

    @property
    def num_nodes(self) -> int:
        return int(self.plan.num_nodes)

    @property
    def num_owned(self) -> int:
        return int(self.plan.num_owned)

    @property
    def part(self) -> np.ndarray:
        """``[N]`` owner of every node (every rank's ``n_id`` gathered at first use: a collective)."""
        if self._part is None:
            from ...link.partition_vector import gathered_partition  # at first use: the layers load no link/
            self._part = gathered_partition(self.plan.n_id, self.num_nodes, self.group)
        return self._part


def shard_adjacency(args: tuple, kwargs: dict) -> HaloAdj | None:
    """The first :class:`~pyg_sparsecomm.HaloAdj` among a call's arguments (``None`` if there is none)."""
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, HaloAdj)), None)


class ShardModel:
    """Mixin of the distributed model classes (see the module doc): the group and noise seed
    :func:`~pyg_sparsecomm.distribute` attaches, and the shard of the last call."""

    _sparsecomm_group: dist.ProcessGroup | None = None
    _sparsecomm_shard: ShardContext | None = None
    _sparsecomm_seed: int = 0
    _sparsecomm_steps: dict[int, int] | None = None

    def attach_shard(self, group: dist.ProcessGroup | None) -> None:
        """Prepares the model for shards of ``group`` (a collective): the seed of its node noise is
        rank 0's ``torch.initial_seed()`` (what ``torch.manual_seed`` set; the generator is not drawn from).

        Args:
            group (torch.distributed.ProcessGroup): the ranks the graph is sharded over (``None``: all).
        """
        self._sparsecomm_group = group
        self._sparsecomm_shard = None
        seed = torch.initial_seed() % (1 << 62)
        self._sparsecomm_seed = host_all_gather([seed], group)[0][0] if group_world_size(group) > 1 else seed
        self._sparsecomm_steps = {}

    def _shard_of(self, what: str, args: tuple, kwargs: dict) -> ShardContext | None:
        """The shard of a call's arguments, kept as the model's; ``None`` on one process without one."""
        adj = shard_adjacency(args, kwargs)
        group = self._sparsecomm_group
        if adj is None:
            if group_world_size(group) > 1:
                raise ValueError(f"{what} under distribute() in a job of {group_world_size(group)} ranks got no "
                                 f"shard's graph: it computes over all nodes of the graph, so every rank passes its "
                                 f"shard (data = partition_and_shard(data); model(data.x, data.edge_index)); "
                                 f"mini-batches are not supported")
            self._sparsecomm_shard = None
            return None
        shard = self._sparsecomm_shard
        if shard is None or shard.plan is not adj.plan:
            shard = ShardContext(adj.plan, group)
        self._sparsecomm_shard = shard
        return shard

    def _node_ids(self, rows: Tensor, what: str) -> Tensor:
        """Global ids of ``rows``' rows: the last shard's (checked), or ``arange`` without one."""
        shard = self._sparsecomm_shard
        if shard is None:
            return torch.arange(rows.size(0), device=rows.device)
        if rows.size(0) != shard.num_owned:
            raise ValueError(f"{what}: got {rows.size(0)} rows but this rank's shard owns {shard.num_owned} nodes: "
                             f"pass the encoder's output on the shard (z = model.encode(data.x, data.edge_index))")
        return shard.n_id.to(rows.device)

    def _node_noise(self, like: Tensor, stream: int, what: str) -> Tensor:
        """Standard normal noise shaped like ``like`` (its rows the model's nodes), keyed by global node
        ids (:func:`~.node_noise.node_normal`): a new draw of ``stream`` at every call."""
        steps = self._sparsecomm_steps if self._sparsecomm_steps is not None else {}
        self._sparsecomm_steps = steps
        steps[stream] = steps.get(stream, -1) + 1
        ids = self._node_ids(like, what)
        cols = int(like[0].numel()) if like.size(0) else int(np.prod(like.shape[1:]))
        noise = node_normal(ids, cols, self._sparsecomm_seed, stream, steps[stream], like.dtype, like.device)
        return noise.view_as(like)

