"""The suite in a plain clone: dataset tests skip with the reason when the Planetoid files are absent.

The inner pytest runs in a fork of this process with the tests' modules (``conftest`` first, which
reads ``PLANETOID_RAW`` when imported) taken out of ``sys.modules``, so it imports them anew under
the changed environment, as a fresh interpreter would, without a fresh interpreter's seconds of
importing torch and PyG (which read no such variable)."""
import multiprocessing as mp
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _inner_pytest(args: list[str], env: dict[str, str]) -> None:
    os.environ.update(env)
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(TESTS)):
            del sys.modules[name]
    os.chdir(TESTS)
    devnull = os.open(os.devnull, os.O_WRONLY)  # the inner session's dots and summary
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os._exit(pytest.main(args))


@pytest.mark.one_core  # one child process
def test_dataset_tests_skip_with_the_reason_without_the_shared_data(tmp_path):
    test = "partition/test_balance.py::test_send_balanced_restarts_reach_far_lower_max_send_on_cora"
    report = tmp_path / "report.xml"
    # --assert=plain: rewriting the asserts of the modules it imports (plugins too) took 10 of its 12 s
    args = ["-q", "-p", "no:cacheprovider", "--assert=plain", f"--junitxml={report}", test]
    child = mp.get_context("fork").Process(target=_inner_pytest,
                                           args=(args, {"PLANETOID_RAW": str(tmp_path / "nowhere")}))
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0, f"inner pytest exited with {child.exitcode}"
    cases = ET.parse(report).getroot().findall(".//testcase")
    assert len(cases) == 1
    skipped = cases[0].find("skipped")
    assert skipped is not None and "Planetoid raw files not found" in skipped.get("message", ""), \
        ET.tostring(cases[0], encoding="unicode")
