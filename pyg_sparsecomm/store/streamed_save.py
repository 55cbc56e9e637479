"""A ``torch.save`` file written in pieces: tensors whose bytes never sit in memory at once.

:func:`save_streamed` writes what ``torch.save(obj, path)`` writes for an ``obj`` in which some
tensors are :class:`Streamed`: a dtype, a shape and an iterator of the tensor's bytes, chunk by
chunk (read from a scratch file, gathered from a memory map, ...).  The file is the zip archive
``torch.save`` makes (``data.pkl`` first, then one stored, 64-byte aligned record per tensor,
CRC-32 of every record), so ``torch.load(path, weights_only=True, mmap=True)`` reads it unchanged
and gives back ordinary tensors.  Every byte goes through one
:class:`~pyg_sparsecomm.store.atomic_dir.HashingWriter`: the SHA-256 returned is that of the bytes
written, in one pass, never a re-read.

Peak memory is the pickled structure plus one chunk, whatever the tensors' sizes.
"""
import io
import os
import pickle
import secrets
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import torch

from ..compat import storage_type, tensor_rebuilder
from .atomic_dir import HashingWriter

_ALIGNMENT = 64  # what torch.save aligns every record to (``archive/.storage_alignment``)
_PADDING_ID = 0x4246  # the extra field torch.save pads local headers with ("FB")


@dataclass
class Streamed:
    """A tensor to be written chunk by chunk: ``chunks()`` yields arrays whose bytes, concatenated,
    are the C-ordered ``shape`` tensor of ``dtype``.

    Args:
        dtype (torch.dtype): the tensor's dtype.
        shape (tuple[int, ...]): the tensor's shape.
        chunks (Callable[[], Iterable[Any]]): called once, when the tensor's record is written.
    """
    dtype: torch.dtype
    shape: tuple[int, ...]
    chunks: Callable[[], Iterable[Any]]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * torch.empty(0, dtype=self.dtype).element_size()

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "Streamed":
        """A dense CPU tensor held in memory, written in one piece."""
        if tensor.layout != torch.strided or tensor.device.type != "cpu" or tensor.requires_grad:
            raise ValueError(f"save_streamed writes dense CPU tensors without grad, got {tensor.layout} "
                             f"on {tensor.device} (requires_grad={tensor.requires_grad})")
        flat = tensor.contiguous().reshape(-1)
        return cls(tensor.dtype, tuple(tensor.shape), lambda: [flat.view(torch.uint8).numpy()] if flat.numel() else [])


class _StorageKey(str):
    """The key of one tensor's record (``archive/data/<key>``), as the pickle's persistent id."""


class _Pickler(pickle.Pickler):
    """Pickles as ``torch.save`` does: every tensor becomes a persistent storage reference."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=2)
        self.tensors: list[Streamed] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            obj = Streamed.of(obj)
        if not isinstance(obj, Streamed):
            return NotImplemented
        key = _StorageKey(len(self.tensors))
        self.tensors.append(obj)
        stride = [int(np.prod(obj.shape[i + 1:], dtype=np.int64)) for i in range(len(obj.shape))]
        return tensor_rebuilder(), (key, 0, tuple(obj.shape), tuple(stride), False, OrderedDict())

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, _StorageKey):
            return None
        tensor = self.tensors[int(obj)]
        return ("storage", storage_type(tensor.dtype), str(obj), "cpu", int(np.prod(tensor.shape, dtype=np.int64)))


def _write_record(archive: zipfile.ZipFile, name: str, size: int, chunks: Iterable[Any]) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.file_size = size
    zip64 = size * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's own rule for force_zip64
    header = 30 + len(name.encode()) + 4 + (20 if zip64 else 0)
    assert archive.fp is not None
    pad = -(archive.fp.tell() + header) % _ALIGNMENT
    info.extra = struct.pack("<HH", _PADDING_ID, pad) + b"Z" * pad
    written = 0
    with archive.open(info, "w", force_zip64=zip64) as f:
        for chunk in chunks:
            view = (np.ascontiguousarray(chunk).data if isinstance(chunk, np.ndarray) else memoryview(chunk)).cast("B")
            written += view.nbytes
            f.write(view)
    if written != size:
        raise RuntimeError(f"streamed record {name} gave {written} bytes, its tensor has {size}")


def save_streamed(obj: Any, path: Path) -> str:
    """Writes ``obj`` (any picklable structure of tensors, :class:`Streamed` tensors, lists, dicts,
    numbers and strings) into the new file ``path`` as ``torch.save`` would, flushed to disk;
    returns the SHA-256 of the bytes written."""
    pickled = io.BytesIO()
    pickler = _Pickler(pickled)
    pickler.dump(obj)
    records: list[tuple[str, int, Iterable[Any]]] = [
        ("data.pkl", len(pickled.getbuffer()), [pickled.getbuffer()]),
        (".format_version", 1, [b"1"]), (".storage_alignment", 2, [str(_ALIGNMENT).encode()]),
        ("byteorder", 6, [b"little"]),
        *((f"data/{k}", t.nbytes, _lazy(t.chunks)) for k, t in enumerate(pickler.tensors)),
        ("version", 2, [b"3\n"]), (".data/serialization_id", 40, [str(secrets.randbits(128)).zfill(40)[:40].encode()]),
    ]
    with open(path, "xb") as f:
        writer = HashingWriter(f)  # no seek() or tell(): zipfile writes it front to back
        with zipfile.ZipFile(cast(IO[bytes], writer), "w", zipfile.ZIP_STORED) as archive:
            for name, size, chunks in records:
                _write_record(archive, f"archive/{name}", size, chunks)
        f.flush()
        os.fsync(f.fileno())
    return writer.hexdigest()


def _lazy(chunks: Callable[[], Iterable[Any]]) -> Iterator[Any]:
    yield from chunks()  # the chunks are produced when their record is written, not before


def has_streamed(obj: Any) -> bool:
    """Whether a :class:`Streamed` tensor is anywhere in ``obj`` (dicts, lists and tuples)."""
    if isinstance(obj, Streamed):
        return True
    if isinstance(obj, dict):
        return any(has_streamed(v) for v in obj.values())
    return isinstance(obj, (list, tuple)) and any(has_streamed(v) for v in obj)


def file_chunks(path: Path, offset: int, nbytes: int, chunk_bytes: int) -> Iterator[memoryview]:
    """The ``nbytes`` bytes of ``path`` from ``offset`` on, ``chunk_bytes`` at a time, read with
    plain reads (no mapped pages left resident) into one buffer: each chunk is valid until the
    next one is read."""
    step = max(1, chunk_bytes)
    buffer = memoryview(bytearray(min(step, nbytes)))
    with open(path, "rb", buffering=0) as f:
        for a in range(0, nbytes, step):
            view = buffer[:min(step, nbytes - a)]
            got = os.preadv(f.fileno(), [view], offset + a)
            if got != view.nbytes:
                raise RuntimeError(f"{path} ended at byte {offset + a + got}: expected {offset + nbytes}")
            yield view
