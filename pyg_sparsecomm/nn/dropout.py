"""Dropout whose mask depends on the *global* node id, so every layout draws the same mask."""

import math

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (xor-shift-multiply rounds) on int64 tensors holding values < 2**32.

    Products stay below 2**59, so int64 arithmetic never overflows."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def _mix32_(x: Tensor) -> Tensor:
    """:func:`_mix32` in place (``x`` is overwritten): a mask over a wide feature matrix is
    memory-bound, and each round of :func:`_mix32` allocates three tensors of its size."""
    shifted = torch.empty_like(x)
    for _ in range(2):
        x ^= torch.bitwise_right_shift(x, 16, out=shifted)
        x *= 0x45D9F3B
        x &= _M32
    x ^= torch.bitwise_right_shift(x, 16, out=shifted)
    return x


def _element_hashes(n_id: Tensor, cols: int, salt: Tensor) -> Tensor:
    """``h[v, k] = mix(lo ^ mix(hi ^ salt))`` of the element id ``n_id[v] * cols + k`` (``lo``, ``hi``:
    its 32-bit halves).  When every id is below ``2**32`` (any graph with fewer elements), ``hi`` is
    0 and ``mix(salt)`` one number, so the inner hash is not evaluated per element."""
    ids = n_id.to(torch.long).view(-1, 1) * cols + torch.arange(cols, device=n_id.device)
    if n_id.numel() == 0 or (int(n_id.min()) >= 0 and (int(n_id.max()) + 1) * cols <= 2 ** 32):
        ids ^= int(_mix32(salt))
        return _mix32_(ids)
    return _mix32((ids & _M32) ^ _mix32(((ids >> 32) & _M32) ^ salt))


def node_dropout(x: Tensor, p: float, n_id: Tensor | None, seed: int, step: int,
                 training: bool = True) -> Tensor:
    r"""Inverted dropout with the mask of element ``(v, k)`` a hash of ``(seed, step, n_id[v], k)``.

    The same global node keeps the same mask wherever it lives, so a distributed
    run drops exactly what a single-process run (``n_id = None`` = ``arange``) drops.

    Args:
        x (torch.Tensor): the features (node rows).
        p (float): the probability of dropping an element, in :math:`[0, 1)`.
        n_id (torch.Tensor or None): the global id of every row of ``x`` (``local.n_id`` on a shard);
            ``None``: ``arange`` (the whole graph).
        seed (int): the masks' random stream.
        step (int): the training step (a new mask every step).
        training (bool, optional): drop (``False``: return ``x`` unchanged). (default: :obj:`True`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)` (or :math:`(|\mathcal{V}|)`),
          n_id :math:`(|\mathcal{V}|)`
        - **output:** node features :math:`(|\mathcal{V}|, F)`, the shape of ``x``
    """
    if not training or p == 0.0:
        return x
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if n_id is None:
        n_id = torch.arange(x.size(0), device=x.device)
    cols = x.size(1) if x.dim() > 1 else 1
    salt = _mix32(torch.tensor([(seed * 0x9E3779B1 + step) & _M32], device=x.device))
    # h / 2**32 >= p exactly when h >= ceil(p * 2**32) (h < 2**32 and p * 2**32 are exact in float64)
    keep = _element_hashes(n_id, cols, salt) >= math.ceil(p * 2.0 ** 32)
    return x * keep.view_as(x).to(x.dtype) / (1.0 - p)


class NodeDropout(torch.nn.Module):
    r"""``torch.nn.Dropout`` with layout-independent masks (see :func:`node_dropout`).

    Call as ``dropout(x, n_id)`` with the global ids of ``x``'s rows (``local.n_id``
    on a shard, ``None`` on the whole graph).  Every training call advances an
    internal step, so masks change between epochs but agree across ranks; the step is part
    of the module's ``state_dict`` (a resumed run continues the masks).

    Args:
        p (float, optional): the probability of dropping an element, in :math:`[0, 1)`. (default: :obj:`0.5`)
        seed (int, optional): the masks' random stream (the same on every rank). (default: :obj:`0`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F)`, n_id :math:`(|\mathcal{V}|)` (optional)
        - **output:** node features :math:`(|\mathcal{V}|, F)`
    """

    def __init__(self, p: float = 0.5, seed: int = 0) -> None:
        super().__init__()
        self.p, self.seed, self.step = p, seed, 0

    def forward(self, x: Tensor, n_id: Tensor | None = None) -> Tensor:
        if self.training and self.p > 0:
            self.step += 1
        return node_dropout(x, self.p, n_id, self.seed, self.step, self.training)

    def get_extra_state(self) -> dict:
        """The step counter, in the module's ``state_dict`` (``"<name>._extra_state"``): a model
        loaded from a checkpoint draws the masks the uninterrupted run would (a counter starting
        at 0 again would repeat the first epochs' masks)."""
        return {"step": self.step}

    def set_extra_state(self, state: dict) -> None:
        self.step = int(state["step"])

    def extra_repr(self) -> str:
        return f"p={self.p}, seed={self.seed}"
