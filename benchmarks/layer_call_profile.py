"""What one steady-state layer call on a shard costs besides its arithmetic (issue 57).

For ``distribute(GCNConv)``, ``distribute(SAGEConv)`` and ``distribute(GATConv)`` at P = 2 (gloo,
local processes), after two calls (the first ran the first-use checks), one more forward is
profiled on every rank (:class:`~pyg_sparsecomm.testing.call_profile.CallProfile`):

* **functions**: distinct package functions entered (``sys.setprofile``), and all entries;
* **collectives**: ``torch.distributed`` calls, by name (the halo's exchange is one
  ``all_to_all_single``; anything else is overhead a plain PyG call does not pay);
* PyG's own call of the same layer on the whole graph, counted the same way in ``torch_geometric``.

Two inputs: ``x = local.x`` (an input layer: a source needing no gradient, whose halo is cached)
and a hidden layer's ``x`` (a new tensor needing a gradient every call: the halo moves every call).
No timings: these are counts, the same on any machine.

    python benchmarks/layer_call_profile.py [--write]
"""
import argparse

from pyg_sparsecomm.testing import launch
from pyg_sparsecomm.testing.call_profile import profile_layer_call, profiled_layers

HEADERS = ["layer", "input", "package functions", "package calls", "collectives per call", "PyG's own functions"]


def rows(world_size: int = 2) -> list[list]:
    """One table row per layer and input, the largest count over the ranks."""
    out = []
    for name in profiled_layers(1):
        for hidden in (False, True):
            results = launch(profile_layer_call, world_size, name, hidden)
            worst = max(results, key=lambda r: r["functions"])
            collectives = ", ".join(f"{k} x{v}" for k, v in sorted(worst["collectives"].items())) or "none"
            out.append([name, "hidden x" if hidden else "local.x", worst["functions"], worst["calls"], collectives,
                        worst["pyg_functions"]])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the layer_call_profile section of RESULTS.md")
    parser.add_argument("--names", default="", help="print the functions entered by this layer's hidden call")
    args = parser.parse_args()
    if args.names:
        for name in launch(profile_layer_call, 2, args.names, True)[0]["names"]:
            print(name)
        return
    table = rows()
    from _common import print_table, write_table_section
    print_table(HEADERS, table)
    if args.write:
        write_table_section("layer_call_profile_counts", "Package functions and collectives per steady-state "
                            "layer call (issue 57), now", "layer_call_profile.py",
                            "Counts, not timings (rank with the most functions, P = 2, gloo, a 400-node random "
                            "graph, 32 features).", HEADERS, table)


if __name__ == "__main__":
    main()
