"""The sparsity-aware halo exchange: one ``all_to_all_single`` per SpMM, with autograd.

Forward (ICPP'24 Algorithm 1, lines 2-6): gather the rows every peer needs
(``send_index``), exchange them in one all-to-allv, return the halo rows in
``[owner, global id]`` order.  Backward: the transpose of that map, i.e. the
halo gradients travel back to their owners (the reverse all-to-allv) and are
summed into the owned rows with ``index_add_`` (a row sent to several peers
accumulates all their gradients).  Nothing assumes ``A = A^T``.

Rows and gradients may travel compressed (``halo_precision``, AdaQP): each row is encoded by
:mod:`~pyg_sparsecomm.comm.quantize` before it leaves and decoded where it arrives, so the
counter records the payload, scale and offset included.  The backward passes gradients
straight through the rounding (unbiased: exact in expectation).
"""
import math
import os
import time
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import Tensor

from .counters import _COUNTER, PeerRows, comm_counter, row_nbytes
from .device_check import CHECK_DEVICES_ENV, check_devices
from .group import join_all, raise_together
from .peer_failure import failures_named, raise_named
from .quantize import decode_rows, encode_rows
from .waiting import SPIN, finish, spin_seconds

if TYPE_CHECKING:  # pragma: no cover
    from ..plan.homogeneous import RankPlan


def start_all_to_all_rows(send: Tensor, send_counts: list[int], recv_counts: list[int],
                          group: dist.ProcessGroup | None = None, kind: str = "halo"):
    """Starts the exchange of :func:`all_to_all_rows` without waiting; returns ``(recv, work)``.

    ``recv`` is valid once ``work.wait()`` returned (a :class:`WorkList`: a peer's failure raises
    naming it).  The bytes are counted here; the caller times the wait (the communication time it
    could not hide).
    """
    row_bytes = row_nbytes(send)
    recv = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
    check_devices("all_to_all_rows", group, send)
    work = dist.all_to_all_single(recv, send.contiguous(), output_split_sizes=recv_counts,
                                  input_split_sizes=send_counts, group=group, async_op=True)
    comm_counter().record(kind, [c * row_bytes for c in send_counts], [c * row_bytes for c in recv_counts], group)
    return recv, WorkList([work], group)


class WorkList:
    """The pending operations of one exchange over ``group``, waited for together; a failure
    caused by a peer raises :class:`~pyg_sparsecomm.comm.peer_failure.PeerFailedError` naming it."""

    def __init__(self, works, group: dist.ProcessGroup | None = None) -> None:
        self.works, self.group = list(works), group

    def wait(self) -> None:
        try:  # every exchange waits here: failures_named's check at no cost while peers answer
            for work in self.works:
                finish(work, self.group)
        except BaseException as error:
            raise_named(error, "the halo exchange", self.group)
            raise

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self.works)


def start_p2p_rows(send: Tensor, send_counts: list[int], recv_counts: list[int],
                   group: dist.ProcessGroup | None = None, kind: str = "halo"):
    """:func:`start_all_to_all_rows` with non-blocking sends and receives posted only to the peers
    that have rows (``batch_isend_irecv``), instead of a collective that contacts every rank.

    The message count is then the plan's (e.g. at most 20 of 63 peers for METIS on mdual at
    P = 64) rather than ``P - 1``.  Returns ``(recv, work)`` like the collective version.
    Every rank of ``group`` calls it, also one without rows: the first call on a group is
    preceded by a collective of all members (:func:`~pyg_sparsecomm.comm.group.join_all`), as
    NCCL requires of a group's first batched point-to-point call.
    """
    join_all(group)
    row_bytes = row_nbytes(send)
    send = send.contiguous()
    recv = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
    ops, sent_off, recv_off = [], 0, 0
    for peer, (n_send, n_recv) in enumerate(zip(send_counts, recv_counts, strict=False)):
        peer_rank = peer if group is None else dist.get_global_rank(group, peer)
        if n_recv:
            ops.append(dist.P2POp(dist.irecv, recv.narrow(0, recv_off, n_recv), peer_rank, group))
        if n_send:
            ops.append(dist.P2POp(dist.isend, send.narrow(0, sent_off, n_send), peer_rank, group))
        sent_off, recv_off = sent_off + n_send, recv_off + n_recv
    check_devices("start_p2p_rows", group, send)
    with failures_named("the halo exchange", group):
        works = dist.batch_isend_irecv(ops) if ops else []
    comm_counter().record(kind, [c * row_bytes for c in send_counts], [c * row_bytes for c in recv_counts], group)
    return recv, WorkList(works, group)


