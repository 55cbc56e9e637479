r"""What ``distribute(model)`` does besides the layers, as ``DistributedDataParallel`` does at
wrapping: every rank starts from rank 0's parameters and buffers, and every backward leaves in
``p.grad`` the sum of the ranks' shares

.. math::
    \nabla_\theta L = \sum_{r=0}^{P-1} \nabla_\theta L_r ,

which is the single-process gradient when each rank's loss is its sum of per-node losses over
the *global* count (:func:`~pyg_sparsecomm.distributed_loss`).

The sum runs while backward computes: a hook on every parameter takes its share when autograd
produces it, and a bucket of parameters (about :data:`BUCKET_BYTES`) is all-reduced
asynchronously as soon as it is complete and every earlier bucket was launched, so all ranks
issue the same all-reduces in the same order. They run on a process group of their own
(:func:`~pyg_sparsecomm.comm.group.dedicated_group`, one per process for all models), apart from
the halo exchanges that backward runs at the same time. A callback at the end of backward
launches the remaining buckets (a parameter without a gradient on this rank contributes zeros),
waits, and writes the sums. Which parameters some rank used travels in the same all-reduces (a
flag per parameter after its bucket's gradients, read only by a rank that did not use one: no
collective of its own, no device synchronisation in the common step), so a parameter no rank used
keeps ``grad = None``, as in one process.

The hook hands autograd zeros in place of the share and the callback *adds* the sum to
``p.grad``, so gradients accumulated over several backwards (no ``zero_grad`` between) are
summed once each.  ``torch.autograd.grad`` is left alone (it returns this rank's share).  Lazy
parameters (``in_channels=-1``) are broadcast and hooked in their module's first forward.  The
loss check is local: :func:`~pyg_sparsecomm.distributed_loss` marks its result's autograd node,
and the callback warns once if the backward did not pass through a marked node.

Activation checkpointing (``torch.utils.checkpoint``, ``DeepGCNLayer(ckpt_grad=True)``) runs a
part's forward again inside backward (its halo exchanges too, on every rank, as the part's first
forward did).  A reentrant checkpoint then runs that part's backward as a nested backward call:
its gradients are collected with those of the enclosing backward (a forward pre-hook on the
model's modules notices the recomputation and queues the sum on the enclosing call), so the
sum, and the loss check, happen once, at the end of the backward the user started.
"""
from __future__ import annotations

import functools
import sys
import warnings
import weakref
from types import FrameType

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parameter import is_lazy

from ..comm.group import collective_device, dedicated_group, global_rank
from ..comm.group import world_size as group_world_size
from ..comm.peer_failure import failures_named
from ..comm.waiting import finish
from ..compat import current_graph_task_id, queue_backward_callback, will_engine_execute_node
from ..launch.runtime import join_job
from ..training.grad_registry import is_synced, register_synced, was_normalised
from .runtime.steady_call import SKIPPED_WHEN_TRACED
from .same_model import check_same_model

#: bucket size of the gradient all-reduces (DDP's default is 25 MiB; GNN models are small, so
#: smaller buckets let the first all-reduces start earlier in backward)
BUCKET_BYTES = 4 * 2 ** 20


class LossNormalisationWarning(UserWarning):
    """A backward through a distributed model whose loss did not go through ``distributed_loss``."""


def broadcast_state(module: torch.nn.Module, group: dist.ProcessGroup | None) -> None:
    """Copies the parameters and buffers of rank 0 of ``group`` to every rank (one broadcast per
    dtype; lazy parameters, not yet materialised, are left out)."""
    tensors = [t for t in (*module.parameters(), *module.buffers()) if not is_lazy(t)]
    src = global_rank(group, 0)
    device = collective_device(group)
    by_dtype: dict[tuple, list[Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    with torch.no_grad():
        for same in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in same])
            flat = flat.to(device) if device is not None else flat
            with failures_named("distribute()'s copy of rank 0's parameters", group):
                dist.broadcast(flat, src=src, group=group)
            offset = 0
            for t in same:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()


