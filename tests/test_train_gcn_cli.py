"""examples/train_gcn.py's command line: its algorithms are the package's registry, and its
first line times the graph (generation or reading) apart from partitioning and sharding."""
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyg_sparsecomm.algorithms import ALGORITHMS
from pyg_sparsecomm.graph.datasets import sbm_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import train_gcn  # noqa: E402


def test_help_lists_every_registered_algorithm(capsys):
    with pytest.raises(SystemExit):
        train_gcn.parse_args(["--help"])
    help_text = capsys.readouterr().out
    choices = re.search(r"--algorithm \{([^}]*)\}", help_text)[1].split(",")
    assert sorted(choices) == sorted([*ALGORITHMS, "auto"])
    for name in choices:
        assert train_gcn.parse_args(["--algorithm", name]).algorithm == name
    with pytest.raises(SystemExit):
        train_gcn.parse_args(["--algorithm", "2d"])
    assert "invalid choice: '2d'" in capsys.readouterr().err


def test_first_line_times_the_graph_apart_from_the_partition(monkeypatch, capsys):
    clock = [0.0]  # the script's clock advances only while the graph is made: no real time is read

    def slow_graph(*args, **kwargs):  # a graph that takes 2 s to make
        clock[0] += 2.0
        return sbm_graph(num_nodes=200)
    monkeypatch.setattr(train_gcn, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(train_gcn, "load_dataset", slow_graph)
    train_gcn.run(train_gcn.parse_args(["--epochs", "1", "--no-progress"]), 0, 1)
    first = capsys.readouterr().out.splitlines()[0]
    times = re.fullmatch(r"P=1 dataset=SBM method=metis algorithm=1d \| graph ([0-9.]+)s, partition ([0-9.]+)s, "
                         r"shard ([0-9.]+)s", first)
    assert times, first
    graph_s, partition_s, shard_s = map(float, times.groups())
    assert (graph_s, partition_s, shard_s) == (2.0, 0.0, 0.0), first
