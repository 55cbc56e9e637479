"""The α-β model prices what ``staleness=1`` buys (issue #16): the exposed exchange time.

Under ``staleness=1`` a layer's halo exchange is posted at one step and waited for at the next,
so it hides behind (at least) the layer's own local SpMMs, ``2 γ nnz f``; the prediction becomes
``max(0, sync - window)`` for the pipelined exchanges.  With ``staleness=0`` every prediction,
choice and explain text is exactly what it was; explain() shows the synchronous and the exposed
time side by side.
"""
import warnings

import pytest
import torch
from graphs import NUM_FEATURES, make_cases
from torch_geometric.nn.models import GraphSAGE

from pyg_sparsecomm import DistributedGCNConv, LossNormalisationWarning, distribute, shard
from pyg_sparsecomm.algorithms import ALGORITHMS, auto_candidates
from pyg_sparsecomm.algorithms.choice import explain_table, local_spmm_nnz
from pyg_sparsecomm.algorithms.cost import (
    CostModel,
    Prediction,
    RankVolumes,
    spmm_seconds_per_entry,
    volumes_of_all_ranks,
)
from pyg_sparsecomm.algorithms.layout import predict_from_partition
from pyg_sparsecomm.algorithms.sparse_15d import restrict_to_blocks
from pyg_sparsecomm.comm.grid import process_grid
from pyg_sparsecomm.comm.halo_options import HaloOptions
from pyg_sparsecomm.nn.distribute import summary
from pyg_sparsecomm.plan.homogeneous import comm_pattern
from pyg_sparsecomm.testing import launch

MODEL = CostModel(alpha=1e-5, beta=1e-9, gamma=1e-7)
STALE = HaloOptions(staleness=1)
OUT = 8


def _volumes(replication=1, nnz=10):
    # rank 0 of 3 block rows: sends 3 + 5 rows, receives 2 rows (1D)
    return RankVolumes.from_counts([0, 3, 5], [0, 2, 0], [4, 4, 4], row=0, col=0, replication=replication,
                                   nnz=nnz)


@pytest.mark.parametrize("options", [None, HaloOptions(), HaloOptions("int8", "bf16")])
@pytest.mark.parametrize("replication", [1, 3])
def test_staleness_off_is_exactly_predict(options, replication):
    volumes = _volumes(replication)
    for name in auto_candidates(replication > 1):
        cls = ALGORITHMS[name]
        fresh = cls.predict(volumes, MODEL, cls.row_bytes(OUT, 4, options))
        got = cls.predict_as_run(volumes, MODEL, OUT, 4, options)
        assert (got.seconds, got.bytes_sent) == (fresh.seconds, fresh.bytes_sent), name  # bitwise


def test_exposed_time_of_a_hand_computed_case():
    volumes = _volumes(nnz=10)
    sync = ALGORITHMS["1d"].predict(volumes, MODEL, OUT * 4)
    # forward: sends 8 rows, receives 2 (32 B each) over 3 ranks; backward: the reverse
    comm = 2 * (2 * 1e-5 + 1e-9 * 8 * 32)
    window = 2 * 1e-7 * 10 * OUT  # this layer's local SpMM, forward and backward
    assert sync.seconds == pytest.approx(comm) and sync.pipelined == sync.seconds
    exposed = ALGORITHMS["1d"].predict_as_run(volumes, MODEL, OUT, 4, STALE)
    assert exposed.seconds == pytest.approx(max(0.0, comm - window)) == pytest.approx(2.4512e-5)
    assert exposed.seconds < sync.seconds and exposed.bytes_sent == sync.bytes_sent
    # the same exposure for the overlapped algorithm (same exchanges)
    assert ALGORITHMS["1d_overlap"].predict_as_run(volumes, MODEL, OUT, 4, STALE).seconds == exposed.seconds
    # a rank whose local SpMM outlasts the exchange hides all of it
    fast = CostModel(alpha=1e-5, beta=1e-9, gamma=1.0)
    assert ALGORITHMS["1d"].predict_as_run(volumes, fast, OUT, 4, STALE).seconds == 0.0
    # unknown nnz: nothing is assumed hidden
    unknown = ALGORITHMS["1d"].predict_as_run(_volumes(nnz=None), MODEL, OUT, 4, STALE)
    assert unknown.seconds == sync.seconds