def all_to_all_rows(send: Tensor, send_counts: list[int], recv_counts: list[int],
                    group: dist.ProcessGroup | None = None, kind: str = "halo") -> Tensor:
    """Sends ``send_counts[p]`` consecutive rows of ``send`` to every rank ``p``.

    Returns the ``sum(recv_counts)`` received rows, grouped by source rank.
    """
    counter = comm_counter()
    with counter.timed(send.device):
        recv, work = start_all_to_all_rows(send, send_counts, recv_counts, group, kind)
        work.wait()
    return recv


def encode_together(rows: Tensor, precision: str | None, group, index: Tensor | None = None) -> Tensor:
    """``rows`` (``rows[index]``, gathered while encoding) in their wire format; a compressed encoding
    that fails on one rank (a non-finite value, fp16's range) raises its message on every rank, which
    agree with one one-element all-reduce (only on compressed exchanges), instead of leaving the peers
    waiting in the exchange."""
    if precision is None:
        return encode_rows(rows, precision, index)
    return raise_together(lambda: encode_rows(rows, precision, index), f"the {precision} halo exchange", group,
                          flag_first=True)


def _to_halo(x: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None,
             precision: str | None = None) -> Tensor:
    """The forward exchange: the rows of ``x`` every peer needs, received as this rank's halo
    (travelling in ``precision``, :mod:`~pyg_sparsecomm.comm.quantize`; ``None``: exact, the rows
    themselves with no codec step)."""
    exact = precision is None
    send = x.index_select(0, plan.send_index) if exact else encode_together(x, precision, group, plan.send_index)
    received = all_to_all_rows(send, plan.send_counts, plan.recv_counts, group, "halo")
    return received if exact else decode_rows(received, x, precision)


def _to_owners(halo: Tensor, into: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None,
               precision: str | None = None) -> Tensor:
    """The reverse exchange: halo rows travel back to their owners (in ``precision``; ``None``:
    exact, with no codec step) and are summed into ``into``."""
    exact = precision is None
    payload = halo if exact else encode_together(halo, precision, group)
    back = all_to_all_rows(payload, plan.recv_counts, plan.send_counts, group, "halo_grad")
    return into.index_add_(0, plan.send_index, back if exact else decode_rows(back, halo, precision))


class _HaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None, precision: str | None,
                grad_precision: str | None) -> Tensor:
        ctx.plan, ctx.group, ctx.num_owned, ctx.grad_precision = plan, group, x.size(0), grad_precision
        return _to_halo(x, plan, group, precision)

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        # the rounding of the forward is passed straight through (its expectation is the identity)
        zeros = grad_halo.new_zeros((ctx.num_owned,) + tuple(grad_halo.shape[1:]))
        return _to_owners(grad_halo, zeros, ctx.plan, ctx.group, ctx.grad_precision), None, None, None, None


def halo_exchange(x: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None = None,
                  precision: str | None = None, grad_precision: str | None = None) -> Tensor:
    """Returns the ``[halo_size, ...]`` rows of ``x`` that this rank's adjacency needs.

    ``x`` holds this rank's owned rows.  Differentiable: gradients flow back to
    the owners' rows.  Without peers (world size 1) no collective is issued.
    ``precision`` / ``grad_precision``: the wire format of the rows and of their gradients
    (:mod:`~pyg_sparsecomm.comm.quantize`; ``None``: exact).  Tensors that are not floating
    point (ids, masks) always travel exactly.  Layers call it through
    :meth:`HaloExchanger.exchange <pyg_sparsecomm.comm.exchanger.HaloExchanger.exchange>`,
    which picks the precisions (and staleness) from the layer's options.

    Args:
        x (torch.Tensor): ``[num_owned, *]`` owned rows.
        plan (RankPlan): this rank's plan (which rows it sends and receives).
        group (torch.distributed.ProcessGroup, optional): the exchange's process group.
            (default: :obj:`None`, the default group)
        precision (str, optional): wire format of the rows. (default: :obj:`None`)
        grad_precision (str, optional): wire format of their gradients. (default: :obj:`None`)
    """
    if x.size(0) != plan.num_owned:
        raise ValueError(f"halo_exchange: x has {x.size(0)} rows but this rank owns {plan.num_owned}")
    if plan.world_size == 1:
        return x.new_empty((0,) + tuple(x.shape[1:]))
    if not x.is_floating_point():
        precision = grad_precision = None
    return _HaloExchange.apply(x, plan, group, precision, grad_precision)