class GradientSync:
    """Sums the gradients of ``module``'s parameters over the ranks of ``group`` after every
    backward, bucketed and overlapped with backward (see the module docstring).

    Args:
        module (torch.nn.Module): the model ``distribute()`` converted.
        group (torch.distributed.ProcessGroup, optional): the ranks that hold a replica of the model.
            (default: :obj:`None`, all)
    """

    def __init__(self, module: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
        self.group = dedicated_group(group, "gradients")
        self.params: list[Tensor] = []
        self.accumulators: list = []  # each parameter's AccumulateGrad node (kept alive, as DDP does)
        self.buckets: list[list[int]] | None = None
        self.task: int | None = None
        self.recomputed = False  # a forward ran inside backward ``self.task`` (activation checkpointing)
        self.shares: dict[int, Tensor] = {}
        self.works: list[tuple[list[int], Tensor, dist.Work]] = []
        self.warned = False
        for p in module.parameters():
            if p.requires_grad and not is_lazy(p) and not is_synced(p):  # lazy ones: at first forward
                self._hook(p)
        module.register_forward_pre_hook(_refuse_ddp)
        ref = weakref.ref(self)
        for child in module.modules():  # a checkpointed part's forward runs again inside backward
            if any(p.requires_grad for p in child.parameters(recurse=False)):
                note = functools.partial(_note_recomputation, ref)
                setattr(note, SKIPPED_WHEN_TRACED, True)  # a no-op when traced
                child.register_forward_pre_hook(note)
        # the module keeps this alive; the parameters' hooks refer to it weakly, as it holds their
        # AccumulateGrad nodes, which hold the parameters (a cycle through C++ the GC cannot free)
        module.__dict__.setdefault("_sparsecomm_gradient_syncs", []).append(self)

    def __reduce__(self):
        return type(None), ()  # a copied or pickled model is not synced (its parameters have no hooks)

    def _hook(self, p: Tensor) -> None:
        index = len(self.params)
        self.params.append(p)
        with torch.enable_grad():
            node = p.view_as(p).grad_fn
        assert node is not None  # p requires grad
        self.accumulators.append(node.next_functions[0][0])
        register_synced(p, self)
        ref = weakref.ref(self)

        def take(grad: Tensor) -> Tensor:
            sync = ref()
            return grad if sync is None else sync._take(index, grad)
        p.register_hook(take)

    def _take(self, index: int, grad: Tensor) -> Tensor:
        """Keeps this rank's share and hands autograd zeros to accumulate: the sum is added to
        ``p.grad`` at the end of backward, so an accumulated gradient is summed once.
        ``torch.autograd.grad`` calls get this rank's share, untouched."""
        if not self._accumulates(index):
            return grad
        task = current_graph_task_id()
        if task != self.task and not (self.task is not None and self.recomputed):
            self._begin(task)  # the first gradient of a backward (not of one nested in it)
        self.shares[index] = grad
        self._launch(complete_only=True)
        return torch.zeros_like(grad)

    def _begin(self, task: int) -> None:
        """Starts collecting the shares of backward call ``task`` and queues the sum at its end."""
        self.task, self.recomputed, self.shares, self.works = task, False, {}, []
        if self.buckets is None:
            self.buckets = _buckets(self.params)
        queue_backward_callback(self._finish)

    def recomputation(self, task: int) -> None:
        """A forward of the model ran inside backward call ``task``: activation checkpointing
        recomputes a part.  A reentrant checkpoint (``use_reentrant=True``, ``DeepGCNLayer(ckpt_grad=
        True)``) then runs that part's backward as a nested backward call, whose gradients belong to
        ``task``: they are collected with its shares, and summed once at its end (so the sum is
        queued on ``task`` now, if its first gradient is still to come from the nested call)."""
        if self.task != task and not (self.task is not None and self.recomputed):
            self._begin(task)
        self.recomputed = True

    def _accumulates(self, index: int) -> bool:
        try:
            return will_engine_execute_node(self.accumulators[index])
        except RuntimeError:  # autograd.grad(): the gradient goes to the caller, not to p.grad
            return False

    def _launch(self, complete_only: bool) -> None:
        assert self.buckets is not None
        while len(self.works) < len(self.buckets):
            bucket = self.buckets[len(self.works)]
            if complete_only and not all(i in self.shares for i in bucket):
                return
            params = [self.params[i] for i in bucket]
            parts = [self.shares[i].reshape(-1) if i in self.shares else torch.zeros(p.numel(), dtype=p.dtype,
                                                                                      device=p.device)
                     for i, p in zip(bucket, params, strict=True)]
            # one flag per parameter after its gradients: summed, how many ranks used it (read only by
            # a rank that did not, so the common step agrees on it without a collective or a device read)
            parts.append(torch.tensor([float(i in self.shares) for i in bucket], dtype=params[0].dtype,
                                      device=params[0].device))
            flat = torch.cat(parts)
            self.works.append((bucket, flat, dist.all_reduce(flat, group=self.group, async_op=True)))

    def _finish(self) -> None:
        self._launch(complete_only=False)
        for bucket, flat, work in self.works:
            with failures_named("the gradient all-reduce", self.group):
                finish(work, self.group)
            used = self._used(bucket, flat)
            offset = 0
            for i in bucket:
                p = self.params[i]
                summed = flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
                if not used[i]:
                    continue  # no rank used p: its gradient stays as in one process
                if p.grad is None:
                    p.grad = summed.clone()
                else:
                    p.grad.add_(summed)
        assert self.task is not None
        normalised = was_normalised(self.task)
        self.task, self.recomputed, self.shares, self.works = None, False, {}, []
        if not normalised and not self.warned:
            self.warned = True
            warnings.warn(
                "backward through a distribute()d model from a loss that did not go through "
                "pyg_sparsecomm.distributed_loss: each rank's gradient share is then scaled by its own row "
                "count, and the summed gradient is about P times too large for a mean loss. Use "
                "loss = distributed_loss(F.cross_entropy, out[mask], y[mask]) (the local sum over the "
                "global count); silence this with warnings.filterwarnings('ignore', "
                "category=pyg_sparsecomm.LossNormalisationWarning) if your loss is normalised otherwise",
                LossNormalisationWarning, stacklevel=2)

    def _used(self, bucket: list[int], flat: Tensor) -> dict[int, bool]:
        """Whether some rank used each parameter of a summed bucket: yes for those this rank used; for
        the others the bucket's summed flags say (read from the device only then)."""
        if all(i in self.shares for i in bucket):
            return dict.fromkeys(bucket, True)
        flags = flat[flat.numel() - len(bucket):].tolist()
        return {i: i in self.shares or flag > 0 for i, flag in zip(bucket, flags, strict=True)}


def _buckets(params: list[Tensor]) -> list[list[int]]:
    """Parameter indices in reverse order of registration (about the order backward produces
    them), cut every :data:`BUCKET_BYTES` and where dtype or device change."""
    buckets: list[list[int]] = []
    size, key = 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        if not buckets or size >= BUCKET_BYTES or key != (p.dtype, p.device):
            buckets.append([])
            size, key = 0, (p.dtype, p.device)
        buckets[-1].append(i)
        size += p.numel() * p.element_size()
    return buckets


def _hook_when_materialised(child: torch.nn.Module, sync: GradientSync | None, group: dist.ProcessGroup | None,
                            broadcast: bool) -> None:
    """A forward pre-hook on ``child``, which owns lazy parameters: once its own pre-hook
    materialised them (PyG's and torch's lazy modules do it first), broadcast and hook them."""
    handle = None

    def hook(module: torch.nn.Module, args) -> None:
        params = list(module.parameters(recurse=False))
        if any(is_lazy(p) for p in params):
            return
        if broadcast:
            broadcast_state(torch.nn.ParameterList(params), group)
        if sync is not None:
            for p in params:
                if p.requires_grad and not is_synced(p):
                    sync._hook(p)
            sync.buckets = None  # re-cut with the new parameters at the next backward
        assert handle is not None
        handle.remove()

    handle = child.register_forward_pre_hook(hook)


def _note_recomputation(ref: weakref.ref, _module: torch.nn.Module, _args: tuple) -> None:
    """A forward pre-hook: a forward inside a backward call is a checkpointed part recomputed
    (:meth:`GradientSync.recomputation`); one outside any while a backward's sum is pending means
    that backward raised before its end, and its shares are dropped (as autograd dropped it)."""
    if torch.compiler.is_compiling():
        return
    task = current_graph_task_id()
    sync = ref()
    if sync is None:
        return
    if task != -1:
        if torch.is_grad_enabled():
            sync.recomputation(task)
    elif sync.task is not None:  # (a reentrant checkpoint's first forward runs without grad: checked too)
        sync.task, sync.recomputed, sync.shares, sync.works = None, False, {}, []


@torch.compiler.disable  # it reads the caller's frames, which dynamo cannot trace: run it eagerly
def _refuse_ddp(module: torch.nn.Module, args) -> None:
    """DDP would all-reduce the same gradients again: refuse it by name (a few frames up)."""
    if not (module.training and torch.is_grad_enabled()):
        return
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return
        if isinstance(frame.f_locals.get("self"), torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError(
                "this model is wrapped in DistributedDataParallel, which all-reduces the gradients "
                "that distribute() already sums over ranks: convert it with distribute(model, "
                "sync_gradients=False) to let DDP synchronise them (it averages: scale the loss by the "
                "world size), or drop the DDP wrapper")
        frame = frame.f_back


def install(module: torch.nn.Module, group: dist.ProcessGroup | None, broadcast: bool,
            sync_gradients: bool) -> None:
    """What ``distribute()`` does to the parameters: rank 0's values everywhere (``broadcast``)
    and a :class:`GradientSync` (``sync_gradients``); nothing on one process.  Under ``torchrun``
    the process group is initialised first if the script did not."""
    join_job()
    if group_world_size(group) == 1:
        return
    check_same_model(module, group)  # before the broadcast and the gradient buckets, which assume it
    if broadcast:
        broadcast_state(module, group)
    sync = GradientSync(module, group) if sync_gradients else None
    for child in module.modules():  # lazy parameters materialise in their module's first forward
        if any(is_lazy(p) for p in child.parameters(recurse=False)):
            _hook_when_materialised(child, sync, group, broadcast)
