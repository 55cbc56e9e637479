"""``python -m pyg_sparsecomm partition-stats`` prints the volume table and writes a PNG heatmap."""
import subprocess
import sys

import pytest

from pyg_sparsecomm.cli import main


def test_partition_stats_table_and_heatmap(tmp_path, capsys):
    png = tmp_path / "volume.png"
    assert main(["partition-stats", "--graph", "sbm", "--parts", "2,4", "--methods", "random,metis",
                 "--heatmap", str(png)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(("2 ", "4 "))]
    assert len(lines) == 4
    metis_4 = next(ln for ln in lines if ln.split()[:2] == ["4", "metis"])
    assert float(metis_4.split("|")[1].split()[0]) < 1.0  # METIS total volume below random's
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and b"IEND" in data


def test_cli_errors():
    with pytest.raises(SystemExit, match="unknown method"):
        main(["partition-stats", "--graph", "sbm", "--methods", "spectral"])
    with pytest.raises(SystemExit, match="unknown graph"):
        main(["partition-stats", "--graph", "nowhere.txt"])
    assert main(["frobnicate"]) == 2


def test_module_entry_point():
    proc = subprocess.run([sys.executable, "-m", "pyg_sparsecomm"], capture_output=True, text=True)
    assert proc.returncode == 2 and "partition-stats" in proc.stderr
