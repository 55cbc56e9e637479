r"""PyG's ``NeighborLoader`` keywords (and those it passes to ``torch.utils.data.DataLoader``),
read by the distributed loaders: each keyword that means the same here is taken, the others
are refused by name with the reason.

* ``batch_size``, ``shuffle``, ``input_nodes``, ``num_neighbors``, ``transform`` are the
  loaders' own arguments, and so is ``drop_last`` (``DistributedNodeSubsetLoader`` refuses ``True``);
* ``num_workers`` (times ``prefetch_factor``, if given) is the number of batches sampled ahead
  (``prefetch``): one background thread does it, whatever the number -- a batch's sampling
  needs collectives with the other ranks in a fixed order, which worker processes could not
  keep; ``num_workers=0`` samples in the iterating thread, as PyG does;
* keywords that only tune worker processes or host memory (``persistent_workers``,
  ``pin_memory``, ...) are accepted and change nothing (:data:`HARMLESS` says why);
* keywords that would change the batches are accepted at PyG's default value only
  (:data:`DEFAULT_ONLY` says why another value is refused).
"""
import difflib
from collections.abc import Iterable
from typing import Any

#: keyword -> why any value changes nothing here
HARMLESS: dict[str, str] = {
    "persistent_workers": "there are no worker processes to keep (one sampling thread per epoch)",
    "pin_memory": "batches are sliced where the shard lives (move it with local.to(device)): no host-to-device "
                  "copy to pin",
    "pin_memory_device": "batches are sliced where the shard lives: no host-to-device copy to pin",
    "filter_per_worker": "there are no worker processes: batches are built where they are sampled",
    "is_sorted": "the shard's adjacency is already sorted (CSR)",
    "multiprocessing_context": "no worker process is started",
    "in_order": "batches always come in order (every rank must take the same batch at the same step)",
    "temporal_strategy": "it only matters with time_attr, which is refused",
}

#: keyword -> (the value accepted, why another value is refused)
DEFAULT_ONLY: dict[str, tuple[Any, str]] = {
    "replace": (False, "sampling with replacement is not implemented: a node keeps a uniform subset of its "
                       "in-edges, without replacement"),
    "disjoint": (False, "a distributed batch is the union of its seeds' neighbourhoods split over the ranks by "
                        "owner (a node shared by two seeds is one row on one rank); per-seed disjoint copies "
                        "would need another plan per seed"),
    "subgraph_type": ("directional", "a batch holds exactly the sampled (directed) in-edges, PyG's 'directional'; "
                                     "for induced subgraphs of random node sets use DistributedNodeSubsetLoader"),
    "directed": (True, "a batch holds exactly the sampled (directed) in-edges"),
    "input_time": (None, "temporal sampling is not implemented"),
    "time_attr": (None, "temporal sampling is not implemented"),
    "weight_attr": (None, "weighted (biased) neighbour sampling is not implemented (edge weights still reach the "
                          "layers through batch.adj)"),
    "transform_sampler_output": (None, "there is no SamplerOutput: a rank's batch is built by collectives; use "
                                       "transform= on the yielded batch"),
    "neighbor_sampler": (None, "sampling follows this loader's rule (the same on every rank); set num_neighbors, "
                               "shuffle and seed"),
    "sampler": (None, "every rank must draw the same batches: the loader's rule does (shuffle=, seed=)"),
    "batch_sampler": (None, "every rank must draw the same batches: the loader's rule does (batch_size=, "
                            "shuffle=, seed=)"),
    "generator": (None, "every rank must draw the same batches: pass seed= (an int) instead of a generator"),
    "collate_fn": (None, "a batch is built by collectives, not collated; use transform="),
    "worker_init_fn": (None, "no worker process is started"),
    "timeout": (0, "a stalled or dead peer surfaces after the process group's timeout "
                   "(init_process_group(timeout=...) / init_distributed(timeout=...))"),
    "input_id": (None, "batch.n_id holds the global ids of the batch's rows"),
}


def prefetch_depth(prefetch: int | None, options: dict[str, Any], loader: str, own: Iterable[str] = ()) -> int:
    """Batches sampled ahead, from ``prefetch`` or PyG's ``num_workers`` / ``prefetch_factor``
    (default 1); checks every other keyword of ``options`` (PyG's) and raises naming it when it
    cannot mean here what it means in PyG, or, for a keyword neither PyG's nor the loader's
    (``own``: its argument names), the closest accepted one and all of them."""
    options = dict(options)
    num_workers = options.pop("num_workers", None)
    prefetch_factor = options.pop("prefetch_factor", None)
    for key, value in options.items():
        if key in HARMLESS:
            continue
        if key in DEFAULT_ONLY:
            accepted, reason = DEFAULT_ONLY[key]
            if value != accepted:
                raise ValueError(f"{loader}({key}={value!r}) is not supported: {reason} (PyG's default "
                                 f"{key}={accepted!r} is accepted)")
            continue
        raise TypeError(unknown_keyword(key, loader, own))
    for key, value in (("prefetch", prefetch), ("num_workers", num_workers), ("prefetch_factor", prefetch_factor)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{key} must be a non-negative integer (batches sampled ahead), got {value!r}")
    if num_workers is None:
        if prefetch_factor is not None:
            raise ValueError("prefetch_factor is read with num_workers (batches ahead = num_workers * "
                             "prefetch_factor); pass prefetch= for the depth directly")
        return 1 if prefetch is None else prefetch
    depth = num_workers * (1 if prefetch_factor is None else prefetch_factor)
    if prefetch is not None and prefetch != depth:
        raise ValueError(f"prefetch={prefetch} and num_workers={num_workers} disagree: both set the batches "
                         f"sampled ahead ({depth} from num_workers); pass one of them")
    return depth


def unknown_keyword(key: str, loader: str, own: Iterable[str]) -> str:
    """The error of a keyword neither the loader's nor PyG's: the closest accepted one, then all."""
    own = [name for name in own if name not in ("self", "local", "pyg_options", "args", "kwargs")]
    pyg = sorted(["num_workers", "prefetch_factor", *HARMLESS, *DEFAULT_ONLY])
    close = difflib.get_close_matches(key, [*own, *pyg], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"{loader} got an unexpected keyword argument {key!r}{hint}; it takes {', '.join(own) or 'its own'} "
            f"arguments, and PyG NeighborLoader's {', '.join(pyg)}")
