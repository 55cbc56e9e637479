"""``method="kaminpar"``: the ParHiP file it reads, valid balanced seeded partitions, exact training
on them in real gloo runs, and the refusal without the package."""
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
from graphs import NUM_FEATURES, make_cases
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from pyg_sparsecomm import DistributedGCNConv, SparsityAwarePartitioner, shard
from pyg_sparsecomm.graph.datasets import rmat_graph
from pyg_sparsecomm.partition.kaminpar_backend import kaminpar_partition_csr
from pyg_sparsecomm.partition.methods import METHODS, row_nnz, symmetric_csr
from pyg_sparsecomm.partition.parhip import write_parhip
from pyg_sparsecomm.testing import launch

kaminpar = pytest.importorskip("kaminpar")


def _with_self_loops_and_duplicates():
    """Directed, with isolated nodes (0..3), self-loops, duplicate and reciprocal edges."""
    gen = torch.Generator().manual_seed(5)
    edges = torch.randint(4, 70, (2, 400), generator=gen)
    extra = torch.tensor([[9, 9, 10, 11, 11, 12], [9, 10, 9, 12, 12, 12]])
    return torch.cat([edges, extra], dim=1), 70


@pytest.mark.parametrize("block_entries", [1, 7, 1 << 20])  # 1: more than 255 blocks (uint16 block ids)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_parhip_file_holds_the_symmetrised_graph(tmp_path, block_entries, dtype):
    edge_index, n = _with_self_loops_and_duplicates()
    src, dst = edge_index.numpy().astype(dtype)
    weights = row_nnz(edge_index, n)
    m = write_parhip(str(tmp_path / "g.parhip"), src, dst, n, weights, block_entries=block_entries)
    graph = kaminpar.load_graph(str(tmp_path / "g.parhip"), kaminpar.GraphFileFormat.PARHIP)
    xadj, adjncy = symmetric_csr(edge_index, n)  # METIS's input: the reference
    assert (graph.n(), graph.m(), m) == (n, len(adjncy), len(adjncy))
    for u in range(n):
        assert [v for v, _ in graph.neighbors(u)] == adjncy[xadj[u]:xadj[u + 1]].tolist(), u
        assert graph.node_weight(u) == weights[u], u
    with pytest.raises(ValueError, match="positive integers"):
        write_parhip(str(tmp_path / "bad.parhip"), src, dst, n, np.zeros(n, dtype=np.int64))
    with pytest.raises(ValueError, match="1-D arrays of equal length"):
        write_parhip(str(tmp_path / "bad.parhip"), src, dst[1:], n)
    write_parhip(str(tmp_path / "empty.parhip"), src[:0], dst[:0], 4)  # no edges: isolated nodes only
    empty = kaminpar.load_graph(str(tmp_path / "empty.parhip"), kaminpar.GraphFileFormat.PARHIP)
    assert (empty.n(), empty.m()) == (4, 0)


def _block_weights(data, part, P):
    return np.bincount(part.numpy(), weights=row_nnz(data.edge_index, data.num_nodes), minlength=P)


@pytest.mark.parametrize("P", [2, 4, 16])
def test_partition_is_valid_balanced_seeded_and_as_good_as_metis(P):
    data = rmat_graph(12, 8, seed=1)
    out = SparsityAwarePartitioner(P, "kaminpar", seed=3)(data)
    part = out.part
    assert part.dtype == torch.long and part.shape == (data.num_nodes,)
    assert int(part.min()) >= 0 and int(part.max()) < P
    weights = _block_weights(data, part, P)
    # the bound: max block weight <= ceil((1 + epsilon) * ceil(total / k)), enforced after KaMinPar
    assert weights.max() <= np.ceil(1.03 * np.ceil(weights.sum() / P)), weights
    again = SparsityAwarePartitioner(P, "kaminpar", seed=3)(data).part
    assert torch.equal(part, again)
    others = [SparsityAwarePartitioner(P, "kaminpar", seed=s)(data).part for s in (4, 5)]
    assert any(not torch.equal(part, o) for o in others)  # the seed is used
    loose = SparsityAwarePartitioner(P, "kaminpar", seed=3, epsilon=0.2, preset="fast")(data).part
    assert _block_weights(data, loose, P).max() <= 1.2 * np.ceil(weights.sum() / P)
    metis, random = (SparsityAwarePartitioner(P, m, seed=3)(data).comm_stats.total_rows for m in ("metis", "random"))
    assert out.comm_stats.total_rows <= 1.1 * metis and out.comm_stats.total_rows < 0.9 * random


