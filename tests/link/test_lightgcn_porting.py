"""PyG's examples/lightgcn.py ported (issue 48, item 4): examples/porting/lightgcn.py is PyG's recipe on a
generated Amazon-Book-shaped graph, lightgcn_distributed.py its port, which changes at most 6 lines and
trains with the same loss, precision@20 and recall@20 curves at P = 2 and 3, the ranks starting from
different torch random states (rank 0 from the single process's), and ends with the single process's
embedding table at every rank's owned rows.  The epoch loss is upstream's ``float(loss) * pos_rank.numel()``
over ``pos_rank.numel()``: the distributed forward returns every pair's score on every rank."""
import contextlib
import difflib
import io
import runpy
import sys
import warnings
from pathlib import Path

import pytest
import torch

from pyg_sparsecomm.testing import launch

PORTING = Path(__file__).resolve().parents[2] / "examples" / "porting"
SINGLE, DISTRIBUTED = PORTING / "lightgcn.py", PORTING / "lightgcn_distributed.py"
#: the import, one torch seed on every rank, distribute, partition_and_shard, the test's gather_nodes
CHANGED_LINES = 6
ARGV = ["--epochs", "3", "--num_users", "120", "--num_books", "160", "--num_interactions", "1500",
        "--batch_size", "256"]


def _run(path: Path, seed: int) -> tuple[str, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The script's output; one more epoch of its own ``train()`` and ``test(k=20)``, unrounded (the
    script prints 4 decimals, as PyG's); its final embedding table and its shard's ``n_id`` (``None``
    in one process)."""
    torch.manual_seed(seed)
    old_argv, sys.argv = sys.argv, [str(path), *ARGV]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # float(loss) of a loss requiring grad, as PyG's script
            scope = runpy.run_path(str(path), run_name="__main__")
            extra = torch.tensor([scope["train"](), *scope["test"](20)], dtype=torch.float64)
    finally:
        sys.argv = old_argv
    return (buffer.getvalue(), extra, scope["model"].embedding.weight.detach().clone(),
            scope["data"].get("n_id"))


def _worker(rank, world_size):
    return _run(DISTRIBUTED, 0 if rank == 0 else 1000 + rank)


def _curves(output: str) -> torch.Tensor:
    rows = [[float(v) for v in line.replace(",", "").split()[3::2]] for line in output.splitlines()
            if line.startswith("Epoch")]
    assert len(rows) == 3 and all(len(row) == 3 for row in rows), output[-2000:]
    return torch.tensor(rows, dtype=torch.float64)


#: upstream's lines the single-process script keeps as they are (its loop, its epoch loss, its metrics)
UPSTREAM_LINES = ("    for index in tqdm(train_loader):", "        total_loss += float(loss) * pos_rank.numel()",
                  "        total_examples += pos_rank.numel()", "    return total_loss / total_examples",
                  "    emb = model.get_embedding(data.edge_index)",
                  "    user_emb, book_emb = emb[:num_users], emb[num_users:]",
                  "        pos_rank, neg_rank = model(data.edge_index, edge_label_index).chunk(2)",
                  "            node_id=edge_label_index.unique(),")


def test_port_changes_few_lines():
    lines = SINGLE.read_text().splitlines()
    assert all(line in lines for line in UPSTREAM_LINES), [line for line in UPSTREAM_LINES if line not in lines]
    diff = list(difflib.unified_diff(SINGLE.read_text().splitlines(), DISTRIBUTED.read_text().splitlines(),
                                     lineterm="", n=0))
    added = [line for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff if line.startswith("-") and not line.startswith("---")]
    assert len(added) <= CHANGED_LINES and len(removed) <= CHANGED_LINES, "\n".join(diff)


@pytest.mark.parametrize("world_size", [2, 3])
def test_port_trains_as_single_process(world_size):
    ref_out, ref_extra, ref_weight, _ = _run(SINGLE, 0)
    reference = _curves(ref_out)
    assert reference[-1, 0] < reference[0, 0], "the single-process script does not learn"
    for rank, (out, extra, weight, n_id) in enumerate(launch(_worker, world_size, timeout=300)):
        # printed with 4 decimals: equal values may round apart by one unit
        torch.testing.assert_close(_curves(out), reference, rtol=0, atol=1.5e-4, msg=f"rank {rank}: curves")
        torch.testing.assert_close(extra, ref_extra, rtol=0, atol=1e-6, msg=f"rank {rank}: loss, precision, recall")
        torch.testing.assert_close(weight, ref_weight[n_id], rtol=1e-4, atol=1e-6, msg=f"rank {rank}: table")
