"""Joint and yoked t-SNE maps (METHODS.md §10), and their figures.

The computations (:func:`joint_tsne`, :func:`yoked_tsne`, the yoked objective and its gradients)
are plain functions on arrays; the plotting functions (:func:`plot_joint_tsne`,
:func:`plot_yoked_tsne`, :func:`plot_tsne`) take their results and return a matplotlib figure.

t-SNE itself is openTSNE (Poličar, Stražar, Zupan 2019): affinities
(:class:`openTSNE.affinity.PerplexityBasedNN`), PCA initialisation and the Barnes–Hut /
FFT-interpolated gradients. The yoked objective (Rauber, Falcão, Telea 2016, *Visualizing
time-dependent data using dynamic t-SNE*; used by Xuan, Stylianou, Pless §2.3) is optimised here by
gradient descent with momentum and gains, the same schedule as openTSNE's ``TSNE.fit``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
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

TRAIN_COLOR = "#d62728"  # red
TEST_COLOR = "#1f77b4"  # blue


# ---------------------------------------------------------------------------------- helpers
def effective_perplexity(perplexity: float, n: int) -> float:
    """The perplexity actually used: ``min(perplexity, (n - 1) / 3)`` (openTSNE needs 3·perplexity
    neighbours per point)."""
    if not perplexity > 0:
        raise EmbedscopeError(f"perplexity must be positive, got {perplexity}")
    if n < 5:
        raise EmbedscopeError(f"t-SNE needs at least 5 points, got {n}")
    return float(min(perplexity, (n - 1) / 3.0))


def stratified_subsample(labels: Any, n: int, seed: int = 0) -> np.ndarray:
    """Indices (sorted) of ``n`` rows drawn without replacement, stratified by ``labels``.

    Each class keeps its share of the rows (largest-remainder rounding, at least one row per class
    while ``n`` allows), drawn with ``numpy.random.default_rng(seed)``; all rows when ``n >= N``.
    """
    labels = np.asarray(labels)
    N = labels.shape[0]
    if n >= N:
        return np.arange(N)
    if n <= 0:
        raise EmbedscopeError(f"the number of points to keep must be positive, got {n}")
    rng = np.random.default_rng(seed)
    classes, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    quota = counts * (n / N)
    take = np.floor(quota).astype(int)
    if n >= len(classes):
        take = np.maximum(take, 1)
    take = np.minimum(take, counts)
    # largest remainder (ties: larger class first, then class order) until the total is n
    while take.sum() != n:
        if take.sum() < n:
            room = np.where(take < counts)[0]
            rem = (quota - take)[room]
            take[room[np.lexsort((-counts[room], -rem))[0]]] += 1
        else:
            over = np.where(take > 1)[0] if n >= len(classes) else np.where(take > 0)[0]
            rem = (take - quota)[over]
            take[over[np.lexsort((counts[over], -rem))[0]]] -= 1
    keep = []
    for c in range(len(classes)):
        rows = np.flatnonzero(inverse == c)
        keep.append(rng.choice(rows, size=take[c], replace=False))
    return np.sort(np.concatenate(keep))


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="it", leave=False, dynamic_ncols=True)


# ---------------------------------------------------------------------------------- joint t-SNE
def _run_opentsne(X: np.ndarray, *, perplexity: float, seed: int, n_iter: int, early_exaggeration_iter: int,
                  n_jobs: int, progress: bool, desc: str, **tsne_kwargs: Any) -> tuple[np.ndarray, dict]:
    """openTSNE.TSNE(...).fit(X) with a tqdm bar; returns (Y, settings)."""
    from openTSNE import TSNE

    perp = effective_perplexity(perplexity, X.shape[0])
    total = int(early_exaggeration_iter + n_iter)
    bar = _progress_bar(total, desc, progress)
    every = 10
    callbacks = None
    if bar is not None:
        def callbacks(iteration, error, embedding):  # noqa: ARG001 - openTSNE's signature
            bar.update(min(every, total - bar.n))
            bar.set_postfix(KL=f"{error:.3f}")
            return False

    tsne = TSNE(perplexity=perp, random_state=seed, n_iter=n_iter, early_exaggeration_iter=early_exaggeration_iter,
                n_jobs=n_jobs, callbacks=callbacks, callbacks_every_iters=every, **tsne_kwargs)
    try:
        emb = tsne.fit(X)
    finally:
        if bar is not None:
            bar.close()
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="openTSNE.TSNE",
        perplexity=perp,
        perplexity_requested=float(perplexity),
        seed=int(seed),
        n_iter=int(n_iter),
        early_exaggeration_iter=int(early_exaggeration_iter),
        early_exaggeration=float(tsne.early_exaggeration),
        kl_divergence=float(getattr(emb, "kl_divergence", float("nan"))),
    )
    info.update(tsne_kwargs)
    return np.asarray(emb, dtype=np.float64), info


def joint_tsne(
    X_train: Any,
    X_test: Any,
    *,
    perplexity: float = 30,
    seed: int = 0,
    n_iter: int = 500,
    early_exaggeration_iter: int = 250,
    n_jobs: int = 1,
    progress: bool = False,
    return_info: bool = False,
    **tsne_kwargs: Any,
):
    """One t-SNE map of the union of training and test embeddings (METHODS.md §10, Xuan Fig. 1/2).

    The rows of ``X_train`` and ``X_test`` are stacked and embedded by one openTSNE run
    (``openTSNE.TSNE`` with its defaults: perplexity 30, PCA initialisation, early exaggeration 12
    for 250 iterations, then 500 iterations, learning rate N / exaggeration, Barnes–Hut below
    10,000 points and FFT interpolation above), so that training and test points share
    coordinates. t-SNE minimises KL(P ‖ Q) with Gaussian input affinities p_ij (perplexity
    calibrated, symmetrised) and Student-t map affinities q_ij ∝ (1 + ‖y_i − y_j‖²)⁻¹
    (van der Maaten and Hinton 2008; openTSNE: Poličar et al. 2019).

    Parameters
    ----------
    X_train, X_test : array (N_train, D), (N_test, D)
        Embeddings; both must have the same D.
    perplexity : float
        Perplexity (default 30, openTSNE's). Lowered to (N − 1)/3 for tiny sets; the value used is
        recorded in ``info["perplexity"]``.
    seed : int
        ``random_state`` of openTSNE (nearest neighbours, PCA initialisation).
    n_iter, early_exaggeration_iter : int
        Iterations after / during early exaggeration (openTSNE defaults 500 / 250).
    n_jobs : int
        Threads for openTSNE.
    progress : bool
        Show a tqdm bar for the optimisation.
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
    Y, info = _run_opentsne(np.vstack([A, B]), perplexity=perplexity, seed=seed, n_iter=n_iter,
                            early_exaggeration_iter=early_exaggeration_iter, n_jobs=n_jobs, progress=progress,
                            desc="joint t-SNE", **tsne_kwargs)
    Y_train, Y_test = Y[: A.shape[0]].copy(), Y[A.shape[0]:].copy()
    if not return_info:
        return Y_train, Y_test
    info.update(method="openTSNE.TSNE on the union of train and test", n_train=int(A.shape[0]),
                n_test=int(B.shape[0]))
    return Y_train, Y_test, info


def single_tsne(X: Any, *, perplexity: float = 30, seed: int = 0, n_iter: int = 500,
                early_exaggeration_iter: int = 250, n_jobs: int = 1, progress: bool = False,
                return_info: bool = False, **tsne_kwargs: Any):
    """One openTSNE map of ``X`` with openTSNE's defaults (METHODS.md §10); see :func:`joint_tsne`.

    Returns ``Y`` (N x 2), and ``info`` with ``return_info``.
    """
    X = check_matrix(X, "X", dtype=np.float64)
    Y, info = _run_opentsne(X, perplexity=perplexity, seed=seed, n_iter=n_iter,
                            early_exaggeration_iter=early_exaggeration_iter, n_jobs=n_jobs, progress=progress,
                            desc="t-SNE", **tsne_kwargs)
    info["n"] = int(X.shape[0])
    return (Y, info) if return_info else Y


# ---------------------------------------------------------------------------------- yoked t-SNE
def _dense_P(P: Any) -> np.ndarray:
    import scipy.sparse as sp

    return P.toarray() if sp.issparse(P) else np.asarray(P, dtype=np.float64)


def yoked_tsne_exact_objective_and_grad(
    Y_a: np.ndarray,
    Y_b: np.ndarray,
    P_a: Any,
    P_b: Any,
    alpha: float,
    *,
    exaggeration: float = 1.0,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Exact (O(N²) time and memory) yoked t-SNE objective and gradient (METHODS.md §10).

    C = KL(P^a ‖ Q^a) + KL(P^b ‖ Q^b) + α Σ_i ‖y_i^a − y_i^b‖²  (Rauber et al. 2016; Xuan §2.3),
    with q_ij = w_ij / Σ_{k≠l} w_kl, w_ij = (1 + ‖y_i − y_j‖²)⁻¹, and

    ∂C/∂y_i^a = 4 Σ_j (e·p_ij^a − q_ij^a) w_ij^a (y_i^a − y_j^a) + 2α (y_i^a − y_i^b)

    (and the same for b with the sign of the last term flipped), e = ``exaggeration`` (1 for the
    true gradient; the reported C never includes it). P^a, P^b are symmetric joint probabilities
    summing to 1 (dense or scipy sparse), e.g. ``PerplexityBasedNN(X).P``. A reference for tests
    and tiny sets; :func:`yoked_tsne_objective_and_grad` gives the approximate version.

    Returns
    -------
    C : float
    grad_a, grad_b : array (N, 2)
    """
    Y_a = np.asarray(Y_a, dtype=np.float64)
    Y_b = np.asarray(Y_b, dtype=np.float64)
    C = 0.0
    grads = []
    for Y, P in ((Y_a, _dense_P(P_a)), (Y_b, _dense_P(P_b))):
        diff = Y[:, None, :] - Y[None, :, :]
        W = 1.0 / (1.0 + np.einsum("ijk,ijk->ij", diff, diff))
        np.fill_diagonal(W, 0.0)
        Q = W / W.sum()
        m = P > 0
        C += float(np.sum(P[m] * np.log(P[m] / Q[m])))
        grads.append(4.0 * np.einsum("ij,ijk->ik", (exaggeration * P - Q) * W, diff))
    delta = Y_a - Y_b
    C += float(alpha) * float(np.sum(delta * delta))
    return C, grads[0] + 2.0 * alpha * delta, grads[1] - 2.0 * alpha * delta


def _kl_and_grad(Y: np.ndarray, P: Any, method: str, *, theta: float, n_jobs: int,
                 eval_error: bool) -> tuple[float, np.ndarray]:
    """openTSNE's KL and *true* gradient (openTSNE returns ∂KL/∂y / 4) of one map."""
    from openTSNE.tsne import kl_divergence_bh, kl_divergence_fft

    if method == "bh":
        kl, g = kl_divergence_bh(Y, P, 1, bh_params={"theta": theta}, should_eval_error=eval_error,
                                 n_jobs=n_jobs)
    elif method == "fft":
        kl, g = kl_divergence_fft(Y, P, 1, fft_params={"n_interpolation_points": 3, "min_num_intervals": 50,
                                                       "ints_in_interval": 1},
                                  should_eval_error=eval_error, n_jobs=n_jobs)
    else:  # pragma: no cover - guarded by callers
        raise EmbedscopeError(f"unknown gradient method '{method}'")
    return float(kl), 4.0 * g


def yoked_tsne_objective_and_grad(
    Y_a: np.ndarray,
    Y_b: np.ndarray,
    P_a: Any,
    P_b: Any,
    alpha: float,
    *,
    method: str = "bh",
    theta: float = 0.5,
    n_jobs: int = 1,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Approximate yoked t-SNE objective and gradient (METHODS.md §10), O(N log N) per call.

    The same C and ∂C/∂y as :func:`yoked_tsne_exact_objective_and_grad`, with each map's KL gradient
    from openTSNE: Barnes–Hut (``method="bh"``, accuracy ``theta``; van der Maaten 2014) or
    FFT-accelerated interpolation (``method="fft"``; Linderman et al. 2019). P^a, P^b must be
    scipy CSR matrices (as ``PerplexityBasedNN(X).P``).
    """
    Y_a = np.ascontiguousarray(Y_a, dtype=np.float64)
    Y_b = np.ascontiguousarray(Y_b, dtype=np.float64)
    kl_a, g_a = _kl_and_grad(Y_a, P_a, method, theta=theta, n_jobs=n_jobs, eval_error=True)
    kl_b, g_b = _kl_and_grad(Y_b, P_b, method, theta=theta, n_jobs=n_jobs, eval_error=True)
    delta = Y_a - Y_b
    C = kl_a + kl_b + float(alpha) * float(np.sum(delta * delta))
    return C, g_a + 2.0 * alpha * delta, g_b - 2.0 * alpha * delta


def _procrustes_align(Y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Rotate/reflect ``Y`` (centred) to best match ``ref`` (orthogonal Procrustes)."""
    A = Y - Y.mean(0)
    B = ref - ref.mean(0)
    U, _, Vt = np.linalg.svd(A.T @ B)
    return A @ (U @ Vt)


def default_alpha(n: int) -> float:
    """The default yoking strength α = 0.01 / N (Rauber et al.'s λ/(2N) with λ = 0.02).

    α multiplies Σ_i ‖y_i^a − y_i^b‖², a sum over N points, while each point's share of the KL
    gradient shrinks like 1/N; α·N is therefore the size-free strength.
    """
    return 0.01 / max(int(n), 1)


def yoked_tsne(
    X_a: Any,
    X_b: Any,
    *,
    alpha: float | None = None,
    perplexity: float = 30,
    seed: int = 0,
    n_iter: int = 500,
    early_exaggeration_iter: int = 250,
    early_exaggeration: float = 12.0,
    learning_rate: float | str = "auto",
    momentum: float = 0.8,
    negative_gradient_method: str = "auto",
    theta: float = 0.5,
    max_step_norm: float | None = 5.0,
    n_jobs: int = 1,
    progress: bool = False,
    return_info: bool = False,
):
    """Yoked t-SNE: two maps of the same points under two embeddings, optimised together.

    METHODS.md §10 (Xuan, Stylianou, Pless §2.3, after Rauber et al. 2016's dynamic t-SNE)::

        C = KL(P^a ‖ Q^a) + KL(P^b ‖ Q^b) + α Σ_i ‖y_i^a − y_i^b‖²

    Row i of ``X_a`` and of ``X_b`` must be the same image. Affinities P^a, P^b:
    ``openTSNE.affinity.PerplexityBasedNN`` (perplexity-calibrated Gaussian kernels on the
    3·perplexity nearest neighbours, symmetrised). Initialisation: openTSNE's PCA initialisation of
    each set (std 1e-4), map b rotated/reflected onto map a (orthogonal Procrustes) so that the
    yoke does not start by fighting an arbitrary PCA sign. Optimiser: openTSNE's schedule —
    ``early_exaggeration_iter`` iterations with P multiplied by ``early_exaggeration``, then
    ``n_iter`` iterations; momentum with per-coordinate gains (Jacobs 1988, as t-SNE); learning
    rate ``"auto"`` = N / exaggeration (Belkina et al. 2019), capped at 1/α so the quadratic yoke
    stays stable for large α; update steps clipped to ``max_step_norm``; each map re-centred every
    iteration. The KL gradients are approximate: Barnes–Hut (``"bh"``) or FFT interpolation
    (``"fft"``), ``"auto"`` choosing BH below 10,000 points and FFT above (as openTSNE), or exact
    (``"exact"``, O(N²), :func:`yoked_tsne_exact_objective_and_grad`; small N only).

    With α = 0 the two maps are independent t-SNE runs; larger α pulls corresponding points
    together at the cost of each map's KL.

    Parameters
    ----------
    X_a, X_b : array (N, D_a), (N, D_b)
        The same N points under two embeddings (D may differ).
    alpha : float or None
        Yoking strength α ≥ 0 of the formula above. ``None``: :func:`default_alpha` = 0.01 / N (on the digits, α·N = 0.01 already
        aligns the maps closely; α·N ≈ 0.001 leaves visible differences; α·N ≥ 1 makes them nearly
        identical).
    perplexity, seed, n_iter, early_exaggeration_iter, early_exaggeration, learning_rate,
    momentum, theta, max_step_norm, n_jobs
        As in openTSNE (its defaults).
    negative_gradient_method : {"auto", "bh", "fft", "exact"}
    progress : bool
        tqdm progress bar over the iterations.
    return_info : bool
        Also return a dict: settings, final KL of each map, C, mean ‖y_i^a − y_i^b‖.

    Returns
    -------
    Y_a, Y_b : array (N, 2)
    info : dict, only with ``return_info``
    """
    from openTSNE.affinity import PerplexityBasedNN
    from openTSNE.initialization import pca as pca_init

    A = check_matrix(X_a, "X_a", dtype=np.float64)
    B = check_matrix(X_b, "X_b", dtype=np.float64)
    if A.shape[0] != B.shape[0]:
        raise EmbedscopeError(f"yoked t-SNE needs the same points in both sets: {A.shape[0]} vs {B.shape[0]} rows")
    n = A.shape[0]
    perp = effective_perplexity(perplexity, n)
    if alpha is None:
        alpha = default_alpha(n)
    alpha = float(alpha)
    if not (alpha >= 0 and math.isfinite(alpha)):
        raise EmbedscopeError(f"alpha must be a finite number >= 0, got {alpha}")
    method = negative_gradient_method
    if method == "auto":
        method = "bh" if n < 10_000 else "fft"
    if method not in ("bh", "fft", "exact"):
        raise EmbedscopeError(f"negative_gradient_method must be auto, bh, fft or exact, got '{method}'")
    if method == "exact" and n > 5000:
        raise EmbedscopeError(f"the exact gradient is O(N^2): use bh or fft for {n} points")

    P_a = PerplexityBasedNN(A, perplexity=perp, n_jobs=n_jobs, random_state=seed).P.tocsr()
    P_b = PerplexityBasedNN(B, perplexity=perp, n_jobs=n_jobs, random_state=seed).P.tocsr()
    Y_a = pca_init(A, 2, random_state=seed)
    Y_b = pca_init(B, 2, random_state=seed)
    Y_b = _procrustes_align(Y_b, Y_a)
    Y_a = np.ascontiguousarray(Y_a - Y_a.mean(0), dtype=np.float64)
    Y_b = np.ascontiguousarray(Y_b, dtype=np.float64)

    Ys = [Y_a, Y_b]
    updates = [np.zeros_like(Y_a), np.zeros_like(Y_b)]
    gains = [np.ones_like(Y_a), np.ones_like(Y_b)]
    total = int(early_exaggeration_iter + n_iter)
    bar = _progress_bar(total, "yoked t-SNE", progress)
    kls = [float("nan"), float("nan")]
    try:
        for phase_iters, ex in ((int(early_exaggeration_iter), float(early_exaggeration)), (int(n_iter), 1.0)):
            if learning_rate == "auto":
                lr = n / ex
            else:
                lr = float(learning_rate)
            if alpha > 0:
                lr = min(lr, 1.0 / alpha)
            Ps = [P_a * ex, P_b * ex] if ex != 1.0 else [P_a, P_b]
            for it in range(phase_iters):
                eval_error = bar is not None and (it + 1) % 50 == 0
                if method == "exact":
                    _, g_a, g_b = yoked_tsne_exact_objective_and_grad(Ys[0], Ys[1], P_a, P_b, 0.0,
                                                                      exaggeration=ex)
                    grads = [g_a, g_b]
                else:
                    grads = []
                    for k in range(2):
                        kl, g = _kl_and_grad(Ys[k], Ps[k], method, theta=theta, n_jobs=n_jobs,
                                             eval_error=eval_error)
                        if eval_error:
                            kls[k] = kl / ex - math.log(ex)
                        grads.append(g)
                if alpha > 0:
                    delta = Ys[0] - Ys[1]
                    grads[0] += 2.0 * alpha * delta
                    grads[1] -= 2.0 * alpha * delta
                for k in range(2):
                    # t-SNE's gradient descent with momentum and gains, in openTSNE's step units
                    # (openTSNE's gradient is the true one divided by 4)
                    g = grads[k] * 0.25
                    flipped = np.sign(updates[k]) != np.sign(g)
                    gains[k][flipped] += 0.2
                    gains[k][~flipped] = gains[k][~flipped] * 0.8 + 0.01
                    updates[k] = momentum * updates[k] - lr * gains[k] * g
                    if max_step_norm is not None:
                        norms = np.linalg.norm(updates[k], axis=1)
                        big = norms > max_step_norm
                        updates[k][big] *= (max_step_norm / norms[big])[:, None]
                    Ys[k] += updates[k]
                    Ys[k] -= Ys[k].mean(0)
                if bar is not None:
                    bar.update(1)
                    if eval_error:
                        bar.set_postfix(KL_a=f"{kls[0]:.3f}", KL_b=f"{kls[1]:.3f}")
    finally:
        if bar is not None:
            bar.close()
    Y_a, Y_b = Ys
    if not return_info:
        return Y_a, Y_b
    if method == "exact":
        C_kl, _, _ = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.0)
        kl_a = yoked_tsne_exact_objective_and_grad(Y_a, Y_a, P_a, P_a, 0.0)[0] / 2
        kl_b = C_kl - kl_a
    else:
        kl_a = _kl_and_grad(Y_a, P_a, method, theta=theta, n_jobs=n_jobs, eval_error=True)[0]
        kl_b = _kl_and_grad(Y_b, P_b, method, theta=theta, n_jobs=n_jobs, eval_error=True)[0]
    dist = np.linalg.norm(Y_a - Y_b, axis=1)
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="yoked t-SNE (Rauber et al. 2016; Xuan §2.3)",
        alpha=alpha,
        alpha_times_n=alpha * n,
        perplexity=perp,
        perplexity_requested=float(perplexity),
        seed=int(seed),
        n=n,
        n_iter=int(n_iter),
        early_exaggeration_iter=int(early_exaggeration_iter),
        early_exaggeration=float(early_exaggeration),
        learning_rate=str(learning_rate),
        momentum=float(momentum),
        theta=float(theta),
        negative_gradient_method=method,
        kl_a=float(kl_a),
        kl_b=float(kl_b),
        objective=float(kl_a + kl_b + alpha * float(np.sum((Y_a - Y_b) ** 2))),
        mean_displacement=float(dist.mean()),
    )
    return Y_a, Y_b, info


# ---------------------------------------------------------------------------------- plotting
def class_colors(n: int) -> list:
    """``n`` distinguishable colours: tab10 up to 10 classes, tab20 up to 20, then a hue circle."""
    import matplotlib
    from matplotlib import colors as mcolors

    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(n)]
    # golden-ratio hue steps with alternating lightness: neighbours in class order differ
    out = []
    for i in range(n):
        h = (i * 0.618033988749895) % 1.0
        s = 0.75 if i % 2 else 0.95
        v = 0.85 if i % 3 else 0.65
        out.append(mcolors.hsv_to_rgb((h, s, v)))
    return out