@pytest.mark.parametrize("P,split", [(8, 2), (6, 4)])
def test_two_level_partition_is_valid_balanced_seeded_and_as_good(P, split):
    """``split``: groups first, then each group's parts; every part used, balanced within the overall
    epsilon, the same for the same seed, and about the volume of the partition into P at once."""
    data = rmat_graph(12, 8, seed=1)
    out = SparsityAwarePartitioner(P, "kaminpar", seed=3, split=split)(data)
    part = out.part
    assert part.dtype == torch.long and sorted(part.unique().tolist()) == list(range(P))
    weights = _block_weights(data, part, P)
    assert weights.max() <= np.ceil(1.03 * np.ceil(weights.sum() / P)), weights  # enforced (rebalance.py)
    assert torch.equal(part, SparsityAwarePartitioner(P, "kaminpar", seed=3, split=split)(data).part)
    direct, random = (SparsityAwarePartitioner(P, m, seed=3)(data).comm_stats.total_rows
                      for m in ("kaminpar", "random"))
    assert out.comm_stats.total_rows <= 1.15 * direct and out.comm_stats.total_rows < 0.9 * random
    with pytest.raises(ValueError, match="split must be an integer from 2 to num_parts - 1"):
        SparsityAwarePartitioner(P, "kaminpar", split=P)(data)


def test_corner_cases_and_bad_options():
    edge_index, n = _with_self_loops_and_duplicates()
    # the CSR entry point (the out-of-core pipeline's) partitions as the edge_index method does
    src, dst = edge_index.numpy()
    order = np.argsort(dst, kind="stable")
    ptr, col = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]), src[order]
    csr_part = kaminpar_partition_csr(ptr, col, n, 3, seed=4, vertex_weights=np.diff(ptr) + 1)
    assert np.array_equal(csr_part, METHODS["kaminpar"](edge_index, n, 3, 4).numpy())
    assert torch.equal(METHODS["kaminpar"](edge_index, n, 1, 0), torch.zeros(n, dtype=torch.long))
    empty = METHODS["kaminpar"](torch.empty(2, 0, dtype=torch.long), 10, 3, 0)
    assert empty.shape == (10,) and int(empty.max()) < 3
    with pytest.raises(ValueError, match="unknown KaMinPar preset 'best'"):
        METHODS["kaminpar"](edge_index, n, 2, 0, preset="best")
    with pytest.raises(ValueError, match="compressed graphs only.*compress=True"):
        METHODS["kaminpar"](edge_index, n, 2, 0, preset="terapart", compress=False)
    for preset in ("terapart", "terapart-eco"):  # compressed by default: KaMinPar would crash otherwise
        part = METHODS["kaminpar"](edge_index, n, 3, 0, preset=preset)
        assert part.shape == (n,) and int(part.max()) < 3
    assert int(METHODS["kaminpar"](edge_index, n, 3, 0, compress=True).max()) < 3
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        METHODS["kaminpar"](edge_index, n, 2, 0, epsilon=0.0)
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        METHODS["kaminpar"](edge_index, n, 2, 0, threads=0)
    with pytest.raises(ValueError, match="takes no option"):
        SparsityAwarePartitioner(2, "kaminpar", objective="vol")


def test_refusal_without_the_package(monkeypatch):
    edge_index, n = _with_self_loops_and_duplicates()
    monkeypatch.setitem(sys.modules, "kaminpar", None)
    with pytest.raises(ImportError, match=r"pip install \"pyg_sparsecomm\[kaminpar\]\""):
        SparsityAwarePartitioner(2, "kaminpar")(Data(edge_index=edge_index, num_nodes=n))


