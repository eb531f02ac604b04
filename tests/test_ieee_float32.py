"""``embedscope.device.ieee_float32``: the searches' float32 products in IEEE float32 whatever the
caller asked of torch (TF32 on CUDA, reduced precision in oneDNN), and the caller's setting as it
was afterwards, through either of torch's two APIs (which torch refuses to mix)."""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

SCRIPT = r"""
import sys, torch
from embedscope.device import ieee_float32

def state():
    out = []
    for f in (torch.get_float32_matmul_precision, lambda: torch.backends.cuda.matmul.allow_tf32,
              lambda: torch.backends.cuda.matmul.fp32_precision, lambda: torch.backends.mkldnn.matmul.fp32_precision):
        try:
            out.append(f())
        except (RuntimeError, AttributeError):
            out.append("refused")
    return out

mode = sys.argv[1]
if mode == "legacy_high": torch.set_float32_matmul_precision("high")
if mode == "legacy_medium": torch.set_float32_matmul_precision("medium")
if mode == "flag": torch.backends.cuda.matmul.allow_tf32 = True
if mode == "new_cuda": torch.backends.cuda.matmul.fp32_precision = "tf32"
if mode == "new_mkldnn": torch.backends.mkldnn.matmul.fp32_precision = "bf16"
before = state()
with ieee_float32():
    inside = state()
after = state()
print(repr((before, inside, after)))
"""


@pytest.mark.parametrize("mode", ["none", "legacy_high", "legacy_medium", "flag", "new_cuda", "new_mkldnn"])
def test_ieee_inside_and_the_callers_setting_after(mode):
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision") and mode.startswith("new"):
        pytest.skip("this torch has no per-backend precision API")
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    before, inside, after = eval(out.stdout.strip().splitlines()[-1])
    assert after == before
    assert inside[1] is False  # no TF32 for CUDA's products
    assert inside[3] in ("ieee", "none", "refused")  # no reduced precision on the CPU
    if mode == "none":
        assert inside == before  # nothing to change
    else:
        assert inside[2] in ("ieee", "refused") and before != inside  # the caller's setting did ask for less


def test_the_searches_multiply_in_ieee_float32(monkeypatch):
    # the torch GEMM of the candidate lists (on the CPU: short lists) runs inside ieee_float32, so
    # that a caller's torch.set_float32_matmul_precision("medium") does not reach it
    import embedscope.device as D
    import embedscope.metrics.search.knn as K
    from embedscope.metrics.search.knn import KeySpace, candidate_blocks

    monkeypatch.setattr(K, "FAISS_MIN_L", 1000)  # the torch path (CUDA's) on the CPU

    seen = []
    real = D.ieee_float32

    class Spy:
        def __enter__(self):
            self.cm = real()
            self.cm.__enter__()
            seen.append(torch.get_float32_matmul_precision())

        def __exit__(self, *exc):
            return self.cm.__exit__(*exc)

    monkeypatch.setattr(D, "ieee_float32", Spy)
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        X = np.random.default_rng(0).standard_normal((300, 16))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        blocks = list(candidate_blocks(KeySpace(X, X, "cosine", True), 5, device="cpu", block=128))
        assert len(blocks) == 3
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(prev)
    assert seen and set(seen) == {"highest"}


def test_precision_name_says_what_cuda_rounds_to_tf32():
    from embedscope.device import CPU, precision_name

    cuda = torch.device("cuda")  # a name only: nothing runs on it
    assert precision_name(CPU) == precision_name(torch.device("cpu")) == "float32"
    assert precision_name(CPU, autocast=True) == precision_name(cuda, True) == "bfloat16 autocast"
    conv, mm = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        want = {(True, False): "float32 (TF32 convolutions)",  # PyTorch's default
                (True, True): "float32 (TF32 convolutions and products)",
                (False, True): "float32 (TF32 products)", (False, False): "float32"}
        for (c, m), name in want.items():
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = c, m
            assert precision_name(cuda) == name
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv, mm


def test_a_studys_cache_keeps_tf32_rows_apart():
    from embedscope.device import CPU
    from embedscope.study.run import device_kind

    assert device_kind(CPU) == device_kind(torch.device("cpu")) == "cpu"
    conv = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        on = device_kind(torch.device("cuda"))
        torch.backends.cudnn.allow_tf32 = False
        off = device_kind(torch.device("cuda"))
    finally:
        torch.backends.cudnn.allow_tf32 = conv
    assert (on, off) == ("cuda/float32 (TF32 convolutions)", "cuda/float32")


THREADS = r"""
import threading, torch
from embedscope.device import ieee_float32

torch.set_float32_matmul_precision("high")
a_in, b_in, a_out, b_check = (threading.Event() for _ in range(4))
seen = {}

def a():
    with ieee_float32():
        a_in.set()
        b_in.wait()
    a_out.set()          # A left while B is still inside

def b():
    a_in.wait()
    with ieee_float32():
        b_in.set()
        a_out.wait()
        seen["b inside, a gone"] = torch.get_float32_matmul_precision()
        with ieee_float32():  # nested in one thread
            pass
        seen["b after its nested one"] = torch.get_float32_matmul_precision()

ta, tb = threading.Thread(target=a), threading.Thread(target=b)
ta.start(); tb.start(); ta.join(); tb.join()
seen["after both"] = torch.get_float32_matmul_precision()
print(repr(seen))
"""


def test_threads_share_one_ieee_setting_and_the_last_out_restores():
    # before: B saved A's "highest" as the caller's, A's exit restored "high" under B (TF32 on CUDA
    # inside B's search), and B's exit left "highest" for the caller
    out = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    seen = eval(out.stdout.strip().splitlines()[-1])
    assert seen == {"b inside, a gone": "highest", "b after its nested one": "highest", "after both": "high"}
