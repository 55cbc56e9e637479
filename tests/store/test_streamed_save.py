"""``save_streamed``: a ``torch.save`` file written chunk by chunk loads as ``torch.save``'s."""
import hashlib
import zipfile

import numpy as np
import pytest
import torch

from pyg_sparsecomm.store.streamed_save import Streamed, file_chunks, save_streamed


def _record(path) -> dict:
    """Tensors of several dtypes and shapes, empty ones, and the plain values a part record holds;
    ``"col"`` streamed from a file in chunks that cut its elements."""
    col = np.arange(1000, dtype=np.int64) * 7
    col.tofile(path.parent / "col.bin")
    return {"rank": 1, "sizes": [3, 0, 2], "value": None, "name": "x",
            "x": torch.randn(3, 4), "empty": torch.empty(0, dtype=torch.long), "scalar": torch.tensor(2.5),
            "col": Streamed(torch.long, (1000,), lambda: file_chunks(path.parent / "col.bin", 0, 8000, 333)),
            "attrs": {"mask": Streamed(torch.bool, (2, 3), lambda: [np.array([1, 0, 1, 1, 1, 0], dtype=bool)]),
                      "y": torch.arange(5, dtype=torch.int32)[::2]}}  # a strided view


def _expected() -> dict:
    return {"col": torch.arange(1000) * 7, "mask": torch.tensor([[True, False, True], [True, True, False]]),
            "y": torch.tensor([0, 2, 4], dtype=torch.int32)}


@pytest.mark.parametrize("zip64", [False, True])
def test_streamed_file_loads_as_torch_save_and_hash_is_of_the_bytes_written(tmp_path, monkeypatch, zip64):
    if zip64:  # records over 4 GiB need zip64 headers: the same path, at a limit this test reaches
        monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    record = _record(tmp_path / "r.pt")
    digest = save_streamed(record, tmp_path / "r.pt")
    assert digest == hashlib.sha256((tmp_path / "r.pt").read_bytes()).hexdigest()
    assert zipfile.ZipFile(tmp_path / "r.pt").testzip() is None  # every record's CRC-32 is right
    for mmap in (True, False):
        out = torch.load(tmp_path / "r.pt", weights_only=True, mmap=mmap)
        assert out.keys() == record.keys() and out["attrs"].keys() == record["attrs"].keys()
        assert (out["rank"], out["sizes"], out["value"], out["name"]) == (1, [3, 0, 2], None, "x")
        for key in ("x", "empty", "scalar"):
            assert out[key].dtype == record[key].dtype and torch.equal(out[key], record[key]), key
        assert torch.equal(out["col"], _expected()["col"])
        for key in ("mask", "y"):
            assert torch.equal(out["attrs"][key], _expected()[key]), key
        if mmap:  # records are aligned as torch.save aligns them
            assert out["col"].data_ptr() % 64 == 0


def test_a_stream_of_the_wrong_length_is_refused(tmp_path):
    short = Streamed(torch.float32, (4,), lambda: [np.zeros(3, dtype=np.float32)])
    with pytest.raises(RuntimeError, match="gave 12 bytes, its tensor has 16"):
        save_streamed({"x": short}, tmp_path / "short.pt")
    (tmp_path / "f.bin").write_bytes(b"abc")
    with pytest.raises(RuntimeError, match="ended at byte 3: expected 8"):
        list(file_chunks(tmp_path / "f.bin", 0, 8, 4))