def _marker_size(n: int) -> float:
    return float(np.clip(4000.0 / max(n, 1), 1.0, 14.0))


def _class_scatter(ax, Y, labels, colors_by_label, *, size=None, alpha=0.8, rasterized=True):
    labels = np.asarray(labels)
    s = _marker_size(len(labels)) if size is None else size
    # one call, points in a fixed random order, so no class is always drawn on top
    order = np.random.default_rng(0).permutation(len(labels))
    cols = np.array([colors_by_label[lab] for lab in labels[order]]) if len(labels) else np.zeros((0, 4))
    ax.scatter(Y[order, 0], Y[order, 1], c=cols, s=s, linewidths=0, alpha=alpha, rasterized=rasterized)


def _style_map_axes(ax, title: str | None = None) -> None:
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    ax.set_aspect("equal", adjustable="datalim")
    ax.tick_params(length=2)
    if title:
        ax.set_title(title)


def _class_legend(fig, labels_present, colors_by_label, class_names, *, max_entries=20, loc="lower center",
                  ncol=None) -> None:
    from matplotlib.lines import Line2D

    labels_present = list(labels_present)
    if len(labels_present) > max_entries:
        return
    handles = [Line2D([], [], marker="o", linestyle="", markersize=5, color=colors_by_label[lab],
                      label=str(class_names[lab]) if class_names is not None else str(lab))
               for lab in labels_present]
    ncol = ncol or min(len(handles), 10)
    fig.legend(handles=handles, loc=loc, ncol=ncol, frameon=False, title="class",
               bbox_to_anchor=(0.5, 0.0), handletextpad=0.2, columnspacing=0.8, title_fontsize=8)


