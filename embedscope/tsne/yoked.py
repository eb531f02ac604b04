"""Yoked t-SNE (docs/methods.md §10): the objective and its gradients, and the run that optimises it.

The yoked objective (Rauber, Falcão, Telea 2016, *Visualizing time-dependent data using dynamic
t-SNE*; used by Xuan, Stylianou, Pless §2.3) ties two t-SNE maps of the same points::

    C = KL(P^a ‖ Q^a) + KL(P^b ‖ Q^b) + α Σ_i ‖y_i^a − y_i^b‖²

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
    TSNE_DEFAULTS,
    check_map,
    effective_perplexity,
    numeric_platform,
    prepare_tsne_input,
    tsne_affinities,
    tsne_threads,
)
from embedscope.tsne.optimizer import GradientDescentState, gradient_descent
from embedscope.validation import check_matrix

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


class YokedObjective:
    """The yoked objective as a callable for :func:`~embedscope.tsne.optimizer.gradient_descent`.

    ``objective([Y_a, Y_b], eval_error) -> (error, [∂C/∂Y_a, ∂C/∂Y_b])`` with P multiplied by
    ``exaggeration`` (early exaggeration) and the true gradient of C (docs/methods.md §10): each map's KL
    gradient (``method`` "bh", "fft" or "exact") plus ±2α (y^a − y^b). With ``eval_error`` (bh/fft)
    ``error`` is ``{"KL_a": ..., "KL_b": ...}``, each map's KL with the exaggeration taken out
    (KL_e / e − log e); exact: ``{"KL_a+KL_b": ...}``.
    """

    def __init__(self, P_a: Any, P_b: Any, alpha: float, *, method: str = "bh", theta: float = 0.5,
                 n_jobs: int = 1, exaggeration: float = 1.0):
        if method not in METHODS:
            raise EmbedscopeError(f"method must be one of {', '.join(METHODS)}, got '{method}'")
        self.P_a, self.P_b = P_a, P_b
        self.alpha = float(alpha)
        self.method, self.theta, self.n_jobs = method, float(theta), int(n_jobs)
        self.exaggeration = float(exaggeration)
        ex = self.exaggeration
        self._Ps = [P_a * ex, P_b * ex] if (ex != 1.0 and method != "exact") else [P_a, P_b]

    def __call__(self, Ys: Sequence[np.ndarray], eval_error: bool = False) -> tuple[Any, list]:
        ex = self.exaggeration
        error = None
        if self.method == "exact":
            C, g_a, g_b = yoked_tsne_exact_objective_and_grad(Ys[0], Ys[1], self.P_a, self.P_b, 0.0,
                                                              exaggeration=ex)
            grads = [g_a, g_b]
            if eval_error:
                error = {"KL_a+KL_b": C}
        else:
            grads, kls = [], []
            for k in range(2):
                kl, g = _kl_and_grad(Ys[k], self._Ps[k], self.method, theta=self.theta, n_jobs=self.n_jobs,
                                     eval_error=eval_error)
                kls.append(kl / ex - math.log(ex))
                grads.append(g)
            if eval_error:
                error = {"KL_a": kls[0], "KL_b": kls[1]}
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
    if method not in METHODS:
        raise EmbedscopeError(f"negative_gradient_method must be auto, bh, fft or exact, got '{method}'")
    if method == "exact" and n > 5000:
        raise EmbedscopeError(f"the exact gradient is O(N^2): use bh or fft for {n} points")
    A, scale_a = prepare_tsne_input(A, "X_a")
    B, scale_b = prepare_tsne_input(B, "X_b")

    aff_a, search = tsne_affinities(A, perp, seed=seed, n_jobs=n_jobs)
    P_a = aff_a.P.tocsr()
    P_b = tsne_affinities(B, perp, seed=seed, n_jobs=n_jobs)[0].P.tocsr()
    Y_a = pca_init(A, 2, random_state=seed)
    Y_b = pca_init(B, 2, random_state=seed)
    Y_b = _procrustes_align(Y_b, Y_a) + Y_a.mean(0)
    Y_a = np.ascontiguousarray(Y_a, dtype=np.float64)  # openTSNE's initialisation as it is (not re-centred)
    Y_b = np.ascontiguousarray(Y_b, dtype=np.float64)

    Ys = [Y_a, Y_b]
    state = GradientDescentState.start(Ys)
    total = int(early_exaggeration_iter + n_iter)
    report, close = progress_reporter(progress, total, "yoked t-SNE")
    callback = None
    if report is not None:
        def callback(iteration, error, Ys):  # noqa: ARG001 - the optimiser's signature
            report(iteration, total, error or {})

    try:
        for phase_iters, ex in ((int(early_exaggeration_iter), float(early_exaggeration)), (int(n_iter), 1.0)):
            lr = n / ex if learning_rate == "auto" else float(learning_rate)
            # the KL gradients explicit (as t-SNE), the yoke implicit: stable for any alpha at t-SNE's
            # own learning rate (an explicit yoke step needs lr < ~1/alpha and stalls the maps)
            objective = YokedObjective(P_a, P_b, 0.0, method=method, theta=theta, n_jobs=n_jobs, exaggeration=ex)
            # t-SNE's step in openTSNE's units: its learning rate applies to the true gradient / 4
            gradient_descent(objective, Ys, phase_iters, learning_rate=lr, momentum=momentum, gradient_scale=0.25,
                             max_step_norm=max_step_norm, state=state, callback=callback, error_every=50,
                             implicit=_Yoke(alpha) if alpha > 0 else None)
            if ex != 1.0:  # openTSNE multiplies P by the exaggeration in place and divides it back after:
                P_a = (P_a * ex) / ex  # the same rounding, so that alpha = 0 is openTSNE's run bit for bit
                P_b = (P_b * ex) / ex
    finally:
        close()
    Y_a, Y_b = (check_map(Y, "yoked t-SNE") for Y in Ys)
    if not return_info:
        return Y_a, Y_b
    if method == "exact":
        C_kl, _, _ = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, 0.0)
        kl_a = yoked_tsne_exact_objective_and_grad(Y_a, Y_a, P_a, P_a, 0.0)[0] / 2
        kl_b = C_kl - kl_a
    else:
        # on one thread: openTSNE sums the KL over its threads (last digits would vary with n_jobs)
        kl_a = _kl_and_grad(Y_a, P_a, method, theta=theta, n_jobs=1, eval_error=True)[0]
        kl_b = _kl_and_grad(Y_b, P_b, method, theta=theta, n_jobs=1, eval_error=True)[0]
    dist = np.linalg.norm(Y_a - Y_b, axis=1)
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="yoked t-SNE (Rauber et al. 2016; Xuan §2.3)",
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
        kl_a=float(kl_a),
        kl_b=float(kl_b),
        objective=float(kl_a + kl_b + alpha * float(np.sum((Y_a - Y_b) ** 2))),
        mean_displacement=float(dist.mean()),
    )
    if scale_a != 1.0 or scale_b != 1.0:
        info.update(input_scale_a=scale_a, input_scale_b=scale_b)
    return Y_a, Y_b, info


__all__ = ["yoked_tsne", "yoked_tsne_exact_objective_and_grad", "yoked_tsne_objective_and_grad",
           "YokedObjective", "default_alpha", "METHODS"]
