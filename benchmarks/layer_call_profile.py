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
#: ``main`` before issue 57's items 1 and 3 (21347c9): functions and collectives of the hidden-input call
BEFORE = {"GCNConv": (124, "all_to_all_single x2 (degrees, rows)"), "SAGEConv": (74, "all_to_all_single x1"),
          "GATConv": (98, "all_to_all_single x1")}
WRITTEN = ["layer", "functions before", "functions after", "collectives before", "collectives after",
           "PyG's own functions"]


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
        written = [[name, BEFORE[name][0], functions, BEFORE[name][1], collectives, pyg]
                   for name, given, functions, _, collectives, pyg in table if given == "hidden x"]
        write_table_section("layer_call_profile", "Package functions and collectives per steady-state layer call "
                            "(issue 57)", "layer_call_profile.py", NOTES, WRITTEN, written)


NOTES = ("Counts, not timings (the same on any machine): one forward of `distribute(layer)` on a P = 2 gloo shard "
         "of a 400-node random graph (32 features, hidden-layer input), after two calls; the rank with the most "
         "functions. Before: `main` at 21347c9 (issue 57 item 2 done: the checks agreed once per shard). After: "
         "items 1 and 3 — each layer's path decided at attach (`CallPath`: its declared stages), the shard, the "
         "narrowing `Linear`'s stand-in and the SpMM kept across calls while their inputs are the same objects, "
         "an unweighted `GCNConv`'s normalisation kept per shard (its degree exchange runs once per "
         "shard: one exchange per steady-state call instead of two), the exchange's byte counts per peer "
         "computed once per plan, GAT's per-head SpMM over the kept CSR structure, helper chains and comprehensions "
         "of the hot path inlined: issue 57's floor of 40 functions is reached by all three.")


if __name__ == "__main__":
    main()
