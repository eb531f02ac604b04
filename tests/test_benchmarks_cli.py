"""Every benchmark script offers ``--quick`` (docs/PERFORMANCE.md: "``make bench`` runs them all,
``--quick`` gives a smoke run"): its ``--help`` parses and lists the flag."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks():
    assert len(BENCH) >= 10


@pytest.mark.parametrize("script", BENCH, ids=lambda p: p.stem)
def test_benchmark_offers_quick(script):
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=script.parent)
    assert out.returncode == 0, out.stderr[-500:]
    assert "--quick" in out.stdout
