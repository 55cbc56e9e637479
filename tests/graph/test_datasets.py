"""``load_dataset``: the built-in SBM graph is PyG's stochastic block model, and a Planetoid set
whose raw files are missing fails with one clear error on every rank, never a download in
the tests and never a peer's "Connection closed"."""
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch_geometric.datasets import Planetoid
from torch_geometric.utils import stochastic_blockmodel_graph

from pyg_sparsecomm.graph.datasets import sbm_edges
from pyg_sparsecomm.graph.offline import OFFLINE_ENV
from pyg_sparsecomm.launch.datasets import load_dataset
from pyg_sparsecomm.testing import launch


@pytest.mark.parametrize("sizes", [[1], [5, 0, 7], [13, 12, 12, 13]])
def test_sbm_edges_are_pygs_stochastic_block_model(sizes):
    probs = torch.rand(len(sizes), len(sizes), generator=torch.Generator().manual_seed(1))
    probs = (probs + probs.t()) / 2
    for seed in range(3):
        torch.manual_seed(seed)
        expected = stochastic_blockmodel_graph(sizes, probs, directed=False)
        torch.manual_seed(seed)
        assert torch.equal(sbm_edges(sizes, probs), expected)


def _load_offline(rank, world_size, root):
    os.environ[OFFLINE_ENV] = "1"
    try:
        load_dataset("Cora", root)
    except FileNotFoundError as e:
        return str(e)
    return None


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_missing_raw_files_raise_one_clear_error_on_every_rank(tmp_path, world_size):
    messages = launch(_load_offline, world_size, str(tmp_path))
    for message in messages:  # every rank, the same error naming the directory and the fix
        assert message is not None and f"no Planetoid raw files in {tmp_path}/Cora/raw/" in message
        assert "not downloaded: PYG_SPARSECOMM_OFFLINE is set" in message
        assert "copy the 8 raw files ind.cora.{x,tx,allx,y,ty,ally,graph,test.index}" in message
        assert "Connection closed" not in message
    if world_size > 1:
        assert f"failed on 1 of {world_size} ranks" in messages[1] and "rank 0: FileNotFoundError" in messages[1]


def test_missing_files_are_listed_and_a_failed_download_is_that_error(tmp_path, monkeypatch, planetoid_root):
    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    shutil.copy(Path(planetoid_root) / "Cora" / "raw" / "ind.cora.x", raw)  # one of the eight
    with pytest.raises(FileNotFoundError, match=r"raw files missing in .*Cora/raw/: ind\.cora\.tx, .*; not downloaded: "
                                                r"download=False"):
        load_dataset("Cora", str(tmp_path), download=False)

    def no_network(self):
        raise OSError("Cannot connect to host github.com:443 [Name or service not known]")
    monkeypatch.setattr(Planetoid, "download", no_network)
    with pytest.raises(FileNotFoundError, match=r"downloading them failed \(OSError: Cannot connect .*\)\. To run "
                                                r"offline, copy") as info:
        load_dataset("Cora", str(tmp_path), download=True)
    assert info.value.__suppress_context__  # one message, not the downloader's traceback


def test_unknown_dataset_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown dataset 'cora'.*'Cora'"):
        load_dataset("cora")