def _finish(fig, *, note: str, legend_h: float, title: str | None) -> None:
    """Lay out inside the canvas (the figure must not rely on ``bbox_inches="tight"``): from the
    bottom up, the settings note, the class legend (``legend_h`` inches; placed by
    :func:`_class_legend`), the panels, and the title."""
    h = fig.get_figheight()
    note_h = 0.17 if note else 0.0
    if note:
        fig.text(0.995, 0.005, note, ha="right", va="bottom", fontsize=6, color="0.4")
    for leg in fig.legends:
        leg.set_bbox_to_anchor((0.5, note_h / h), transform=fig.transFigure)
    top = 1.0
    if title:
        fig.suptitle(title, y=0.995, va="top")
        top = 1 - 0.3 / h
    fig.tight_layout(rect=(0, (legend_h + note_h) / h, 1, top), pad=0.4, w_pad=0.8)


def _legend_height(n_classes: int, max_entries: int = 20) -> float:
    """Inches below the panels for the class legend (10 entries per row, plus its title)."""
    if n_classes > max_entries:
        return 0.0
    return 0.4 + 0.2 * math.ceil(n_classes / 10)


def _settings_text(info: dict | None, keys: Sequence[str]) -> str:
    if not info:
        return ""
    parts = []
    for k in keys:
        if k in info:
            v = info[k]
            parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    return ", ".join(parts)


