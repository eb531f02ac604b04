"""The float32 bound of cosine keys (``KeySpace.delta`` when the tile is the key itself, q·r):
(D + 16) u ‖q‖ ‖r‖max, a quarter of the general bound the candidate lists used before for unit rows
(its ‖r‖² and ‖q‖² terms are the Euclidean tile's). It holds for products in any order: checked
against numpy's and torch's float32 GEMMs on rows of one sign (Σ|q_k r_k| = q·r, the accumulation's
worst case) and on mixed rows, with the ranks it certifies equal to a float64 brute force."""

import numpy as np
import pytest

from embedscope.metrics.search import knn
from embedscope.metrics.search.counting import tile_delta
from embedscope.metrics.search.knn import KeySpace, pair_keys64, prepare


def _rows(n, d, seed, same_sign):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.01, 3.0, size=(n, 1))
    if same_sign:
        X = np.abs(X) + rng.uniform(0, 1e-3, size=(n, d))
    return prepare(X, "cosine")


@pytest.mark.parametrize("d", [16, 160, 1100, 2048])
@pytest.mark.parametrize("same_sign", [True, False])
def test_the_cosine_bound_holds_for_numpy_and_torch_gemms(d, same_sign):
    torch = pytest.importorskip("torch")
    Q = _rows(300, d, d, same_sign)
    ks = KeySpace(Q, Q, "cosine", True)
    assert ks.plain and ks.centre is None
    K = (Q @ Q.T)  # float64: its own rounding is ~1e-16, inside the bound's slack
    n = len(Q)
    exact = pair_keys64(Q, Q, np.repeat(np.arange(n), n), np.tile(np.arange(n), n), "cosine").reshape(n, n)
    assert np.abs(exact - K).max() < 1e-12
    general = (d + 16) * knn.U32 * 1.05 * (ks.rmax + np.sqrt(ks.qsq)) ** 2
    np.testing.assert_allclose(ks.delta, general / 4, rtol=1e-6)  # unit rows: a quarter
    np.testing.assert_allclose(ks.delta, tile_delta(ks), rtol=0.04)  # the counting pass's bound (one chunk: D + 17)
    for S in (ks.Q32 @ ks.R32.T, torch.from_numpy(ks.Q32) @ torch.from_numpy(ks.R32).T):
        err = np.abs(np.asarray(S, dtype=np.float64) - exact)
        assert np.all(err <= ks.delta[:, None]), float((err / ks.delta[:, None]).max())


def test_certified_ranks_with_the_tighter_bound_equal_a_brute_force():
    # near-ties everywhere: one-sign rows in 1,100 dimensions differing by 1e-6; the candidate
    # lists (CUDA's path, here with faiss) certified by the bound
    rng = np.random.default_rng(7)
    base = np.abs(rng.standard_normal(1100))
    X = base + 1e-6 * rng.standard_normal((400, 1100))
    Q = prepare(X, "cosine")
    ks = KeySpace(Q, Q, "cosine", True, centre=False)
    assert ks.plain
    got_v, got_i = knn.topk_exact(ks, 12, device="cpu")
    n = len(Q)
    K = pair_keys64(Q, Q, np.repeat(np.arange(n), n), np.tile(np.arange(n), n), "cosine").reshape(n, n)
    for i in range(n):
        k = K[i].copy()
        k[i] = -np.inf
        order = np.lexsort((np.arange(n), -k))[:12]
        np.testing.assert_array_equal(got_i[i], order)
        np.testing.assert_array_equal(got_v[i], k[order])
