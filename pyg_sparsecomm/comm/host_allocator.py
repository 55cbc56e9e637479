"""Host buffers of a training step reused, not mapped afresh: glibc ``malloc`` settings for a rank.

Every exchange of a step allocates its send and receive buffers on the host (a halo of a few
thousand rows is megabytes) and frees them within the step.  glibc's ``malloc`` serves such sizes
by ``mmap`` and returns them to the system when freed (its thresholds adapt, but a rank whose
threads allocate and free buffers of changing sizes keeps crossing them), so each step faults its
buffers' pages in again: at P = 2 a GraphSAGE mini-batch step of ``benchmarks/minibatch_speed.py``
took a median of about 2,300 minor page faults (P = 1: about 20) and a third more CPU time than with
the buffers kept (about 6 faults; ``tests/comm/test_host_allocator.py``).  :func:`keep_host_buffers` fixes both
thresholds once per process (``mallopt``): blocks up to :data:`MMAP_THRESHOLD` come from the heap,
and up to :data:`TRIM_THRESHOLD` of freed heap stays mapped for the next step.  What PyTorch's CPU
performance guides get by preloading jemalloc or tcmalloc, without a preload.

The process's resident memory then stays near its peak instead of shrinking between steps; the
peak itself is unchanged.  ``PYG_SPARSECOMM_HOST_ALLOCATOR=default`` leaves ``malloc`` as it is;
other C libraries (musl, macOS, Windows) are left alone.
"""
import ctypes
import ctypes.util
import os

#: set to ``default`` to leave glibc's ``malloc`` settings as they are
HOST_ALLOCATOR_ENV = "PYG_SPARSECOMM_HOST_ALLOCATOR"
#: blocks up to this size come from the heap (glibc's own ceiling of its adaptive threshold: 32 MiB)
MMAP_THRESHOLD = 32 << 20
#: free memory at the top of the heap kept mapped up to this size
TRIM_THRESHOLD = 1 << 30

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_applied: bool | None = None


def keep_host_buffers() -> bool:
    """Sets glibc's ``malloc`` thresholds once per process (see the module doc); ``True`` if they are
    set (now or before), ``False`` where left alone (other C library, or the environment says
    ``default``)."""
    global _applied
    if _applied is None:
        _applied = os.environ.get(HOST_ALLOCATOR_ENV, "") != "default" and _set_thresholds()
    return _applied


def _set_thresholds() -> bool:
    if not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or "").lower():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:  # pragma: no cover
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                      TRIM_THRESHOLD))
