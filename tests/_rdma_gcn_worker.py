"""``DistributedGCNConv(algorithm="rdma")`` == PyG ``GCNConv`` under ``mpiexec -n P`` (run by test_rdma.py).

torch.distributed (gloo, file store given as argv[1]) is initialised with the
MPI ranks; prints ``PASS gcn_rdma_equivalence`` on rank 0, aborts the job on any failure.
"""
import faulthandler
import os
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from graphs import CONFIGS, NUM_FEATURES, make_cases
from mpi4py import MPI
from torch_geometric.nn import GCNConv

import pyg_sparsecomm.algorithms.rdma as rdma_algorithm  # registers algorithm="rdma"
from pyg_sparsecomm import DistributedGCNConv, shard, sync_gradients

OUT = 5
CASES = ("undirected", "directed", "isolated", "self_loops", "empty_part")


def state(config):
    torch.manual_seed(3)
    conv = GCNConv(NUM_FEATURES, OUT, **config)
    torch.nn.init.normal_(conv.bias)
    return conv.state_dict()


def upstream(num_nodes):
    return torch.randn(num_nodes, OUT, generator=torch.Generator().manual_seed(7))


def check(rank: int, world_size: int) -> None:
    for name, data in make_cases(world_size).items():
        if name not in CASES:
            continue
        local = shard(data)
        for cfg_name, config in CONFIGS.items():
            ref = GCNConv(NUM_FEATURES, OUT, **config)
            ref.load_state_dict(state(config))
            x_ref = data.x.clone().requires_grad_()
            y_ref = ref(x_ref, data.edge_index)
            (y_ref * upstream(data.num_nodes)).sum().backward()
            conv = DistributedGCNConv(NUM_FEATURES, OUT, algorithm="rdma", **config)
            conv.load_state_dict(state(config))
            for call in range(2 if config.get("cached") else 1):
                conv.zero_grad()
                x = local.x.clone().requires_grad_()
                y = conv(x, local.adj)
                (y * upstream(data.num_nodes)[local.n_id]).sum().backward()
                sync_gradients(conv)
                where = f"{name}/{cfg_name}/call {call}/rank {rank} of {world_size}"
                for what, got, expect in (("y", y, y_ref.detach()[local.n_id]), ("dx", x.grad, x_ref.grad[local.n_id]),
                                          ("dW", conv.lin.weight.grad, ref.lin.weight.grad)):
                    if not torch.allclose(got, expect, atol=1e-5, rtol=1e-4):
                        raise AssertionError(f"{where} {what}: max error {(got - expect).abs().max():.3g}")


if __name__ == "__main__":
    comm = MPI.COMM_WORLD
    # a hung rank prints where it hangs before the test's subprocess timeout kills the job
    faulthandler.dump_traceback_later(float(os.environ.get("RDMA_TEST_DUMP_AFTER", "100")), exit=True)
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=comm.rank,
                                world_size=comm.size, timeout=timedelta(seconds=60))
        check(comm.rank, comm.size)
        rdma_algorithm.free_engines()
        dist.barrier()
        if comm.rank == 0:
            print("PASS gcn_rdma_equivalence", flush=True)
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 -- any failure must abort every rank, or peers hang
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
