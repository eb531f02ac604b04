"""Every benchmark script offers ``--quick`` (docs/PERFORMANCE.md: "``make bench`` runs them all,
``--quick`` gives a smoke run"): its ``--help`` parses and lists the flag."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = sorted(p for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py") if not p.name.startswith("_"))


def test_there_are_benchmarks():
    assert len(BENCH) >= 10


@pytest.mark.parametrize("script", BENCH, ids=lambda p: p.stem)
def test_benchmark_offers_quick(script):
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                         cwd=script.parent)
    assert out.returncode == 0, out.stderr[-500:]
    assert "--quick" in out.stdout


@pytest.mark.parametrize("script, args", [
    ("retrieval_scaling.py", ["--device", "cuda", "--n", "300", "--dims", "8", "--classes", "cub", "--repeats", "1"]),
    ("saliency.py", ["--device", "cuda", "--quick"]),
    ("embed_throughput.py", ["--device", "cuda", "--quick"]),
    ("train_throughput.py", ["--device", "cuda", "--quick"]),
    ("retrieval_cuda.py", ["--device", "cuda", "--n", "300", "--dims", "8", "--repeats", "1"]),
    ("conv_precision.py", ["--device", "cuda", "--size", "32", "--batch", "2"]),
])
def test_gpu_commands_say_in_one_line_that_there_is_no_gpu(script, args):
    # the GPU commands of docs/PERFORMANCE.md, "ready to run", on a machine without CUDA: one line, exit 1
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    path = BENCH[0].parent / script
    out = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300,
                         cwd=path.parent)
    assert out.returncode == 1, out.stderr[-800:]
    assert out.stderr.strip().splitlines() == [f"{script}: error: --device cuda was asked for, but no CUDA GPU "
                                               "is available (use --device auto or cpu)"]


@pytest.mark.parametrize("script, args", [
    ("saliency.py", ["--device", "cpu", "--quick"]),
    ("embed_throughput.py", ["--device", "cpu", "--quick"]),
    ("train_throughput.py", ["--device", "cpu", "--quick", "--num-workers", "1"]),
    ("retrieval_cuda.py", ["--device", "cpu", "--n", "1500", "--dims", "16", "--repeats", "1", "--check"]),
    ("conv_precision.py", ["--device", "cpu", "--quick"]),
])
def test_gpu_benchmarks_run_on_the_cpu(script, args):
    # the GPU benchmarks' code runs where CI runs (the saliency benchmark once passed compute_device's
    # CPU, which is no torch.device, to Module.to, and failed with a TypeError on every device)
    path = BENCH[0].parent / script
    out = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=300,
                         cwd=path.parent)
    assert out.returncode == 0, out.stderr[-1500:]
    if script == "retrieval_cuda.py":
        assert "largest |cpu - cpu| 0.0e+00" in out.stdout


def test_machine_line_names_cpu_cores_and_the_passes_in_use(monkeypatch):
    """benchmarks/_script.machine(): the line printed above a benchmark's table (timings differ between CPUs:
    whether the CPU multiplies bfloat16, whether the compiled fused pass was built)."""
    import os

    monkeypatch.syspath_prepend(str(BENCH[0].parent))
    from _script import machine

    from embedscope.metrics.search import fused
    from embedscope.metrics.search.bf16 import bf16_available

    line = machine()
    assert f"{os.cpu_count()} cores" in line
    assert f"bfloat16 hardware: {'yes' if bf16_available() else 'no'}" in line
    assert ("fused pass: built" if fused.available() else "fused pass: not built") in line
    monkeypatch.setattr(fused, "_fused", None)
    assert "fused pass: not built" in machine()
