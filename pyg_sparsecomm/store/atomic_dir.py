"""Directories that appear whole or not at all: the write path of the partition store.

A writer of ``root`` (:func:`atomic_directory`)

1. takes an exclusive ``flock`` on ``.<name>.lock`` next to ``root`` (the kernel releases it when
   the writer dies, even by ``SIGKILL``, so a dead writer never blocks the next one); a second
   writer is refused at once with the holder's pid and host (:class:`DirectoryLockedError`);
2. writes every file into a fresh sibling ``.<name>.tmp-<random>``, each through a
   :class:`HashingWriter`, so the SHA-256 recorded is that of the bytes this writer wrote (never
   a re-read of a file another writer may have replaced meanwhile), and ``fsync``s it;
3. swaps the finished directory into place with one ``rename`` (``renameat2(RENAME_EXCHANGE)``
   when ``root`` already holds an older partition, so readers see the old or the new directory,
   never neither) and removes the old one.

A writer killed anywhere before the swap leaves ``root`` as it was, plus an unfinished
``.tmp-`` sibling that the next writer removes; :func:`unfinished_hint` names it in the error of
a reader that finds no manifest.
"""
import ctypes
import ctypes.util
import errno
import fcntl
import hashlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import torch

_RENAME_EXCHANGE = 2  # linux/fs.h


class DirectoryLockedError(RuntimeError):
    """Another process is writing the directory (it holds the lock file)."""


class HashingWriter:
    """A binary file object that hashes every byte it writes (SHA-256) on the way to ``file``.

    Args:
        file (Any): an open binary file.
    """

    def __init__(self, file: Any) -> None:
        self.file, self.sha256, self.size = file, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        self.size += view.nbytes
        return self.file.write(view)

    def flush(self) -> None:
        self.file.flush()

    def hexdigest(self) -> str:
        return self.sha256.hexdigest()


def save_hashed(obj: Any, path: Path) -> str:
    """``torch.save(obj)`` into the new file ``path``, flushed to disk; returns the SHA-256 of
    the bytes written."""
    with open(path, "xb") as f:
        writer = HashingWriter(f)
        torch.save(obj, cast(IO[bytes], writer))  # only write() and flush() are called
        f.flush()
        os.fsync(f.fileno())
    return writer.hexdigest()


def write_text_synced(text: str, path: Path) -> None:
    """Writes ``text`` into the new file ``path`` and ``fsync``s it."""
    with open(path, "x") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _siblings(root: Path, kind: str) -> list[Path]:
    return sorted(root.parent.glob(f".{root.name}.{kind}-*"))


def unfinished_hint(root: Path) -> str:
    """``""``, or a sentence naming the unfinished copies an interrupted writer left next to
    ``root`` (or saying that ``root`` itself is one)."""
    root = Path(root)
    if root.name.startswith(".") and ".tmp-" in root.name:
        return f" ({root} is the unfinished copy of an interrupted or running writer)"
    left = _siblings(root, "tmp")
    if not left:
        return ""
    return (f" (a writer of {root} was interrupted or is still running: its unfinished copy "
            f"{left[0]} remains; the next save_partition removes it)")


def _lock_holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown process"
    except OSError:
        return "unknown process"


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    path = root.parent / f".{root.name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DirectoryLockedError(
                f"another writer ({_lock_holder(path)}) is writing {root} (it holds {path}): wait "
                f"for it to finish, or write to another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (unlinking a lock file races with its takers)


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two paths atomically (Linux ``renameat2``); ``False`` where that is unavailable."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.ENOTSUP):
        return False
    raise OSError(ctypes.get_errno(), f"cannot swap {a} and {b}: {os.strerror(ctypes.get_errno())}")


def _check_replaceable(root: Path, replaceable: Any) -> None:
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"{root} exists and is not a directory: choose another partition directory")
    if root.is_dir():
        foreign = sorted(p.name for p in root.iterdir() if not replaceable(p.name))
        if foreign:
            raise FileExistsError(f"{root} holds files that are not a partition ({', '.join(foreign[:3])}"
                                  f"{', ...' if len(foreign) > 3 else ''}): writing would replace them; "
                                  f"choose a new or empty directory")


def _default_dir_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_into_place(tmp: Path, root: Path) -> None:
    if root.is_dir() and any(root.iterdir()):
        if not _exchange(tmp, root):  # no atomic swap here: a moment without root, never a mix
            old = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
            os.rename(root, old / "dir")
            os.rename(tmp, root)
            tmp = old
        shutil.rmtree(tmp)  # after the exchange: the older partition
    else:
        os.rename(tmp, root)  # over a missing or empty directory: atomic
    _fsync_dir(root.parent)


@contextmanager
def atomic_directory(root: str | Path, replaceable: Any = lambda name: False) -> Iterator[Path]:
    """Yields an empty directory to fill; when the block ends without error it becomes ``root``.

    Args:
        root (str or pathlib.Path): the directory to (re)write.  Its parent must exist or be creatable.
        replaceable (Any, optional): ``name -> bool``, the file names an existing ``root`` may hold to be
            replaced (an older partition); any other file makes the write refuse, so that no
            unrelated directory is ever deleted. (default: :obj:`lambda name: False`)

    Raises:
        DirectoryLockedError: another process is writing ``root``.
        FileExistsError: ``root`` holds files ``replaceable`` does not accept.
    """
    root = Path(root).absolute()
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root):
        _check_replaceable(root, replaceable)
        for stale in _siblings(root, "tmp") + _siblings(root, "old"):  # of writers that died: we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
        tmp.chmod(_default_dir_mode())  # mkdtemp's 0o700 would hide the partition from other users
        try:
            yield tmp
            _fsync_dir(tmp)
            _swap_into_place(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
