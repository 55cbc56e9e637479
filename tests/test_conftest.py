"""The suite in a plain clone: dataset tests skip with the reason when the Planetoid files are absent."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_dataset_tests_skip_with_the_reason_without_the_shared_data(tmp_path):
    env = {**os.environ, "PLANETOID_RAW": str(tmp_path / "nowhere")}
    test = "partition/test_balance.py::test_send_balanced_restarts_reach_far_lower_max_send_on_cora"
    report = tmp_path / "report.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                           test], cwd=TESTS, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = ET.parse(report).getroot().findall(".//testcase")
    assert len(cases) == 1
    skipped = cases[0].find("skipped")
    assert skipped is not None and "Planetoid raw files not found" in skipped.get("message", ""), proc.stdout
