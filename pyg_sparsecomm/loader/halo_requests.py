r"""A batch's requests between the ranks: one all-to-all of flags per hop.

At every hop a rank asks the owners of the halo columns its new edges read (those it has not
asked for before in the batch) to take those rows into the batch: their owners sample their
in-edges at the next hop and send them in the batch's exchanges.  Rank ``q``'s halo entries owned
by rank ``p`` are, in order, ``p``'s send list to ``q`` (the shard's halo exchange plan), so a
request needs no ids: one bit per halo entry, each owner's entries packed into bytes.  Both ends
know every message's size from the plan, so a hop costs one ``all_to_all_single`` of
``ceil(entries / 8)`` bytes per peer and no exchange of counts before it (ids would cost two
collectives per hop, the counts first, as an all-to-all's receiver must know its sizes, and 16
bytes per row), and on an accelerator its tensors stay on the device (on an NCCL group nothing
waits for it).  A heterogeneous batch asks for the rows of every source type in the same message.

The owner keeps, for each entry of its send lists, the hop it was first asked at (``-1``: not
asked): the batch's :class:`~.batch.Requests`, read once per batch (:class:`BatchRequests`).  On
the host, where reading a size costs nothing, the batch's entries are kept as sorted index sets
instead (:class:`BatchRowRequests`, :mod:`~pyg_sparsecomm.sampling.row_sets`: O(batch), no mask of
the shard's halo or send lists per hop; only the message itself is one bit per halo entry).
"""
import torch
import torch.distributed as dist
from torch import Tensor

from ..comm.ids import exchange_ids
from ..plan.homogeneous import RankPlan
from ..sampling.host_reads import indices
from ..sampling.row_sets import difference, disjoint_union, unique_rows
from .batch import Requests


