"""A partitioned graph's statistics pickle as plain numbers (issue 54's class "a user's own launch"):
a partitioned ``Data`` or ``HeteroData`` passes to ``torch.multiprocessing`` workers (``mp.spawn``, the
launcher of the tests) -- before, the tensors made while pickling ``comm_stats`` died with the pickling
and the workers failed with ``unable to resize file`` -- and loads with ``torch.load(weights_only=True)``,
also from files of 0.3 whose arrays are tensors."""
import io

import numpy as np
import torch
from torch_geometric.data import Data

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.graph.datasets import igbh_like
from pyg_sparsecomm.partition.partitioner import _comm_stats
from pyg_sparsecomm.testing import launch


def _graph() -> Data:
    gen = torch.Generator().manual_seed(0)
    return Data(x=torch.randn(60, 4, generator=gen), edge_index=torch.randint(0, 60, (2, 240), generator=gen))


def _received(rank, world_size, data):
    return data.comm_stats.total_rows, data.comm_stats.part_sizes


def test_a_partitioned_graph_passes_to_multiprocessing_workers():
    for data in (SparsityAwarePartitioner(2, method="metis")(_graph()),
                 SparsityAwarePartitioner(2, method="random")(igbh_like(60, seed=0))):
        sizes = data.comm_stats.part_sizes
        for total_rows, part_sizes in launch(_received, 2, data):
            assert total_rows == data.comm_stats.total_rows
            if isinstance(sizes, dict):
                assert {t: s.tolist() for t, s in part_sizes.items()} == {t: s.tolist() for t, s in sizes.items()}
            else:
                assert part_sizes.tolist() == sizes.tolist() and part_sizes.dtype == sizes.dtype


def test_comm_stats_load_with_weights_only_and_from_files_holding_tensors():
    stats = SparsityAwarePartitioner(3, method="metis")(_graph()).comm_stats
    buf = io.BytesIO()
    torch.save({"comm_stats": stats}, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)["comm_stats"]
    assert loaded.total_rows == stats.total_rows and np.array_equal(loaded.spans, stats.spans)
    old = _comm_stats({"num_parts": 3, "volume": torch.from_numpy(stats.volume),
                       "part_sizes": torch.from_numpy(stats.part_sizes), "nnz": torch.from_numpy(stats.nnz),
                       "spans": torch.from_numpy(stats.spans)})  # what 0.3 wrote
    assert old.total_rows == stats.total_rows and np.array_equal(old.part_sizes, stats.part_sizes)
