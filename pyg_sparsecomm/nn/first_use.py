r"""The check a distributed layer runs the first time it meets a shard: one small all-gather.

Shards of different partitions, a shard built for another rank or world size, node features of
different widths or dtypes on different ranks, or a ``cached=True`` layer called with another
shard than the one it cached: each would end in a mismatched collective (a gloo abort, a hang) on
some ranks and a silently wrong result on others.  The first call of a layer on a shard (a new
:class:`~pyg_sparsecomm.plan.homogeneous.RankPlan` object) gathers from every rank a small fingerprint

* the plan: rank, world size, number of nodes, owned rows, :math:`\sum n` and :math:`\sum n^2` of the
  owned global ids, and per peer a digest of the global ids sent to it and received from it;
* the call: the shape after the node dimension and the dtype of ``x``;
* the layer: a digest of its (materialised) parameters, which must be equal on every rank (a
  ``DistributedGCNConv`` built without a seed, or ``reset_parameters()`` after ``distribute()``,
  would otherwise train one model per rank);
* this rank's own findings (``x`` of another row count, edge arguments of another length, a cached
  layer on another adjacency),

and every rank derives the same verdict from the same gathered list, so every rank raises the
same ``ValueError`` naming the problem, the ranks and the fix.  Rank ``s`` sends rank ``r`` exactly
the rows ``r`` expects iff the digests of the ids ``s`` sends to ``r`` and ``r`` receives from ``s`` agree.
The fingerprints travel first as a fixed number of integers (:func:`summary`, digests as ``int64``)
in one host all-gather; only when those show a problem (:func:`agrees`) does every rank gather the
whole entries (``all_gather_object``: two collectives and pickling) to word the message.

Later calls (:func:`check_call`) run this rank's cheap checks (edge arguments, rows of ``x``) and
agree on three flags with one host all-reduce (a few integers over gloo, no device wait): *some rank
met a new shard* (then every rank runs the first-use check above, so a shard of another partition
passed on one rank at step 5 is the same error on every rank, not a mismatched collective), *some
rank's check failed* (then every rank raises every failing rank's message) and *some rank's layer
meets its first mini-batch* (then every rank compares the layer's parameters, :func:`check_parameters`:
a batch's plan is new every step and covers no whole graph, so it is checked once per layer, not
per batch, and for the parameters only; ``reset_parameters()`` after ``distribute()`` without a
common seed is then an error in mini-batch training too).  Without the
flags the peers of a rank that raised would wait in the layer's exchange until it dies ("Connection
closed by peer").  Its cost per call is in ``benchmarks/RESULTS.md`` (``agreement_cost.py``).
"""
import hashlib
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parameter import is_lazy
from torch_geometric.nn import MessagePassing

from ..comm.group import host_all_gather, host_all_reduce, is_distributed, raise_together, rank, world_size
from ..plan.halo_adj import HaloAdj
from ..plan.homogeneous import RankPlan
from .layer_adapters import forward_signature

#: attributes in which PyG's ``cached=True`` layers keep what they computed from the first graph
CACHE_ATTRIBUTES = ("_cached_edge_index", "_cached_adj_t", "_cached_x", "_cached_h", "_cached_spmm")

_WRAP = 2 ** 64  # id sums are int64 sums (which wrap), compared modulo 2^64
_SAME_SHARD = ("build every rank's shard from one partitioned graph (one SparsityAwarePartitioner run, or "
               "save_partition once and load_shard on every rank)")


class CheckedPlan:
    """What a layer's checks passed on: the plan of its last full-graph first-use check, held
    weakly (it must not keep a shard alive, travel with ``layer.to(device)`` or be pickled with the
    layer: a copy checks again), and whether its parameters were compared across the ranks.

    A mini-batch's plan is new every step, so mini-batch calls are not keyed on it: the layer's
    first mini-batch call compares its parameters once (:func:`check_parameters`), and later
    batches only run the per-call checks."""

    def __init__(self) -> None:
        self._ref: weakref.ref | None = None
        self.parameters = False  # the ranks' parameters were found equal (a first-use check passed)

    def is_(self, plan: RankPlan) -> bool:
        return self._ref is not None and self._ref() is plan

    def set(self, plan: RankPlan) -> None:
        self._ref = weakref.ref(plan)
        self.parameters = True

    def __getstate__(self) -> dict:
        return {"_ref": None, "parameters": False}


