"""KaHyPar (GPLv3, optional) as a km1 backend of ``method="hypergraph"``.

The ``kahypar`` wheel ships no ``.ini`` presets, so the project writes its own
direct k-way km1 configuration (:data:`KM1_CONFIG`: community-aware multilevel
coarsening, recursive-bisection initial partitioning, k-way FM refinement for
km1).  KaHyPar aborts the whole process on a configuration or input it does not
accept; it therefore runs in a child process (the script :mod:`.kahypar_child`, which imports
KaHyPar and NumPy only, not torch), and a crash surfaces as a ``RuntimeError`` here instead of
killing the training job.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

KM1_CONFIG = {
    # general
    "mode": "direct", "objective": "km1", "seed": "-1", "cmaxnet": "-1", "vcycles": "0",
    # preprocessing
    "p-use-sparsifier": "false",
    "p-detect-communities": "true", "p-detect-communities-in-ip": "true", "p-reuse-communities": "false",
    "p-max-louvain-pass-iterations": "100", "p-min-eps-improvement": "0.0001",
    "p-louvain-edge-weight": "hybrid", "p-large-he-threshold": "1000",
    "p-smallest-maxnet-threshold": "50000", "p-maxnet-removal-factor": "0.01",
    # coarsening
    "c-type": "ml_style", "c-s": "1", "c-t": "160",
    "c-rating-score": "heavy_edge", "c-rating-use-communities": "true",
    "c-rating-heavy_node_penalty": "no_penalty", "c-rating-acceptance-criterion": "best_prefer_unmatched",
    "c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed",
    # initial partitioning
    "i-mode": "recursive", "i-technique": "multi",
    "i-c-type": "ml_style", "i-c-s": "1", "i-c-t": "150",
    "i-c-rating-score": "heavy_edge", "i-c-rating-use-communities": "true",
    "i-c-rating-heavy_node_penalty": "no_penalty",
    "i-c-rating-acceptance-criterion": "best_prefer_unmatched",
    "i-c-fixed-vertex-acceptance-criterion": "fixed_vertex_allowed",
    "i-algo": "pool", "i-runs": "20",
    "i-bp-algorithm": "worst_fit", "i-bp-heuristic-prepacking": "false",
    "i-bp-early-restart": "true", "i-bp-late-restart": "true",
    "i-r-type": "twoway_fm", "i-r-runs": "-1", "i-r-fm-stop": "simple", "i-r-fm-stop-i": "50",
    # k-way local search for km1
    "r-type": "kway_fm_km1", "r-runs": "-1", "r-fm-stop": "adaptive_opt",
    "r-fm-stop-alpha": "1", "r-fm-stop-i": "350",
}


def write_config(path: str, config: dict) -> None:
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in config.items()))


def kahypar_partition(net_ptr: np.ndarray, pins: np.ndarray, weights: np.ndarray, num_nodes: int,
                      num_parts: int, epsilon: float, seed: int, timeout: float = 3600.0,
                      config: dict | None = None, net_weights: np.ndarray | None = None) -> np.ndarray:
    try:
        import kahypar  # noqa: F401
    except ImportError as e:
        raise ImportError("backend='kahypar' needs KaHyPar (GPLv3): pip install kahypar, or "
                          "pip install 'pyg_sparsecomm[hypergraph]'") from e
    with tempfile.TemporaryDirectory() as tmp:
        write_config(os.path.join(tmp, "km1_direct_kway.ini"), KM1_CONFIG if config is None else config)
        np.savez(os.path.join(tmp, "input.npz"), num_nodes=num_nodes, net_ptr=net_ptr, pins=pins, weights=weights,
                 net_weights=np.ones(len(net_ptr) - 1, np.int64) if net_weights is None else net_weights,
                 num_parts=num_parts, epsilon=epsilon, seed=seed)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kahypar_child.py")
        code: int | str
        try:
            code = subprocess.run([sys.executable, script, tmp], timeout=timeout, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            code = f"none, killed after {timeout} s"
        out = os.path.join(tmp, "part.npy")
        if not os.path.exists(out):
            raise RuntimeError(f"KaHyPar did not return a partition (exit code {code}); "
                               f"try backend='mtkahypar'")
        part = np.load(out)
    return np.asarray(part, dtype=np.int64)
