"""Run a function on ``P`` local processes under gloo (tests, benchmarks, notebooks): :func:`launch`,
with a fork server that imports torch, PyG and the package once (:func:`start_fork_server`,
:func:`preload`, :mod:`.warm`)."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {"launch": ".processes", "mesh_failed_to_connect": ".processes", "preload": ".processes",
            "start_fork_server": ".processes"}

if TYPE_CHECKING:  # pragma: no cover
    from .processes import launch, mesh_failed_to_connect, preload, start_fork_server

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["launch", "preload", "start_fork_server", "mesh_failed_to_connect"]
