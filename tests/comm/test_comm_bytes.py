"""Bytes counted on the wire equal the plan's prediction exactly."""
import numpy as np
import pytest
from graphs import NUM_FEATURES, make_cases

from pyg_sparsecomm import CommStats, DistributedGCNConv, comm_counter, shard
from pyg_sparsecomm.plan import comm_pattern
from pyg_sparsecomm.testing import launch

OUT = 5
F32 = 4


def _worker(rank, world_size, case):
    data = make_cases(world_size)[case]
    local = shard(data)
    counter = comm_counter()
    result = {"send_counts": local.adj.plan.send_counts, "recv_counts": local.adj.plan.recv_counts,
              "num_owned": local.adj.num_owned}
    for algorithm in ["1d", "oblivious", "1d_overlap", "1d_overlap_p2p"]:
        conv = DistributedGCNConv(NUM_FEATURES, OUT, cached=True, algorithm=algorithm)
        counter.reset()
        conv(local.x, local.adj)  # first call: also exchanges the halo degrees (1 column)
        first = {k: (counter.sent[k].copy(), counter.received[k].copy()) for k in counter.sent}
        counter.reset()
        x = local.x.clone().requires_grad_()
        conv(x, local.adj).sum().backward()
        steady = {k: (counter.sent[k].copy(), counter.received[k].copy()) for k in counter.sent}
        result[algorithm] = (first, steady)
    return result


@pytest.mark.parametrize("world_size,case", [(2, "undirected"), (4, "directed"), (3, "empty_part")])
def test_measured_bytes_equal_plan(world_size, case):
    per_rank = launch(_worker, world_size, case)
    data = make_cases(world_size)[case]
    # from the partition itself: not every case went through the partitioner (empty_part has no comm_stats)
    stats = CommStats.from_pattern(comm_pattern(data.edge_index, data.part, data.num_nodes, world_size))
    total_sent = 0
    for r, res in enumerate(per_rank):
        send = np.array(res["send_counts"]) * F32
        recv = np.array(res["recv_counts"]) * F32
        first, steady = res["1d"]
        np.testing.assert_array_equal(first["halo"][0], send * (OUT + 1))  # features + degrees
        np.testing.assert_array_equal(first["halo"][1], recv * (OUT + 1))
        np.testing.assert_array_equal(steady["halo"][0], send * OUT)
        np.testing.assert_array_equal(steady["halo"][1], recv * OUT)
        np.testing.assert_array_equal(steady["halo_grad"][0], recv * OUT)  # backward: reverse
        np.testing.assert_array_equal(steady["halo_grad"][1], send * OUT)
        total_sent += int(steady["halo"][0].sum())
        # the overlapped exchanges (collective or point-to-point) move exactly the same bytes as "1d";
        # their first calls exchange no degrees: the shard's cached layers share the first one's
        # normalisation (nn/shared_adjacency.py)
        for overlapped in ("1d_overlap", "1d_overlap_p2p"):
            ov_first, ov_steady = res[overlapped]
            assert set(ov_first) == set(first) and set(ov_steady) == set(steady)
            np.testing.assert_array_equal(ov_first["halo"][0], send * OUT)
            np.testing.assert_array_equal(ov_first["halo"][1], recv * OUT)
            for kind in steady:
                np.testing.assert_array_equal(ov_steady[kind][0], steady[kind][0])
                np.testing.assert_array_equal(ov_steady[kind][1], steady[kind][1])

        # oblivious: rank r broadcasts its whole block to P-1 peers, forward and (reduce) backward
        block = res["num_owned"] * OUT * F32
        _, ob = res["oblivious"]
        assert int(ob["bcast"][0].sum()) == block * (world_size - 1)
        sizes = [p["num_owned"] for p in per_rank]
        assert int(ob["reduce"][0].sum()) == sum(sizes[j] for j in range(world_size) if j != r) * OUT * F32
    assert total_sent == stats.total_rows * OUT * F32
    assert total_sent > 0
