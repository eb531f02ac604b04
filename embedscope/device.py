"""Device selection: ``auto`` picks CUDA when present, else the CPU."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from embedscope.errors import EmbedscopeError

DEVICES = ("auto", "cpu", "cuda")
# device nodes of the GPU drivers torch can use (NVIDIA, NVIDIA under WSL, AMD ROCm): a machine with
# none of them has no GPU for torch (see compute_device)
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version", "/dev/dxg", "/dev/kfd")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; a container's CPU set)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class _Cpu:
    """The CPU for computations that need torch only on a GPU (``compute_device``): ``.type`` as
    a ``torch.device`` has it; ``str()`` gives what ``torch.device`` accepts."""

    type = "cpu"
    index = None

    def __str__(self) -> str:
        return "cpu"

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __eq__(self, other) -> bool:
        return str(other) == "cpu"

    def __hash__(self) -> int:
        return hash("cpu")


CPU = _Cpu()


def compute_device(device="auto"):
    """The device of a computation that runs on the CPU without torch (the searches: numpy, BLAS,
    faiss): "cpu", and "auto" on a machine without GPU driver nodes (``GPU_DRIVER_NODES``) while
    torch is not imported yet, give :data:`CPU` without importing torch (1.3–1.9 s of a CPU-only
    ``embedscope evaluate``); everything else is :func:`resolve_device`. A ``torch.device`` (or
    :data:`CPU`) is returned as it is."""
    if hasattr(device, "type"):
        return device
    if device == "cpu":
        return CPU
    if device in (None, "auto") and "torch" not in sys.modules and not any(map(os.path.exists, GPU_DRIVER_NODES)):
        return CPU
    return resolve_device(device)


def resolve_device(device: str = "auto"):
    """A ``torch.device`` for "auto" | "cpu" | "cuda" (or "cuda:N"), or for a ``torch.device`` (or
    :data:`CPU`) given (``torch.device("cpu")`` was "unknown device 'cpu'"); a CUDA one checked as its name."""
    import torch

    if hasattr(device, "type") and not isinstance(device, str):
        device = str(device)
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")

    shown = str(device)[:40]  # raw: the error line escapes it
    if str(device).startswith("cuda"):
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError):
            raise EmbedscopeError(f"unknown device '{shown}' (choose auto, cpu, cuda or cuda:N)") from None
        if dev.type != "cuda":
            raise EmbedscopeError(f"unknown device '{shown}' (choose auto, cpu, cuda or cuda:N)")
        if not torch.cuda.is_available():
            raise EmbedscopeError(f"--device {shown} was asked for, but no CUDA GPU is available (use --device auto or cpu)")
        n = torch.cuda.device_count()
        if dev.index is not None and dev.index >= n:
            raise EmbedscopeError(f"--device {shown}: this machine has {n} CUDA GPU(s), cuda:0 to cuda:{n - 1}")
        return dev
    raise EmbedscopeError(f"unknown device '{shown}' (choose auto, cpu or cuda)")


@contextlib.contextmanager
def torch_threads(n: int):
    """torch's thread count is ``n`` inside, the caller's again after. torch keeps the (OpenMP)
    count per thread, and the last count set is the default of threads started later."""
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


_IEEE_LOCK = threading.Lock()
_IEEE_HELD: list = []  # the exit of the outermost ieee_float32 of any thread (the setting is process-wide)


@contextlib.contextmanager
def ieee_float32():
    """torch's float32 matrix products in IEEE float32 inside, the caller's setting again after.

    The searches certify their float32 keys by float32's rounding error (docs/methods.md §1). A
    script that asked for faster, rounder products — ``torch.backends.cuda.matmul.allow_tf32 =
    True`` or ``torch.set_float32_matmul_precision("high")`` (TF32 on CUDA: 10 mantissa bits), or
    ``"medium"`` (reduced precision in oneDNN on CPUs with bfloat16) — would break that bound, and
    with it the ranks. torch has two APIs for this setting and refuses to read the global one once
    the per-backend one (``fp32_precision``) was used: the API the caller used is the one changed.

    The setting is the process's, so the contexts of all threads count as one: the first to enter
    sets it, the last to leave restores it (two searches in two threads — a study's worker threads,
    k-means beside the ranks — never leave one of them multiplying under the caller's TF32).
    """
    with _IEEE_LOCK:
        if not _IEEE_HELD:
            cm = _ieee_float32_once()
            cm.__enter__()
            _IEEE_HELD.append([cm, 0])
        _IEEE_HELD[0][1] += 1
    try:
        yield
    finally:
        with _IEEE_LOCK:
            _IEEE_HELD[0][1] -= 1
            if _IEEE_HELD[0][1] == 0:
                cm = _IEEE_HELD.pop()[0]
                cm.__exit__(None, None, None)


@contextlib.contextmanager
def _ieee_float32_once():
    """:func:`ieee_float32`'s change of the setting, and its restoration."""
    import torch

    try:
        legacy = torch.get_float32_matmul_precision()
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:  # the per-backend API was used
        legacy = tf32 = None
    if legacy is not None:
        mkl = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
        cpu_reduced = legacy == "medium" or getattr(mkl, "fp32_precision", "none") not in ("none", "ieee")
        if cpu_reduced:  # every backend's setting, restored as the caller made it
            torch.set_float32_matmul_precision("highest")
            try:
                yield
            finally:
                torch.set_float32_matmul_precision(legacy)
                if bool(torch.backends.cuda.matmul.allow_tf32) != tf32:
                    torch.backends.cuda.matmul.allow_tf32 = tf32
        elif tf32:  # only CUDA's flag (the global call would change the CPU's too)
            torch.backends.cuda.matmul.allow_tf32 = False
            try:
                yield
            finally:
                torch.backends.cuda.matmul.allow_tf32 = True
        else:
            yield
        return
    backends = [b for b in (torch.backends.cuda.matmul, getattr(torch.backends.mkldnn, "matmul", None))
                if b is not None and hasattr(b, "fp32_precision")]
    before = [b.fp32_precision for b in backends]
    for b in backends:
        b.fp32_precision = "ieee"
    try:
        yield
    finally:
        for b, p in zip(backends, before):
            b.fp32_precision = p


def precision_name(dev, autocast: bool = False) -> str:
    """How a network's forward passes computed on ``dev``, as files record it (``precision``):
    "bfloat16 autocast", else "float32" — on CUDA with what PyTorch's settings let cuDNN and cuBLAS
    round to TF32 (10 mantissa bits): "float32 (TF32 convolutions)" under PyTorch's default
    (``torch.backends.cudnn.allow_tf32``), "float32 (TF32 convolutions and products)" with
    ``torch.backends.cuda.matmul.allow_tf32`` too. On an H200 a ResNet-50's TF32 rows are ~6e-4 (relative)
    from the CPU's float32 ones and 2.9x faster than IEEE float32 (docs/PERFORMANCE.md)."""
    if autocast:
        return "bfloat16 autocast"
    if getattr(dev, "type", str(dev)) != "cuda":
        return "float32"
    import torch

    try:
        mm = bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:  # the per-backend API was used
        mm = getattr(torch.backends.cuda.matmul, "fp32_precision", "ieee") == "tf32"
    try:
        conv = bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", "ieee") == "tf32"
    what = [w for w, on in (("convolutions", conv), ("products", mm)) if on]
    return f"float32 (TF32 {' and '.join(what)})" if what else "float32"