def test_15d_pipelines_the_column_exchange_only():
    cls = ALGORITHMS["1.5d"]
    # 2 block rows x 2 replicas: rank (0, 0) exchanges with block row 1 and sums with its replica
    grid_volumes = RankVolumes.from_counts([0, 6], [0, 4], [5, 5], row=0, col=0, replication=2, nnz=10)
    sync = cls.predict(grid_volumes, MODEL, OUT * 4)
    exchange = 2 * MODEL.all_to_all(6 * 32, 4 * 32, 2)
    row_sums = 2 * MODEL.all_reduce(5 * 32, 2)
    assert sync.seconds == pytest.approx(exchange + row_sums) and sync.pipelined == pytest.approx(exchange)
    exposed = cls.predict_as_run(grid_volumes, MODEL, OUT, 4, STALE)
    assert exposed.seconds == pytest.approx(max(0.0, exchange - 2 * 1e-7 * 10 * OUT) + row_sums)
    fast = CostModel(alpha=1e-5, beta=1e-9, gamma=1.0)  # the row all-reduce is never hidden
    assert row_sums > 0 and cls.predict_as_run(grid_volumes, fast, OUT, 4, STALE).seconds == pytest.approx(row_sums)


def test_prediction_exposed_and_sum():
    total = Prediction(3.0, 10, pipelined=2.0) + Prediction(1.0, 5)
    assert (total.seconds, total.bytes_sent, total.pipelined) == (4.0, 15, 2.0)
    assert total.exposed(0.5).seconds == 3.5 and total.exposed(5.0).seconds == 2.0
    assert total.exposed(-1.0).seconds == 4.0  # a window is never negative


def test_layout_prediction_under_staleness():
    data = make_cases(4)["directed"]
    pattern = comm_pattern(data.edge_index, data.part, data.num_nodes, 4)
    assert pattern.block_nnz.sum() == data.edge_index.size(1)
    assert (pattern.block_nnz.sum(axis=1) == pattern.edge_nnz).all()
    ranks = volumes_of_all_ranks(pattern.volume_matrix(), pattern.part_sizes, 2, None, pattern.block_nnz)
    part = torch.as_tensor(pattern.part)
    for r in ranks:  # rank (i, j) multiplies the blocks A_ik of its stage columns k
        stage = torch.as_tensor(r.stage_blocks)
        edges = (part[data.edge_index[1]] == r.row) & torch.isin(part[data.edge_index[0]], stage)
        assert r.nnz == int(edges.sum())
    widths = [16, 5]
    for c in (1, 2):
        sync = predict_from_partition(data.edge_index, data.num_nodes, data.part, 4 * c, c, widths, MODEL,
                                      options=HaloOptions())
        stale = predict_from_partition(data.edge_index, data.num_nodes, data.part, 4 * c, c, widths, MODEL,
                                       options=STALE)
        by_name = {row.algorithm: row for row in sync}
        assert stale, c
        for row in stale:
            assert row.seconds < by_name[row.algorithm].seconds  # gamma = 1e-7 hides some of every exchange
            assert row.max_bytes_sent == by_name[row.algorithm].max_bytes_sent


def test_explain_table_format():
    report, exact = [("1d", 0.001, 100), ("oblivious", 0.002, 900)], [("1d", 0.001, 100), ("oblivious", 0.002, 900)]
    text = explain_table(report, "1d", "header", MODEL, exact)
    assert text == (f"cost model: {MODEL}\nheader\n"
                    "algorithm         predicted ms  max bytes sent\n"
                    "1d                       1.000             100  <- chosen\n"
                    "oblivious                2.000             900")
    stale = explain_table([("1d", 0.0004, 100)], "1d", "header", MODEL, [("1d", 0.0004, 100)], [("1d", 0.001, 100)])
    assert "staleness=1: exposed ms" in stale and "γ = 100.000 ns" in stale
    assert stale.splitlines()[-2:] == ["algorithm          sync ms  exposed ms  max bytes sent",
                                       "1d                   1.000       0.400             100  <- chosen"]


