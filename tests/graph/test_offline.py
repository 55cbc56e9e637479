"""``PYG_SPARSECOMM_OFFLINE=1`` (issue 45, item 2): ``rank_zero_first`` around any PyG dataset never
reaches the network where raw files are missing; every rank raises naming the files and their folder."""
import os
import socket

import pytest
import torch_geometric.transforms as T
from torch_geometric.data import Dataset
from torch_geometric.datasets import Planetoid

from pyg_sparsecomm import rank_zero_first
from pyg_sparsecomm.graph.offline import OFFLINE_ENV
from pyg_sparsecomm.testing import launch

CORA_FILES = r"ind\.cora\.x, ind\.cora\.tx, ind\.cora\.allx, .*ind\.cora\.test\.index"


def _refuse_network(setattr_) -> list[str]:
    """Makes every way into the network raise, and records the attempts (a download's own error
    handling may swallow the exception; the record cannot be swallowed)."""
    attempts: list[str] = []

    def refuse(name):
        def call(*args, **kwargs):
            attempts.append(name)
            raise OSError(f"test: no network ({name})")
        return call
    for name in ("getaddrinfo", "create_connection"):
        setattr_(socket, name, refuse(name))
    setattr_(socket.socket, "connect", refuse("connect"))
    return attempts


def _build(root, as_context):
    if as_context:
        with rank_zero_first():
            return Planetoid(root, "Cora", transform=T.NormalizeFeatures())
    return rank_zero_first(Planetoid)(root, "Cora", transform=T.NormalizeFeatures())


@pytest.mark.parametrize("as_context", [False, True])
def test_readme_line_offline_names_the_missing_files_and_makes_no_network_call(tmp_path, monkeypatch, as_context):
    init = Dataset.__init__
    monkeypatch.setenv(OFFLINE_ENV, "1")
    monkeypatch.chdir(tmp_path)  # the README's script, run in an empty folder: root "data"
    attempts = _refuse_network(monkeypatch.setattr)
    with pytest.raises(FileNotFoundError, match=rf"Planetoid: raw files missing in data/Cora/raw/: {CORA_FILES}; not "
                                                rf"downloaded: {OFFLINE_ENV} is set\. Copy them into data/Cora/raw/"):
        _build("data", as_context)
    assert attempts == []
    assert Dataset.__init__ is init  # PyG as it was, after the block


def _offline_worker(rank, world_size, root):
    os.environ[OFFLINE_ENV] = "1"
    attempts = _refuse_network(lambda owner, name, value: setattr(owner, name, value))
    messages = []
    for as_context in (False, True):
        try:
            _build(root, as_context)
            messages.append(None)
        except (FileNotFoundError, RuntimeError) as e:
            messages.append(f"{type(e).__name__}: {e}")
    return messages, attempts


def test_every_rank_raises_naming_the_files_and_no_rank_touches_the_network(tmp_path):
    raw = tmp_path / "Cora" / "raw"
    for rank, (messages, attempts) in enumerate(launch(_offline_worker, 2, str(tmp_path))):
        assert attempts == [], rank
        for message in messages:
            assert message is not None, rank
            assert f"raw files missing in {raw}/: ind.cora.x, " in message and f"Copy them into {raw}/" in message
            assert message.startswith("FileNotFoundError" if rank == 0 else "RuntimeError: rank 0 failed"), message
