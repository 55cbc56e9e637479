"""Peak memory of this process and of every rank: what the examples print after training.

Host memory is the peak resident set size (``getrusage``'s ``ru_maxrss``: every page the process
ever had resident at once, its Python, torch and CUDA libraries included); on a GPU also
``torch.cuda.max_memory_allocated`` (the tensors' peak, not the caching allocator's reserve).
"""
import ctypes
import ctypes.util
import resource
import sys

import torch
import torch.distributed as dist


def release_free_heap() -> None:
    """Returns the C heap's free pages to the system (glibc ``malloc_trim(0)``; a no-op elsewhere).

    numpy arrays below glibc's mmap threshold (up to 32 MiB) live on the heap, whose freed
    pages stay resident until trimmed: a long out-of-core pass (merges, sorts) leaves them
    behind, counted in the resident set as if still used."""
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc and sys.platform.startswith("linux") else None
    if trim is not None:
        trim(0)


def peak_memory_bytes() -> int:
    """Peak resident set size of this process, in bytes (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def cuda_peak_bytes(device: torch.device | str | None = None) -> int | None:
    """``torch.cuda.max_memory_allocated(device)`` on a CUDA device, else ``None``."""
    if device is None or torch.device(device).type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def peak_memory_per_rank(device: torch.device | str | None = None,
                         group: dist.ProcessGroup | None = None) -> list[dict]:
    """``[{"rank", "host", "cuda"}]``, every rank's peak host memory and CUDA peak (``None`` off
    CUDA) in bytes, gathered on every rank (one ``all_gather_object``; collective under a group)."""
    mine = {"host": peak_memory_bytes(), "cuda": cuda_peak_bytes(device)}
    if not dist.is_initialized():
        return [{"rank": 0, **mine}]
    gathered: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    return [{"rank": r, **g} for r, g in enumerate(gathered)]


def peak_memory_report(device: torch.device | str | None = None, group: dist.ProcessGroup | None = None) -> str:
    """One line: ``peak memory per rank: 0: 512.3 MB, 1: 498.0 MB`` (plus ``CUDA ...`` on GPUs).
    Collective under a process group: every rank must call it.

    Args:
        device (torch.device or str, optional): the device whose CUDA peak to add (none for the CPU).
            (default: :obj:`None`)
        group (torch.distributed.ProcessGroup, optional): the ranks to report. (default: all ranks)
    """
    cells = []
    for row in peak_memory_per_rank(device, group):
        cuda = "" if row["cuda"] is None else f" (CUDA {format_bytes(row['cuda'])})"
        cells.append(f"{row['rank']}: {format_bytes(row['host'])}{cuda}")
    return "peak memory per rank: " + ", ".join(cells)
