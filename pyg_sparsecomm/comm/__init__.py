"""Exchanges over ``torch.distributed`` with their autograd: the halo exchange and its options
(:mod:`.exchanger`, :mod:`.halo`, :mod:`.stale`, :mod:`.quantize`; what a call site's exchanges
share, :mod:`.exchange_site`), collectives that fail by name
(:mod:`.collectives`, :mod:`.peer_failure`), byte counters (:mod:`.counters`), process groups and
the 1.5D grid (:mod:`.group`, :mod:`.grid`)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"comm_counter": ".counters", "seed_rounding": ".rounding", "PeerFailedError": ".peer_failure",
            "ProcessGrid": ".grid", "process_grid": ".grid"}

if TYPE_CHECKING:  # pragma: no cover
    from .counters import comm_counter
    from .grid import ProcessGrid, process_grid
    from .peer_failure import PeerFailedError
    from .rounding import seed_rounding

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "comm_counter", "seed_rounding", "PeerFailedError", "ProcessGrid", "process_grid",
]