def _colors_for(labels_all: np.ndarray) -> dict:
    present = np.unique(labels_all)
    cols = class_colors(len(present))
    return {lab: cols[i] for i, lab in enumerate(present)}


def plot_joint_tsne(
    Y_train: np.ndarray,
    Y_test: np.ndarray,
    labels_train: Any,
    labels_test: Any,
    *,
    class_names: Sequence[str] | None = None,
    info: dict | None = None,
    title: str | None = None,
):
    """Three panels (METHODS.md §10, Xuan Fig. 1/2): training points by class, test points by class,
    and both (training red, test blue), all in the joint map's coordinates. Returns the figure."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC

    Y_train = np.asarray(Y_train)
    Y_test = np.asarray(Y_test)
    lt, le = np.asarray(labels_train), np.asarray(labels_test)
    cmap = _colors_for(np.concatenate([lt, le]))
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(1, 3, figsize=(7.0, 3.3))
        _class_scatter(axes[0], Y_train, lt, cmap)
        _style_map_axes(axes[0], f"train\n{len(lt)} points, {len(np.unique(lt))} classes")
        _class_scatter(axes[1], Y_test, le, cmap)
        _style_map_axes(axes[1], f"test\n{len(le)} points, {len(np.unique(le))} classes")
        s = _marker_size(len(lt) + len(le))
        both = np.vstack([Y_train, Y_test])
        col = np.array([TRAIN_COLOR] * len(lt) + [TEST_COLOR] * len(le))
        order = np.random.default_rng(0).permutation(len(both))
        axes[2].scatter(both[order, 0], both[order, 1], c=col[order], s=s, linewidths=0, alpha=0.6,
                        rasterized=True)
        _style_map_axes(axes[2], "train and test\n(same coordinates)")
        from matplotlib.lines import Line2D

        axes[2].legend(handles=[Line2D([], [], marker="o", linestyle="", color=TRAIN_COLOR, label="train"),
                                Line2D([], [], marker="o", linestyle="", color=TEST_COLOR, label="test")],
                       loc="best", frameon=True, framealpha=0.8, handletextpad=0.2, borderpad=0.3)
        lo = both.min(0) if len(both) else np.zeros(2)
        hi = both.max(0) if len(both) else np.ones(2)
        pad = 0.04 * np.maximum(hi - lo, 1e-9)
        for ax in axes:  # the same window in all three panels: a point sits at the same place
            ax.set_xlim(lo[0] - pad[0], hi[0] + pad[0])
            ax.set_ylim(lo[1] - pad[1], hi[1] + pad[1])
            ax.set_aspect("equal", adjustable="box")
        for ax in axes[1:]:
            ax.set_ylabel("")
        # class legend only when train and test share classes and there are few of them
        _class_legend(fig, sorted(cmap), cmap, class_names, max_entries=20)
        note = _settings_text(info, ("perplexity", "seed", "initialization", "n_iter", "kl_divergence"))
        _finish(fig, note="openTSNE: " + note if note else "", legend_h=_legend_height(len(cmap)), title=title)
    return fig


def plot_tsne(Y: np.ndarray, labels: Any, *, class_names: Sequence[str] | None = None, info: dict | None = None,
              title: str | None = None):
    """One t-SNE map coloured by class (METHODS.md §10). Returns the figure."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC

    labels = np.asarray(labels)
    cmap = _colors_for(labels)
    with plt.rc_context(PAPER_RC):
        fig, ax = plt.subplots(figsize=(3.8, 3.5))
        _class_scatter(ax, np.asarray(Y), labels, cmap)
        _style_map_axes(ax, title or f"{len(labels)} points, {len(cmap)} classes")
        if len(cmap) <= 20:
            from matplotlib.lines import Line2D

            handles = [Line2D([], [], marker="o", linestyle="", markersize=5, color=cmap[lab],
                              label=str(class_names[lab]) if class_names is not None else str(lab))
                       for lab in sorted(cmap)]
            ax.legend(handles=handles, title="class", loc="center left", bbox_to_anchor=(1.01, 0.5),
                      frameon=False, handletextpad=0.2)
        note = _settings_text(info, ("perplexity", "seed", "initialization", "kl_divergence"))
        _finish(fig, note="openTSNE: " + note if note else "", legend_h=0.0, title=None)
    return fig


