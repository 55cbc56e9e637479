"""``CommStats`` on a hand-made 3-part partition whose figures are worked out by hand."""
import numpy as np
import pytest
import torch

from pyg_sparsecomm import CommStats
from pyg_sparsecomm.algorithms import bytes_per_epoch
from pyg_sparsecomm.plan import comm_pattern

# Nodes 0-2 on rank 0, 3-4 on rank 1, 5-6 on rank 2.
PART = torch.tensor([0, 0, 0, 1, 1, 2, 2])
EDGES = [(0, 5), (1, 6), (0, 6),   # rank 0 -> 2: nodes {0, 1}, 2 rows (node 0 is sent once)
         (3, 5), (3, 6),           # rank 1 -> 2: node {3}, 1 row
         (6, 2),                   # rank 2 -> 0: node {6}, 1 row
         (0, 1), (1, 0), (3, 4), (5, 6)]  # local edges: nonzeros, no rows
VOLUME = np.array([[0, 0, 2],
                   [0, 0, 1],
                   [1, 0, 0]])
# Row nonzeros per rank = edges into the rank + one self-loop per owned node:
# rank 0: (6,2), (0,1), (1,0) + 3; rank 1: (3,4) + 2; rank 2: six edges + 2.
NNZ = np.array([6, 3, 8])


@pytest.fixture
def stats() -> CommStats:
    edge_index = torch.tensor(EDGES).t()
    return CommStats.from_pattern(comm_pattern(edge_index, PART, 7, 3))


def test_hand_made_volume_and_nnz(stats):
    np.testing.assert_array_equal(stats.volume, VOLUME)
    np.testing.assert_array_equal(stats.nnz, NNZ)


def test_bytes_per_spmm_is_rows_times_width_times_element_size(stats):
    # rows sent [2, 1, 1] (total 4), received [1, 0, 3]; oblivious: sizes [3, 2, 2] * (P - 1) = 14
    for width, element_size in ((16, 4), (3, 2), (0, 4)):
        b = width * element_size
        assert stats.bytes_per_spmm(width, element_size) == pytest.approx({
            "total_bytes": 4 * b,
            "max_bytes_sent": 2 * b, "avg_bytes_sent": 4 / 3 * b,
            "max_bytes_received": 3 * b, "avg_bytes_received": 4 / 3 * b,
            "oblivious_total_bytes": 14 * b,
        })
    # A GCN epoch exchanges every layer's width forward and backward.
    assert bytes_per_epoch(stats, [16, 7]) == 2 * stats.bytes_per_spmm(23)["total_bytes"]


def test_as_dict_adds_byte_keys_only_with_a_width(stats):
    assert not any(k.endswith("_bytes") or "_bytes_" in k for k in stats.as_dict())
    d = stats.as_dict(width=16, element_size=2)
    assert d["total_bytes"] == 4 * 32 and d["max_bytes_received"] == 3 * 32
    assert {k: v for k, v in d.items() if "bytes" not in k} == stats.as_dict()


def test_received_messages_and_nnz_keys(stats):
    d = stats.as_dict()
    # messages sent [1, 1, 1], received [1, 0, 2]: the maxima differ, the averages cannot
    assert d["max_messages_received"] == 2 and d["avg_messages_received"] == pytest.approx(1.0)
    assert d["max_messages_sent"] == 1 and d["avg_messages_sent"] == pytest.approx(1.0)
    assert d["max_nnz"] == 8 and d["avg_nnz"] == pytest.approx(17 / 3)


def test_existing_keys_keep_their_meaning(stats):
    d = stats.as_dict()
    assert d["num_parts"] == 3 and d["total_rows"] == 4 and d["oblivious_total_rows"] == 14
    assert (d["max_rows_sent"], d["max_rows_received"]) == (2, 3)
    assert d["avg_rows_sent"] == d["avg_rows_received"] == pytest.approx(4 / 3)
    assert (d["max_messages"], d["avg_messages"]) == (1, 1)  # messages *sent*, as before
    assert d["compute_imbalance"] == pytest.approx(8 / (17 / 3))
    assert d["node_imbalance"] == pytest.approx(3 / (7 / 3)) and d["empty_parts"] == 0


@pytest.mark.parametrize("width, element_size", [(-1, 4), (2.5, 4), (8, -4), (True, 4)])
def test_bad_width_raises(stats, width, element_size):
    with pytest.raises(ValueError, match="width|element_size"):
        stats.bytes_per_spmm(width, element_size)


def test_one_sided_spans_by_hand(stats):
    # forward: rank 2 reads rows 0-1 of rank 0 (nodes 0, 1) and row 0 of rank 1 (node 3); rank 0 reads
    # row 1 of rank 2 (node 6).  Backward (A^T): rank 0 reads rows 0-1 of rank 2 (targets 5, 6 of its
    # nodes), rank 1 the same, rank 2 row 2 of rank 0 (target 2 of node 6).
    np.testing.assert_array_equal(stats.spans[0], [[0, 0, 1], [0, 0, 0], [2, 1, 0]])
    np.testing.assert_array_equal(stats.spans[1], [[0, 0, 2], [0, 0, 2], [1, 0, 0]])


def test_bytes_per_epoch_prices_every_algorithm_by_its_prediction(stats):
    widths, b = [16, 7], 23 * 4
    assert bytes_per_epoch(stats, widths, algorithm="oblivious") == 2 * 14 * b  # broadcasts + reduces
    for name in ("1d_overlap", "1d_overlap_p2p", "1.5d"):  # the "1d" exchange (1.5d at c = 1: no all-reduce)
        assert bytes_per_epoch(stats, widths, algorithm=name) == bytes_per_epoch(stats, widths) == 2 * 4 * b
    assert bytes_per_epoch(stats, widths, algorithm="1.5d_oblivious") == 2 * 14 * b
    # rdma: the spans above, forward 4 rows + backward 5 rows, always float64
    assert bytes_per_epoch(stats, widths, algorithm="rdma") == (4 + 5) * 23 * 8
    assert bytes_per_epoch(stats, widths, element_size=2, algorithm="rdma") == (4 + 5) * 23 * 8
    # c = 3 on P = 9: one stage block per grid column, plus the row all-reduce
    assert bytes_per_epoch(stats, widths, algorithm="1.5d", replication=3) > bytes_per_epoch(stats, widths)


def test_bytes_per_epoch_refuses_what_it_cannot_price(stats):
    with pytest.raises(ValueError, match=r"unknown algorithm 'sparse'; choose one of \[.*'oblivious'.*'rdma'"):
        bytes_per_epoch(stats, [16], algorithm="sparse")  # used to be priced as oblivious, silently
    with pytest.raises(ValueError, match="is a 1D algorithm"):
        bytes_per_epoch(stats, [16], algorithm="1d", replication=3)
    with pytest.raises(ValueError, match="does not divide|must be an integer"):
        bytes_per_epoch(stats, [16], algorithm="1.5d", replication=2)
    without_spans = CommStats(stats.num_parts, stats.volume, stats.part_sizes, stats.nnz)
    with pytest.raises(ValueError, match="known only from the whole edge list"):
        bytes_per_epoch(without_spans, [16], algorithm="rdma")
