"""Opt-in ways to move halo rows inexactly: compressed payloads and pipelined (stale) exchanges.

The default exchange is exact: every halo row arrives in the payload's dtype, computed from
this step's rows.  :class:`HaloOptions` names the two trades issue #16 adds, both off by default:

* ``precision`` / ``grad_precision``: halo rows (forward) and halo gradients (backward) travel as
  ``"bf16"``, ``"fp16"``, ``"int8"`` or ``"int4"`` (integers with a per-row scale and offset and
  unbiased stochastic rounding; AdaQP, MLSys'23);
* ``staleness=1``: a layer uses the halo rows and halo gradients of the previous step, exchanged
  while this step computes (PipeGCN, ICLR'22), optionally smoothed.

A layer that has state across calls (a stale exchange keeps the previous step's rows) keeps it in
its own :class:`ExchangeSlots`, so two layers never share a pipeline.
"""
from dataclasses import dataclass
from typing import Any

#: the wire formats of ``halo_precision`` / ``halo_grad_precision`` (``None``: exact)
PRECISIONS = ("bf16", "fp16", "int8", "int4")


def _check_precision(argument: str, value: Any) -> None:
    if value is not None and value not in PRECISIONS:
        raise ValueError(f"{argument}={value!r} is not a halo precision; choose one of {list(PRECISIONS)} "
                         f"or None (exact)")


@dataclass(frozen=True)
class HaloOptions:
    """How a layer's halo exchanges trade exactness for bytes or waiting (all off: exact).

    Args:
        precision (str, optional): wire format of the forward halo rows (``None``: exact). (default: :obj:`None`)
        grad_precision (str, optional): wire format of the backward halo gradients (``None``: exact).
            (default: :obj:`None`)
        staleness (int, optional): ``0`` (exact) or ``1`` (use the previous step's halo rows and gradients).
            (default: :obj:`0`)
        stale_smoothing (float, optional): ``γ`` of the exponential smoothing of stale values, or ``None``.
            (default: :obj:`None`)
    """
    precision: str | None = None
    grad_precision: str | None = None
    staleness: int = 0
    stale_smoothing: float | None = None

    def __post_init__(self) -> None:
        _check_precision("halo_precision", self.precision)
        _check_precision("halo_grad_precision", self.grad_precision)
        if isinstance(self.staleness, bool) or self.staleness not in (0, 1):
            raise ValueError(f"staleness must be 0 (exact) or 1 (the previous step's halos), got {self.staleness!r}")
        if self.stale_smoothing is not None:
            if not self.staleness:
                raise ValueError("stale_smoothing smooths stale halos: it needs staleness=1")
            if not 0.0 <= float(self.stale_smoothing) < 1.0:
                raise ValueError(f"stale_smoothing must be in [0, 1), got {self.stale_smoothing!r}")

    @classmethod
    def from_arguments(cls, halo_precision: str | None = None, halo_grad_precision: str | None = "same",
                       staleness: int = 0, stale_smoothing: float | None = None) -> "HaloOptions":
        """The options of a layer's constructor arguments; ``halo_grad_precision="same"`` follows
        ``halo_precision``."""
        grad = halo_precision if halo_grad_precision == "same" else halo_grad_precision
        return cls(halo_precision, grad, staleness, stale_smoothing)

    @property
    def exact(self) -> bool:
        """Whether exchanges move exact rows of this step (the default)."""
        return self.precision is None and self.grad_precision is None and not self.staleness

    @property
    def compressed(self) -> bool:
        """Whether forward or backward payloads are compressed."""
        return self.precision is not None or self.grad_precision is not None

    @property
    def compression_only(self) -> "HaloOptions":
        """These options without staleness (what constructors check early: an algorithm's support
        for staleness is checked when it is built)."""
        return HaloOptions(self.precision, self.grad_precision)

    def describe(self) -> str:
        """The non-default options as constructor arguments (``""`` when exact)."""
        parts = []
        if self.precision is not None or self.grad_precision is not None:
            parts.append(f"halo_precision={self.precision!r}")
            if self.grad_precision != self.precision:
                parts.append(f"halo_grad_precision={self.grad_precision!r}")
        if self.staleness:
            parts.append(f"staleness={self.staleness}")
        if self.stale_smoothing is not None:
            parts.append(f"stale_smoothing={self.stale_smoothing}")
        return ", ".join(parts)


EXACT = HaloOptions()


class ExchangeSlots:
    """The state one layer's exchanges keep across calls, by call-site name (e.g. ``"x"``).

    Owned by the layer (``DistributedGCNConv`` or a layer of ``distribute``), so state never
    leaks between layers; dropped on pickling (a copied model starts a new pipeline).

    The layer calls :meth:`begin_call` at the start of every forward: it records whether the
    call trains (``training``: stale exchanges run only then) and numbers the exchanges of
    the call, so a layer exchanging several times per forward (APPNP's ``K`` propagations)
    keeps one pipeline per exchange (:meth:`call_site`: ``"x"``, ``"x#1"``, ...).
    """

    def __init__(self) -> None:
        self.slots: dict[str, Any] = {}
        self.training = True
        self._calls: dict[str, int] | None = None  # None: no begin_call yet, keys are used as given
        self._restored: dict[str, dict] = {}  # states loaded before their slot exists (see load_state_dict)

    def begin_call(self, training: bool) -> None:
        """A new forward of the owning layer (``training``: its ``self.training``)."""
        self.training, self._calls = bool(training), {}

    def call_site(self, key: str) -> str:
        """The slot of the next exchange named ``key`` in this call: ``key``, then ``key#1``, ..."""
        if self._calls is None:
            return key
        n = self._calls.get(key, 0)
        self._calls[key] = n + 1
        return key if n == 0 else f"{key}#{n}"

    def get(self, key: str, default: Any = None) -> Any:
        return self.slots.get(key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self._restored:
            value.load_state_dict(self._restored.pop(key))
        self.slots[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.slots[key]

    def __contains__(self, key: str) -> bool:
        return key in self.slots

    def clear(self) -> None:
        """Drops the slots (a move to another device); states loaded but not taken yet stay."""
        self.slots.clear()

    def state_dict(self) -> dict[str, dict]:
        """The state of every slot that keeps one across steps (the stale pipelines,
        :meth:`StaleHalo.state_dict <pyg_sparsecomm.comm.stale.StaleHalo.state_dict>`), by call site."""
        return {key: value.state_dict() for key, value in self.slots.items() if hasattr(value, "state_dict")}

    def load_state_dict(self, state: dict[str, dict]) -> None:
        """Continues the slots :meth:`state_dict` saved.  A slot made at the first training call
        (a new model's) takes its state when it is made."""
        self._restored = dict(state)
        for key in list(self._restored):
            if key in self.slots:
                self.slots[key].load_state_dict(self._restored.pop(key))

    def __getstate__(self) -> dict:
        return {"slots": {}, "training": self.training, "_calls": None, "_restored": {}}