class _HaloReduce(torch.autograd.Function):
    """The adjoint of :class:`_HaloExchange`: halo rows travel back to their owners and are
    summed into the owned rows; backward is the forward exchange.  (Counted as ``"halo_grad"``,
    the reverse direction, although it runs in the forward pass.)"""

    @staticmethod
    def forward(ctx, owned: Tensor, halo: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None) -> Tensor:
        ctx.plan, ctx.group = plan, group
        return _to_owners(halo, owned.clone(), plan, group)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, _to_halo(grad, ctx.plan, ctx.group), None, None


def halo_reduce(x_ext: Tensor, plan: "RankPlan", group: dist.ProcessGroup | None = None) -> Tensor:
    r"""Folds values over ``[owned | halo]`` columns into the owners' rows.

    Row ``c`` of the result is ``x_ext[c]`` plus every peer's ``x_ext`` row of the halo
    column that is this rank's node ``c``: the sum over all ranks of a per-column partial
    (e.g. a node's out-degree, whose edges live on the ranks owning their targets).
    Differentiable; the adjoint of :func:`halo_exchange`.

    Args:
        x_ext (torch.Tensor): ``[num_owned + halo_size, *]`` values over this rank's columns.
        plan (RankPlan): this rank's plan.
        group (torch.distributed.ProcessGroup, optional): the exchange's process group.
            (default: :obj:`None`, the default group)
    """
    if x_ext.size(0) != plan.num_owned + plan.halo_size:
        raise ValueError(f"halo_reduce: x has {x_ext.size(0)} rows, expected owned + halo = "
                         f"{plan.num_owned + plan.halo_size}")
    owned, halo = x_ext[:plan.num_owned], x_ext[plan.num_owned:]
    if plan.world_size == 1:
        return owned
    return _HaloReduce.apply(owned, halo, plan, group)


class HeaderedPlan:
    """The rows of a headered exchange over a plan (:func:`headered_exchange`): one header row
    after each peer's rows.

    Args:
        plan (RankPlan): the exchange's plan.
        me (int): this rank in the exchange's group.
    """

    def __init__(self, plan: "RankPlan", me: int, group: dist.ProcessGroup | None = None) -> None:
        peers = [int(r != me) for r in range(len(plan.send_counts))]
        self.send_counts, self.recv_counts = headered_counts(plan, me)
        self.send_body, self.send_header = _positions(plan.send_counts, peers)
        self.recv_body, self.recv_header = _positions(plan.recv_counts, peers)
        self.send_index, self.num_owned = plan.send_index, plan.num_owned
        self.body_counts = (plan.send_counts, plan.recv_counts)
        #: the rows counted forward (the body's, not the headers') and backward, by default-group rank
        self.body_rows = PeerRows(plan.send_counts, plan.recv_counts, group)
        self.grad_rows = PeerRows(plan.recv_counts, plan.send_counts, group)


def headered_counts(plan: "RankPlan", me: int) -> tuple[list[int], list[int]]:
    """The send and receive counts of a headered exchange over ``plan``: one row more per peer."""
    peers = [int(r != me) for r in range(len(plan.send_counts))]
    return ([c + p for c, p in zip(plan.send_counts, peers, strict=True)],
            [c + p for c, p in zip(plan.recv_counts, peers, strict=True)])


def _positions(counts: list[int], peers: list[int]) -> tuple[Tensor, Tensor]:
    """The positions of the rows and of the header rows in a buffer of peers' segments."""
    body, header, at = [], [], 0
    for count, peer in zip(counts, peers, strict=True):
        body.append(torch.arange(at, at + count))
        at += count
        if peer:
            header.append(at)
            at += 1
    return torch.cat(body) if body else torch.zeros(0, dtype=torch.long), torch.tensor(header, dtype=torch.long)


