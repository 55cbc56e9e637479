r"""PyG's own loaders handed a shard: which one is running, and the package's loader that does its job.

PyG's mini-batch loaders (``RandomNodeLoader``, ``ClusterData`` / ``ClusterLoader``, the
GraphSAINT samplers, ``NeighborLoader``, ``LinkNeighborLoader``, ``ShaDowKHopSampler``, ...) read
``data.edge_index`` as a ``[2, E]`` tensor of the whole graph and cut batches from it in one
process.  A shard's adjacency is a CSR block of one rank's rows whose batches need collectives
with the other ranks, so none of them can run on it: the first time one reads the shard's
adjacency as a tensor (at construction, or at its first batch), the error names the loader and the
package's loader to use instead (:func:`replacement_note`).  No loader of PyG talks to the other
ranks, so each rank raises by itself at the same point of the script: no rank is left waiting.
"""
import inspect

#: PyG loader class -> the package's loader that does its job, and how to port the call
REPLACEMENTS: dict[str, str] = {
    "RandomNodeLoader": "DistributedNodeSubsetLoader(data, num_parts=num_parts, shuffle=True) (random node subsets "
                        "and the subgraphs they induce, every node in one batch per epoch)",
    "RandomNodeSampler": "DistributedNodeSubsetLoader(data, num_parts=num_parts, shuffle=True)",
    "ClusterData": "DistributedNodeSubsetLoader(data, num_parts=num_parts, shuffle=True) (random node subsets and "
                   "their induced subgraphs: batches of METIS clusters are not implemented; the partition itself is "
                   "the package's SparsityAwarePartitioner)",
    "ClusterLoader": "DistributedNodeSubsetLoader(data, num_parts=num_parts, batch_size=...) (random node subsets and "
                     "their induced subgraphs: batches of METIS clusters are not implemented)",
    "GraphSAINTNodeSampler": "DistributedNodeSubsetLoader(data, batch_size=batch_size, shuffle=True) (uniform node "
                             "subsets and their induced subgraphs; GraphSAINT's normalisation coefficients are not "
                             "computed)",
    "GraphSAINTEdgeSampler": "DistributedNodeSubsetLoader(data, batch_size=...) or DistributedNeighborLoader "
                             "(edge-sampled subgraphs are not implemented)",
    "GraphSAINTRandomWalkSampler": "DistributedNeighborLoader(data, num_neighbors=[...], batch_size=...) or "
                                   "DistributedNodeSubsetLoader (random-walk subgraphs are not implemented)",
    "GraphSAINTSampler": "DistributedNodeSubsetLoader(data, batch_size=...)",
    "NeighborLoader": "DistributedNeighborLoader with the same arguments (from pyg_sparsecomm.loader import "
                      "DistributedNeighborLoader as NeighborLoader)",
    "NeighborSampler": "DistributedNeighborLoader(data, num_neighbors=sizes, batch_size=...) (batches are Data "
                       "objects, as NeighborLoader's)",
    "HGTLoader": "DistributedNeighborLoader on the heterogeneous shard (num_neighbors per edge type)",
    "LinkNeighborLoader": "DistributedLinkNeighborLoader with the same arguments (from pyg_sparsecomm.loader import "
                          "DistributedLinkNeighborLoader as LinkNeighborLoader)",
    "LinkLoader": "DistributedLinkNeighborLoader",
    "NodeLoader": "DistributedNeighborLoader or DistributedNodeSubsetLoader",
    "ShaDowKHopSampler": "DistributedNeighborLoader(data, num_neighbors=[-1] * depth, batch_size=...) (each seed's "
                         "k-hop in-neighbourhood; ShaDow's per-seed induced subgraphs are not implemented)",
}
_PYG_LOADER_MODULES = ("torch_geometric.loader", "torch_geometric.sampler")


def pyg_loader_in_stack() -> str | None:
    """The name of the outermost PyG loader (an object of a class of ``torch_geometric.loader`` or
    ``torch_geometric.sampler``) whose method is running on the current thread's stack, else ``None``."""
    found = None
    frame = inspect.currentframe()
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        owner = frame.f_locals.get("self", frame.f_locals.get("cls"))
        if module.startswith(_PYG_LOADER_MODULES) and owner is not None:
            cls = owner if isinstance(owner, type) else type(owner)
            if cls.__module__.startswith(_PYG_LOADER_MODULES):
                found = cls.__name__
        frame = frame.f_back
    return found


def replacement_note() -> str:
    """A sentence naming the PyG loader on the stack and the package's loader to use instead
    (``""`` when no PyG loader is running)."""
    name = pyg_loader_in_stack()
    if name is None:
        return ""
    instead = REPLACEMENTS.get(name, "DistributedNeighborLoader, DistributedNodeSubsetLoader or "
                                     "DistributedLinkNeighborLoader")
    return (f"PyG's {name} cannot cut batches from a shard (it reads the whole graph's edge_index in one process; a "
            f"shard's batches need every rank's exchanges): use pyg_sparsecomm.loader's {instead}. ")
