"""KaHyPar's process: ``python kahypar_child.py WORKDIR`` (run as a script by :mod:`.kahypar_backend`).

Reads ``WORKDIR/input.npz`` (``num_nodes``, ``net_ptr``, ``pins``, ``weights``, ``net_weights``,
``num_parts``, ``epsilon``, ``seed``) and the configuration ``WORKDIR/km1_direct_kway.ini``,
writes the block of every vertex to ``WORKDIR/part.npy``.  A script, not a module of the package:
importing the package would import torch first (seconds per partition, the most of a small one's
time); this file imports only NumPy and KaHyPar.
"""
import os
import sys

import numpy as np


def main(workdir: str) -> None:
    import kahypar
    with np.load(os.path.join(workdir, "input.npz")) as f:
        arrays = {k: f[k] for k in f.files}
    num_nodes, num_parts = int(arrays["num_nodes"]), int(arrays["num_parts"])
    net_ptr = arrays["net_ptr"].tolist()
    hg = kahypar.Hypergraph(num_nodes, len(net_ptr) - 1, net_ptr, arrays["pins"].tolist(), num_parts,
                            arrays["net_weights"].tolist(), arrays["weights"].tolist())
    ctx = kahypar.Context()
    ctx.loadINIconfiguration(os.path.join(workdir, "km1_direct_kway.ini"))
    ctx.setK(num_parts)
    ctx.setEpsilon(float(arrays["epsilon"]))
    ctx.setSeed(int(arrays["seed"]))
    ctx.suppressOutput(True)
    kahypar.partition(hg, ctx)
    np.save(os.path.join(workdir, "part.npy"), np.asarray([hg.blockID(v) for v in range(num_nodes)], np.int64))


if __name__ == "__main__":
    main(sys.argv[1])