def _fresh(local, grid, options, width=OUT):
    """This rank's prediction of every candidate as run, computed here from the plan."""
    plan = local.adj.plan
    volumes = RankVolumes.from_counts(plan.send_counts, plan.recv_counts, plan.part_sizes, plan.rank,
                                      grid.col if grid else 0, grid.replication if grid else 1,
                                      nnz=local_spmm_nnz(local.adj, grid))
    return {n: ALGORITHMS[n].predict_as_run(volumes, CostModel(), width, 4, options)
            for n in auto_candidates(grid is not None, options)}


def _layers_worker(rank, world_size):
    warnings.filterwarnings("ignore", category=LossNormalisationWarning)  # plain sums on purpose: timings only
    torch.manual_seed(0)
    local = shard(make_cases(world_size)["weighted"])
    out = {}
    for staleness in (0, 1):
        conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="auto", staleness=staleness)
        conv(local.x, local.adj).sum().backward()
        out[staleness] = (conv.chosen_algorithm, conv.cost_report, conv.sync_cost_report, conv.explain_algorithm(),
                          _fresh(local, None, HaloOptions(staleness=staleness)))
    model = distribute(GraphSAGE(NUM_FEATURES, OUT, 2, 3), algorithm="auto", staleness=1)
    model(local.x.clone().requires_grad_(), local.adj).sum().backward()
    out["sage"] = summary(model)
    return out


def test_layers_explain_the_exposed_time():
    per_rank = launch(_layers_worker, 2, timeout=300)
    for staleness in (0, 1):
        chosen, report, sync, text, _ = per_rank[0][staleness]
        assert all(r[staleness][:4] == (chosen, report, sync, text) for r in per_rank)  # one decision
        # the reported figures are the fresh predictions, max over ranks (bitwise)
        fresh = [r[staleness][4] for r in per_rank]
        assert report == [(n, max(f[n].seconds for f in fresh), max(f[n].bytes_sent for f in fresh))
                          for n, _, _ in report]
        assert chosen == min(report, key=lambda row: row[1])[0]
        if staleness == 0:
            assert sync == report
            assert "predicted ms" in text and "exposed" not in text and "sync ms" not in text
        else:
            assert [row[2] for row in sync] == [row[2] for row in report]  # the same bytes
            assert all(e[1] <= s[1] for e, s in zip(report, sync, strict=True))
            assert "sync ms" in text and "exposed ms" in text
            row = next(line for line in text.splitlines() if line.startswith(chosen))
            assert row.split()[1:3] == [f"{sync[0][1] * 1e3:.3f}", f"{report[0][1] * 1e3:.3f}"]
    assert "sync ms" in per_rank[0]["sage"] and "exposed ms" in per_rank[0]["sage"]


def _grid_worker(rank, world_size):
    grid = process_grid(2)
    local = shard(make_cases(world_size // 2)["directed"], grid=grid)
    restricted = restrict_to_blocks(local.adj, grid.stage_blocks()).nnz
    conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="auto", replication=2, staleness=1)
    conv(local.x, local.adj).sum().backward()
    return local_spmm_nnz(local.adj, grid), restricted, conv.explain_algorithm(), grid.row, local.adj.nnz


def test_grid_window_counts_the_stage_blocks():
    per_rank = launch(_grid_worker, 4, timeout=300)
    for nnz, restricted, text, _, _ in per_rank:
        assert nnz == restricted
        assert "exposed ms" in text and "1.5d" in text
    for row in (0, 1):  # the c replicas of a block row split its entries between them
        replicas = [r for r in per_rank if r[3] == row]
        assert len(replicas) == 2 and sum(r[0] for r in replicas) == replicas[0][4] > 0


def test_spmm_micro_benchmark():
    gamma = spmm_seconds_per_entry(nnz=1 << 12, repeats=2)
    assert 0 < gamma < 1e-6
    with pytest.raises(ValueError, match="nnz >= degree"):
        spmm_seconds_per_entry(nnz=3)
