"""Device selection: ``auto`` picks CUDA when present, else the CPU."""

from __future__ import annotations

import contextlib

from embedscope.errors import EmbedscopeError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto"):
    """A ``torch.device`` for "auto" | "cpu" | "cuda" (or "cuda:N")."""
    import torch

    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if str(device).startswith("cuda"):
        if not torch.cuda.is_available():
            raise EmbedscopeError("--device cuda was asked for, but no CUDA GPU is available (use --device auto or cpu)")
        return torch.device(device)
    raise EmbedscopeError(f"unknown device '{device}' (choose auto, cpu or cuda)")


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