def plot_yoked_tsne(
    Y_a: np.ndarray,
    Y_b: np.ndarray,
    labels: Any,
    *,
    names: Sequence[str] = ("A", "B"),
    class_names: Sequence[str] | None = None,
    inset_class: Any = None,
    info: dict | None = None,
    title: str | None = None,
):
    """The two yoked maps side by side with the same class colours (METHODS.md §10, Xuan §2.3).

    ``inset_class`` (a label): a second row zooms into that class in each map (the box around its
    central 96% of points, marked on the map above); other classes in the box are drawn faded for
    context. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from embedscope.viz.figures import PAPER_RC

    labels = np.asarray(labels)
    Y_a, Y_b = np.asarray(Y_a), np.asarray(Y_b)
    cmap = _colors_for(labels)
    if inset_class is not None:
        matches = [lab for lab in cmap if str(lab) == str(inset_class)]
        if not matches:
            raise EmbedscopeError(f"inset class {inset_class} is not among the labels")
        inset_class = matches[0]
    zoom = inset_class is not None
    with plt.rc_context(PAPER_RC):
        if zoom:
            fig, grid = plt.subplots(2, 2, figsize=(6.4, 6.0), gridspec_kw={"height_ratios": [1, 0.85]})
            axes, zaxes = grid[0], grid[1]
        else:
            fig, axes = plt.subplots(1, 2, figsize=(6.4, 3.3))
            zaxes = [None, None]
        nm_c = (class_names[inset_class] if class_names is not None else inset_class) if zoom else None
        for ax, zax, Y, nm in zip(axes, zaxes, (Y_a, Y_b), names):
            _class_scatter(ax, Y, labels, cmap)
            _style_map_axes(ax, str(nm))
            if zax is None:
                continue
            sel = labels == inset_class
            lo = np.percentile(Y[sel], 2, axis=0)
            hi = np.percentile(Y[sel], 98, axis=0)
            pad = 0.15 * np.maximum(hi - lo, 1e-9)
            lo, hi = lo - pad, hi + pad
            ax.add_patch(Rectangle(tuple(lo), *(hi - lo), fill=False, edgecolor="0.15", linewidth=0.9,
                                   linestyle="--"))
            near = np.all((Y >= lo) & (Y <= hi), axis=1)
            _class_scatter(zax, Y[near & ~sel], labels[near & ~sel], cmap, size=7, alpha=0.3)
            _class_scatter(zax, Y[sel], labels[sel], cmap, size=9, alpha=0.9)
            zax.set_xlim(lo[0], hi[0])
            zax.set_ylim(lo[1], hi[1])
            zax.set_xlabel("t-SNE 1")
            zax.set_ylabel("t-SNE 2")
            zax.set_title(f"class {nm_c} zoomed (dashed box above)")
        axes[1].set_ylabel("")
        if zoom:
            zaxes[1].set_ylabel("")
        _class_legend(fig, sorted(cmap), cmap, class_names, max_entries=20)
        note = _settings_text(info, ("alpha", "alpha_times_n", "perplexity", "seed", "kl_a", "kl_b",
                                     "mean_displacement"))
        _finish(fig, note="yoked t-SNE: " + note if note else "", legend_h=_legend_height(len(cmap)), title=title)
    return fig


__all__ = [
    "joint_tsne",
    "single_tsne",
    "yoked_tsne",
    "yoked_tsne_exact_objective_and_grad",
    "yoked_tsne_objective_and_grad",
    "default_alpha",
    "effective_perplexity",
    "stratified_subsample",
    "class_colors",
    "plot_joint_tsne",
    "plot_tsne",
    "plot_yoked_tsne",
    "TSNE_DEFAULTS",
]
