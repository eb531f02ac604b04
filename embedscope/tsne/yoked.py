"""Yoked t-SNE (docs/methods.md §10): the objective and its gradients, and the run that optimises it.

The yoked objective (Rauber, Falcão, Telea 2016, *Visualizing time-dependent data using dynamic
t-SNE*; used by Xuan, Stylianou, Pless §2.3) ties two t-SNE maps of the same points::

    C = KL(P^a ‖ Q^a) + KL(P^b ‖ Q^b) + α Σ_i ‖y_i^a − y_i^b‖²

and extends to a sequence of K maps (e.g. the checkpoints of successive epochs), each yoked to the
next, and to a variant that yokes class centroids instead of points
(:func:`yoked_tsne_maps`, :func:`yoke_penalty`).

Here: the exact O(N²) objective and gradient (:func:`yoked_tsne_exact_objective_and_grad`, the
reference), the Barnes–Hut / FFT version from openTSNE's KL gradients
(:func:`yoked_tsne_objective_and_grad`), the objective as a callable for the optimiser
(:class:`YokedObjective`), and :func:`yoked_tsne`, which runs openTSNE's schedule with
:func:`embedscope.tsne.optimizer.gradient_descent`. Lower C is better; α trades each map's KL
against agreement of the two maps.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.tsne._progress import ProgressFn, progress_reporter
from embedscope.tsne.joint import (
    MAX_SEED,
    TSNE_DEFAULTS,
    check_map,
    check_n_jobs,
    effective_perplexity,
    numeric_platform,
    prepare_tsne_input,
    tsne_affinities,
    tsne_threads,
)
from embedscope.tsne.optimizer import GradientDescentState, gradient_descent
from embedscope.validation import check_choice, check_matrix

METHODS = ("bh", "fft", "exact")


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
    """Exact (O(N²) time and memory) yoked t-SNE objective and gradient (docs/methods.md §10).

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
    for Y, P in ((Y_a, P_a), (Y_b, P_b)):
        kl, g = exact_kl_and_grad(Y, P, exaggeration=exaggeration)
        C += kl
        grads.append(g)
    delta = Y_a - Y_b
    C += float(alpha) * float(np.sum(delta * delta))
    return C, grads[0] + 2.0 * alpha * delta, grads[1] - 2.0 * alpha * delta


