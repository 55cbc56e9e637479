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

Later calls (:func:`~.checks.check_call`) run this rank's cheap checks (edge arguments, rows of ``x``) and
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
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parameter import is_lazy

from ...comm.group import host_all_gather, is_distributed, rank, world_size
from ...plan.halo_adj import HaloAdj
from ...plan.homogeneous import RankPlan

_WRAP = 2 ** 64  # id sums are int64 sums (which wrap), compared modulo 2^64
_SAME_SHARD = ("build every rank's shard from one partitioned graph (one SparsityAwarePartitioner run, or "
               "save_partition once and load_shard on every rank)")


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


def check_batch_inputs(who: str, x: Any, parameters: str, group: dist.ProcessGroup | None,
                       parameters_checked: bool = False) -> None:
    """Raises ``ValueError`` on every rank of ``group`` unless every rank's node features ``x`` have
    the same shape after the first dimension and dtype, and every rank's ``parameters`` (a
    :func:`parameter_digest`) are the same: one host all-gather of two integers per rank (and, to
    word a difference of features, one of the shapes).  A watched mini-batch call whose inputs
    changed on some rank runs it (:class:`~.checks.AgreementWatch`): its halo exchange would not pair
    up otherwise; every rank calls it together.

    Args:
        who (str): the layer's class name, for messages.
        x (Any): the call's node features (a tensor, else not compared).
        parameters (str): the layer's :func:`parameter_digest`.
        group (ProcessGroup or None): the process group of the layer's exchanges.
        parameters_checked (bool, optional): the layer's parameters were compared before (the message
            then names a later call). (default: :obj:`False`)
    """
    features = (tuple(x.shape[1:]), str(x.dtype).replace("torch.", "")) if isinstance(x, Tensor) else None
    rows = host_all_gather([_text_digest(repr(features)), _text_digest(parameters)], group)
    problems: list[str] = []
    if len({row[0] for row in rows}) > 1:
        gathered: list[Any] = [None] * len(rows)
        dist.all_gather_object(gathered, features, group=group)
        problems = _feature_problems([{"features": f} for f in gathered], who)
    problems = problems or _parameter_problems([{"parameters": row[1]} for row in rows], who)
    if problems:
        when = "a later call on a mini-batch" if parameters_checked else "first call on a mini-batch"
        raise ValueError(f"{who} ({when}; every rank raises this error):\n{problems[0]}")


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
        who (str): the layer's class name, for messages.
        adj (HaloAdj): the shard's adjacency the layer was called with.
        x (Any): the layer's node features (checked for width and dtype if a tensor).
        local_checks (Callable[[], None]): this rank's own checks (raise ``ValueError`` naming the problem
            and the fix).
        group (torch.distributed.ProcessGroup or None): the process group of the layer's exchanges.
        collective (bool, optional): ``False``: this rank's checks only (1.5D layouts, whose shards
            ``exchange_group`` checks). (default: :obj:`True`)
        parameters (str, optional): the layer's :func:`parameter_digest` (must be equal on every rank).
            (default: :obj:`""`, none)
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

