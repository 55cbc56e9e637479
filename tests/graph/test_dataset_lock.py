"""A script's own dataset call under a launcher (issue 54): importing the package makes a PyG dataset
download and process once, however many ranks construct it at the same time on a fresh root; the
others load the processed files.  Real processes, a dataset whose download waits until the other
process is constructing it too (so without the lock both would download)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

#: the processes mostly wait (for each other and for their imports)
pytestmark = pytest.mark.one_core

DATASET = textwrap.dedent('''
    import json, os, sys, time
    import torch
    from torch_geometric.data import Data, InMemoryDataset
    import pyg_sparsecomm  # the dataset's download and processing locked

    class Slow(InMemoryDataset):
        """Downloads one raw file, slowly: until the other process has begun constructing it too."""

        def __init__(self, root, me, other):
            self.me, self.other = me, other
            super().__init__(root)
            self.load(self.processed_paths[0])

        raw_file_names = ["edges.txt"]
        processed_file_names = ["data.pt"]

        def note(self, what):
            with open(os.path.join(self.root, "log"), "a") as f:
                f.write(f"{what} {self.me}\\n")

        def download(self):
            self.note("download")
            deadline = time.monotonic() + 20
            while not os.path.exists(self.other) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the other process is inside its own constructor by now
            with open(os.path.join(self.raw_dir, "edges.txt"), "w") as f:
                f.write("0 1\\n1 2\\n")

        def process(self):
            self.note("process")
            with open(self.raw_paths[0]) as f:
                edges = [[int(v) for v in line.split()] for line in f]
            self.save([Data(edge_index=torch.tensor(edges).t(), num_nodes=3)], self.processed_paths[0])

    root, me = sys.argv[1], sys.argv[2]
    other = os.path.join(root, "arrived-" + ("b" if me == "a" else "a"))
    open(os.path.join(root, "arrived-" + me), "w").close()
    data = Slow(root, me, other)[0]
    print(json.dumps(data.edge_index.tolist()))
''')


def _run_two(tmp_path) -> tuple[list[str], list[list[list[int]]]]:
    script = tmp_path / "slow_dataset.py"
    script.write_text(DATASET)
    root = tmp_path / "root"
    root.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(script), str(root), me], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for me in ("a", "b")]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        outputs.append(json.loads(out.strip().splitlines()[-1]))
    return (root / "log").read_text().split("\n")[:-1], outputs


def test_two_ranks_constructing_a_dataset_at_once_download_and_process_it_once(tmp_path):
    log, outputs = _run_two(tmp_path)
    assert [line.split()[0] for line in log] == ["download", "process"], log
    assert outputs[0] == outputs[1] == [[0, 1], [1, 2]]


@pytest.mark.parametrize("first", ["pyg_sparsecomm", "torch_geometric"])
def test_the_lock_is_installed_whichever_is_imported_first_and_pyg_is_not_imported_by_the_package(first):
    second = "torch_geometric" if first == "pyg_sparsecomm" else "pyg_sparsecomm"
    code = (f"import sys\nimport {first}\nbefore = 'torch_geometric' in sys.modules\nimport {second}\n"
            "from torch_geometric.data import Dataset\n"
            "print(before, Dataset._download._pyg_sparsecomm_locked, Dataset._process._pyg_sparsecomm_locked)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(first == "torch_geometric"), "True", "True"]


def test_offline_a_missing_raw_file_is_an_error_naming_it(tmp_path):
    script = tmp_path / "slow_dataset.py"
    script.write_text(DATASET)
    (tmp_path / "root").mkdir()
    env = {**os.environ, "PYG_SPARSECOMM_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "root"), "a"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0
    assert "FileNotFoundError: Slow: raw files missing in" in done.stderr and "edges.txt" in done.stderr, \
        done.stderr[-2000:]
    assert not (tmp_path / "root" / "log").exists()  # download() never ran


def test_a_root_where_no_lock_file_can_be_made_still_loads(tmp_path):
    """A read-only root (datasets kept ready on a shared volume) loads as without the lock; simulated by a
    folder where the lock file would go (the tests run as root, for whom chmod does not forbid writing)."""
    from pyg_sparsecomm.graph.dataset_lock import LOCK_NAME, root_lock
    (tmp_path / LOCK_NAME).mkdir()
    with root_lock(str(tmp_path)):
        entered = True
    assert entered
