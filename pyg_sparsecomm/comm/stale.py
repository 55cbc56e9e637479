r"""Pipelined (stale) halo exchange: epoch :math:`t` uses the halo rows and halo gradients of
epoch :math:`t - 1`, exchanged while epoch :math:`t` computes (PipeGCN, Wan et al., ICLR'22).

One :class:`StaleHalo` per call site (a layer's exchange, kept in the layer's
:class:`~pyg_sparsecomm.comm.halo_options.ExchangeSlots` under its key) holds the pipeline.
With :math:`h(x)` the exact halo rows of ``x`` (:func:`~pyg_sparsecomm.comm.halo.halo_exchange`),
:math:`g_t` the gradient of the halo rows at step :math:`t` and :math:`R(g)` the reverse
exchange that sums halo gradients into their owners' rows, training step :math:`t` computes

.. math::
    \mathrm{halo}_t = u_t, \qquad
    \frac{\partial L_t}{\partial x_t} = \Big(\frac{\partial L_t}{\partial x_t}\Big)_{\mathrm{local}} + v_t

    u_0 = h(x_0), \quad u_t = \gamma\, u_{t-1} + (1 - \gamma)\, h(x_{t-1}) \quad (t \ge 1)

    v_0 = R(g_0), \quad v_t = \gamma\, v_{t-1} + (1 - \gamma)\, R(g_{t-1}) \quad (t \ge 1)

with :math:`\gamma` = ``stale_smoothing`` (``None``: :math:`\gamma = 0`, i.e. :math:`u_t = h(x_{t-1})`,
:math:`v_t = R(g_{t-1})`; :math:`u_1 = h(x_0)` and :math:`v_1 = R(g_0)` for every :math:`\gamma`).
The halo rows are constants of step :math:`t` (no gradient path into :math:`x_{t-1}`).
Step 0 exchanges synchronously; step :math:`t \ge 1` *starts* the exchange of :math:`x_t`
(forward) and of :math:`g_t` (backward) without waiting and waits for it only at step
:math:`t + 1`: every step moves the bytes of one exact forward and one exact backward exchange.

Every pipelined exchange runs on a dedicated process group over the same ranks
(:func:`pipeline_group`), so its pending all-to-allvs never interleave with the synchronous
collectives of the exchange's own group; waits are bounded by the default group's timeout.
Evaluation (``slots.training`` false or gradients disabled) exchanges exactly and synchronously
and leaves the pipeline alone.  The payload passes through a :class:`RowCodec` (identity here;
a compressed wire format plugs in there).
"""
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ..plan.homogeneous import RankPlan
from .counters import Stopwatch, comm_counter
from .exchange_site import ExchangeSite
from .group import dedicated_group, raise_together
from .halo import halo_exchange, start_all_to_all_rows
from .quantize import decode_rows, encode_rows

#: starts a non-blocking row exchange: ``(send, send_counts, recv_counts, group, kind) -> (recv, work)``
StartExchange = Callable[..., tuple[Tensor, Any]]

def pipeline_group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    """The dedicated process group of pipelined exchanges over the ranks of ``group``.

    Created at the first call (only the members of ``group`` take part, which they all do:
    the first stale exchange is itself collective) and cached while the default group lives.
    """
    return dedicated_group(group, "stale halos")


class RowCodec:
    """How rows travel: ``encode`` rows to a payload of rows, ``decode`` the received payload.

    The identity (this class) sends rows as they are; a compressed format (``halo_precision``)
    subclasses it.  Bytes are counted on the payload, so they are the wire's.
    """

    def encode(self, rows: Tensor) -> Tensor:
        return rows

    def decode(self, payload: Tensor, like: Tensor) -> Tensor:
        """``like``: a tensor with the decoded rows' trailing shape and dtype."""
        return payload


IDENTITY = RowCodec()


