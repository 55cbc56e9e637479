"""``python -m pyg_sparsecomm``: ``--help`` lists the commands without importing torch;
``partition-stats`` prints the volume table and draws heatmaps/bars."""
import runpy
import subprocess
import sys

import pytest

from pyg_sparsecomm import SparsityAwarePartitioner
from pyg_sparsecomm.cli.main import COMMANDS, main
from pyg_sparsecomm.cli.options import parse_option
from pyg_sparsecomm.cli.partition_stats import VB_OBJECTIVES, assign_options
from pyg_sparsecomm.graph.datasets import sbm_graph

#: what the parse step must not import (torch alone took 30-57 s of a loaded machine before --help answered)
HEAVY = ("torch", "torch_geometric", "numpy", "scipy", "matplotlib")


def _imported_by(args: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -X importtime -m pyg_sparsecomm ARGS`` in a fresh interpreter: the run and the top-level
    packages it imported (importtime's lines on stderr end with '| module')."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pyg_sparsecomm", *args],
                          capture_output=True, text=True, timeout=120)
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    return done, imported


@pytest.mark.one_core  # one small interpreter at a time
def test_help_lists_every_command_and_imports_nothing_heavy():
    done, imported = _imported_by(["--help"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pyg_sparsecomm" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))
    help_text = " ".join(done.stdout.split())  # argparse wraps the descriptions
    for name, (_, summary) in COMMANDS.items():
        assert f"{name} {summary}" in help_text, (name, done.stdout)
    for name in COMMANDS:
        done, imported = _imported_by([name, "--help"])
        assert done.returncode == 0 and f"usage: python -m pyg_sparsecomm {name} " in done.stdout, done.stderr[-3000:]
        assert not imported & set(HEAVY), (name, sorted(imported & set(HEAVY)))


def test_vb_objectives_are_the_balancers():
    from pyg_sparsecomm.partition.balance import RESTART_OBJECTIVES
    assert VB_OBJECTIVES == RESTART_OBJECTIVES


def _rows(out, P):
    """Table rows of ``P`` parts, by method."""
    return {ln.split()[1]: ln for ln in out.splitlines() if ln.split()[:1] == [str(P)]}


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


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<svg"), (".pdf", b"%PDF")])
def test_heatmap_and_bars_in_every_format(tmp_path, capsys, suffix, magic):
    heatmap, bars = tmp_path / f"heatmap{suffix}", tmp_path / f"bars{suffix}"
    assert main(["partition-stats", "--graph", "sbm", "--parts", "4", "--methods", "metis",
                 "--heatmap", str(heatmap), "--bars", str(bars)]) == 0
    for path in (heatmap, bars):
        head = path.read_bytes()[:4096]
        assert magic in head, path
    out = capsys.readouterr().out
    assert f"wrote {heatmap}" in out and f"wrote {bars}" in out


def test_plots_name_the_extra_and_bad_formats(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match=r"--heatmap .*use one of the extensions"):
        main(["partition-stats", "--graph", "sbm", "--parts", "2", "--methods", "random",
              "--heatmap", str(tmp_path / "volume.xyz")])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    with pytest.raises(SystemExit, match=r"--bars .*matplotlib.*pyg_sparsecomm\[plot\]"):
        main(["partition-stats", "--graph", "sbm", "--parts", "2", "--methods", "random",
              "--bars", str(tmp_path / "bars.png")])


def test_cli_errors():
    with pytest.raises(SystemExit, match="unknown partitioning method 'spectral'"):
        main(["partition-stats", "--graph", "sbm", "--methods", "spectral"])
    with pytest.raises(SystemExit, match="unknown graph"):
        main(["partition-stats", "--graph", "nowhere.txt"])
    with pytest.raises(SystemExit) as exc:  # argparse: naming the commands, exit status 2
        main(["frobnicate"])
    assert exc.value.code == 2


def test_missing_graph_files_are_named_with_the_fix(tmp_path, monkeypatch):
    # benchmarks/graphs/ is not in the repository: a fresh clone has no mesh
    mesh = tmp_path / "benchmarks" / "graphs" / "4elt.graph"
    with pytest.raises(SystemExit, match=r"graph file .*4elt\.graph' not found.*bash benchmarks/fetch_meshes\.sh"):
        main(["partition-stats", "--graph", str(mesh)])
    with pytest.raises(SystemExit, match=r"graph file .*mine\.graph' not found"):
        main(["partition-stats", "--graph", str(tmp_path / "mine.graph")])
    monkeypatch.setenv("PYG_SPARSECOMM_OFFLINE", "1")  # never a download attempt in the tests
    with pytest.raises(SystemExit, match=r"no Planetoid raw files in .*Cora/raw/.*copy the 8 raw files ind\.cora\."):
        main(["partition-stats", "--graph", "Cora", "--root", str(tmp_path)])


def test_module_entry_point(monkeypatch, capsys):
    """``python -m pyg_sparsecomm`` without a command: usage on stderr, exit status 2 (run through
    ``runpy`` as ``-m`` runs it; a fresh interpreter importing the package is the torchrun tests')."""
    monkeypatch.setattr(sys, "argv", ["pyg_sparsecomm"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("pyg_sparsecomm", run_name="__main__", alter_sys=True)
    assert exc.value.code == 2 and "partition-stats" in capsys.readouterr().err


def test_vb_method_with_an_option_and_byte_columns(capsys):
    assert main(["partition-stats", "--graph", "sbm:400", "--parts", "4", "--methods", "random,metis,metis+vb",
                 "--option", "objective=vol", "--vb-restarts", "1", "--bytes", "8"]) == 0
    out = capsys.readouterr().out
    assert "graph sbm:400: 400 nodes" in out
    rows = _rows(out, 4)
    assert set(rows) == {"random", "metis", "metis+vb"}
    data = sbm_graph(num_nodes=400)
    for method in ("metis", "metis+vb"):  # 'objective' reached both METIS runs (vol != cut here)
        expected = SparsityAwarePartitioner(4, method, objective="vol", vb_restarts=1)(data).comm_stats
        total, total_bytes = int(rows[method].split()[2]), int(rows[method].split()[9])
        assert total == expected.total_rows and total_bytes == expected.total_rows * 8 * 4
    assert int(rows["metis"].split()[2]) != SparsityAwarePartitioner(4, "metis")(data).comm_stats.total_rows


def test_vb_objective_reaches_the_balancing(monkeypatch, capsys):
    import pyg_sparsecomm.partition.partitioner as partitioner
    seen, balance = [], partitioner.balance_max_send
    monkeypatch.setattr(partitioner, "balance_max_send",
                        lambda *a, **k: seen.append(k["objective"]) or balance(*a, **k))
    for flag, expected in (([], "auto"), (["--vb-objective", "cut"], "cut"), (["--vb-objective", "vol"], "vol")):
        seen.clear()
        assert main(["partition-stats", "--graph", "sbm:300", "--parts", "4", "--methods", "metis+vb"] + flag) == 0
        assert seen == [expected]
    with pytest.raises(SystemExit):
        main(["partition-stats", "--graph", "sbm:300", "--methods", "metis+vb", "--vb-objective", "volume"])
    assert "invalid choice: 'volume'" in capsys.readouterr().err


def test_rmat_graph_tsv_and_markdown(capsys):
    assert main(["partition-stats", "--graph", "rmat:7", "--parts", "2", "--methods", "random,contiguous",
                 "--format", "tsv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# graph rmat:7: 128 nodes, " + lines[0].split(", ")[1]
    header, rows = lines[1].split("\t"), [ln.split("\t") for ln in lines[2:]]
    assert header[:3] == ["P", "method", "total"] and [r[1] for r in rows] == ["random", "contiguous"]
    assert all(len(r) == len(header) for r in rows) and rows[0][header.index("total/rnd")] == "1.000"
    assert main(["partition-stats", "--graph", "sbm:200", "--parts", "2", "--methods", "metis",
                 "--format", "markdown"]) == 0
    table = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    assert len(table) == 3 and table[1].startswith("|---:|:---|") and table[2].startswith("| 2 | metis |")


def test_option_parsing_and_assignment():
    assert parse_option("fanouts=[10,5]") == (None, "fanouts", [10, 5])
    assert parse_option("hypergraph:preset=quality") == ("hypergraph", "preset", "quality")
    assert parse_option("epsilon=0.05")[2] == 0.05 and parse_option("x=true")[2] is True
    methods = ["random", "metis", "metis+vb", "hypergraph+vb"]
    options = assign_options(methods, [(None, "objective", "vol"), (None, "epsilon", 0.05),
                                       ("hypergraph", "preset", "quality"), ("metis+vb", "objective", "cut")])
    assert options == {"random": {}, "metis": {"objective": "vol"}, "metis+vb": {"objective": "cut"},
                       "hypergraph+vb": {"epsilon": 0.05, "preset": "quality"}}


def test_stochastic_hypergraph_sampling_options(capsys):
    """``fanouts=[5,5]`` and ``batch_size=64`` reach SHP as the shorthand of the neighbour loader's rule."""
    assert main(["partition-stats", "--graph", "sbm:600", "--parts", "2", "--methods", "random,stochastic_hypergraph",
                 "--option", "fanouts=[5,5]", "--option", "batch_size=64", "--format", "tsv"]) == 0
    rows = [ln.split("\t") for ln in capsys.readouterr().out.splitlines()[2:]]
    assert [r[1] for r in rows] == ["random", "stochastic_hypergraph"]


def test_bad_options_name_the_option():
    base = ["partition-stats", "--graph", "sbm:200", "--parts", "2", "--methods", "random,metis"]
    with pytest.raises(SystemExit, match="none of --methods takes option 'frobnicate'"):
        main(base + ["--option", "frobnicate=1"])
    with pytest.raises(SystemExit, match=r"method 'metis' takes no option\(s\) \['preset'\]"):
        main(base + ["--option", "metis:preset=quality"])
    with pytest.raises(SystemExit, match="'hypergraph' is not in --methods"):
        main(base + ["--option", "hypergraph:preset=quality"])
    with pytest.raises(SystemExit) as exc:  # argparse: usage error, exit status 2
        main(base + ["--option", "objective"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit, match="bad graph 'rmat:x'"):
        main(["partition-stats", "--graph", "rmat:x"])
    with pytest.raises(SystemExit, match="cannot split 200 nodes into 400 parts"):
        main(["partition-stats", "--graph", "sbm:200", "--parts", "400", "--methods", "random"])


def test_bad_option_exits_non_zero_from_the_module_entry(monkeypatch, capsys):
    """``python -m pyg_sparsecomm ...`` with a bad option: the module ends with ``SystemExit(message)``,
    which the interpreter turns into exit status 1 and the message on stderr (run here through
    ``runpy`` as ``-m`` runs it)."""
    monkeypatch.setattr(sys, "argv", ["pyg_sparsecomm", "partition-stats", "--graph", "sbm:200",
                                      "--methods", "metis+vb", "--option", "metis:frobnicate=1"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("pyg_sparsecomm", run_name="__main__", alter_sys=True)
    assert isinstance(exc.value.code, str)  # a message: exit status 1
    assert "method 'metis+vb': method 'metis' takes no option(s) ['frobnicate']" in exc.value.code
    assert not capsys.readouterr().out  # refused before the graph is loaded