class FlagLayout:
    """Where each entry's flag sits in one hop's message: ``slots[s]`` the bit of every entry of
    source ``s`` (entries grouped by peer, in order), ``nbytes[p]`` the bytes for peer ``p``.

    Args:
        counts (list[list[int]]): ``counts[s][p]`` entries of source ``s`` for peer ``p``.
        device (torch.device): where the slots live.
    """

    def __init__(self, counts: list[list[int]], device: torch.device) -> None:
        P = len(counts[0])
        per_peer = [sum(c[p] for c in counts) for p in range(P)]
        self.nbytes = [-(-n // 8) for n in per_peer]
        byte_start = [sum(self.nbytes[:p]) for p in range(P)]
        self.slots, before = [], [0] * P  # before[p]: entries of earlier sources for peer p
        for c in counts:
            seg_start = [sum(c[:p]) for p in range(P)]
            base = torch.tensor([8 * byte_start[p] + before[p] - seg_start[p] for p in range(P)], device=device)
            total = sum(c)
            self.slots.append(torch.repeat_interleave(base, torch.tensor(c, device=device), output_size=total)
                              + torch.arange(total, device=device))
            before = [b + n for b, n in zip(before, c, strict=True)]
        self.num_bits = 8 * sum(self.nbytes)
        self.shifts = torch.arange(8, dtype=torch.uint8, device=device)  # bit i of a byte: flag i of its 8

    def pack(self, flags: list[Tensor]) -> Tensor:
        """``[sum(nbytes)]`` uint8: the bool ``flags`` of every source at their slots."""
        bits = torch.zeros(self.num_bits, dtype=torch.uint8, device=self.slots[0].device)
        for flag, slot in zip(flags, self.slots, strict=True):
            bits.index_copy_(0, slot, flag.to(torch.uint8))
        return bits.view(-1, 8).bitwise_left_shift_(self.shifts).sum(1).to(torch.uint8)

    def unpack(self, packed: Tensor) -> list[Tensor]:
        """The bool flags of every source in ``packed`` (:meth:`pack`'s inverse)."""
        bits = packed.unsqueeze(1).bitwise_right_shift(self.shifts).bitwise_and_(1).view(-1)
        return [bits.index_select(0, slot).bool() for slot in self.slots]

    def pack_entries(self, entries: list[Tensor]) -> Tensor:
        """:meth:`pack` of the flags set at ``entries`` (per source, the entries flagged, each once):
        the bytes themselves, no tensor of a flag per entry."""
        packed = torch.zeros(sum(self.nbytes), dtype=torch.uint8, device=self.shifts.device)
        for flagged, slot in zip(entries, self.slots, strict=True):
            bit = slot.index_select(0, flagged)
            # distinct bits of a byte: their sum is their OR, at most 255
            packed.index_put_((bit >> 3,), torch.ones_like(bit, dtype=torch.uint8) << (bit & 7).to(torch.uint8),
                              accumulate=True)
        return packed

    def unpack_entries(self, packed: Tensor) -> list[Tensor]:
        """Per source, the entries whose flag is set in ``packed`` (ascending): :meth:`pack_entries`'
        inverse, over the bytes that hold a set flag only."""
        nonzero = torch.nonzero(packed).view(-1)
        bits = packed.index_select(0, nonzero).unsqueeze(1).bitwise_right_shift(self.shifts).bitwise_and_(1).bool()
        set_bits = ((nonzero * 8).unsqueeze(1) + self.shifts.long())[bits]  # ascending
        out = []
        for slot in self.slots:  # each source's slots ascend (grouped by peer, in order)
            if slot.numel() == 0:
                out.append(slot)
                continue
            at = torch.searchsorted(slot, set_bits).clamp_(max=slot.numel() - 1)
            out.append(at[slot.index_select(0, at) == set_bits])
        return out


class HaloRequests:
    """What a loader's batches need to ask for rows: the message layouts of its ``plans`` (one per
    source: the shard's plan, or every source type's), made once.

    Args:
        plans (list[RankPlan]): the sources' plans, in an order every rank shares.
    """

    def __init__(self, plans: list[RankPlan]) -> None:
        self.plans = plans
        device = plans[0].send_index.device
        self.asking = FlagLayout([p.recv_counts for p in plans], device)    # halo entries, by owner
        self.answering = FlagLayout([p.send_counts for p in plans], device)  # send-list entries, by peer
        P = plans[0].world_size
        self.send_peer = [torch.repeat_interleave(torch.arange(P, device=device),
                                                  torch.tensor(p.send_counts, device=device),
                                                  output_size=p.send_index.numel()) for p in plans]

    def batch(self, group: dist.ProcessGroup | None) -> "BatchRequests":
        """The requests of one batch, exchanged over ``group``."""
        return BatchRequests(self, group)

    def batch_sets(self, group: dist.ProcessGroup | None) -> "BatchRowRequests":
        """The requests of one batch kept as sets of the batch's entries, exchanged over ``group``."""
        return BatchRowRequests(self, group)

    def exchange_entries(self, asked: list[Tensor], group: dist.ProcessGroup | None) -> list[Tensor]:
        """:meth:`exchange` of the halo entries ``asked`` (per source, ascending, each once): the
        send-list entries peers asked for, per source, ascending (the same message)."""
        packed = self.asking.pack_entries(asked)
        received, _ = exchange_ids(packed, self.asking.nbytes, group, "sample", recv_counts=self.answering.nbytes)
        return self.answering.unpack_entries(received)

    def exchange(self, asked: list[Tensor], group: dist.ProcessGroup | None) -> list[Tensor]:
        """Sends every source's ``asked`` halo flags to their owners; returns the flags of every
        source's send lists that peers asked for (one all-to-all, counted as ``"sample"``)."""
        packed = self.asking.pack(asked)
        received, _ = exchange_ids(packed, self.asking.nbytes, group, "sample", recv_counts=self.answering.nbytes)
        return self.answering.unpack(received)


class BatchRequests:
    """One batch's requests: the halo entries asked for so far and the hop each send-list entry
    was asked at (``-1``: not asked), per source."""

    def __init__(self, layouts: HaloRequests, group: dist.ProcessGroup | None) -> None:
        self.layouts, self.group = layouts, group
        self.asked = [torch.zeros(p.halo_size, dtype=torch.bool, device=p.send_index.device) for p in layouts.plans]
        self.asked_at = [torch.full_like(p.send_index, -1) for p in layouts.plans]

    def hop(self, cols: list[list[Tensor]], hop: int) -> list[Tensor]:
        """Asks for the halo rows the edges sampled at ``hop`` read (columns ``[owned | halo]`` of every
        source, ``cols[s]``) that were not asked for before; collective (one all-to-all when ``P > 1``).
        Returns per source the ``[num_owned]`` mask of the rows the hop reaches: read by this rank's
        edges or asked for by a peer."""
        plans, fresh, reached = self.layouts.plans, [], []
        for s, (plan, columns) in enumerate(zip(plans, cols, strict=True)):
            read_halo, read_rows = _read(plan, columns)
            new = read_halo & ~self.asked[s]
            self.asked[s] |= new
            fresh.append(new)
            reached.append(read_rows)
        if plans[0].world_size > 1:
            for s, (plan, flags) in enumerate(zip(plans, self.layouts.exchange(fresh, self.group), strict=True)):
                self.asked_at[s].masked_fill_(flags, hop)
                reached[s].index_fill_(0, torch.where(flags, plan.send_index, plan.num_owned), True)
        return [rows[:plan.num_owned] for rows, plan in zip(reached, plans, strict=True)]

    def requests(self, source: int = 0) -> Requests:
        """The rows of ``source`` peers asked for in this batch, ``(peer, row, first hop)`` sorted by
        (peer, row); reads the device once."""
        plan, asked_at = self.layouts.plans[source], self.asked_at[source]
        entries = indices(asked_at >= 0)
        return Requests(self.layouts.send_peer[source].index_select(0, entries),
                        plan.send_index.index_select(0, entries), asked_at.index_select(0, entries))


def _read(plan: RankPlan, columns: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Masks of the halo entries (``[halo_size]``) and owned rows (``[num_owned + 1]``, the last one
    a spare slot for scatters of masked entries) that ``columns`` read."""
    n, halo, device = plan.num_owned, plan.halo_size, plan.send_index.device
    read_halo = torch.zeros(halo + 1, dtype=torch.bool, device=device)
    read_rows = torch.zeros(n + 1, dtype=torch.bool, device=device)
    for col in columns:
        is_halo = col >= n
        read_halo.index_fill_(0, torch.where(is_halo, col - n, halo), True)
        read_rows.index_fill_(0, torch.where(is_halo, n, col), True)
    return read_halo[:halo], read_rows


class BatchRowRequests:
    """One batch's requests as :class:`BatchRequests`' but kept as sets of entries
    (:mod:`~pyg_sparsecomm.sampling.row_sets`: sorted indices, O(batch), no mask of the shard's halo
    or send lists; finding them reads the device, so hosts use them, accelerators the masks): per
    source, the halo entries asked for so far, and per hop the send-list entries peers asked for at it."""

    def __init__(self, layouts: HaloRequests, group: dist.ProcessGroup | None) -> None:
        self.layouts, self.group = layouts, group
        self.asked = [p.send_index.new_zeros(0) for p in layouts.plans]
        self.answered: list[list[tuple[Tensor, int]]] = [[] for _ in layouts.plans]

    def hop_rows(self, cols: list[list[Tensor]], hop: int) -> list[Tensor]:
        """Asks for the halo rows the edges sampled at ``hop`` read (columns ``[owned | halo]`` of every
        source, ``cols[s]``) that were not asked for before; collective (one all-to-all when ``P > 1``).
        Returns per source the set (ascending) of the owned rows the hop reaches: read by this rank's
        edges or asked for by a peer."""
        plans, fresh, reached = self.layouts.plans, [], []
        for s, (plan, columns) in enumerate(zip(plans, cols, strict=True)):
            read_halo, read_rows = _read_sets(plan, columns)
            new = difference(read_halo, self.asked[s], plan.halo_size)
            self.asked[s] = disjoint_union(self.asked[s], new)
            fresh.append(new)
            reached.append(read_rows)
        if plans[0].world_size > 1:
            answered = self.layouts.exchange_entries(fresh, self.group)
            for s, (plan, entries) in enumerate(zip(plans, answered, strict=True)):
                self.answered[s].append((entries, hop))
                reached[s] = unique_rows(torch.cat([reached[s], plan.send_index.index_select(0, entries)]),
                                         plan.num_owned)
        return reached

    def requests(self, source: int = 0) -> Requests:
        """The rows of ``source`` peers asked for in this batch, ``(peer, row, first hop)`` in the order
        of the send lists (by peer, then row)."""
        plan, answered = self.layouts.plans[source], self.answered[source]
        if not answered:
            empty = plan.send_index.new_zeros(0)
            return Requests(empty, empty, empty)
        entries = torch.cat([e for e, _ in answered])
        hops = torch.cat([torch.full_like(e, h) for e, h in answered])
        entries, order = torch.sort(entries)  # a peer asks for an entry at one hop only
        return Requests(self.layouts.send_peer[source].index_select(0, entries),
                        plan.send_index.index_select(0, entries), hops.index_select(0, order))


def _read_sets(plan: RankPlan, columns: list[Tensor]) -> tuple[Tensor, Tensor]:
    """The sets (ascending) of the halo entries and of the owned rows that ``columns`` read."""
    n = plan.num_owned
    col = columns[0] if len(columns) == 1 else torch.cat(columns)
    is_halo = col >= n
    return unique_rows(col[is_halo] - n, plan.halo_size), unique_rows(col[~is_halo], n)
