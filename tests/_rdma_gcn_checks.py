"""``DistributedGCNConv(algorithm="rdma")`` == PyG ``GCNConv``: checks shared by the MPI worker
(``tests/_rdma_worker.py --store``) and the emulated symmetric-memory backend (``tests/rdma/test_symm_backend.py``).

* :func:`check` — output, input, weight and bias gradients for every graph case (including
  edge weights) and GCNConv option;
* :func:`check_many_adjacencies` — more adjacencies alive than the engine cache keeps idle
  (cached=True layers with different edge weights), forward and backward on all of them
  twice, then collective release and eviction.

Both need ``torch.distributed`` initialised; they use whatever backend
``pyg_sparsecomm.algorithms.rdma`` runs on.
"""
import torch
from graphs import CONFIGS, NUM_FEATURES, make_cases
from torch_geometric.nn import GCNConv

import pyg_sparsecomm.algorithms.rdma as rdma_algorithm
from pyg_sparsecomm import DistributedGCNConv, shard, sync_gradients
from pyg_sparsecomm.rdma import engine_cache

OUT = 5
CASES = ("undirected", "directed", "isolated", "weighted", "self_loops_weighted", "empty_part")


def state(config):
    torch.manual_seed(3)
    conv = GCNConv(NUM_FEATURES, OUT, **config)
    torch.nn.init.normal_(conv.bias)
    return conv.state_dict()


def upstream(num_nodes):
    return torch.randn(num_nodes, OUT, generator=torch.Generator().manual_seed(7))


def close(what, got, expect, where):
    if not torch.allclose(got, expect, atol=1e-5, rtol=1e-4):
        raise AssertionError(f"{where} {what}: max error {(got - expect).abs().max():.3g}")


def check(rank: int, world_size: int) -> int:
    """Compares every case and option with ``GCNConv``; returns the number of tensors compared."""
    compared = 0
    for name, data in make_cases(world_size).items():
        if name not in CASES:
            continue
        local = shard(data)
        weight = getattr(data, "edge_weight", None)
        local_weight = getattr(local, "edge_weight", None)
        assert (weight is None) == (local_weight is None), name
        for cfg_name, config in CONFIGS.items():
            ref = GCNConv(NUM_FEATURES, OUT, **config)
            ref.load_state_dict(state(config))
            x_ref = data.x.clone().requires_grad_()
            y_ref = ref(x_ref, data.edge_index, weight)
            (y_ref * upstream(data.num_nodes)).sum().backward()
            conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="rdma", **config)
            conv.load_state_dict(state(config))
            for call in range(2 if config.get("cached") else 1):
                conv.zero_grad()
                x = local.x.clone().requires_grad_()
                y = conv(x, local.adj, local_weight)
                (y * upstream(data.num_nodes)[local.n_id]).sum().backward()
                sync_gradients(conv)
                where = f"{name}/{cfg_name}/call {call}/rank {rank} of {world_size}"
                for what, got, expect in (("y", y, y_ref.detach()[local.n_id]), ("dx", x.grad, x_ref.grad[local.n_id]),
                                          ("dW", conv.lin.weight.grad, ref.lin.weight.grad),
                                          ("db", conv.bias.grad, ref.bias.grad)):
                    close(what, got, expect, where)
                    compared += 1
    return compared


def expected_comparisons(world_size: int) -> int:
    """What :func:`check` compares: 4 tensors per case, option and call (cached options call twice)."""
    cases = sum(name in CASES for name in make_cases(world_size))
    return 4 * cases * sum(2 if config.get("cached") else 1 for config in CONFIGS.values())


def check_many_adjacencies(rank: int, world_size: int, layers: int = 6) -> int:
    """``layers`` > MAX_IDLE_ENGINES distinct adjacencies alive at once (regression: the cache used to free
    the oldest engine while a cached layer and a pending backward still used it); returns the number
    of gradients compared (``2 * (1 + 2 * layers)``)."""
    compared = 0
    assert layers > rdma_algorithm.MAX_IDLE_ENGINES
    data = make_cases(world_size)["undirected"]
    local = shard(data)
    gen = torch.Generator().manual_seed(11)
    weights = [torch.rand(data.edge_index.size(1), generator=gen) + 0.5 for _ in range(layers)]
    refs, convs = [], []
    for n in range(layers):
        torch.manual_seed(20 + n)
        ref = GCNConv(NUM_FEATURES, OUT, cached=True)
        torch.nn.init.normal_(ref.bias)
        conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="rdma", cached=True)
        conv.load_state_dict(ref.state_dict())
        refs.append(ref)
        convs.append(conv)
    x_ref = data.x.clone().requires_grad_()
    sum(ref(x_ref, data.edge_index, w).square().sum() for ref, w in zip(refs, weights, strict=False)).backward()
    local_w = [w[local.e_id] for w in weights]
    for call in range(2):  # build (call 0), then the cached algorithms with engines beyond the cache size
        for conv in convs:
            conv.zero_grad()
        x = local.x.clone().requires_grad_()
        loss = sum(conv(x, local.adj, w).square().sum() for conv, w in zip(convs, local_w, strict=False))
        if call == 0:
            live = len(engine_cache.engines())
            assert live >= layers, f"expected {layers} live engines, have {live}"
            be = engine_cache.backend()
            for engine in engine_cache.engines():  # empty blocks take no storage
                for M in (engine.A, engine.AT):
                    full = sum(M.nnz(rank, k) > 0 for k in range(world_size))
                    assert be.local(M.regions[1]).numel() == full * (engine.T + 1)
            regions = be._next_id
        loss.backward()
        if call == 1:  # the H buffers are reused: no allocation by cached layers' products
            assert be._next_id == regions, f"{be._next_id - regions} regions allocated by cached products"
        for conv in convs:
            sync_gradients(conv)
        where = f"many adjacencies/call {call}/rank {rank} of {world_size}"
        close("dx", x.grad, x_ref.grad[local.n_id], where)
        for n, (conv, ref) in enumerate(zip(convs, refs, strict=False)):
            close(f"layer {n} dW", conv.lin.weight.grad, ref.lin.weight.grad, where)
            close(f"layer {n} db", conv.bias.grad, ref.bias.grad, where)
        compared += 1 + 2 * layers
    # a pending backward keeps its engine alive across an explicit, collective close()
    x = local.x.clone().requires_grad_()
    y = convs[0](x, local.adj, local_w[0])
    algorithms = [conv._cached_spmm for conv in convs]
    assert all(isinstance(a, rdma_algorithm.RDMAStationaryC) for a in algorithms)
    for algorithm in algorithms:
        algorithm.close()
    y.square().sum().backward()
    del x, y, loss, algorithms
    for conv in convs:
        conv._cached_spmm = None
    rdma_algorithm.collect(keep=0)  # collective: every engine is unreferenced everywhere now
    left = len(engine_cache.engines())
    assert left == 0, f"{left} engines still cached after every lease was released"
    return compared
