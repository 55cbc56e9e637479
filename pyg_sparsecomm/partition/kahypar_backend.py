"""KaHyPar (GPLv3, optional) as a km1 backend of ``method="hypergraph"``.

The ``kahypar`` wheel ships no ``.ini`` presets, so the project writes its own
direct k-way km1 configuration (:data:`KM1_CONFIG`: community-aware multilevel
coarsening, recursive-bisection initial partitioning, k-way FM refinement for
km1).  KaHyPar aborts the whole process on a configuration or input it does not
accept; it therefore runs in a spawned child process, and a crash surfaces
as a ``RuntimeError`` here instead of killing the training job.
"""
import multiprocessing as mp
import os
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


def _child(conn, num_nodes, net_ptr, pins, weights, num_parts, epsilon, seed, config_path, net_weights=None):
    import kahypar
    hg = kahypar.Hypergraph(num_nodes, len(net_ptr) - 1, net_ptr, pins, num_parts,
                            [1] * (len(net_ptr) - 1) if net_weights is None else net_weights, weights)
    ctx = kahypar.Context()
    ctx.loadINIconfiguration(config_path)
    ctx.setK(num_parts)
    ctx.setEpsilon(epsilon)
    ctx.setSeed(seed)
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    conn.send([hg.blockID(v) for v in range(num_nodes)])
    conn.close()


def kahypar_partition(net_ptr: np.ndarray, pins: np.ndarray, weights: np.ndarray, num_nodes: int,
                      num_parts: int, epsilon: float, seed: int, timeout: float = 3600.0,
                      config: dict | None = None, net_weights: np.ndarray | None = None) -> np.ndarray:
    try:
        import kahypar  # noqa: F401
    except ImportError as e:
        raise ImportError("backend='kahypar' needs KaHyPar (GPLv3): pip install kahypar, or "
                          "pip install 'pyg_sparsecomm[hypergraph]'") from e
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        config_path = os.path.join(tmp, "km1_direct_kway.ini")
        write_config(config_path, KM1_CONFIG if config is None else config)
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(send, num_nodes, net_ptr.tolist(), pins.tolist(),
                                                weights.tolist(), num_parts, epsilon, seed, config_path,
                                                None if net_weights is None else net_weights.tolist()))
        proc.start()
        send.close()
        part = None
        if recv.poll(timeout):
            try:
                part = recv.recv()
            except EOFError:
                part = None
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
        if part is None:
            raise RuntimeError(f"KaHyPar did not return a partition (exit code {proc.exitcode}); "
                               f"try backend='mtkahypar'")
    return np.asarray(part, dtype=np.int64)
