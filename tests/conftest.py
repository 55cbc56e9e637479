import os
import shutil
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "planetoid"


@pytest.fixture(scope="session")
def planetoid_root(tmp_path_factory):
    """A temporary Planetoid root holding copies of the shared raw files (never downloads)."""
    if not SHARED.is_dir():
        pytest.fail(f"Planetoid raw files not found at {SHARED}: the shared/ data folder must sit "
                    f"beside the repository")
    root = tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        shutil.copytree(SHARED / name / "raw", root / name / "raw")
    return str(root)
