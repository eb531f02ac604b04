"""t-SNE runs by openTSNE: one map of a set, and the joint map of training and test (docs/methods.md §10).

t-SNE itself is openTSNE (Poličar, Stražar, Zupan 2019) with its defaults: affinities
(:class:`openTSNE.affinity.PerplexityBasedNN`), PCA initialisation and the Barnes–Hut /
FFT-interpolated gradients. Every run returns its settings (``info``) so a figure can record them.

The map does not depend on the thread count (``n_jobs``): the affinities are computed by
:func:`tsne_affinities`, whose approximate neighbour search builds its trees on one thread
(openTSNE's own ``n_jobs`` > 1 builds other Annoy trees, hence another map); the gradients give the same bits on
any number of threads, and the KL divergence reported is evaluated on one thread. It still
depends on the machine's arithmetic (BLAS kernels, the maths library), recorded in
``info["numerics"]`` (:func:`numeric_platform`).

Degenerate input is refused up front and extreme scales are handled exactly
(:func:`prepare_tsne_input`): a run never returns NaN coordinates.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError
from embedscope.tsne import MIN_PERPLEXITY, MIN_POINTS
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
    """The thread count a map runs with for ``n_jobs`` (−1: every core this process may use,
    :func:`embedscope.device.available_cpus`, where openTSNE's own −1 counts the machine's, outside a
    container's or a scheduler's CPU mask; −2 one fewer, ...); passed to openTSNE resolved and recorded
    as ``info["n_jobs"]``. It changes the speed only, not the map (:func:`tsne_affinities`)."""
    from embedscope.device import available_cpus

    n = int(n_jobs)
    if n < 0:
        n = available_cpus() + n + 1
    return max(n, 1)


#: maps of at least this many points take every core by default (:func:`auto_jobs`)
AUTO_JOBS_MIN_POINTS = 1000


#: the most threads a map may ask for (``n_jobs``, ``--n-jobs``): past the cores they only wait; 100,000 started
#: threads until the system refused one
MAX_JOBS = 1024
#: the largest seed of a map: scikit-learn's PCA (the initialisation) takes 0 .. 2^32 - 1
MAX_SEED = 2 ** 32 - 1


def check_n_jobs(n_jobs, *, allow_none: bool = False) -> int | None:
    """``n_jobs`` of a map: -1 (every core this process may use), an integer in 1 .. :data:`MAX_JOBS`, or (``allow_none``)
    None (:func:`auto_jobs`); anything else a one-line error (0 has no meaning to joblib; -2 ... would
    leave cores out)."""
    from embedscope.validation import check_int

    n_jobs = check_int(n_jobs, "n_jobs", min=None, allow_none=allow_none)
    if n_jobs is not None and n_jobs != -1 and not 1 <= n_jobs <= MAX_JOBS:
        raise EmbedscopeError(f"n_jobs must be {'None (auto), ' if allow_none else ''}-1 (every core) or an integer "
                              f"in 1..{MAX_JOBS}, got {n_jobs}")
    return n_jobs


def auto_jobs(n_jobs: int | None, n_points: int) -> int:
    """``n_jobs`` as given (-1: the cores this process may use), or for ``None`` (the commands' default)
    the cores this process may use (:func:`embedscope.device.available_cpus`) less those already busy (the 1-minute load average,
    rounded; at least one) for a map of at least :data:`AUTO_JOBS_MIN_POINTS` points, one thread
    below. The map is the same for any count (:func:`tsne_affinities`); only the time changes: a
    50,000-point map took 96 s on one thread and 70 s on two of an idle 2-core machine, while a
    1,797-point map beside another busy process took 7.6 s on one thread and 10.3 s on two (threads
    that wait for a busy core; docs/PERFORMANCE.md), hence the load; a small map gains little."""
    if n_jobs == -1:  # every core this process may use (openTSNE's -1 counts the machine's, outside an affinity mask)
        from embedscope.device import available_cpus

        return available_cpus()
    if n_jobs is not None:
        return n_jobs
    if n_points < AUTO_JOBS_MIN_POINTS:
        return 1
    from embedscope.device import available_cpus

    cpus = available_cpus()
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average (Windows)
        busy = 0.0
    return max(1, min(cpus, int(math.floor(cpus - busy + 0.5))))


def numeric_platform() -> str:
    """What a map depends on beyond its settings, seed and input (recorded as ``info["numerics"]``).

    Not the thread count, but the arithmetic of the machine: the PCA initialisation's BLAS kernels
    (chosen by processor type) and the maths library's exp (FMA or not) change the last bits of
    the initialisation and of P, and t-SNE amplifies one unit in the last place into another
    layout (docs/methods.md §10). Processor architecture, BLAS library and kernel, C library,
    openTSNE and numpy versions.
    """
    import platform

    import openTSNE
    from threadpoolctl import threadpool_info

    blas = sorted({f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}"
                   for i in threadpool_info() if i.get("user_api") == "blas"})
    libc = " ".join(platform.libc_ver()).strip() or platform.system()
    return (f"{platform.machine()}; BLAS {', '.join(blas) or 'unknown'}; {libc}; openTSNE {openTSNE.__version__}; "
            f"numpy {np.__version__}")


#: openTSNE's ``neighbors="auto"``: exact search (scikit-learn) below this many points, Annoy from it on.
EXACT_NEIGHBOURS_BELOW = 1000


def _annoy_built_on_one_thread():
    """openTSNE's Annoy index (``openTSNE.nearest_neighbors.Annoy``) with its trees built on one
    thread and its queries on ``n_jobs`` threads.

    openTSNE's ``Annoy.build`` with the one change: ``index.build(n_jobs=1)``. Annoy's threaded
    build gives thread t the seed ``seed + t`` and its share of the trees, so the trees (and the
    neighbours found) depend on the thread count; a query only reads the trees, so the neighbours
    of each point are the same whichever thread asks. The build is the cheap part (20,000 x 32:
    0.23 s of 4.9 s on one thread).
    """
    from openTSNE.nearest_neighbors import Annoy

    class OneThreadBuildAnnoy(Annoy):
        def build(self):
            from openTSNE.dependencies.annoy import AnnoyIndex
            from sklearn.utils import check_random_state

            data, k = self.data, self.k
            N = data.shape[0]
            aliases = {"cosine": "angular", "l1": "manhattan", "l2": "euclidean", "taxicab": "manhattan"}
            self.index = AnnoyIndex(data.shape[1], aliases.get(self.metric, self.metric))
            self.index.set_seed(check_random_state(self.random_state).randint(np.iinfo(np.int32).max))
            for i in range(N):
                self.index.add_item(i, data[i])
            self.index.build(n_jobs=1, **{"n_trees": 50, **(self.knn_kwargs or {})})
            distances = np.zeros((N, k))
            indices = np.zeros((N, k)).astype(int)

            def getnns(i):  # Annoy returns the query point itself first
                indices_i, distances_i = self.index.get_nns_by_item(i, k + 1, include_distances=True)
                indices[i] = indices_i[1:]
                distances[i] = distances_i[1:]

            if self.n_jobs == 1:
                for i in range(N):
                    getnns(i)
            else:
                from joblib import Parallel, delayed

                Parallel(n_jobs=self.n_jobs, require="sharedmem")(delayed(getnns)(i) for i in range(N))
            return indices, distances

    return OneThreadBuildAnnoy


def tsne_affinities(X: np.ndarray, perplexity: float, *, seed: int, n_jobs: int = 1, neighbors: str = "auto",
                    metric: str = "euclidean", metric_params: dict | None = None,
                    knn_kwargs: dict | None = None) -> tuple[Any, str]:
    """openTSNE's affinities P of ``X``, the same whatever the thread count (docs/methods.md §10).

    ``openTSNE.affinity.PerplexityBasedNN`` (Gaussian kernels on the 3·perplexity nearest
    neighbours, perplexity-calibrated, symmetrised), as ``openTSNE.TSNE(...).fit`` computes them.
    With ``neighbors="auto"`` openTSNE searches exactly (scikit-learn) below 1,000 points and with
    Annoy's 50 random-projection trees from 1,000 on. Annoy builds its trees on the threads it is
    given, each thread drawing from its own generator (seed + thread index) and building its share
    of the trees: another thread count gives other trees, other neighbours for most points, another
    map. Here the trees are always built on one thread and queried on ``n_jobs`` threads
    (:func:`_annoy_built_on_one_thread`): openTSNE's ``n_jobs=1`` result bit for bit, for any
    ``n_jobs``. The exact search and the perplexity calibration (one point per task) give the same
    bits on any number of threads; another approximate search (pynndescent, hnsw) runs on one thread.

    Returns the ``Affinities`` object (``.P``: scipy CSR) and a description of the neighbour search
    (recorded as ``info["neighbour_search"]``).
    """
    from openTSNE.affinity import PerplexityBasedNN
    from openTSNE.nearest_neighbors import Annoy

    n = X.shape[0]
    exact = metric == "precomputed" or neighbors == "exact" or (neighbors == "auto" and n < EXACT_NEIGHBOURS_BELOW)
    annoy = not exact and (neighbors == "annoy" or (neighbors in ("auto", "approx") and metric in Annoy.VALID_METRICS))
    if annoy:
        k = min(n - 1, int(3 * perplexity))  # PerplexityBasedNN's k_neighbors="auto"
        index = _annoy_built_on_one_thread()(X, k, metric=metric, metric_params=metric_params, n_jobs=n_jobs,
                                             random_state=seed, knn_kwargs=knn_kwargs)
        aff = PerplexityBasedNN(X, perplexity=perplexity, method=index, n_jobs=n_jobs)
        trees = (knn_kwargs or {}).get("n_trees", 50)
        how = f"approximate (Annoy, {trees} trees built on 1 thread, seed {int(seed)})"
    else:
        aff = PerplexityBasedNN(X, perplexity=perplexity, method=neighbors, metric=metric,
                                metric_params=metric_params, n_jobs=n_jobs if exact else 1, random_state=seed,
                                knn_kwargs=knn_kwargs)
        name = type(aff.knn_index).__name__
        how = "exact (scikit-learn)" if name == "Sklearn" else f"{name} (1 thread)"
    return aff, f"{how}, {aff.knn_index.k} neighbours, {metric}"


def effective_perplexity(perplexity: float, n: int) -> float:
    """The perplexity actually used: ``min(perplexity, (n - 1) / 3)`` (openTSNE needs 3·perplexity
    neighbours per point). A perplexity below :data:`~embedscope.tsne.MIN_PERPLEXITY` (1) is refused,
    and so are fewer than :data:`~embedscope.tsne.MIN_POINTS` (6) points."""
    from embedscope.validation import check_int, check_number

    perplexity = check_number(perplexity, "perplexity", min=0, min_inclusive=False)
    if perplexity < MIN_PERPLEXITY:  # (openTSNE's search failed below 1/3; 1/3 to 1 gave one map for all)
        raise EmbedscopeError(f"perplexity must be at least {MIN_PERPLEXITY:g} (2 to the entropy of a point's "
                              f"neighbour distribution), got {perplexity:g}")
    n = check_int(n, "n (points)", min=0)
    if n < MIN_POINTS:
        raise EmbedscopeError(f"t-SNE needs at least {MIN_POINTS} points, got {n}")
    return float(min(perplexity, (n - 1) / 3.0))


def perplexity_cap(info: Any, n: int) -> str | None:
    """When the perplexity used (``info["perplexity"]``) is below the one asked for
    (``info["perplexity_requested"]``, :func:`effective_perplexity`'s cap at (N − 1)/3 for ``n``
    points): ``"50 capped at 6.333 for 20 points"``; otherwise (or either value missing) None.

    >>> perplexity_cap({"perplexity": 19 / 3, "perplexity_requested": 50.0}, 20)
    '50 capped at 6.333 for 20 points (at most (N − 1)/3)'
    >>> perplexity_cap({"perplexity": 30.0, "perplexity_requested": 30.0}, 200) is None
    True
    """
    used, asked = (info or {}).get("perplexity"), (info or {}).get("perplexity_requested")
    if not isinstance(used, (int, float)) or not isinstance(asked, (int, float)) or not used < asked:
        return None
    return f"{asked:.4g} capped at {used:.4g} for {int(n)} points (at most (N − 1)/3)"


def prepare_tsne_input(X: Any, name: str = "X") -> tuple[np.ndarray, float]:
    """Rows ready for t-SNE: finite float64, not all identical, at a scale openTSNE can handle.

    t-SNE depends on the rows only through their distances, and perplexity calibration makes the
    map invariant to a global scale. Rows whose largest |value| is beyond 2^±40 are therefore
    multiplied by a power of two (exact in floating point) that brings it near 1; other inputs are
    returned unchanged. Rows that are all identical have no distances to map: refused. So is a
    single dimension: openTSNE's PCA initialisation (docs/methods.md §10) takes two components.

    Returns
    -------
    X : array (N, D) float64
    scale : float
        The factor applied (1.0 when none).
    """
    A = check_matrix(X, name, dtype=np.float64)
    if A.shape[1] < 2:
        raise EmbedscopeError(f"{name}: t-SNE needs embeddings of at least 2 dimensions (its PCA initialisation "
                              f"takes 2 components), got {A.shape[1]}")
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

    from embedscope.validation import check_int, check_number

    # what openTSNE, joblib or scikit-learn would refuse deep inside (or take: a negative exaggeration length)
    seed = check_int(seed, "seed", min=0, max=MAX_SEED)
    n_iter = check_int(n_iter, "n_iter", min=0)
    early_exaggeration_iter = check_int(early_exaggeration_iter, "early_exaggeration_iter", min=0)
    n_jobs = tsne_threads(check_n_jobs(n_jobs))  # (-1 resolved here: openTSNE's counts the machine's cores)
    perplexity = check_number(perplexity, "perplexity", min=0, min_inclusive=False)

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
    # the affinities with Annoy's trees built on one thread, where the thread count would change
    # them (tsne_affinities); openTSNE's TSNE.fit computes the same ones for n_jobs = 1
    affinity_kw = {k: tsne_kwargs[k] for k in ("neighbors", "metric", "metric_params", "knn_kwargs")
                   if k in tsne_kwargs}
    try:
        affinities, search = tsne_affinities(X, perp, seed=seed, n_jobs=n_jobs, **affinity_kw)
        emb = tsne.fit(X, affinities=affinities)
        # openTSNE sums the final KL over its threads (last digits vary with n_jobs): evaluated
        # again on one thread, as openTSNE's n_jobs = 1 run reports it
        kl = emb.optimize(0, n_jobs=1, callbacks=None).kl_divergence if tsne_threads(n_jobs) > 1 \
            else emb.kl_divergence
        if report is not None and done[0] < total:  # (the callbacks come every 10 iterations of each phase:
            report(total, total, {"KL": float(kl)})  # --n-iter 1 ended the line at "250/251 it")
    finally:
        close()
    info = dict(TSNE_DEFAULTS)
    info.update(
        method="openTSNE.TSNE",
        perplexity=perp,
        perplexity_requested=float(perplexity),
        seed=int(seed),
        n_jobs=tsne_threads(n_jobs),
        neighbour_search=search,
        numerics=numeric_platform(),
        n_iter=int(n_iter),
        early_exaggeration_iter=int(early_exaggeration_iter),
        early_exaggeration=float(tsne.early_exaggeration),
        kl_divergence=float(kl if kl is not None else float("nan")),
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
        Threads for openTSNE's gradients (−1: every core), recorded in ``info["n_jobs"]``. The map
        and the KL divergence are the same bit for bit for any count: the approximate neighbour
        search, whose result would depend on it, builds its trees on one thread
        (:func:`tsne_affinities`; ``info["neighbour_search"]``).
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


__all__ = ["TSNE_DEFAULTS", "effective_perplexity", "perplexity_cap", "prepare_tsne_input", "check_map",
           "joint_tsne", "single_tsne", "tsne_affinities", "tsne_threads", "auto_jobs", "numeric_platform"]
