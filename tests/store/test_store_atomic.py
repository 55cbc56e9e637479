"""The partition store's writes are atomic: a writer killed mid-write, or two writers of one
directory, never leave a directory that loads another writer's files or a mix of two writes.

Writers run as separate processes that pause inside ``torch.save`` after a chosen
number of part files, so the test picks the moment exactly: it SIGKILLs the writer there, or
starts a second writer while the first one waits."""
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from graphs import make_cases

from pyg_sparsecomm import SparsityAwarePartitioner, graph_fingerprint, load_shard, save_partition, shard
from pyg_sparsecomm.store.atomic_dir import DirectoryLockedError
from pyg_sparsecomm.store.files import read_manifest
from pyg_sparsecomm.testing.processes import _context

P = 3


def writer_data(which: str):
    """Two different partitioned graphs: writer ``"A"``'s and writer ``"B"``'s."""
    data = make_cases(P)["weighted"].clone()
    del data.part, data.num_parts, data.comm_stats
    if which == "B":
        data.x = data.x + 100.0
        return SparsityAwarePartitioner(P, "contiguous")(data)
    return SparsityAwarePartitioner(P, "random", seed=1)(data)


def _write(root: str, which: str, pause_after: int, ready: str, go: str, result: str) -> None:
    """The child: ``save_partition`` of ``writer_data(which)``, stopping after its
    ``pause_after``-th ``torch.save`` until ``go`` exists; its outcome into ``result``."""
    data = writer_data(which)
    real_save, calls = torch.save, [0]

    def paused_save(*args, **kwargs):
        real_save(*args, **kwargs)
        calls[0] += 1
        if calls[0] == pause_after:
            Path(ready).touch()
            while not os.path.exists(go):
                time.sleep(0.01)

    torch.save = paused_save
    try:
        save_partition(data, root)
        outcome = "OK"
    except Exception as e:  # noqa: BLE001 - the test reads what the writer raised
        outcome = f"{type(e).__name__}: {e}"
    Path(result).write_text(outcome)


class Writer:
    """A ``save_partition`` in a child process (forked from the warm fork server of
    :mod:`pyg_sparsecomm.testing.processes`) that stops after its ``pause_after``-th ``torch.save``."""

    def __init__(self, tmp_path: Path, root: Path, which: str, pause_after: int) -> None:
        tag = f"{root.name}-{which}"
        self.ready, self.go, self.result = (tmp_path / f"{kind}-{tag}" for kind in ("ready", "go", "result"))
        self.proc = _context().Process(target=_write, args=(str(root), which, pause_after, str(self.ready),
                                                            str(self.go), str(self.result)), daemon=True)
        self.proc.start()

    def wait_paused(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if not self.proc.is_alive() or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"writer did not pause (exit code {self.proc.exitcode})")
            time.sleep(0.01)

    def resume(self) -> str:
        self.go.touch()
        return self.finish()

    def finish(self, timeout: float = 120.0) -> str:
        self.proc.join(timeout)
        assert self.proc.exitcode == 0, self.proc.exitcode
        return self.result.read_text()

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(30)


def _same_shard(loaded, expected) -> bool:
    return all(torch.equal(loaded[k], expected[k]) for k in ("n_id", "x", "e_id", "edge_weight")) \
        and torch.equal(loaded.adj.col, expected.adj.col)


def _loads_as(root: Path, data) -> None:
    """Every rank loads ``data``'s shard from ``root``, under a manifest that names ``data``."""
    assert read_manifest(root)["source"]["fingerprint"] == graph_fingerprint(data)
    for r in range(P):
        assert _same_shard(load_shard(root, rank=r, world_size=P), shard(data, rank=r, world_size=P)), r


def test_writer_killed_mid_write_leaves_nothing_loadable(tmp_path):
    root = tmp_path / "parts"
    writer = Writer(tmp_path, root, "A", pause_after=2)
    writer.wait_paused()
    writer.kill()
    for r in range(P):
        with pytest.raises(FileNotFoundError, match="interrupted or is still running.*run save_partition"):
            load_shard(root, rank=r, world_size=P)
    leftover = list(tmp_path.glob(".parts.tmp-*"))
    assert len(leftover) == 1 and not (leftover[0] / "manifest.json").exists()
    with pytest.raises(FileNotFoundError, match="unfinished copy of an interrupted or running writer"):
        load_shard(leftover[0], rank=0, world_size=P)
    save_partition(writer_data("A"), root)  # the next writer removes the leftover and succeeds
    assert not leftover[0].exists()
    _loads_as(root, writer_data("A"))


def test_writer_killed_over_an_older_partition_keeps_it_whole(tmp_path):
    """Killed after its first part file, or after its last one (before the manifest): the older
    partition still loads on every rank, none of the killed writer's files mixed in."""
    roots = {k: tmp_path / f"parts{k}" for k in (1, P)}
    for root in roots.values():
        save_partition(writer_data("A"), root)
    writers = [Writer(tmp_path, root, "B", pause_after=k) for k, root in roots.items()]
    for writer in writers:
        writer.wait_paused()
        writer.kill()
    for root in roots.values():
        _loads_as(root, writer_data("A"))
        save_partition(writer_data("B"), root)  # replaced whole by the next writer
        _loads_as(root, writer_data("B"))


def test_second_writer_is_refused_while_the_first_writes(tmp_path):
    """Writer A stops after writing (and, before this fix, before hashing) its second part file;
    writer B writes the same directory meanwhile.  B is refused naming A, and A's partition is
    the one that loads, on every rank."""
    root = tmp_path / "parts"
    first = Writer(tmp_path, root, "A", pause_after=2)
    first.wait_paused()
    try:
        refused = Writer(tmp_path, root, "B", pause_after=10**6).finish()
    finally:
        assert first.resume() == "OK"
    _loads_as(root, writer_data("A"))
    assert refused.startswith(f"DirectoryLockedError: another writer (pid {first.proc.pid} on "), refused
    assert "wait for it to finish, or write to another directory" in refused


def test_store_refuses_to_replace_a_directory_that_is_no_partition(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"holds files that are not a partition \(notes.txt\)"):
        save_partition(writer_data("A"), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / "manifest.json").exists()


def test_lock_is_refused_in_process_and_released_after_an_error(tmp_path):
    from pyg_sparsecomm.store.atomic_dir import atomic_directory

    root = tmp_path / "parts"
    with atomic_directory(root) as tmp:
        with pytest.raises(DirectoryLockedError, match=f"pid {os.getpid()} on "):
            save_partition(writer_data("A"), root)
        assert tmp.parent == root.parent and tmp.name.startswith(".parts.tmp-")
    with pytest.raises(ZeroDivisionError), atomic_directory(root):
        1 / 0  # noqa: B018
    assert not list(tmp_path.glob(".parts.tmp-*"))  # removed, and the lock released:
    save_partition(writer_data("A"), root)
    _loads_as(root, writer_data("A"))


def test_part_file_hash_is_of_the_bytes_written_and_loads_memory_mapped(tmp_path, monkeypatch):
    """The checksum is computed while writing: no part file is read back by the writer."""
    import builtins

    opened = []
    real_open = builtins.open

    def recording_open(file, mode="r", *args, **kwargs):
        opened.append((Path(file).name, mode))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    save_partition(writer_data("A"), tmp_path / "parts")
    monkeypatch.undo()
    assert not [(name, mode) for name, mode in opened if name.startswith("part-") and "r" in mode]
    mapped = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: mapped.append(k.get("mmap")) or real_load(*a, **k))
    _loads_as(tmp_path / "parts", writer_data("A"))
    assert mapped == [True] * P
