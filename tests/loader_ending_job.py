"""A torchrun job that leaves every kind of distributed loader's epoch the way a script does and
then ends (issue 55, item 2): ``python -m torch.distributed.run --nproc-per-node 2
tests/loader_ending_job.py ENDING DESTROY PREFETCH``.

ENDING is how every loader's loop ends, for each of the six loaders (neighbour, heterogeneous
neighbour, node subset, heterogeneous subset, link neighbour, heterogeneous link), one after the
other, with each prefetching thread left sampling ahead when the next loader starts:

* ``break``: ``for batch in loader: break``;
* ``exception``: an exception raised inside the loop, caught outside it; after the last loader
  one more is raised and not caught (the job's exit code is then 1, on every rank);
* ``gc``: ``it = iter(loader); next(it)`` then ``del it`` and ``gc.collect()``;
* ``exit``: ``it = iter(loader); next(it)`` kept in a global until the interpreter exits;
* ``exception_one``: after the others ended by ``break``, rank 1 raises in the first loader's loop (not
  caught) while rank 0 goes on iterating: rank 1 exits 1, rank 0 fails or is stopped by torchrun.

DESTROY (``1``/``0``) calls ``dist.destroy_process_group()`` before the script ends; PREFETCH is
every loader's ``prefetch=``.  Prints ``ENDED <rank>`` as its last line.
"""
import gc
import sys

import torch
import torch.distributed as dist
from torch_geometric.data import Data, HeteroData

from pyg_sparsecomm import shard
from pyg_sparsecomm.loader import (
    DistributedLinkNeighborLoader,
    DistributedNeighborLoader,
    DistributedNodeSubsetLoader,
)

N, USERS, ITEMS = 240, 60, 40


class Ended(Exception):
    """The exception a loop raises."""


def graphs(world_size: int) -> tuple[Data, HeteroData]:
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(N, 4, generator=gen), edge_index=torch.randint(0, N, (2, 1500), generator=gen),
                num_nodes=N, part=torch.arange(N) % world_size, num_parts=world_size)
    hetero = HeteroData()
    hetero["user"].x, hetero["item"].x = torch.randn(USERS, 4, generator=gen), torch.randn(ITEMS, 4, generator=gen)
    rates = torch.stack([torch.randint(0, USERS, (300,), generator=gen),
                         torch.randint(0, ITEMS, (300,), generator=gen)])
    hetero["user", "rates", "item"].edge_index = rates
    hetero["item", "rev", "user"].edge_index = rates.flip(0)
    hetero["user"].part, hetero["item"].part = torch.arange(USERS) % world_size, torch.arange(ITEMS) % world_size
    hetero.num_parts = world_size
    return data, hetero


def loaders(prefetch: int) -> list:
    data, hetero = graphs(dist.get_world_size())
    local, hetero_local = shard(data), shard(hetero)
    pairs = data.edge_index[:, :400]
    rates = hetero["user", "rates", "item"].edge_index
    return [DistributedNeighborLoader(local, [5, 3], batch_size=8, shuffle=True, prefetch=prefetch),
            DistributedNeighborLoader(hetero_local, [4, 2], batch_size=8, input_nodes="user", prefetch=prefetch),
            DistributedNodeSubsetLoader(local, batch_size=16, shuffle=True, prefetch=prefetch),
            DistributedNodeSubsetLoader(hetero_local, batch_size=10, input_nodes="user", prefetch=prefetch),
            DistributedLinkNeighborLoader(local, [3, 2], pairs, batch_size=16, prefetch=prefetch),
            DistributedLinkNeighborLoader(hetero_local, [3], (("user", "rates", "item"), rates), batch_size=16,
                                          prefetch=prefetch)]


KEPT = []  # iterators alive until the interpreter exits (ending "exit")


def end(loader, ending: str) -> None:
    if ending == "break":
        for _ in loader:
            break
    elif ending == "exception":
        try:
            for _ in loader:
                raise Ended("raised in the loop")
        except Ended:
            pass
    elif ending == "gc":
        it = iter(loader)
        next(it)
        del it
        gc.collect()
    elif ending == "exit":
        it = iter(loader)
        next(it)
        KEPT.append(it)
    else:
        raise ValueError(ending)


def main() -> None:
    ending, destroy, prefetch = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    made = loaders(prefetch)
    for loader in made:
        end(loader, "break" if ending == "exception_one" else ending)
    if destroy:
        dist.destroy_process_group()
    print(f"ENDED {rank}", flush=True)
    if ending == "exception" or (ending == "exception_one" and rank == 1):
        for _ in made[0]:
            raise Ended("raised in the loop and not caught")
    if ending == "exception_one":
        for _ in made[0]:  # rank 0: its peer stopped taking part
            pass


if __name__ == "__main__":
    main()
