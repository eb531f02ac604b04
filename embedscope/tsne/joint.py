"""t-SNE runs by openTSNE: one map of a set, and the joint map of training and test (docs/methods.md §10).

t-SNE itself is openTSNE (Poličar, Stražar, Zupan 2019) with its defaults: affinities
(:class:`openTSNE.affinity.PerplexityBasedNN`), PCA initialisation and the Barnes–Hut /
FFT-interpolated gradients. Every run returns its settings (``info``) so a figure can record them.

Degenerate input is refused up front and extreme scales are handled exactly
(:func:`prepare_tsne_input`): a run never returns NaN coordinates.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.tsne._progress import ProgressFn, progress_reporter
from embedscope.validation import check_matrix

#: openTSNE's defaults (openTSNE 1.0): recorded with every map.
TSNE_DEFAULTS = {
    "perplexity": 30.0,
    "initialization": "pca",
    "early_exaggeration": 12.0,
    "early_exaggeration_iter": 250,
    "n_iter": 500,
    "learning_rate": "auto (N / exaggeration)",
    "momentum": 0.8,
    "theta": 0.5,
    "metric": "euclidean",
}

#: inputs whose largest |value| lies outside [2^-SCALE_EXPONENT_LIMIT, 2^SCALE_EXPONENT_LIMIT] are
#: rescaled by a power of two before t-SNE (openTSNE's float32 neighbour search and its PCA
#: initialisation overflow near 1e30); inside the range the input is used as it is.
SCALE_EXPONENT_LIMIT = 40


def tsne_threads(n_jobs: int) -> int:
    """The thread count openTSNE runs with for ``n_jobs`` (−1: every core of this machine, as
    openTSNE resolves it); recorded as ``info["n_jobs"]`` because a map of 1,000 points or more
    depends on it (docs/methods.md §10)."""
    import multiprocessing

    n = int(n_jobs)
    if n < 0:
        n = multiprocessing.cpu_count() + n + 1
    return max(n, 1)


def effective_perplexity(perplexity: float, n: int) -> float:
    """The perplexity actually used: ``min(perplexity, (n - 1) / 3)`` (openTSNE needs 3·perplexity
    neighbours per point)."""
    if not perplexity > 0:
        raise EmbedscopeError(f"perplexity must be positive, got {perplexity}")
    if n < 5:
        raise EmbedscopeError(f"t-SNE needs at least 5 points, got {n}")
    return float(min(perplexity, (n - 1) / 3.0))


def prepare_tsne_input(X: Any, name: str = "X") -> tuple[np.ndarray, float]:
    """Rows ready for t-SNE: finite float64, not all identical, at a scale openTSNE can handle.

    t-SNE depends on the rows only through their distances, and perplexity calibration makes the
    map invariant to a global scale. Rows whose largest |value| is beyond 2^±40 are therefore
    multiplied by a power of two (exact in floating point) that brings it near 1; other inputs are
    returned unchanged. Rows that are all identical have no distances to map: refused.

    Returns
    -------
    X : array (N, D) float64
    scale : float
        The factor applied (1.0 when none).
    """
    A = check_matrix(X, name, dtype=np.float64)
    if A.shape[0] > 1 and np.array_equal(A.max(axis=0), A.min(axis=0)):
        raise EmbedscopeError(f"{name}: all {A.shape[0]} rows are identical; t-SNE needs points that differ")
    top = float(np.max(np.abs(A))) if A.size else 0.0
    if top > 0 and not (2.0 ** -SCALE_EXPONENT_LIMIT <= top <= 2.0 ** SCALE_EXPONENT_LIMIT):
        shift = -int(np.frexp(top)[1])
        return np.ldexp(A, shift), float(2.0 ** shift)
    return A, 1.0


def check_map(Y: np.ndarray, what: str) -> np.ndarray:
    """Refuse a map with NaN or inf coordinates (never hand them on to a figure or a table)."""
    if not np.all(np.isfinite(Y)):
        bad = int(np.count_nonzero(~np.all(np.isfinite(Y), axis=1)))
        raise EmbedscopeError(f"{what} gave non-finite coordinates for {bad} point(s): the input is degenerate "
                              "(near-identical rows?)")
    return Y


def _run_opentsne(X: np.ndarray, *, perplexity: float, seed: int, n_iter: int, early_exaggeration_iter: int,
                  n_jobs: int, progress: bool | ProgressFn | None, desc: str,
                  **tsne_kwargs: Any) -> tuple[np.ndarray, dict]:
    """openTSNE.TSNE(...).fit(X), progress through openTSNE's callbacks; returns (Y, settings)."""
    from openTSNE import TSNE

    perp = effective_perplexity(perplexity, X.shape[0])
    total = int(early_exaggeration_iter + n_iter)
    report, close = progress_reporter(progress, total, desc)
    every = 10
    callbacks = None
    if report is not None:
        done = [0]

        def callbacks(iteration, error, embedding):  # noqa: ARG001 - openTSNE's signature
            done[0] = min(done[0] + every, total)
            report(done[0], total, {"KL": float(error)})
            return False

    tsne = TSNE(perplexity=perp, random_state=seed, n_iter=n_iter, early_exaggeration_iter=early_exaggeration_iter,
                n_jobs=n_jobs, callbacks=callbacks, callbacks_every_iters=every, **tsne_kwargs)
    try:
        emb = tsne.fit(X)
    finally:
        close()
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="openTSNE.TSNE",
        perplexity=perp,
        perplexity_requested=float(perplexity),
        seed=int(seed),
        n_jobs=tsne_threads(n_jobs),
        n_iter=int(n_iter),
        early_exaggeration_iter=int(early_exaggeration_iter),
        early_exaggeration=float(tsne.early_exaggeration),
        kl_divergence=float(getattr(emb, "kl_divergence", float("nan"))),
    )
    info.update(tsne_kwargs)
    return check_map(np.asarray(emb, dtype=np.float64), desc), info


