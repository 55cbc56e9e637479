"""Run a function on ``P`` local processes under gloo (tests, benchmarks, notebooks): :func:`launch`,
with a fork server that imports torch, PyG and the package once (:func:`start_fork_server`,
:func:`preload`, :mod:`.warm`)."""
from .processes import launch, mesh_failed_to_connect, preload, start_fork_server

__all__ = ["launch", "preload", "start_fork_server", "mesh_failed_to_connect"]
