"""Figures of a partition's communication, drawn with matplotlib (``pip install pyg_sparsecomm[plot]``).

``volume`` is the P×P matrix of :class:`~pyg_sparsecomm.plan.stats.CommStats`: ``volume[r, s]`` rows
rank ``r`` sends to rank ``s`` per SpMM.  The file format follows the path's extension (any
format matplotlib writes: ``.png``, ``.svg``, ``.pdf``, ...).
"""
from pathlib import Path
from typing import Any

import numpy as np

PLOT_EXTRA = "pip install 'pyg_sparsecomm[plot]' (or pip install matplotlib)"


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or an ImportError saying how to get it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"plots need matplotlib: {PLOT_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig: Any, path: str) -> None:
    suffix = Path(path).suffix.lower().lstrip(".")
    supported = fig.canvas.get_supported_filetypes()
    if suffix not in supported:
        raise ValueError(f"cannot write {path!r}: use one of the extensions {sorted(supported)}")
    fig.savefig(path, bbox_inches="tight")


def volume_heatmap(volume: np.ndarray, path: str, title: str = "rows sent per SpMM") -> None:
    """The P×P matrix as a heatmap: row = sender, column = receiver, colour = rows.

    Args:
        volume (np.ndarray): ``[P, P]`` rows sent (``volume[r, s]``: from ``r`` to ``s``).
        path (str): output file; its extension picks the format.
        title (str, optional): the figure's title. (default: :obj:`"rows sent per SpMM"`)
    """
    plt = _pyplot()
    matrix = np.asarray(volume, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    try:
        image = ax.imshow(matrix, cmap="Reds", interpolation="nearest", vmin=0)
        fig.colorbar(image, ax=ax, label="rows")
        ax.set_xlabel("receiving rank")
        ax.set_ylabel("sending rank")
        ax.set_title(title)
        _save(fig, path)
    finally:
        plt.close(fig)


def volume_bars(sent: np.ndarray, received: np.ndarray, path: str, title: str = "rows per rank per SpMM") -> None:
    """Rows each rank sends and receives per SpMM, side by side (the largest bounds the step).

    Args:
        sent (np.ndarray): ``[P]`` rows each rank sends (``CommStats.rows_sent``).
        received (np.ndarray): ``[P]`` rows each rank receives (``CommStats.rows_received``).
        path (str): output file; its extension picks the format.
        title (str, optional): the figure's title. (default: :obj:`"rows per rank per SpMM"`)
    """
    plt = _pyplot()
    ranks = np.arange(len(sent))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.25 * len(ranks)), 3.5))
    try:
        ax.bar(ranks - 0.2, sent, width=0.4, label="sent")
        ax.bar(ranks + 0.2, received, width=0.4, label="received")
        ax.set_xlabel("rank")
        ax.set_ylabel("rows")
        ax.set_title(title)
        ax.legend()
        _save(fig, path)
    finally:
        plt.close(fig)
