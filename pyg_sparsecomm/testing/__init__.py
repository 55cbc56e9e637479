"""Run a function on ``P`` local processes under gloo (tests, benchmarks, notebooks): :func:`launch`,
with a fork server that imports torch, PyG and the package once (:func:`start_fork_server`,
:func:`preload`, :mod:`.warm`); run a command beside one busy-loop process per core
(:mod:`.burner`, ``python -m pyg_sparsecomm.testing.burner -- COMMAND``).  The names load their module
at first use: the burner's command line does not import torch."""
from typing import TYPE_CHECKING

from .._lazy import lazy_exports

_EXPORTS = {name: ".processes" for name in ("launch", "preload", "start_fork_server", "mesh_failed_to_connect")}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .processes import launch, mesh_failed_to_connect, preload, start_fork_server

__all__ = ["launch", "preload", "start_fork_server", "mesh_failed_to_connect"]