def exact_kl_and_grad(Y: np.ndarray, P: Any, *, exaggeration: float = 1.0) -> tuple[float, np.ndarray]:
    """One map's exact (O(N²)) KL(P ‖ Q) and gradient 4 Σ_j (e·p_ij − q_ij) w_ij (y_i − y_j)
    (see :func:`yoked_tsne_exact_objective_and_grad`; the KL never includes the exaggeration e)."""
    Y = np.asarray(Y, dtype=np.float64)
    P = _dense_P(P)
    diff = Y[:, None, :] - Y[None, :, :]
    W = 1.0 / (1.0 + np.einsum("ijk,ijk->ij", diff, diff))
    np.fill_diagonal(W, 0.0)
    Q = W / W.sum()
    m = P > 0
    kl = float(np.sum(P[m] * np.log(P[m] / Q[m])))
    return kl, 4.0 * np.einsum("ij,ijk->ik", (exaggeration * P - Q) * W, diff)


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
    """Approximate yoked t-SNE objective and gradient (docs/methods.md §10), O(N log N) per call.

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


def kl_names(k: int) -> list[str]:
    """The names of K maps' KL values in progress reports and ``error`` dicts: ``KL_a``, ``KL_b``
    for two maps (as :class:`YokedObjective`), ``KL_1`` … ``KL_K`` for more."""
    return ["KL_a", "KL_b"] if k == 2 else [f"KL_{i + 1}" for i in range(k)]


class MapsKL:
    """The KL divergences of K ≥ 2 t-SNE maps as one objective for
    :func:`~embedscope.tsne.optimizer.gradient_descent` (each map's own P, nothing shared): the
    yoke of :func:`yoked_tsne_maps` is taken by its implicit step, not here.

    ``objective(Ys, eval_error) -> (error, grads)``: each map's true KL gradient with P multiplied
    by ``exaggeration`` (openTSNE's, ``method`` "bh" or "fft"), and with ``eval_error`` the KL of
    each map with the exaggeration taken out (KL_e / e − log e), named by :func:`kl_names`.
    """

    def __init__(self, Ps: Sequence[Any], *, method: str = "bh", theta: float = 0.5, n_jobs: int = 1,
                 exaggeration: float = 1.0):
        if method not in METHODS:
            raise EmbedscopeError(f"method must be one of {', '.join(METHODS)}, got '{method}'")
        self.method, self.theta, self.n_jobs = method, float(theta), int(n_jobs)
        self.exaggeration = ex = float(exaggeration)
        self.Ps = list(Ps)
        self._Ps = [P * ex for P in Ps] if (ex != 1.0 and method != "exact") else list(Ps)
        self.names = kl_names(len(self._Ps))

    def __call__(self, Ys: Sequence[np.ndarray], eval_error: bool = False) -> tuple[Any, list]:
        ex = self.exaggeration
        grads, kls = [], []
        for Y, P in zip(Ys, self._Ps):
            if self.method == "exact":
                kl, g = exact_kl_and_grad(Y, P, exaggeration=ex)
            else:
                kl, g = _kl_and_grad(Y, P, self.method, theta=self.theta, n_jobs=self.n_jobs, eval_error=eval_error)
                kl = kl / ex - math.log(ex)
            kls.append(kl)
            grads.append(g)
        return (dict(zip(self.names, kls)) if eval_error else None), grads


class YokedObjective(MapsKL):
    """The yoked objective as a callable for :func:`~embedscope.tsne.optimizer.gradient_descent`.

    ``objective([Y_a, Y_b], eval_error) -> (error, [∂C/∂Y_a, ∂C/∂Y_b])`` with P multiplied by
    ``exaggeration`` (early exaggeration) and the true gradient of C (docs/methods.md §10): each map's KL
    gradient (``method`` "bh", "fft" or "exact"; :class:`MapsKL` of the two maps) plus ±2α (y^a − y^b).
    With ``eval_error`` (bh/fft) ``error`` is ``{"KL_a": ..., "KL_b": ...}``, each map's KL with the
    exaggeration taken out (KL_e / e − log e); exact: ``{"KL_a+KL_b": ...}``.
    """

    def __init__(self, P_a: Any, P_b: Any, alpha: float, *, method: str = "bh", theta: float = 0.5,
                 n_jobs: int = 1, exaggeration: float = 1.0):
        super().__init__([P_a, P_b], method=method, theta=theta, n_jobs=n_jobs, exaggeration=exaggeration)
        self.P_a, self.P_b = P_a, P_b
        self.alpha = float(alpha)

    def __call__(self, Ys: Sequence[np.ndarray], eval_error: bool = False) -> tuple[Any, list]:
        error, grads = super().__call__(Ys, eval_error)
        if error is not None and self.method == "exact":
            error = {"KL_a+KL_b": error["KL_a"] + error["KL_b"]}
        if self.alpha > 0:
            delta = Ys[0] - Ys[1]
            grads[0] += 2.0 * self.alpha * delta
            grads[1] -= 2.0 * self.alpha * delta
        return error, grads


class _Yoke:
    """The yoke α Σ_i ‖y_i^a − y_i^b‖² as the implicit term of
    :func:`~embedscope.tsne.optimizer.gradient_descent`: its gradient ±2α (y^a − y^b), and its
    proximal step. With per-coordinate steps s_a, s_b the implicit equations
    y'_a = ỹ_a − 2α s_a (y'_a − y'_b), y'_b = ỹ_b + 2α s_b (y'_a − y'_b) give
    δ' = δ̃ / (1 + 2α (s_a + s_b)) and y'_a = ỹ_a − 2α s_a δ', y'_b = ỹ_b + 2α s_b δ'."""

    def __init__(self, alpha: float):
        self.alpha = float(alpha)

    def gradient(self, Ys: Sequence[np.ndarray]) -> list:
        d = 2.0 * self.alpha * (Ys[0] - Ys[1])
        return [d, -d]

    def prox(self, Ys: Sequence[np.ndarray], steps: Sequence[np.ndarray]) -> list:
        a2 = 2.0 * self.alpha
        delta = (Ys[0] - Ys[1]) / (1.0 + a2 * (steps[0] + steps[1]))
        return [Ys[0] - a2 * steps[0] * delta, Ys[1] + a2 * steps[1] * delta]


YOKES = ("points", "centroids")


def _class_index(labels: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per point its class index 0..C−1 (in ``np.unique`` order) and the class sizes n_c."""
    from embedscope.validation import check_labels

    y = check_labels(labels, n, "labels")
    _, inv, counts = np.unique(y, return_inverse=True, return_counts=True)
    return inv.reshape(-1), counts


def _class_means(Y: np.ndarray, inv: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The mean of each class's rows of ``Y`` (..., N, 2) -> (..., C, 2)."""
    Y3 = Y.reshape((-1,) + Y.shape[-2:])
    C, d = counts.size, Y.shape[-1]
    out = np.empty((Y3.shape[0], C, d))
    for m in range(Y3.shape[0]):
        for j in range(d):
            out[m, :, j] = np.bincount(inv, weights=Y3[m, :, j], minlength=C)
    out /= counts[:, None]
    return out.reshape(Y.shape[:-2] + (C, d))


def _chain_laplacian(Z: np.ndarray) -> np.ndarray:
    """(L Z)_k = Σ over the neighbours j = k ± 1 in the chain of maps (axis 0) of Z_k − Z_j."""
    out = np.zeros_like(Z)
    d = Z[:-1] - Z[1:]
    out[:-1] += d
    out[1:] -= d
    return out


def yoke_penalty(Ys: Sequence[np.ndarray], alpha: float, *, yoke: str = "points",
                 labels: Any = None) -> tuple[float, list]:
    """The yoke of K ≥ 2 maps of the same N points, each yoked to the next (docs/methods.md §10),
    and its gradient with respect to each map::

        points:     α Σ_{k<K} Σ_i ‖y_i^k − y_i^{k+1}‖²
        centroids:  α Σ_{k<K} Σ_c n_c ‖μ_c^k − μ_c^{k+1}‖²,  μ_c^k = mean of class c's points in map k

    The centroid yoke weighs each class by its size n_c, so that α means the same in both forms
    (it is the points' yoke less the within-class spread of the displacements, by Jensen: never
    larger), and moves each point by its class's gradient 2α (L μ)_c^k, L the chain's Laplacian.
    ``labels`` (N,): the classes, needed for ``yoke="centroids"``.
    """
    from embedscope.validation import check_number

    alpha = check_number(alpha, "alpha", min=0)
    if isinstance(Ys, (str, bytes)) or not hasattr(Ys, "__len__") or len(Ys) < 2:
        raise EmbedscopeError("yoke_penalty needs a sequence of two or more maps [N, 2] of the same points")
    try:
        Y = np.stack([np.asarray(y, dtype=np.float64) for y in Ys])
    except (TypeError, ValueError):
        raise EmbedscopeError("yoke_penalty needs maps of numbers, all of one shape [N, 2]") from None
    if Y.ndim != 3:
        raise EmbedscopeError(f"yoke_penalty needs maps [N, 2], got shape {Y.shape[1:]}")
    if yoke == "points":
        d = Y[:-1] - Y[1:]
        return float(alpha) * float(np.sum(d * d)), list(2.0 * float(alpha) * _chain_laplacian(Y))
    if yoke != "centroids":
        raise EmbedscopeError(f"yoke must be one of {', '.join(YOKES)}, got '{yoke}'")
    if labels is None:
        raise EmbedscopeError("yoke='centroids' needs the labels of the points")
    inv, counts = _class_index(labels, Y.shape[1])
    M = _class_means(Y, inv, counts)
    d = M[:-1] - M[1:]
    value = float(alpha) * float(np.sum(counts[None, :, None] * d * d))
    G = 2.0 * float(alpha) * _chain_laplacian(M)
    return value, [g[inv] for g in G]


def _chain_solve(Z: np.ndarray, S: np.ndarray, a2: float) -> np.ndarray:
    """The solution X of X + a2 · S ⊙ (L X) = Z along axis 0 (the chain of maps; L its Laplacian:
    one tridiagonal system per trailing index, solved by the Thomas algorithm; strictly
    diagonally dominant, so stable)."""
    K = Z.shape[0]
    lo = -a2 * S  # coefficient of X_{k-1} (k ≥ 1) and of X_{k+1} (k ≤ K − 2) in row k
    deg = np.full(K, 2.0)
    deg[0] = deg[-1] = 1.0
    diag = 1.0 + a2 * S * deg.reshape((K,) + (1,) * (Z.ndim - 1))
    c = np.empty_like(Z)  # modified upper coefficients
    d = np.empty_like(Z)
    c[0] = lo[0] / diag[0]
    d[0] = Z[0] / diag[0]
    for k in range(1, K):
        den = diag[k] - lo[k] * c[k - 1]
        c[k] = lo[k] / den if k < K - 1 else 0.0
        d[k] = (Z[k] - lo[k] * d[k - 1]) / den
    X = np.empty_like(Z)
    X[-1] = d[-1]
    for k in range(K - 2, -1, -1):
        X[k] = d[k] - c[k] * X[k + 1]
    return X


class ChainYoke:
    """The yoke of :func:`yoke_penalty` as the implicit term of
    :func:`~embedscope.tsne.optimizer.gradient_descent`: its gradient, and its proximal step.

    With per-coordinate steps s (one per point, coordinate and map) the implicit equations
    y' = ỹ − s ⊙ ∇yoke(y') are, for the points' yoke, one tridiagonal system per point and
    coordinate, (I + 2α diag(s) L) y' = ỹ; for the centroids' yoke, ∇yoke(y')_i = 2α (L μ')_c
    is shared by class c's points, so that the class means obey (I + 2α diag(s̄_c) L) μ' = m̃
    (m̃, s̄: the class means of ỹ and of s), and then y'_i = ỹ_i − 2α s_i (L μ')_c. Both are
    solved exactly (:func:`_chain_solve`). For two maps and points this is :class:`_Yoke`'s
    closed form."""

    def __init__(self, alpha: float, yoke: str = "points", labels: Any = None, n: int | None = None):
        if yoke not in YOKES:
            raise EmbedscopeError(f"yoke must be one of {', '.join(YOKES)}, got '{yoke}'")
        self.alpha, self.yoke = float(alpha), yoke
        self.labels = labels
        if yoke == "centroids":
            if labels is None:
                raise EmbedscopeError("yoke='centroids' needs the labels of the points")
            self.inv, self.counts = _class_index(labels, len(labels) if n is None else n)

    def gradient(self, Ys: Sequence[np.ndarray]) -> list:
        return yoke_penalty(Ys, self.alpha, yoke=self.yoke, labels=self.labels)[1]

    def prox(self, Ys: Sequence[np.ndarray], steps: Sequence[np.ndarray]) -> list:
        a2 = 2.0 * self.alpha
        Z = np.stack(Ys)
        S = np.stack(steps)
        if self.yoke == "points":
            return list(_chain_solve(Z, S, a2))
        inv, counts = self.inv, self.counts
        M = _chain_solve(_class_means(Z, inv, counts), _class_means(S, inv, counts), a2)
        G = a2 * _chain_laplacian(M)
        return [Z[k] - S[k] * G[k][inv] for k in range(Z.shape[0])]


def _procrustes_align(Y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Rotate/reflect ``Y`` (centred) to best match ``ref`` (orthogonal Procrustes)."""
    A = Y - Y.mean(0)
    B = ref - ref.mean(0)
    U, _, Vt = np.linalg.svd(A.T @ B)
    return A @ (U @ Vt)


#: the largest yoking strength α: from ~1e30 (N·α far beyond the KL gradients) the maps are held together as
#: tightly as they can be; 2α times a step overflowed float64 at α = 1e308 (NaN coordinates)
MAX_ALPHA = 1e100


def default_alpha(n: int) -> float:
    """The default yoking strength α = 0.01 / N (Rauber et al.'s λ/(2N) with λ = 0.02).

    α multiplies Σ_i ‖y_i^a − y_i^b‖², a sum over N points, while each point's share of the KL
    gradient shrinks like 1/N; α·N is therefore the size-free strength.
    """
    from embedscope.validation import check_int

    return 0.01 / check_int(n, "n (points)")


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
    progress: bool | ProgressFn = False,
    return_info: bool = False,
):
    """Yoked t-SNE: two maps of the same points under two embeddings, optimised together.

    docs/methods.md §10 (Xuan, Stylianou, Pless §2.3, after Rauber et al. 2016's dynamic t-SNE)::

        C = KL(P^a ‖ Q^a) + KL(P^b ‖ Q^b) + α Σ_i ‖y_i^a − y_i^b‖²

    Row i of ``X_a`` and of ``X_b`` must be the same image. Affinities P^a, P^b:
    ``openTSNE.affinity.PerplexityBasedNN`` (perplexity-calibrated Gaussian kernels on the
    3·perplexity nearest neighbours, symmetrised), computed so that they do not depend on the
    thread count (:func:`~embedscope.tsne.joint.tsne_affinities`). Initialisation: openTSNE's PCA initialisation of
    each set (std 1e-4), map b rotated/reflected onto map a (orthogonal Procrustes) so that the
    yoke does not start by fighting an arbitrary PCA sign. Optimiser
    (:func:`~embedscope.tsne.optimizer.gradient_descent` on :class:`YokedObjective`): openTSNE's
    schedule — ``early_exaggeration_iter`` iterations with P multiplied by ``early_exaggeration``,
    then ``n_iter`` iterations; momentum with per-coordinate gains (Jacobs 1988, as t-SNE);
    learning rate ``"auto"`` = N / exaggeration (Belkina et al. 2019); the KL gradients taken
    explicitly (update steps clipped to ``max_step_norm``) and the yoke by an implicit (proximal)
    step, which is exact for the quadratic yoke and stable for any α at t-SNE's own learning
    rate; each map re-centred every iteration. The KL gradients are approximate: Barnes–Hut (``"bh"``) or FFT
    interpolation (``"fft"``), ``"auto"`` choosing BH below 10,000 points and FFT above (as
    openTSNE), or exact (``"exact"``, O(N²), :func:`yoked_tsne_exact_objective_and_grad`; small N
    only).

    With α = 0 the two maps are independent t-SNE runs (map a is openTSNE's ``TSNE(...).fit(X_a)``
    with the same settings bit for bit; map b starts from its rotated initialisation); larger α pulls corresponding points
    together at the cost of each map's KL. Degenerate input (all rows of a set identical) is
    refused; extreme scales are rescaled exactly (:func:`~embedscope.tsne.joint.prepare_tsne_input`).

    Parameters
    ----------
    X_a, X_b : array (N, D_a), (N, D_b)
        The same N points under two embeddings (D may differ).
    alpha : float or None
        Yoking strength α ≥ 0 of the formula above. ``None``: :func:`default_alpha` = 0.01 / N (on
        the digits, α·N = 0.01 already aligns the maps closely; α·N ≈ 0.001 leaves visible
        differences; α·N ≥ 1 makes them nearly identical).
    perplexity, seed, n_iter, early_exaggeration_iter, early_exaggeration, learning_rate,
    momentum, theta, max_step_norm, n_jobs
        As in openTSNE (its defaults). ``n_jobs``: threads for the KL gradients, recorded in
        ``info["n_jobs"]``; the maps, the KL divergences and C are the same bit for bit for any
        count (the approximate neighbour search builds its trees on one thread,
        :func:`~embedscope.tsne.joint.tsne_affinities`, ``info["neighbour_search"]``; the final KL
        values are evaluated on one thread).
    negative_gradient_method : {"auto", "bh", "fft", "exact"}
    progress : bool or callable
        ``True``: a tqdm bar; a callable: ``progress(done, total, values)`` after each iteration,
        ``values`` holding ``KL_a``, ``KL_b`` every 50 iterations (empty otherwise).
    return_info : bool
        Also return a dict: settings, final KL of each map, C, mean ‖y_i^a − y_i^b‖.

    Returns
    -------
    Y_a, Y_b : array (N, 2)
    info : dict, only with ``return_info``
    """
    out = yoked_tsne_maps(
        [X_a, X_b], yoke="points", alpha=alpha, perplexity=perplexity, seed=seed, n_iter=n_iter,
        early_exaggeration_iter=early_exaggeration_iter, early_exaggeration=early_exaggeration,
        learning_rate=learning_rate, momentum=momentum, negative_gradient_method=negative_gradient_method,
        theta=theta, max_step_norm=max_step_norm, n_jobs=n_jobs, progress=progress, return_info=return_info)
    if return_info:
        (Y_a, Y_b), info = out
        return Y_a, Y_b, info
    return out[0], out[1]


def yoked_tsne_maps(
    Xs: Sequence[Any],
    *,
    yoke: str = "points",
    labels: Any = None,
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
    progress: bool | ProgressFn = False,
    return_info: bool = False,
):
    """Yoked t-SNE of a sequence of K ≥ 2 embeddings of the same points, each map yoked to the next
    (docs/methods.md §10; Xuan, Stylianou, Pless §2.3; Rauber et al. 2016's dynamic t-SNE, whose
    maps are the time steps of a sequence, e.g. the checkpoints of successive epochs)::

        C = Σ_k KL(P^k ‖ Q^k) + yoke,   yoke = α Σ_{k<K} Σ_i ‖y_i^k − y_i^{k+1}‖²           ("points")
                                     or α Σ_{k<K} Σ_c n_c ‖μ_c^k − μ_c^{k+1}‖²       ("centroids")

    μ_c^k: the mean of class c's points in map k (``labels`` needed): the centroids' yoke aligns
    where the classes lie and leaves each point free within its class (:func:`yoke_penalty`).
    Everything else as :func:`yoked_tsne`, which is this function for two maps yoked by points:
    row i of every ``Xs[k]`` is the same image; each map's affinities and PCA initialisation
    from its own embedding, each initialisation rotated/reflected onto the one before (orthogonal
    Procrustes); the KL gradients explicit, the yoke by its exact implicit step
    (:class:`ChainYoke`).

    Returns
    -------
    list of K arrays (N, 2); with ``return_info`` ``(maps, info)``, info a dict: the settings, ``kl`` (each map's
    KL), ``objective`` (C), ``mean_displacement`` (mean ‖y_i^k − y_i^{k+1}‖ over points and
    consecutive maps), ``mean_displacements`` (per consecutive pair) and, yoking centroids,
    ``mean_centroid_displacement`` (the class-size weighted mean ‖μ_c^k − μ_c^{k+1}‖); for two
    maps also ``kl_a`` and ``kl_b``.
    """
    from openTSNE.initialization import pca as pca_init

    if isinstance(Xs, np.ndarray) and Xs.ndim == 3:  # (K, N, D): K embeddings of the same size
        Xs = list(Xs)
    if isinstance(Xs, (np.ndarray, str)) or not isinstance(Xs, Sequence) or len(Xs) < 2:
        raise EmbedscopeError("yoked t-SNE needs a sequence of two or more embeddings of the same points")
    K = len(Xs)
    names = ["X_a", "X_b"] if K == 2 else [f"Xs[{k}]" for k in range(K)]
    mats = [check_matrix(X, nm, dtype=np.float64) for X, nm in zip(Xs, names)]
    n = mats[0].shape[0]
    for m in mats[1:]:
        if m.shape[0] != n:
            raise EmbedscopeError(f"yoked t-SNE needs the same points in every set: {n} vs {m.shape[0]} rows")
    check_choice(yoke, "yoke", YOKES)
    if yoke == "centroids":
        if labels is None:
            raise EmbedscopeError("yoke='centroids' needs the labels of the points")
        _class_index(labels, n)  # checked here, before any work
    from embedscope.validation import check_int, check_number

    seed = check_int(seed, "seed", min=0, max=MAX_SEED)  # (scikit-learn's PCA refused others deep inside)
    n_iter = check_int(n_iter, "n_iter", min=0)
    early_exaggeration_iter = check_int(early_exaggeration_iter, "early_exaggeration_iter", min=0)
    n_jobs = tsne_threads(check_n_jobs(n_jobs))  # (-1 resolved here: openTSNE's counts the machine's cores)
    early_exaggeration = check_number(early_exaggeration, "early_exaggeration", min=0, min_inclusive=False)
    momentum = check_number(momentum, "momentum", min=0, max=1)
    theta = check_number(theta, "theta", min=0)
    max_step_norm = check_number(max_step_norm, "max_step_norm", min=0, min_inclusive=False, allow_none=True)
    if learning_rate != "auto":
        learning_rate = check_number(learning_rate, "learning_rate", min=0, min_inclusive=False)
    perplexity = check_number(perplexity, "perplexity", min=0, min_inclusive=False)
    perp = effective_perplexity(perplexity, n)
    if alpha is None:
        alpha = default_alpha(n)
    alpha = check_number(alpha, "alpha", min=0)  # ("x" was a raw ValueError)
    if alpha > MAX_ALPHA:
        raise EmbedscopeError(f"alpha must be at most {MAX_ALPHA:g}, got {alpha:g} ({MAX_ALPHA:g} already holds "
                              "the maps together as tightly as any larger value; beyond, the yoke's step overflows)")
    method = negative_gradient_method
    if method == "auto":
        method = "bh" if n < 10_000 else "fft"
    if method not in METHODS:
        raise EmbedscopeError(f"negative_gradient_method must be auto, bh, fft or exact, got '{method}'")
    if method == "exact" and n > 5000:
        raise EmbedscopeError(f"the exact gradient is O(N^2): use bh or fft for {n} points")
    prepared = [prepare_tsne_input(m, nm) for m, nm in zip(mats, names)]

    Ps, Ys, search = [], [], None
    for k, (A, _) in enumerate(prepared):
        aff, srch = tsne_affinities(A, perp, seed=seed, n_jobs=n_jobs)
        search = srch if search is None else search
        Ps.append(aff.P.tocsr())
        Y = pca_init(A, 2, random_state=seed)
        if k:  # onto the map before, so that the yoke does not start by fighting an arbitrary PCA sign
            Y = _procrustes_align(Y, Ys[-1]) + Ys[-1].mean(0)
        Ys.append(np.ascontiguousarray(Y, dtype=np.float64))  # map 1: openTSNE's initialisation as it is

    state = GradientDescentState.start(Ys)
    total = int(early_exaggeration_iter + n_iter)
    report, close = progress_reporter(progress, total, "yoked t-SNE")
    callback = None
    if report is not None:
        def callback(iteration, error, Ys):  # noqa: ARG001 - the optimiser's signature
            report(iteration, total, error or {})

    if alpha > 0:
        implicit = _Yoke(alpha) if (K == 2 and yoke == "points") else ChainYoke(alpha, yoke, labels, n)
    else:
        implicit = None
    try:
        for phase_iters, ex in ((int(early_exaggeration_iter), float(early_exaggeration)), (int(n_iter), 1.0)):
            lr = n / ex if learning_rate == "auto" else float(learning_rate)
            # the KL gradients explicit (as t-SNE), the yoke implicit: stable for any alpha at t-SNE's
            # own learning rate (an explicit yoke step needs lr < ~1/alpha and stalls the maps)
            objective = MapsKL(Ps, method=method, theta=theta, n_jobs=n_jobs, exaggeration=ex)
            # t-SNE's step in openTSNE's units: its learning rate applies to the true gradient / 4
            gradient_descent(objective, Ys, phase_iters, learning_rate=lr, momentum=momentum, gradient_scale=0.25,
                             max_step_norm=max_step_norm, state=state, callback=callback, error_every=50,
                             implicit=implicit)
            if ex != 1.0:  # openTSNE multiplies P by the exaggeration in place and divides it back after:
                Ps = [(P * ex) / ex for P in Ps]  # the same rounding, so that alpha = 0 is openTSNE's run bit for bit
    finally:
        close()
    Ys = [check_map(Y, "yoked t-SNE") for Y in Ys]
    if not return_info:
        return Ys
    if method == "exact":
        kls = [exact_kl_and_grad(Y, P)[0] for Y, P in zip(Ys, Ps)]
    else:  # on one thread: openTSNE sums the KL over its threads (last digits would vary with n_jobs)
        kls = [_kl_and_grad(Y, P, method, theta=theta, n_jobs=1, eval_error=True)[0] for Y, P in zip(Ys, Ps)]
    disp = [np.linalg.norm(Ys[k] - Ys[k + 1], axis=1) for k in range(K - 1)]
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="yoked t-SNE (Rauber et al. 2016; Xuan §2.3)",
        yoke=yoke,
        n_maps=K,
        # (openTSNE's "pca" alone did not say that map 2 onwards start rotated onto the map before)
        initialization="pca; each map's rotated/reflected onto the one before (orthogonal Procrustes)",
        alpha=alpha,
        alpha_times_n=alpha * n,
        perplexity=perp,
        perplexity_requested=float(perplexity),
        seed=int(seed),
        n_jobs=tsne_threads(n_jobs),
        neighbour_search=search,
        numerics=numeric_platform(),
        n=n,
        n_iter=int(n_iter),
        early_exaggeration_iter=int(early_exaggeration_iter),
        early_exaggeration=float(early_exaggeration),
        learning_rate=str(learning_rate),
        momentum=float(momentum),
        theta=float(theta),
        negative_gradient_method=method,
        kl_divergence_estimate="exact" if method == "exact" else f"{method} approximation (openTSNE)",
    )
    if K == 2:
        info.update(kl_a=float(kls[0]), kl_b=float(kls[1]))
    info.update(
        kl=[float(v) for v in kls],
        objective=float(sum(kls) + yoke_penalty(Ys, alpha, yoke=yoke, labels=labels)[0]),
        mean_displacement=float(np.mean(np.concatenate(disp))),
        mean_displacements=[float(d.mean()) for d in disp],
    )
    if yoke == "centroids":
        inv, counts = _class_index(labels, n)
        M = _class_means(np.stack(Ys), inv, counts)
        cd = np.linalg.norm(M[:-1] - M[1:], axis=2)  # (K − 1, C)
        info["mean_centroid_displacement"] = float(np.sum(cd * counts) / (counts.sum() * (K - 1)))
    for k, (_, scale) in enumerate(prepared):
        if scale != 1.0:
            info[f"input_scale_{'ab'[k] if K == 2 else k + 1}"] = scale
    return Ys, info


__all__ = ["yoked_tsne", "yoked_tsne_maps", "yoke_penalty", "yoked_tsne_exact_objective_and_grad",
           "yoked_tsne_objective_and_grad", "exact_kl_and_grad", "YokedObjective", "MapsKL", "ChainYoke",
           "kl_names", "default_alpha", "METHODS", "YOKES"]