def joint_tsne(
    X_train: Any,
    X_test: Any,
    *,
    perplexity: float = 30,
    seed: int = 0,
    n_iter: int = 500,
    early_exaggeration_iter: int = 250,
    n_jobs: int = 1,
    progress: bool | ProgressFn = False,
    return_info: bool = False,
    **tsne_kwargs: Any,
):
    """One t-SNE map of the union of training and test embeddings (docs/methods.md §10, Xuan Fig. 1/2).

    The rows of ``X_train`` and ``X_test`` are stacked and embedded by one openTSNE run
    (``openTSNE.TSNE`` with its defaults: perplexity 30, PCA initialisation, early exaggeration 12
    for 250 iterations, then 500 iterations, learning rate N / exaggeration, Barnes–Hut below
    10,000 points and FFT interpolation above), so that training and test points share
    coordinates. t-SNE minimises KL(P ‖ Q) with Gaussian input affinities p_ij (perplexity
    calibrated, symmetrised) and Student-t map affinities q_ij ∝ (1 + ‖y_i − y_j‖²)⁻¹
    (van der Maaten and Hinton 2008; openTSNE: Poličar et al. 2019). Lower KL is a more faithful map.

    Parameters
    ----------
    X_train, X_test : array (N_train, D), (N_test, D)
        Embeddings; both must have the same D. All rows identical: refused; extreme scales
        (beyond 2^±40) are rescaled exactly (:func:`prepare_tsne_input`, ``info["input_scale"]``).
    perplexity : float
        Perplexity (default 30, openTSNE's). Lowered to (N − 1)/3 for tiny sets; the value used is
        recorded in ``info["perplexity"]``.
    seed : int
        ``random_state`` of openTSNE (nearest neighbours, PCA initialisation).
    n_iter, early_exaggeration_iter : int
        Iterations after / during early exaggeration (openTSNE defaults 500 / 250).
    n_jobs : int
        Threads for openTSNE (−1: every core). From 1,000 points openTSNE's approximate neighbour
        search builds its trees on these threads, so the map depends on the thread count
        (reproducible for the same count); the count used is recorded in ``info["n_jobs"]``.
    progress : bool or callable
        ``True``: a tqdm bar; a callable: ``progress(done, total, {"KL": ...})`` every 10 iterations.
    return_info : bool
        Also return a dict with the settings and the final KL divergence.
    **tsne_kwargs
        Further ``openTSNE.TSNE`` arguments (recorded in ``info``).

    Returns
    -------
    Y_train, Y_test : array (N_train, 2), (N_test, 2)
        Map coordinates, in the input row order.
    info : dict, only with ``return_info``
    """
    A = check_matrix(X_train, "X_train", dtype=np.float64)
    B = check_matrix(X_test, "X_test", dtype=np.float64)
    if A.shape[0] == 0 or B.shape[0] == 0:
        raise EmbedscopeError("joint t-SNE needs at least one training and one test point")
    if A.shape[1] != B.shape[1]:
        raise EmbedscopeError(f"X_train has {A.shape[1]} dimensions but X_test has {B.shape[1]}")
    X, scale = prepare_tsne_input(np.vstack([A, B]), "the train and test embeddings")
    Y, info = _run_opentsne(X, perplexity=perplexity, seed=seed, n_iter=n_iter,
                            early_exaggeration_iter=early_exaggeration_iter, n_jobs=n_jobs, progress=progress,
                            desc="joint t-SNE", **tsne_kwargs)
    Y_train, Y_test = Y[: A.shape[0]].copy(), Y[A.shape[0]:].copy()
    if not return_info:
        return Y_train, Y_test
    info.update(method="openTSNE.TSNE on the union of train and test", n_train=int(A.shape[0]),
                n_test=int(B.shape[0]))
    if scale != 1.0:
        info["input_scale"] = scale
    return Y_train, Y_test, info


def single_tsne(X: Any, *, perplexity: float = 30, seed: int = 0, n_iter: int = 500,
                early_exaggeration_iter: int = 250, n_jobs: int = 1, progress: bool | ProgressFn = False,
                return_info: bool = False, **tsne_kwargs: Any):
    """One openTSNE map of ``X`` with openTSNE's defaults (docs/methods.md §10); see :func:`joint_tsne`.

    Returns ``Y`` (N x 2), and ``info`` with ``return_info``.
    """
    X, scale = prepare_tsne_input(X, "X")
    Y, info = _run_opentsne(X, perplexity=perplexity, seed=seed, n_iter=n_iter,
                            early_exaggeration_iter=early_exaggeration_iter, n_jobs=n_jobs, progress=progress,
                            desc="t-SNE", **tsne_kwargs)
    info["n"] = int(X.shape[0])
    if scale != 1.0:
        info["input_scale"] = scale
    return (Y, info) if return_info else Y


__all__ = ["TSNE_DEFAULTS", "effective_perplexity", "prepare_tsne_input", "check_map", "joint_tsne",
           "single_tsne"]
