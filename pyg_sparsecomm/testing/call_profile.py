"""What one call costs in package code and collectives: :class:`CallProfile` (benchmarks, budget tests).

Two counts of a block of code, on this rank:

* **package functions entered**: ``sys.setprofile`` sees every Python frame; each distinct code
  object whose module is ``pyg_sparsecomm`` (or one of its submodules) counts once, however often
  it runs (:attr:`CallProfile.functions`); :attr:`CallProfile.calls` counts every entry;
* **collectives issued**: every ``torch.distributed`` collective or point-to-point function called
  while the block runs, by name (:attr:`CallProfile.collectives`), counted through wrappers put in
  place of the ``torch.distributed`` module's attributes (callers reach them as ``dist.<name>``);
  the wrappers' own frames are not package functions.

Neither count is a time: they are the regression bars of issue 57 (``tests/nn/test_layer_call_budget.py``)
and the numbers of ``benchmarks/layer_call_profile.py``, both from :func:`profile_layer_call`.
"""
import os
import sys
import warnings
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from ..comm.device_check import CHECK_DEVICES_ENV

#: the ``torch.distributed`` functions counted as collectives
COLLECTIVES = ("all_reduce", "all_to_all_single", "all_to_all", "all_gather", "all_gather_object",
               "all_gather_into_tensor", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
               "reduce_scatter_tensor", "barrier", "send", "recv", "isend", "irecv", "batch_isend_irecv",
               "gather", "scatter", "monitored_barrier")


class CallProfile:
    """Counts package functions and collectives of the code run inside ``with CallProfile() as p:``.

    Args:
        package (str, optional): the module prefix whose functions count. (default: ``"pyg_sparsecomm"``)
    """

    def __init__(self, package: str = "pyg_sparsecomm") -> None:
        self.package = package
        self.code: dict[Any, str] = {}
        self.calls = 0
        self.collectives: Counter = Counter()
        self._originals: dict[str, Any] = {}

    @property
    def functions(self) -> int:
        """Distinct package functions entered."""
        return len(self.code)

    def names(self) -> list[str]:
        """``module.function`` of every package function entered, in first-entry order."""
        return list(self.code.values())

    def _profile(self, frame, event, arg) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module != __name__ and (module == self.package or module.startswith(self.package + ".")):
            self.calls += 1
            if frame.f_code not in self.code:
                self.code[frame.f_code] = f"{module}.{frame.f_code.co_name}"

    def _counting(self, name: str, original):
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.collectives[name] += 1
            return original(*args, **kwargs)
        return counted

    def __enter__(self) -> "CallProfile":
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                self._originals[name] = original
                setattr(dist, name, self._counting(name, original))
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()


def _graph(num_nodes: int = 400, num_features: int = 32):
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, num_nodes, (2, 8 * num_nodes), generator=gen)
    return Data(x=torch.randn(num_nodes, num_features, generator=gen), edge_index=edge_index, num_nodes=num_nodes)


def profiled_layers(in_channels: int) -> dict:
    """The layers :func:`profile_layer_call` knows, by name.

    Args:
        in_channels (int): their input width.
    """
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv
    return {"GCNConv": lambda: GCNConv(in_channels, 16), "SAGEConv": lambda: SAGEConv(in_channels, 16),
            "GATConv": lambda: GATConv(in_channels, 8, heads=2)}


def profile_layer_call(rank: int, world_size: int, name: str, hidden: bool = True) -> dict:
    """The counts of one steady-state call of ``distribute(layer)`` on this rank's shard of a
    400-node random graph, and of PyG's own call on the whole graph (a :func:`~.processes.launch`
    worker).

    Args:
        rank (int): this rank.
        world_size (int): the ranks.
        name (str): a layer of :func:`profiled_layers`.
        hidden (bool, optional): ``x`` is a new tensor needing a gradient every call (a hidden
            layer); ``False``: ``local.x`` itself (an input layer). (default: ``True``)

    Returns ``{"functions", "calls", "collectives", "names", "pyg_functions"}``.
    """
    from .. import LossNormalisationWarning, SparsityAwarePartitioner, distribute, shard
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # plain sums: counts only
    data = _graph()
    local = shard(SparsityAwarePartitioner(world_size, method="random", seed=1)(data))
    torch.manual_seed(0)
    layer = distribute(profiled_layers(data.num_features)[name]())
    torch.manual_seed(0)
    plain = profiled_layers(data.num_features)[name]()

    def x_of(features: torch.Tensor) -> torch.Tensor:
        return features.clone().requires_grad_() if hidden else features

    for _ in range(2):  # the first call checks the shard; the second is steady state already
        layer(x_of(local.x), local.adj).sum().backward()
        plain(x_of(data.x), data.edge_index)
    x = x_of(local.x)
    debug = os.environ.pop(CHECK_DEVICES_ENV, None)  # the production path: the test suite's debug checks off
    try:
        with CallProfile() as ours:
            out = layer(x, local.adj)
    finally:
        if debug is not None:
            os.environ[CHECK_DEVICES_ENV] = debug
    with CallProfile("torch_geometric") as pyg:
        plain(x_of(data.x), data.edge_index)
    out.sum().backward()
    return {"functions": ours.functions, "calls": ours.calls, "collectives": dict(ours.collectives),
            "names": ours.names(), "pyg_functions": pyg.functions}