def _all_to_all_body(send: Tensor, send_counts: list[int], recv_counts: list[int], body: PeerRows,
                     group: dist.ProcessGroup | None, kind: str) -> Tensor:
    """:func:`all_to_all_rows` counting the rows of ``body`` only (the header rows are no halo bytes).
    A hot path (every steady-state layer call's exchange): the byte counts per peer are the plan's,
    computed once (:class:`~.counters.PeerRows`), the device check reads the environment inline."""
    counter = _COUNTER
    if os.environ.get(CHECK_DEVICES_ENV, "") not in ("", "0"):
        check_devices("all_to_all_rows", group, send)
    device = send.device
    start = time.perf_counter() if device.type != "cuda" else counter.start(device)  # (the host clock: inline)
    recv = send.new_empty((sum(recv_counts),) + tuple(send.shape[1:]))
    work = dist.all_to_all_single(recv, send.contiguous(), output_split_sizes=recv_counts,
                                  input_split_sizes=send_counts, group=group, async_op=True)
    key = (group, dist.get_world_size(group))  # waiting.finish, inline: polled while that pays (comm/waiting.py)
    spin = SPIN[key] if key in SPIN else spin_seconds(group)
    if spin:
        deadline = time.perf_counter() + spin
        while not work.is_completed() and time.perf_counter() < deadline:
            os.sched_yield()
    work.wait()
    counter.exchanged(kind, body, math.prod(send.shape[1:]) * send.element_size(), start)
    return recv


class _HeaderedExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, header: Tensor, plan: HeaderedPlan, group: dist.ProcessGroup | None):
        ctx.plan, ctx.group, ctx.num_owned = plan, group, x.size(0)
        send = x.new_empty((sum(plan.send_counts),) + tuple(x.shape[1:]))
        send.index_copy_(0, plan.send_body, x.index_select(0, plan.send_index))
        send.index_copy_(0, plan.send_header, header.expand((plan.send_header.numel(),) + tuple(x.shape[1:])))
        received = _all_to_all_body(send, plan.send_counts, plan.recv_counts, plan.body_rows, group, "halo")
        headers = received.index_select(0, plan.recv_header)
        ctx.mark_non_differentiable(headers)
        return received.index_select(0, plan.recv_body), headers

    @staticmethod
    def backward(ctx, grad_halo: Tensor, grad_headers: Tensor):
        plan = ctx.plan
        payload = grad_halo.new_zeros((sum(plan.recv_counts),) + tuple(grad_halo.shape[1:]))
        payload.index_copy_(0, plan.recv_body, grad_halo)
        back = _all_to_all_body(payload, plan.recv_counts, plan.send_counts, plan.grad_rows, ctx.group, "halo_grad")
        grad_x = grad_halo.new_zeros((ctx.num_owned,) + tuple(grad_halo.shape[1:]))
        return grad_x.index_add_(0, plan.send_index, back.index_select(0, plan.send_body)), None, None, None


def headered_exchange(x: Tensor, plan: HeaderedPlan, group: dist.ProcessGroup | None = None,
                      flag: int = 0) -> tuple[Tensor, bool]:
    """The exact halo rows of ``x`` (as :func:`halo_exchange`'s, with its gradients and counted
    bytes) and whether a peer's header row carried a set flag: one extra row per peer in the same
    all-to-allv, whose first element is the sender's ``flag`` (the layers' agreed checks,
    :class:`~pyg_sparsecomm.nn.runtime.checks.AgreementWatch`).  Host tensors only: the flags are
    read on the host.

    Args:
        x (Tensor): this rank's owned rows (at least one element per row).
        plan (HeaderedPlan): the exchange's plan with its header rows.
        group (ProcessGroup, optional): the exchange's process group. (default: :obj:`None`)
        flag (int, optional): this rank's flag. (default: ``0``)

    Shapes:
        - **input:** ``[num_owned, *]``
        - **output:** ``[halo_size, *]``
    """
    header = x.new_zeros((1,) + tuple(x.shape[1:]))
    header.view(-1)[0] = flag
    halo, headers = _HeaderedExchange.apply(x, header, plan, group)
    flags = headers.detach().reshape(headers.size(0), -1)[:, 0].tolist()
    return halo, any(flags)  # (a list's any(): no generator frame per call)


def announce_rows(recorded: tuple, group: dist.ProcessGroup | None = None) -> None:
    """Sends the rows of a headered exchange ``recorded`` as ``(send counts, receive counts, trailing
    shape, dtype)``, zeros with every flag set, and drops what arrives (counted as ``"agreement"``)."""
    send_counts, recv_counts, shape, dtype = recorded
    send = torch.zeros((sum(send_counts),) + shape, dtype=dtype)
    send.view(send.size(0), -1)[:, 0] = 1
    _all_to_all_body(send, send_counts, recv_counts, PeerRows([0] * len(send_counts), [0] * len(recv_counts), group),
                     group, "agreement")
