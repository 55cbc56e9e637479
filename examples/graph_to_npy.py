"""Writes a graph as the ``.npy`` files ``python -m pyg_sparsecomm partition`` reads.

    python examples/graph_to_npy.py --dataset SBM --out graph/
    python -m pyg_sparsecomm partition --edges graph/edges.npy --x graph/x.npy --y graph/y.npy \\
        --mask train_mask=graph/train_mask.npy --num-parts 4 --dataset SBM --out parts/

``edges.npy`` holds ``edge_index`` (``[2, E]``, row 0 sources), ``x.npy``, ``y.npy`` and every
``*_mask.npy`` one row per node.  This script loads the graph whole to show the format; a graph
too large for that is written to these files by whatever produced it (a database export, ``numpy``
memory maps filled chunk by chunk, ...): the partitioner then never holds its features whole.
"""
import argparse
from pathlib import Path

import numpy as np

from pyg_sparsecomm.launch.datasets import load_dataset


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="SBM", choices=["SBM", "Cora", "CiteSeer"],
                   help="SBM is generated locally (no download); Planetoid sets need --root")
    p.add_argument("--root", default="data", help="Planetoid root (raw files under ROOT/NAME/raw)")
    p.add_argument("--out", required=True, help="directory to write the .npy files into")
    args = p.parse_args(argv)
    data = load_dataset(args.dataset, args.root, barrier=False)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ["edges", "x", "y", *sorted(k for k in data.keys() if k.endswith("_mask"))]
    for name in names:
        np.save(out / f"{name}.npy", data["edge_index" if name == "edges" else name].numpy())
    print(f"wrote {', '.join(f'{n}.npy' for n in names)} to {out} ({data.num_nodes} nodes, "
          f"{data.edge_index.size(1)} edges)")


if __name__ == "__main__":
    main()