def _as_int64(value: int) -> int:
    """``value`` modulo 2^64 as a signed ``int64``."""
    value %= _WRAP
    return value - _WRAP if value >= _WRAP // 2 else value


def _text_digest(text: str) -> int:
    return _as_int64(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little"))


def summary(entry: dict, size: int) -> list[int]:
    """``entry`` (a :func:`fingerprint`) as ``11 + 2 * size`` integers (``size``: the group's world
    size): rank, world size, nodes, owned rows, the two id sums, error?, features?, the features'
    digest, group size, the digests sent to and received from each peer, then the parameters' digest."""
    def per_peer(digests: list[str]) -> list[int]:
        ints = [_as_int64(int(d, 16)) for d in digests[:size]]
        return ints + [0] * (size - len(ints))
    features = entry["features"]
    return [entry["rank"], entry["world_size"], entry["num_nodes"], entry["num_owned"],
            *(_as_int64(v) for v in entry["id_sums"]), int(entry["error"] is not None), int(features is not None),
            _text_digest(repr(features)), entry["group_size"], *per_peer(entry["sent"]), *per_peer(entry["received"]),
            _text_digest(entry["parameters"])]


def agrees(rows: list[list[int]]) -> bool:
    """Whether the gathered :func:`summary` rows show nothing :func:`verdict` would report: no
    error, shards of one partition of one graph for this group, node features alike (``True``
    implies that :func:`verdict` finds nothing, barring a collision of 64-bit digests)."""
    size = len(rows)
    if len({row[-1] for row in rows}) != 1:
        return False
    if any(row[6] or row[1] != size or row[0] != r or row[9] != size for r, row in enumerate(rows)):
        return False
    n = rows[0][2]
    if any(row[2] != n for row in rows):
        return False
    covered = (sum(row[3] for row in rows), sum(row[4] for row in rows) % _WRAP, sum(row[5] for row in rows) % _WRAP)
    if covered != (n, n * (n - 1) // 2 % _WRAP, (n - 1) * n * (2 * n - 1) // 6 % _WRAP):
        return False
    if any(rows[s][10 + r] != rows[r][10 + size + s] for s in range(size) for r in range(size) if s != r):
        return False
    return not all(row[7] for row in rows) or len({row[8] for row in rows}) == 1


def _digest(t: Tensor) -> str:
    """The bytes of ``t`` hashed where they lie (no copy: a shard's column index is 8 B per edge)."""
    flat = t.detach().cpu().contiguous().reshape(-1).numpy()
    return hashlib.blake2b(flat.view(np.uint8).data, digest_size=8).hexdigest()


def _split_digests(ids: Tensor, counts: list[int]) -> list[str]:
    return [_digest(part) for part in ids.cpu().split(counts)]


def shard_key(adj: HaloAdj) -> tuple:
    """What a cached layer depends on: the owned and halo ids and the local structure."""
    plan = adj.plan
    return (plan.world_size, plan.num_nodes, _digest(plan.n_id), _digest(plan.halo_n_id), _digest(adj.rowptr),
            _digest(adj.col))


def node_features(conv: MessagePassing, args: tuple, kwargs: dict) -> Any:
    """The call's ``x`` (the source side of an ``(x_src, x_dst)`` pair), or its first tensor argument."""
    bound = forward_signature(type(conv)).bind_partial(conv, *args, **kwargs).arguments
    x = bound.get("x", next((v for v in args if isinstance(v, Tensor)), None))
    return x[0] if isinstance(x, (tuple, list)) and x else x


_EDGE_ARGUMENTS = ("edge_weight", "edge_attr", "edge_type")


def check_edge_arguments(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj) -> None:
    """Edge-level arguments must be the shard's, in ``adj``'s edge order (``local.edge_weight``...)."""
    bound = forward_signature(type(conv)).bind_partial(conv, *args, **kwargs).arguments
    for name in _EDGE_ARGUMENTS:
        value = bound.get(name)
        if isinstance(value, Tensor) and value.dim() > 0 and value.size(0) != adj.nnz:
            raise ValueError(f"{type(conv).__name__}: {name} has shape {list(value.shape)}: {value.size(0)} rows but "
                             f"this rank's adjacency has {adj.nnz} edges: pass the shard's local.{name} (in "
                             f"local.adj's edge order)")


def check_rows(conv: MessagePassing, x: Any, adj: HaloAdj) -> None:
    """``x`` must hold the shard's rows."""
    node_dim = conv.node_dim if conv.node_dim >= 0 else conv.node_dim + (x.dim() if isinstance(x, Tensor) else 0)
    if isinstance(x, Tensor) and 0 <= node_dim < x.dim() and x.size(node_dim) != adj.num_owned:
        raise ValueError(f"{type(conv).__name__}: x has {x.size(node_dim)} rows but this rank owns "
                         f"{adj.num_owned} rows (of {adj.plan.num_nodes} in the graph): pass the shard's rows, local.x")


def check_cache(conv: MessagePassing, adj: HaloAdj, cached_key: tuple | None) -> tuple | None:
    """The key of the shard a ``cached=True`` layer's cache holds (``None`` for other layers).

    Such a layer reuses what it computed from the first shard (PyG's semantics); on another shard
    that is silently wrong, so this raises naming the fix."""
    if not getattr(conv, "cached", False):
        return None
    key = shard_key(adj)
    filled = any(getattr(conv, name, None) is not None for name in CACHE_ATTRIBUTES)
    if filled and cached_key is not None and key != cached_key:
        raise ValueError(f"{type(conv).__name__}(cached=True) reuses the normalised adjacency of the shard it first "
                         f"ran on, but is now called with another shard (another partition or graph): build the "
                         f"layer with cached=False, or one layer per shard")
    return key


def fingerprint(plan: RankPlan, x: Any, error: str | None, group: dist.ProcessGroup | None,
                parameters: str = "") -> dict:
    """This rank's entry of the all-gather (see the module doc); ``parameters``: the layer's
    :func:`parameter_digest`."""
    ids = plan.n_id.cpu()
    features = None
    if isinstance(x, Tensor):
        features = (tuple(x.shape[1:]), str(x.dtype).replace("torch.", ""))
    return {"rank": plan.rank, "world_size": plan.world_size, "num_nodes": plan.num_nodes,
            "num_owned": plan.num_owned, "id_sums": (int(ids.sum()) % _WRAP, int((ids * ids).sum()) % _WRAP),
            "sent": _split_digests(plan.n_id.cpu()[plan.send_index.cpu()], plan.send_counts),
            "received": _split_digests(plan.halo_n_id, plan.recv_counts),
            "features": features, "error": error, "group_rank": rank(group), "group_size": world_size(group),
            "parameters": parameters}


def _partition_problems(entries: list[dict]) -> list[str]:
    size = entries[0]["group_size"]
    if any(e["world_size"] != size for e in entries):
        sizes = ", ".join(f"rank {r}: {e['world_size']}" for r, e in enumerate(entries))
        return [f"the shards were partitioned into different numbers of parts ({sizes}) but the process group "
                f"has {size} ranks: partition with SparsityAwarePartitioner(num_parts={size}) and {_SAME_SHARD}"]
    wrong = [f"the shard was built for rank {e['rank']} but this process is rank {r}"
             for r, e in enumerate(entries) if e["rank"] != r]
    if wrong:
        return ["; ".join(wrong) + ": every rank must use its own shard (shard(data) on each rank takes the rank "
                "from the process group; load_shard(root) likewise)"]
    if len({e["num_nodes"] for e in entries}) > 1:
        nodes = ", ".join(f"rank {r}: {e['num_nodes']}" for r, e in enumerate(entries))
        return [f"the shards come from different graphs (number of nodes {nodes}): {_SAME_SHARD}"]
    n = entries[0]["num_nodes"]
    covered = (sum(e["num_owned"] for e in entries), sum(e["id_sums"][0] for e in entries) % _WRAP,
               sum(e["id_sums"][1] for e in entries) % _WRAP)
    expected = (n, n * (n - 1) // 2 % _WRAP, (n - 1) * n * (2 * n - 1) // 6 % _WRAP)
    mismatched = [f"{s} -> {r}" for r in range(size) for s in range(size)
                  if s != r and entries[s]["sent"][r] != entries[r]["received"][s]]
    if covered != expected or mismatched:
        detail = (f"the halo rows ranks {', '.join(mismatched[:4])} exchange differ from what the receiver "
                  f"expects" if mismatched else "their owned nodes do not cover the graph exactly once")
        return [f"the shards come from different partitions ({detail}): {_SAME_SHARD}"]
    return []


def _feature_problems(entries: list[dict], who: str) -> list[str]:
    features = [e["features"] for e in entries]
    if any(f is None for f in features) or len(set(features)) == 1:
        return []
    described = ", ".join(f"rank {r}: [*, {', '.join(map(str, shape))}] {dtype}"
                          for r, (shape, dtype) in enumerate(features))
    return [f"{who} got node features of different widths or dtypes on different ranks ({described}): every rank "
            f"must pass its rows of the same feature matrix (local.x of the same graph, cast alike)"]


def _parameter_problems(entries: list[dict], who: str) -> list[str]:
    differ = [r for r, e in enumerate(entries) if e["parameters"] != entries[0]["parameters"]]
    if not differ:
        return []
    return [f"{who} holds different parameters on different ranks (rank 0's differ from rank "
            f"{', '.join(map(str, differ[:4]))}'s), so each rank would train its own model. Under distribute(model), "
            f"which copied rank 0's parameters to every rank, some ranks changed them afterwards (reset_parameters(), "
            f"load_state_dict() or an initialisation of their own): call reset_parameters() before distribute(), not "
            f"after, or do it under the same torch.manual_seed on every rank (likewise with broadcast=False). A layer "
            f"used without distribute(), such as DistributedGCNConv on its own, keeps each rank's own draw: build it "
            f"under the same torch.manual_seed on every rank, or wrap the model in distribute(model) (or "
            f"DistributedDataParallel)"]


def parameter_digest(module: torch.nn.Module) -> str:
    """A digest of ``module``'s materialised parameters (lazy ones left out), equal on ranks that
    hold the same values."""
    return "".join(_digest(p.detach().contiguous().reshape(-1).view(torch.uint8))  # any dtype, bfloat16 too
                   for p in module.parameters() if not is_lazy(p))


def check_parameters(who: str, parameters: str, group: dist.ProcessGroup | None) -> None:
    """Raises ``ValueError`` on every rank of ``group`` unless every rank's ``parameters`` (a
    :func:`parameter_digest`) is the same: one host all-gather of one integer per rank.  A layer's
    first call on a mini-batch runs it (the plan checks of :func:`check_first_use` are a shard's);
    every rank calls it together."""
    digests = [row[0] for row in host_all_gather([_text_digest(parameters)], group)]
    problems = _parameter_problems([{"parameters": d} for d in digests], who)
    if problems:
        raise ValueError(f"{who} (first call on a mini-batch; every rank raises this error):\n{problems[0]}")


def verdict(entries: list[dict], who: str) -> str | None:
    """The one error message every rank derives from the gathered ``entries`` (``None``: consistent)."""
    errors = [f"rank {r}: {e['error']}" for r, e in enumerate(entries) if e["error"]]
    problems = (errors or _partition_problems(entries) or _feature_problems(entries, who)
                or _parameter_problems(entries, who))
    if not problems:
        return None
    return "\n".join(problems)


def check_first_use(who: str, adj: HaloAdj, x: Any, local_checks: Callable[[], None],
                    group: dist.ProcessGroup | None, collective: bool = True, parameters: str = "") -> None:
    """Runs ``local_checks`` on this rank and the consistency check of the module doc over
    ``group``; raises ``ValueError`` on every rank if anything failed on any rank.

    Args:
        who: the layer's class name, for messages.
        adj: the shard's adjacency the layer was called with.
        x: the layer's node features (checked for width and dtype if a tensor).
        local_checks: this rank's own checks (raise ``ValueError`` naming the problem and the fix).
        group: the process group of the layer's exchanges.
        collective: ``False``: this rank's checks only (1.5D layouts, whose shards ``exchange_group`` checks).
        parameters: the layer's :func:`parameter_digest` (must be equal on every rank).
    """
    error = None
    try:
        local_checks()
    except ValueError as e:
        error = str(e)
    if not collective or not is_distributed(group) or world_size(group) == 1:
        if error:
            raise ValueError(error)
        return
    entry = fingerprint(adj.plan, x, error, group, parameters)
    if agrees(host_all_gather(summary(entry, world_size(group)), group)):
        return
    entries: list[Any] = [None] * world_size(group)  # every rank is here: word the problem from the whole entries
    dist.all_gather_object(entries, entry, group=group)
    message = verdict(entries, who)
    if message:
        raise ValueError(f"{who} (first call on this shard; every rank raises this error):\n{message}")


def check_first_call(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj, cached_key: tuple | None,
                     group: dist.ProcessGroup | None, collective: bool = True) -> tuple | None:
    """The checks of a layer's first call on a shard: this rank's (edge arguments, rows of ``x``,
    a cached layer's shard) and the consistency of every rank's, agreed over ``group``; returns the
    key of the shard a ``cached=True`` layer now holds (see :func:`check_cache`)."""
    x = node_features(conv, args, kwargs)
    key = [cached_key]

    def local_checks() -> None:
        check_edge_arguments(conv, args, kwargs, adj)
        check_rows(conv, x, adj)
        key[0] = check_cache(conv, adj, cached_key)

    check_first_use(type(conv).__name__, adj, x, local_checks, group, collective, parameter_digest(conv))
    return key[0]


def check_call(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj, checked: CheckedPlan,
               cached_key: tuple | None, group: dist.ProcessGroup | None, collective: bool = True) -> tuple | None:
    """The checks of every call of a distributed layer, agreed over ``group`` (see the module doc).

    Args:
        conv, args, kwargs: the layer and its call.
        adj: the shard's (or a mini-batch's) adjacency of the call.
        checked: the plan the first-use check passed on; set to ``adj``'s when it runs and passes
            (on a mini-batch: whether the parameters were compared, see :class:`CheckedPlan`).
        cached_key: the shard a ``cached=True`` layer's cache holds (:func:`check_cache`).
        group: the process group of the layer's exchanges.
        collective: ``False``: this rank's checks only (1.5D layouts, whose shards ``exchange_group`` checks).

    Returns:
        the key of the shard a ``cached=True`` layer now holds.

    Raises:
        ValueError: on every rank, if a check failed on any rank.
    """
    new = not adj.is_minibatch and not checked.is_(adj.plan)
    unchecked_parameters = adj.is_minibatch and not checked.parameters  # once per layer, not per batch
    if not collective or not is_distributed(group) or world_size(group) == 1:
        if new:
            cached_key = check_first_call(conv, args, kwargs, adj, cached_key, group, collective)
            checked.set(adj.plan)
        else:
            _later_checks(conv, args, kwargs, adj)
        return cached_key
    error = None
    try:
        _later_checks(conv, args, kwargs, adj)
    except ValueError as e:
        error = e
    some_new, some_unchecked, some_failed = host_all_reduce(
        [int(new), int(unchecked_parameters), int(error is not None)], dist.ReduceOp.MAX, group)
    if some_new:  # every rank checks its shard against the others' (one all-gather)
        cached_key = check_first_call(conv, args, kwargs, adj, cached_key, group, collective)
        if not adj.is_minibatch:
            checked.set(adj.plan)
    elif some_failed:
        def local() -> None:
            if error is not None:
                raise error
        raise_together(local, f"{type(conv).__name__} (a later call on this shard)", group)
    elif some_unchecked:  # a layer's first mini-batch: its parameters must be every rank's
        check_parameters(type(conv).__name__, parameter_digest(conv), group)
        checked.parameters = True
    return cached_key


def _later_checks(conv: MessagePassing, args: tuple, kwargs: dict, adj: HaloAdj) -> None:
    """This rank's checks of a call after the first on its shard: the edge arguments and (full-graph
    shards: a mini-batch's rows are trimmed per layer) the rows of ``x``."""
    check_edge_arguments(conv, args, kwargs, adj)
    if not adj.is_minibatch:
        check_rows(conv, node_features(conv, args, kwargs), adj)
