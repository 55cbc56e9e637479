"""What each rank keeps for itself and a checkpoint must carry over, rank by rank.

* the random streams: torch's CPU generator, the CUDA generator of the rank's device, Python's
  ``random`` and NumPy's global generator (dropout masks, shuffles);
* the stochastic rounding streams of compressed halos (:func:`pyg_sparsecomm.comm.rounding.state_dict`);
* the stale pipelines of ``staleness=1`` layers: the previous step's halo rows and gradients
  (:meth:`ExchangeSlots.state_dict <pyg_sparsecomm.comm.halo_options.ExchangeSlots.state_dict>`);
* the partition it was computed on (:func:`partition_fingerprint`).

All of it is valid only on the same partition, for the same rank.
"""
import io
import random
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from ..comm import rounding
from ..nn.runtime.state import distributed_layers
from ..plan.halo_adj import HaloAdj
from ..store.files import graph_fingerprint


def partition_fingerprint(local: Data) -> str:
    """SHA-256 of what a rank's shard is: the global ids of its rows and halo, the rows it sends,
    the counts it exchanges with every rank and its local adjacency's structure (``local.adj``).
    Two runs share it only on the same graph structure, partition and rank.

    Args:
        local (torch_geometric.data.Data): the rank's shard (:func:`~pyg_sparsecomm.shard`).
    """
    adj = getattr(local, "adj", None)
    if not isinstance(adj, HaloAdj):
        raise ValueError("checkpoint: shard= takes the rank's shard (shard(data), load_shard(...) or "
                         "partition_and_shard(...)), which carries adj (a HaloAdj)")
    plan = adj.plan
    summary = Data(num_nodes=int(plan.num_nodes), n_id=plan.n_id, halo_n_id=plan.halo_n_id,
                   send_index=plan.send_index, send_counts=torch.tensor(plan.send_counts),
                   recv_counts=torch.tensor(plan.recv_counts), rowptr=adj.rowptr, col=adj.col,
                   rank=int(plan.rank), world_size=int(plan.world_size))
    return graph_fingerprint(summary)


def rng_state() -> dict[str, Any]:
    """This process's random generators (the CUDA one of the current device, if CUDA is in use)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                             "numpy": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


def pipelines(model: torch.nn.Module) -> dict[str, dict]:
    """The stale pipelines of every distributed layer of ``model`` that has one, by layer name."""
    found = {name: layer.exchange_slots.state_dict() for name, layer in distributed_layers(model)}
    return {name: slots for name, slots in found.items() if slots}


def load_pipelines(model: torch.nn.Module, state: dict[str, dict]) -> None:
    layers = dict(distributed_layers(model))
    missing = sorted(set(state) - set(layers))
    if missing:
        raise ValueError(f"checkpoint: the saved model had stale pipelines in layers {missing}, which this model "
                         f"does not have as distributed layers (another model?)")
    for name, slots in state.items():
        layers[name].exchange_slots.load_state_dict(slots)


def rank_state(model: torch.nn.Module) -> bytes:
    """Everything of the module docstring but the fingerprint, serialised (one entry per rank)."""
    buffer = io.BytesIO()
    torch.save({"rng": rng_state(), "rounding": rounding.state_dict(), "pipelines": pipelines(model)}, buffer)
    return buffer.getvalue()


def load_rank_state(model: torch.nn.Module, data: bytes) -> None:
    """Restores what :func:`rank_state` saved (on the same partition and rank)."""
    state = torch.load(io.BytesIO(data), weights_only=False)  # written by this module (as DCP's own bytes)
    set_rng_state(state["rng"])
    rounding.load_state_dict(state["rounding"])
    load_pipelines(model, state["pipelines"])