def _train_on_subgroups(rank, world_size):
    """Every P in 2..world_size in one launch: ranks < P shard a KaMinPar partition into P parts
    and run a DistributedGCNConv forward and backward on their subgroup."""
    out = {}
    for P in range(2, world_size + 1):
        group = dist.new_group(list(range(P)))  # every rank takes part in creating it
        if rank >= P:
            continue
        for case in ("weighted", "isolated", "self_loops_weighted"):
            data = SparsityAwarePartitioner(P, "kaminpar", seed=2)(make_cases(1)[case])
            local = shard(data, group=group)
            torch.manual_seed(0)
            conv = DistributedGCNConv(NUM_FEATURES, 4, group=group)
            x = local.x.clone().requires_grad_()
            y = conv(x, local.adj, local.edge_weight)
            y.pow(2).sum().backward()
            out[P, case] = (local.n_id, y.detach(), x.grad, conv.lin.weight.grad)
    return out


def test_shard_and_exchange_exact_on_a_kaminpar_partition():
    per_rank = launch(_train_on_subgroups, 4)
    for (P, case) in per_rank[0]:
        data = make_cases(1)[case]
        torch.manual_seed(0)
        conv = GCNConv(NUM_FEATURES, 4)
        x = data.x.clone().requires_grad_()
        ref = conv(x, data.edge_index, data.edge_weight)
        ref.pow(2).sum().backward()
        y, gx, gw = torch.zeros_like(ref), torch.zeros_like(x), 0
        for r in range(P):
            n_id, yy, gg, gw_r = per_rank[r][P, case]
            y[n_id], gx[n_id], gw = yy, gg, gw + gw_r  # each rank's weight gradient: its rows' share
        torch.testing.assert_close(gw, conv.lin.weight.grad, atol=1e-5, rtol=1e-4, msg=f"{P} {case}")
        torch.testing.assert_close(y, ref.detach(), atol=1e-5, rtol=1e-4, msg=f"{P} {case}")
        torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-4, msg=f"{P} {case}")
    assert sorted(per_rank[0]) == [(P, c) for P in (2, 3, 4) for c in ("isolated", "self_loops_weighted",
                                                                         "weighted")]


def test_auto_takes_kaminpar_above_the_size(monkeypatch):
    from pyg_sparsecomm.partition import auto

    data = rmat_graph(11, 8, seed=2)
    ei, n = data.edge_index, data.num_nodes
    below = SparsityAwarePartitioner(4, "auto", seed=2)(data).part
    assert torch.equal(below, METHODS["metis"](ei, n, 4, 2))
    monkeypatch.setattr(auto, "KAMINPAR_ABOVE_EDGES", ei.size(1) - 1)
    assert auto.recommended_method(ei.size(1)) == "kaminpar"
    above = SparsityAwarePartitioner(4, "auto", seed=2)(data).part
    assert torch.equal(above, METHODS["kaminpar"](ei, n, 4, 2)) and not torch.equal(above, below)
    monkeypatch.setitem(sys.modules, "kaminpar", None)
    with pytest.warns(UserWarning, match=r"less memory: pip install \"pyg_sparsecomm\[kaminpar\]\""):
        without = SparsityAwarePartitioner(4, "auto", seed=2)(data).part
    assert torch.equal(without, below)


def _threads_on_rank_zero(rank, world_size):
    from pyg_sparsecomm import partition_on_rank_zero
    from pyg_sparsecomm.partition import kaminpar_backend

    seen = []
    real = kaminpar_backend.partition_parhip_file

    def recording(path, num_parts, seed, preset, epsilon, threads, compress, max_block_weights=None):
        seen.append(threads)
        return real(path, num_parts, seed, preset, epsilon, threads, compress, max_block_weights)

    kaminpar_backend.partition_parhip_file = recording
    data = rmat_graph(10, 8, seed=3)
    for options in ({}, {"threads": 1}):  # the default, then an explicit count
        partition_on_rank_zero(SparsityAwarePartitioner(4, "kaminpar", **options), data)
    SparsityAwarePartitioner(4, "kaminpar")(data)  # outside: one thread
    return seen + [kaminpar_backend.automatic_threads()[0]]  # a large graph's, in a job of 2 ranks: 1


def test_rank_zero_partitions_with_its_usable_cores_unless_threads_are_named():
    import os

    from pyg_sparsecomm.partition.kaminpar_backend import automatic_threads, default_kaminpar_threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert launch(_threads_on_rank_zero, 2) == [[cores, 1, 1, 1], [1, 1]]
    assert automatic_threads()[0] == cores  # one process: a large graph gets its cores
    with default_kaminpar_threads(3):
        assert automatic_threads()[0] == 3
