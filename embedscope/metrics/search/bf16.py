"""A bfloat16 pre-filter for the float32 tile keys (docs/methods.md §1, "Protocol"): where the CPU
multiplies bfloat16 in hardware (AVX512-BF16, AMX), a tile's GEMM in bfloat16 costs 0.4–0.5 of
the float32 one, and a rigorous bound on its error lets the filtered tile pass (:mod:`.rows`)
keep exactly the survivors that a float32 tile would give.

The bound. With u_b = 2⁻⁸ (bfloat16 keeps 8 significant bits) and u = 2⁻²⁴, a bfloat16 tile value
``B = bf16(Σ_k bf16(q_k)·bf16(r_k))``, the sum accumulated in float32 in any order (oneDNN and
the hardware's dot-product instructions accumulate in float32; a product of two bfloat16 numbers
is exact in float32), differs from the exact key q·r of the float64 rows by at most

    (2u_b + u_b²) Σ|q_k r_k|          rounding the float32 operands to bfloat16,
  + γ_D (1 + u_b)² Σ|q_k r_k|         the float32 accumulation (γ_D ≈ D·u),
  + u_b |Σ|                           rounding the float32 sum to the bfloat16 output,
  + (D + 16) u ‖q‖ ‖r‖                the float64 → float32 rounding of the rows,

i.e. at most ``e_i = 1.05 (3u_b + 4u_b² + 1.1 (D + 16) u) ‖q_i‖ ‖r‖max`` (Cauchy–Schwarz), plus a
negligible absolute term for flushed subnormals: 0.0117 for unit rows. A tile value is a
**candidate** when ``B > thr_i − e_i − δ_i`` (δ_i: the float32 tile bound, :func:`~.counting.tile_delta`);
the candidates' float32 keys are then computed pair by pair (:meth:`~.counting.TileGemm.pair_keys32`,
within δ_i like any float32 GEMM) and compared with ``thr_i`` as a float32 tile would be. Every
reference whose float32 key exceeds ``thr_i`` is a candidate (its exact key exceeds thr_i − δ_i,
so B exceeds thr_i − δ_i − e_i), so the survivors and everything the certification of
:mod:`.rows` concludes from them are those of a float32 tile.

Whether a pass uses it is a cost estimate (:func:`prefer_bf16`): the candidates cost a gathered
dot product each, so sparse survivors (SOP-like classes, large N) gain, dense ones (N of a few
thousand and depths of ~70) do not. ``EMBEDSCOPE_BF16=0`` turns the pre-filter off, ``=1`` allows it on
any CPU (slow without hardware support; the tests use it); unset, it is allowed where torch reports
AVX512-BF16 or AMX and a self-check of the bound on a small product passes.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np

from embedscope.metrics.search.knn import U32

__all__ = ["bf16_available", "bf16_error", "prefer_bf16", "U_BF16", "ENV"]

U_BF16 = 2.0 ** -8
ENV = "EMBEDSCOPE_BF16"
# cost of a tile element per inner-dimension term (float32 GEMM, bfloat16 GEMM), of converting a
# bfloat16 tile element to float32, and of a candidate's float32 key per dimension + per candidate;
# seconds, one thread of the 2-core AVX512-BF16 machine of docs/PERFORMANCE.md (only ratios matter)
COST_F32, COST_BF16, COST_CONVERT = 2.5e-11, 1.2e-11, 1.3e-10
COST_KEY_DIM, COST_CANDIDATE = 7.2e-10, 2.0e-8
GAIN = 0.85  # the pre-filter is taken when its estimated cost is below this share of float32's
MIN_SAVING = 0.01  # ... and saves more than this (seconds: calls into torch, buffers),
IMPORT_COST = 1.5  # ... or than this where torch is not imported yet

_STATE: dict = {}
_LOCK = threading.Lock()


def bf16_error(qnorm: np.ndarray, rmax: float, dim: int) -> np.ndarray:
    """Per query, the bound ``e_i`` of the module docstring on |bfloat16 tile value − exact key|
    (cosine keys, float64 query norms ``qnorm``, largest reference norm ``rmax``)."""
    rel = 3.0 * U_BF16 + 4.0 * U_BF16 ** 2 + 1.1 * (dim + 16) * U32
    return 1.05 * rel * np.asarray(qnorm, dtype=np.float64) * rmax + 1e-30 * (dim + 1)


def _hardware() -> bool:
    import torch

    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, c, lambda: False)()) for c in checks)


def _self_check() -> bool:
    """The bound holds on a product of mixed magnitudes computed by this torch build (the tiles'
    own GEMM call): a guard against a backend that would accumulate in less than float32."""
    import torch

    rng = np.random.default_rng(12345)
    out = True
    for d in (16, 160, 1100):
        Q = rng.standard_normal((48, d)) * rng.uniform(0.01, 3.0, size=(48, 1))
        R = rng.standard_normal((200, d)) * rng.uniform(0.01, 3.0, size=(200, 1))
        R[:8] = np.abs(R[:8])  # same-sign rows: Σ|q r| = |q·r|, the accumulation's worst case
        Q[:8] = np.abs(Q[:8])
        Q32, R32 = Q.astype(np.float32), R.astype(np.float32)
        B = torch.mm(torch.from_numpy(Q32).to(torch.bfloat16),
                     torch.from_numpy(R32).to(torch.bfloat16).T).to(torch.float32).numpy()
        exact = Q @ R.T
        e = bf16_error(np.linalg.norm(Q, axis=1), float(np.linalg.norm(R, axis=1).max()), d)
        out &= bool(np.all(np.abs(B.astype(np.float64) - exact) <= e[:, None]))
    return out


def bf16_available() -> bool:
    """Whether the bfloat16 pre-filter may be used in this process (see the module docstring)."""
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    forced = env in ("1", "on", "true", "yes")
    key = "forced" if forced else "auto"
    with _LOCK:
        if key not in _STATE:
            try:
                _STATE[key] = (forced or _hardware()) and _self_check()
            except Exception:  # noqa: BLE001 - no usable bfloat16 GEMM: the float32 tiles
                _STATE[key] = False
        return _STATE[key]


def prefer_bf16(tile_elems: float, dim: int, candidates: float, min_saving: float = MIN_SAVING) -> bool:
    """Whether a pass of ``tile_elems`` tile values at inner dimension ``dim`` with about
    ``candidates`` bfloat16 candidates in all costs less with the pre-filter (an estimate), by at
    least ``min_saving`` seconds."""
    f32 = tile_elems * dim * COST_F32
    bf = tile_elems * (dim * COST_BF16 + COST_CONVERT) + candidates * (dim * COST_KEY_DIM + COST_CANDIDATE)
    return GAIN * f32 - bf > (min_saving if "torch" in sys.modules else max(min_saving, IMPORT_COST))
