"""The P = 64 prediction, curves and figures of ``halo_compression.py``."""
import statistics
from pathlib import Path

import numpy as np
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.algorithms import algorithm_class
from pyg_sparsecomm.algorithms.cost import CostModel, RankVolumes, volumes_of_all_ranks
from pyg_sparsecomm.plan.homogeneous import comm_pattern

PREDICTED_P = 64
#: inter-node network of 25 GB/s; α = 2 µs (an assumption: MPI latency over InfiniBand is 1-2 µs); γ: the
#: package's default (this machine's CSR SpMM) for the local SpMM a stale exchange hides behind
NETWORK = CostModel(alpha=2e-6, beta=1 / 25e9, source="inter-node network (assumed α)")
P64_MODEL = (f"algorithm \"1d\" on a {PREDICTED_P}-way METIS partition, α-β model {NETWORK}; each layer is one "
             f"all-to-allv forward and its reverse backward, with the bytes per halo row measured at P = 2; "
             f"stale rows: the exposed time of the package's model (SpMMAlgorithm.predict_as_run), each "
             f"layer's exchange hidden behind its own local SpMMs, {NETWORK.describe_gamma()}, an upper bound")


def ranks_of_partition(data: Data, num_parts: int = PREDICTED_P) -> list[RankVolumes]:
    """The :class:`RankVolumes` of every rank of a ``num_parts``-way METIS partition (no processes),
    with the nonzeros of each rank's block row (its edges; the self-loops a normalisation adds are
    not counted, which only shrinks the window a stale exchange hides behind)."""
    skeleton = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    part = SparsityAwarePartitioner(num_parts, "metis", seed=0)(skeleton).part
    pattern = comm_pattern(data.edge_index, part, data.num_nodes, num_parts)
    return volumes_of_all_ranks(pattern.volume_matrix(), pattern.part_sizes, 1, pattern.spans, pattern.block_nnz)


def exchange_time(ranks: list[RankVolumes], row_bytes: list[float], stale_widths: list[int] | None = None,
                  model: CostModel = NETWORK) -> tuple[float, int, float]:
    r"""Predicted exchange seconds of one epoch on the slowest rank,
    :math:`\max_r \sum_\ell \mathrm{predict}_{1d}(r, b_\ell)` with :math:`b_\ell` the bytes per
    halo row of layer :math:`\ell` (rounded up: a row's payload is whole bytes), the bytes all ranks
    send, and the exposed seconds: with ``stale_widths`` (``staleness=1``, the columns
    :math:`f_\ell` of every layer) :math:`\max_r \sum_\ell` of the same prediction
    :meth:`~pyg_sparsecomm.algorithms.cost.Prediction.exposed` behind the window
    :math:`2 \gamma \, nnz_r f_\ell` (:meth:`~pyg_sparsecomm.algorithms.cost.CostModel.stale_window`, as
    :meth:`~pyg_sparsecomm.algorithms.SpMMAlgorithm.predict_as_run`), else the exchange seconds."""
    cls = algorithm_class("1d")
    seconds, exposed, sent = np.zeros(len(ranks)), np.zeros(len(ranks)), 0
    for i, volumes in enumerate(ranks):
        for layer, b in enumerate(row_bytes):
            prediction = cls.predict(volumes, model, int(np.ceil(b - 1e-9)))
            seconds[i] += prediction.seconds
            sent += prediction.bytes_sent
            if stale_widths is not None:
                prediction = prediction.exposed(model.stale_window(volumes.nnz, stale_widths[layer]))
            exposed[i] += prediction.seconds
    return float(seconds.max()), sent, float(exposed.max())


def curves(summaries: dict) -> dict:
    """``{model: {option: loss / test accuracy curves, mean over seeds}}`` (rounded)."""
    out: dict = {}
    for (model, option), seeds in summaries.items():
        out.setdefault(model, {})[option] = {
            "loss": [round(statistics.mean(s["loss"][e] for s in seeds), 4) for e in range(len(seeds[0]["loss"]))],
            "eval_epochs": seeds[0]["eval_epochs"],
            "test_acc": [round(statistics.mean(s["test_acc"][i] for s in seeds), 4)
                         for i in range(len(seeds[0]["test_acc"]))]}
    return out


def plot_curves(all_curves: dict, out: Path) -> list[str]:
    """Loss, loss minus exact's loss and test-accuracy curves: one panel per (graph, model),
    one line per option."""
    try:
        from pyg_sparsecomm.cli.plots import _pyplot
        plt = _pyplot()
    except ImportError as e:
        print(f"no figures: {e}")
        return []
    graphs = list(all_curves)
    models = list(dict.fromkeys(m for g in graphs for m in all_curves[g]))
    if not models:
        return []
    names = []
    for key, label in (("loss", "training loss"), ("loss_gap", "loss - exact's loss"), ("test_acc", "test accuracy")):
        fig, axes = plt.subplots(len(graphs), len(models), figsize=(4 * len(models), 3 * len(graphs)),
                                 squeeze=False)
        for i, g in enumerate(graphs):
            for j, m in enumerate(models):
                ax, runs = axes[i][j], all_curves[g].get(m, {})
                if not runs:
                    ax.axis("off")  # the model did not run on this graph
                    continue
                for option, c in runs.items():
                    if key == "loss_gap":
                        if "exact" not in runs:
                            continue
                        y = list(np.subtract(c["loss"], runs["exact"]["loss"]))
                    else:
                        y = c["loss" if key == "loss" else key]
                    x = c["eval_epochs"] if key == "test_acc" else range(1, len(y) + 1)
                    ax.plot(list(x), y, label=option, lw=1)
                ax.set_title(f"{g} {m}", fontsize=9)
                ax.set_xlabel("epoch", fontsize=8)
                ax.set_ylabel(label, fontsize=8)
        axes[0][-1].legend(fontsize=6)
        name = f"halo_compression_{key}.png"
        fig.savefig(out / name, dpi=70, bbox_inches="tight")
        plt.close(fig)
        names.append(name)
    return names