class PipelineSeconds:
    """Process-wide time of the pipelined exchanges, split as ``comm_counter().seconds``
    cannot: ``post`` (starting an exchange: on a machine without a spare core, also the time the
    transfer thread takes from the step) and ``wait`` (blocking for the previous step's rows).
    Measured like the counter's (:class:`~pyg_sparsecomm.comm.counters.Stopwatch`: CUDA events
    for CUDA rows)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.posting, self.waiting = Stopwatch(), Stopwatch()

    @property
    def post(self) -> float:
        return self.posting.seconds

    @property
    def wait(self) -> float:
        return self.waiting.seconds


#: read and reset by benchmarks (``benchmarks/stale_hiding.py``)
PIPELINE_SECONDS = PipelineSeconds()


_IN_FLIGHT: list["_Pending"] = []


class _Pending:
    """One started exchange: the payload buffer being received, its work handle, and an empty
    tensor shaped like the rows sent (what the payload decodes to)."""

    def __init__(self, recv: Tensor, work, like: Tensor) -> None:
        self.recv, self.work, self.like = recv, work, like
        # Keep every started exchange alive until it completed, also when its pipeline is dropped
        # (a discarded model, ``ExchangeSlots.clear()``): a point-to-point receive whose work is
        # destroyed unposts its buffer, and the peer's message would then match the next receive.
        _IN_FLIGHT[:] = [p for p in _IN_FLIGHT if not p.work.is_completed()] + [self]

    def wait(self) -> Tensor:
        device = self.recv.device
        with PIPELINE_SECONDS.waiting.measure(device), comm_counter().timed(device):
            self.work.wait()
        return self.recv


def _smooth(previous: Tensor | None, new: Tensor, gamma: float) -> Tensor:
    """``γ previous + (1 - γ) new`` (``new`` itself when there is no previous value or γ = 0)."""
    if previous is None or gamma == 0.0:
        return new
    return previous.mul(gamma).add_(new, alpha=1.0 - gamma)


class _Pipe:
    r"""One direction of a pipelined exchange: the value of step :math:`t` is what was sent at
    step :math:`t - 1` (smoothed), while this step's rows travel.

    Step 0 exchanges synchronously and its result serves steps 0 and 1.  A compressed encoding
    that fails on one rank raises on every rank (agreed on ``agree_group``, the exchange's own
    group: the pipeline's group may hold exchanges in flight, behind which an agreement would wait).
    """

    def __init__(self, codec: RowCodec, gamma: float, kind: str, start: StartExchange,
                 pipe_group: dist.ProcessGroup, agree_group: dist.ProcessGroup | None = None) -> None:
        self.codec, self.gamma, self.kind, self.start, self.pipe_group = codec, gamma, kind, start, pipe_group
        self.agree_group = agree_group  # encode failures are agreed here: exchanges may be in flight on pipe_group
        self.value: Tensor | None = None
        self.pending: _Pending | None = None
        self.steps = 0

    def step(self, rows: Tensor, send_counts: list[int], recv_counts: list[int]) -> Tensor:
        """Sends ``rows`` (this step's); returns the (smoothed) rows received for this step."""
        if self.steps == 0:
            self.value = self._received(self._start(rows, send_counts, recv_counts))
        else:
            if self.pending is not None:
                self.value = _smooth(self.value, self._received(self.pending), self.gamma)
            self.pending = self._start(rows, send_counts, recv_counts)
        self.steps += 1
        assert self.value is not None
        return self.value

    def _start(self, rows: Tensor, send_counts: list[int], recv_counts: list[int]) -> _Pending:
        # posting is communication time the step cannot hide
        with PIPELINE_SECONDS.posting.measure(rows.device), comm_counter().timed(rows.device):
            recv, work = self.start(self._encode(rows.contiguous()), send_counts, recv_counts,
                                    self.pipe_group, self.kind)
        return _Pending(recv, work, rows.new_empty((0,) + tuple(rows.shape[1:])))

    def _encode(self, rows: Tensor) -> Tensor:
        if self.codec is IDENTITY:  # nothing can fail: no agreement
            return rows
        return raise_together(lambda: self.codec.encode(rows), f"the stale {self.kind} exchange", self.agree_group,
                              flag_first=True)  # one one-element host all-reduce

    def _received(self, pending: _Pending) -> Tensor:
        return self.codec.decode(pending.wait(), pending.like)

    def drain(self) -> None:
        """Waits for the exchange in flight (its rows are kept for the next step)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self.value = _smooth(self.value, self._received(pending), self.gamma)

    def state_dict(self) -> dict:
        """The rows of the next step (after :meth:`drain`: nothing stays in flight) and the step count."""
        self.drain()
        return {"value": None if self.value is None else self.value.cpu(), "steps": self.steps}

    def load_state_dict(self, state: dict, device: torch.device) -> None:
        value = state["value"]
        self.value = None if value is None else value.to(device)
        self.steps, self.pending = int(state["steps"]), None


class StaleHalo:
    """The pipeline of one call site: the halo rows (forward) and halo gradients (backward)
    of the previous training step, and the exchanges of this step in flight.

    Args:
        exchanger (ExchangeSite): the plan, process group and options of the call site (every
            later call must use the same plan and group; pipelined exchanges run on
            :func:`pipeline_group` over the group's ranks; ``options.stale_smoothing`` is
            ``γ``, ``options.precision`` / ``grad_precision`` the payload formats).
        start (callable, optional): how exchanges are started (one all-to-allv, or
            point-to-point to the peers with rows). (default: :func:`start_all_to_all_rows`)
    """

    def __init__(self, exchanger: ExchangeSite, start: StartExchange = start_all_to_all_rows) -> None:
        self.plan, self.group, self.start = exchanger.plan, exchanger.group, start
        self.pipe_group = pipeline_group(self.group)
        codec, grad_codec = payload_codecs(exchanger.options)
        gamma = float(exchanger.options.stale_smoothing or 0.0)
        self.rows = _Pipe(codec, gamma, "halo", start, self.pipe_group, self.group)
        self.grads = _Pipe(grad_codec, gamma, "halo_grad", start, self.pipe_group, self.group)
        self.row_shape: tuple[tuple[int, ...], torch.dtype] | None = None

    def check(self, x: Tensor, exchanger: ExchangeSite, start: StartExchange = start_all_to_all_rows) -> None:
        """Raises unless ``x``, the exchanger's plan and group and ``start`` are those of the previous steps."""
        plan, group = exchanger.plan, exchanger.group
        if plan is not self.plan and not same_plan(plan, self.plan):
            raise ValueError("staleness needs full-graph training on the same shard: this exchange got a "
                             "different plan (another graph, or a mini-batch) than at its first step; use "
                             "staleness=0 with mini-batch loaders, or a new layer for another graph")
        if group is not self.group:
            raise ValueError("staleness: this exchange got another process group than at its first step")
        if start is not self.start:
            raise ValueError("staleness: this exchange is started another way than at its first step")
        shape = (tuple(x.shape[1:]), x.dtype)
        if self.row_shape is not None and shape != self.row_shape:
            raise ValueError(f"staleness: rows of shape {shape[0]} and dtype {shape[1]} reach an exchange that "
                             f"carried {self.row_shape[0]} / {self.row_shape[1]} rows: the previous step's "
                             f"halos cannot stand in for them")
        self.row_shape = shape

    def forward_step(self, x: Tensor) -> Tensor:
        """This step's halo rows (the previous step's, smoothed); starts sending ``x``'s."""
        send = x.detach().index_select(0, self.plan.send_index)
        return self.rows.step(send, self.plan.send_counts, self.plan.recv_counts).clone()

    def backward_step(self, grad_halo: Tensor) -> Tensor:
        """The owned rows' halo gradient of the previous step (smoothed); starts sending ``grad_halo``."""
        back = self.grads.step(grad_halo.contiguous(), self.plan.recv_counts, self.plan.send_counts)
        grad = back.new_zeros((self.plan.num_owned,) + tuple(back.shape[1:]))
        return grad.index_add_(0, self.plan.send_index, back)

    def drain(self) -> None:
        """Waits for both exchanges in flight (e.g. before saving or timing); the pipeline goes on."""
        self.rows.drain()
        self.grads.drain()

    def state_dict(self) -> dict:
        """The pipeline between two steps: the previous step's halo rows and gradients (both
        exchanges in flight are waited for first, :meth:`drain`, which changes nothing the next step
        computes) and the step count.  Only valid for the same plan (the same partition)."""
        return {"rows": self.rows.state_dict(), "grads": self.grads.state_dict(), "row_shape": self.row_shape}

    def load_state_dict(self, state: dict) -> None:
        """Continues the pipeline :meth:`state_dict` saved: the next step uses the saved halos, as the
        uninterrupted run would have."""
        device = self.plan.send_index.device
        self.rows.load_state_dict(state["rows"], device)
        self.grads.load_state_dict(state["grads"], device)
        self.row_shape = state["row_shape"]


def same_plan(a: RankPlan, b: RankPlan) -> bool:
    """Whether two plans exchange the same rows between the same ranks."""
    return (a.rank == b.rank and a.world_size == b.world_size and a.send_counts == b.send_counts
            and a.recv_counts == b.recv_counts and torch.equal(a.n_id, b.n_id)
            and torch.equal(a.halo_n_id, b.halo_n_id) and torch.equal(a.send_index, b.send_index))


class _StaleExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, state: StaleHalo) -> Tensor:
        ctx.state = state
        return state.forward_step(x)

    @staticmethod
    def backward(ctx, grad_halo: Tensor):
        return ctx.state.backward_step(grad_halo), None


def is_training(slots: Any) -> bool:
    """Whether a call is a training step: gradients enabled and the layer in training mode
    (``slots.training``, kept by the layer; ``True`` when the slots do not say)."""
    return torch.is_grad_enabled() and bool(getattr(slots, "training", True))


def stale_halo_exchange(x: Tensor, exchanger: ExchangeSite, key: str = "x",
                        start: StartExchange = start_all_to_all_rows) -> Tensor:
    r"""The halo rows of ``x`` under ``staleness=1`` (see the module docstring for the math).

    In a training step, returns the halo rows of the previous step's ``x`` (step 0: of ``x``)
    and starts sending ``x``'s rows for the next step; in backward, the owned rows receive the
    previous step's halo gradients and this step's are sent.  In evaluation (``slots.training``
    false or gradients disabled) the exchange is exact and synchronous and the pipeline is left
    as it was.  Layers reach it through
    :meth:`HaloExchanger.exchange <pyg_sparsecomm.comm.exchanger.HaloExchanger.exchange>`.

    Args:
        x (torch.Tensor): owned rows.
        exchanger (ExchangeSite): the plan (the same, or an equal, one at every step), process
            group, options (``stale_smoothing``, precisions) and slots (the pipeline lives in
            ``slots[key]``) of the call site.
        key (str, optional): the call site's name within the layer (numbered per call by
            ``slots.call_site``). (default: ``"x"``)
        start (callable, optional): how an exchange is started (``start_all_to_all_rows`` or
            ``start_p2p_rows``). (default: :func:`start_all_to_all_rows`)

    Shapes:
        - **input:** ``[num_owned, *]``
        - **output:** ``[halo_size, *]``; differentiable in ``x`` through the stale backward
    """
    plan, slots = exchanger.plan, exchanger.slots
    if plan.minibatch:
        raise ValueError("staleness needs full-graph training on the same shard: this plan is a mini-batch's "
                         "(another graph every step); use staleness=0 with mini-batch loaders")
    if x.size(0) != plan.num_owned:
        raise ValueError(f"stale_halo_exchange: x has {x.size(0)} rows but this rank owns {plan.num_owned}")
    if plan.world_size == 1 or not is_training(slots):
        return halo_exchange(x, plan, exchanger.group)
    if slots is None:
        raise ValueError("staleness needs the layer's ExchangeSlots (the previous step's halos live there)")
    key = slots.call_site(key) if hasattr(slots, "call_site") else key
    state = slots.get(key)
    if state is None:
        state = StaleHalo(exchanger, start)
        slots[key] = state
    state.check(x, exchanger, start)
    return _StaleExchange.apply(x, state)


def payload_codecs(options: Any) -> tuple[RowCodec, RowCodec]:
    """The payload formats of the halo rows and gradients (the identity for exact payloads)."""
    def codec(precision: str | None) -> RowCodec:
        return IDENTITY if precision is None else PrecisionCodec(precision)
    return codec(getattr(options, "precision", None)), codec(getattr(options, "grad_precision", None))


class PrecisionCodec(RowCodec):
    """Rows travel in ``halo_precision`` (:mod:`~pyg_sparsecomm.comm.quantize`): stale and
    compressed halos compose; what is not floating point travels as it is."""

    def __init__(self, precision: str) -> None:
        self.precision = precision

    def encode(self, rows: Tensor) -> Tensor:
        return encode_rows(rows, self.precision) if rows.is_floating_point() else rows

    def decode(self, payload: Tensor, like: Tensor) -> Tensor:
        return decode_rows(payload, like, self.precision) if like.is_floating_point() else payload
