"""Remote update queues and outboxes for stationary-A and work stealing (ICS'24 Section 3.1.2, 5.3).

A producer that computed a partial ``C_ij`` owned by another rank stores the
partial in its own *outbox* (a region others can read) and enqueues a small
*handle* ``(src, offsets, i, j, nnz, k)`` on the owner's :class:`RemoteQueue`.
The owner later dequeues the handle, ``get``\\ s the partial from the producer
and accumulates it into its tile, as in the paper's Algorithm 1.

Queue layout (one int64 region per rank): ``capacity`` slots of
:data:`SLOT_WORDS` words ``[ready, src, f_off, i_off, i, j, nnz, k]`` and a
separate one-word tail counter.  Enqueue:

1. ``slot = fetch_add(owner, tail, 1)`` reserves a slot (one remote atomic);
2. ``put`` of the handle words into the slot (flushed: remotely complete);
3. ``fetch_add(owner, slot.ready, 1)`` publishes it.

Step 3 exists because MPI does not order a put before a later put to another
address; the owner reads ``ready`` atomically, so it never sees a half-written
handle (BCL's CheckSumQueue reaches the same end with a checksum instead).
Slots are consumed in order; the queue never wraps, so ``capacity`` must bound
the number of updates a rank can receive — the algorithms compute it exactly
from the directories (see ``expected`` counts there).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from .backend import RMABackend
from .kernels import Tile, csr_tile, is_sparse, tile_nnz

SLOT_WORDS = 8


class RemoteQueue:
    """Multi-producer, single-consumer queue of fixed-size int64 handles on every rank (collective).

    Args:
        backend (RMABackend): the one-sided backend holding the queue's regions.
        capacity (int): handles the queue holds.
    """

    def __init__(self, backend: RMABackend, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"queue capacity must be >= 0, got {capacity}")
        self.backend = backend
        self.slots = backend.alloc(capacity * SLOT_WORDS, torch.int64)
        self.tail = backend.alloc(1, torch.int64)
        self.capacity = [n // SLOT_WORDS for n in self.slots.lengths]
        self.head = 0  # next slot this rank consumes (only the owner pops)

    def push(self, owner: int, handle: Sequence[int]) -> int:
        """Enqueues ``handle`` (``SLOT_WORDS - 1`` ints) on ``owner``'s queue; returns the slot."""
        if len(handle) != SLOT_WORDS - 1:
            raise ValueError(f"a queue handle has {SLOT_WORDS - 1} words, got {len(handle)}")
        slot = self.backend.fetch_add(owner, self.tail, 0, 1)
        if slot >= self.capacity[owner]:
            raise RuntimeError(f"remote queue of rank {owner} overflowed: slot {slot} >= capacity "
                               f"{self.capacity[owner]} (expected-update count too small)")
        words = torch.tensor([int(w) for w in handle], dtype=torch.int64, device=self.backend.device)
        self.backend.put(owner, self.slots, slot * SLOT_WORDS + 1, words)
        self.backend.fetch_add(owner, self.slots, slot * SLOT_WORDS, 1)  # publish after the put completed
        return slot

    def pop(self) -> list[int] | None:
        """The next published handle of this rank's queue, or ``None`` if none is ready yet."""
        me = self.backend.rank
        if self.head >= self.capacity[me] or self.backend.fetch_add(me, self.slots, self.head * SLOT_WORDS, 0) == 0:
            return None
        words = self.backend.get(me, self.slots, self.head * SLOT_WORDS + 1, SLOT_WORDS - 1)
        self.head += 1
        return [int(w) for w in words.tolist()]

    def free(self) -> None:
        self.backend.free(self.slots)
        self.backend.free(self.tail)


class Outbox:
    """A rank's readable store of partial tiles: bump allocation in a float64 and an int64 region.

    Args:
        backend (RMABackend): the one-sided backend holding the regions (allocation is collective).
        float_capacity (int): ``float64`` elements of the value region.
        int_capacity (int, optional): ``int64`` elements of the index region (SpGEMM's CSR partials).
            (default: :obj:`0`)
    """

    def __init__(self, backend: RMABackend, float_capacity: int, int_capacity: int = 0) -> None:
        self.backend = backend
        self.values = backend.alloc(float_capacity, torch.float64)
        self.ints = backend.alloc(int_capacity, torch.int64)
        self.f_used = self.i_used = 0

    def fits(self, tile: Tile) -> bool:
        nf, ni = self.sizes(tile)
        me = self.backend.rank
        return self.f_used + nf <= self.values.lengths[me] and self.i_used + ni <= self.ints.lengths[me]

    @staticmethod
    def sizes(tile: Tile) -> tuple[int, int]:
        """``(float64 words, int64 words)`` that storing ``tile`` takes."""
        if is_sparse(tile):
            return tile_nnz(tile), tile.shape[0] + 1 + tile_nnz(tile)
        return tile.numel(), 0

    def store(self, tile: Tile) -> tuple[int, int, int]:
        """Copies ``tile`` into the outbox; returns ``(f_off, i_off, nnz)`` (``nnz = -1``: dense)."""
        if not self.fits(tile):
            raise RuntimeError(f"outbox of rank {self.backend.rank} is full")
        me, f_off, i_off = self.backend.rank, self.f_used, self.i_used
        if is_sparse(tile):
            self.backend.put(me, self.values, f_off, tile.values())
            self.backend.put(me, self.ints, i_off, torch.cat([tile.crow_indices(), tile.col_indices()]))
            nnz = tile_nnz(tile)
        else:
            self.backend.put(me, self.values, f_off, tile)
            nnz = -1
        nf, ni = self.sizes(tile)
        self.f_used, self.i_used = f_off + nf, i_off + ni
        return f_off, i_off, nnz

    def fetch(self, src: int, f_off: int, i_off: int, nnz: int, rows: int, cols: int) -> Tile:
        """Reads a partial stored by ``src`` (the owner's side of a dequeue)."""
        if nnz < 0:
            return self.backend.get(src, self.values, f_off, rows * cols).reshape(rows, cols)
        values = self.backend.get_async(src, self.values, f_off, nnz)
        ints = self.backend.get(src, self.ints, i_off, rows + 1 + nnz)
        return csr_tile(values.wait(), ints[:rows + 1], ints[rows + 1:], (rows, cols))

    def free(self) -> None:
        self.backend.free(self.values)
        self.backend.free(self.ints)
