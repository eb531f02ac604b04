"""The bfloat16 pre-filter of the filtered tile pass (embedscope.metrics.search.bf16, rows.py):
its error bound against float64 products, and ranks equal to a brute-force full sort on both of
its comparison paths (int16 bit patterns, float32 conversion), separate sets and chunked GEMMs."""

import numpy as np
import pytest
import torch
from test_search_ranks import _check, _data, brute_ranks

from embedscope.metrics import relevant_ranks
from embedscope.metrics.search import bf16, rows, search_threads


@pytest.fixture
def forced(monkeypatch):
    """The pre-filter on whatever the CPU (EMBEDSCOPE_BF16=1) and whatever the cost estimate;
    records per pass whether it was taken and which comparison paths its blocks use."""
    monkeypatch.setenv(bf16.ENV, "1")
    monkeypatch.setattr(bf16, "_STATE", {})
    monkeypatch.setattr(rows, "prefer_bf16", lambda *a, **k: True)
    seen = {"passes": 0, "bf16": 0, "int16_blocks": 0, "float_blocks": 0, "floors": 0}
    orig = rows._Rows.set_thresholds

    def spy(self):
        orig(self)
        seen["passes"] += 1
        seen["floors"] += bool(self.floor_bf16)
        if self.cthr is not None:
            seen["bf16"] += 1
            seen["int16_blocks"] += sum(self.pos_block)
            seen["float_blocks"] += len(self.pos_block) - sum(self.pos_block)

    monkeypatch.setattr(rows._Rows, "set_thresholds", spy)
    return seen


@pytest.mark.parametrize("dim", [3, 64, 300, 1100])
def test_bf16_error_bound_holds(dim):
    """|bf16 tile value − float64 key| ≤ bf16_error, on the tiles' own torch call, for rows of
    mixed norms, same-sign rows (the accumulation's worst case) and near-parallel rows."""
    rng = np.random.default_rng(dim)
    Q = rng.standard_normal((70, dim)) * rng.uniform(0.05, 4.0, size=(70, 1))
    R = rng.standard_normal((300, dim)) * rng.uniform(0.05, 4.0, size=(300, 1))
    Q[:10], R[:10] = np.abs(Q[:10]), np.abs(R[:10])
    R[10:20] = Q[10:20] * (1 + 1e-3 * rng.standard_normal((10, dim)))
    B = torch.mm(torch.from_numpy(Q.astype(np.float32)).to(torch.bfloat16),
                 torch.from_numpy(R.astype(np.float32)).to(torch.bfloat16).T).float().numpy()
    err = np.abs(B.astype(np.float64) - Q @ R.T)
    e = bf16.bf16_error(np.linalg.norm(Q, axis=1), float(np.linalg.norm(R, axis=1).max()), dim)
    assert np.all(err <= e[:, None])
    assert err.max() > 0.05 * e.max()  # a bound that means something, not one far above every error


def test_rows_pass_with_the_bf16_prefilter_equals_brute_force(forced, monkeypatch):
    X, y = _data(21, n=330, n_cls=9)
    X[200] = X[201]  # an exact tie
    ref = brute_ranks(X, y)
    for depth in (None, 5, "all"):
        rr = relevant_ranks(X, y, depth=depth, block=45, device="cpu")
        d = {None: int(rr.R.max()), 5: 5, "all": len(X) - 1}[depth]
        _check(rr, ref, d)
    assert forced["passes"] == forced["bf16"] == 3
    assert forced["floors"] == 2  # depth "all" ranks every reference: no floor, so no sample (rows._sample)
    assert forced["int16_blocks"] > 0  # thresholds > 0: bit patterns
    # floors from the lowest sampled key: thresholds below 0, compared as float32 after conversion
    monkeypatch.setattr(rows, "_sample_ranks", lambda depth, ns, nr, dim, pairs=None: np.full(depth.shape, ns))
    before = forced["float_blocks"]
    rr = relevant_ranks(X, y, depth=150, block=45, device="cpu")
    _check(rr, ref, 150)
    assert forced["bf16"] == 4 and forced["float_blocks"] > before


def test_bf16_prefilter_with_two_workers_keeps_the_callers_torch_threads(forced):
    X, y = _data(22, n=400, d=16, n_cls=5)
    before = torch.get_num_threads()
    with search_threads(2):
        rr = relevant_ranks(X, y, block=40, device="cpu")
    _check(rr, brute_ranks(X, y), int(rr.R.max()))
    assert forced["bf16"] == 1
    assert torch.get_num_threads() == before


def test_bf16_prefilter_separate_sets_and_chunked_gemm(forced, monkeypatch):
    from embedscope.metrics.search import counting

    monkeypatch.setattr(rows, "REF_TILE", 41)  # many reference tiles per query block (no symmetry)
    monkeypatch.setattr(counting, "K_CHUNK", 4)  # candidates' float32 keys summed per chunk of 4
    monkeypatch.setattr(counting, "CHUNK_MIN_DIM", 0)
    X, y = _data(23, n=150, d=10, n_cls=6)
    Xr, yr = _data(24, n=260, d=10, n_cls=6)
    Xr[5] = Xr[6] = X[7]
    rr = relevant_ranks(X, y, X_ref=Xr, y_ref=yr, depth=50, block=32, device="cpu")
    _check(rr, brute_ranks(X, y, Xr, yr), 50)
    assert forced["bf16"] == 1


def test_bf16_prefilter_off_by_environment(forced, monkeypatch):
    monkeypatch.setenv(bf16.ENV, "0")
    X, y = _data(25, n=200, n_cls=6)
    rr = relevant_ranks(X, y, device="cpu")
    _check(rr, brute_ranks(X, y), int(rr.R.max()))
    assert forced["passes"] == 1 and forced["bf16"] == 0 and forced["floors"] == 0


def test_cost_estimate_takes_sparse_passes_only():
    # SOP-like: 60,000 same-set queries at D = 128, ~50 candidates per query: taken
    assert bf16.prefer_bf16(60_000 * 30_500, 128, 60_000 * 50)
    # CUB-like: 6,000 queries, ~300 candidates per query in a 6,000-wide row: not taken
    assert not bf16.prefer_bf16(6_000 * 3_500, 128, 6_000 * 3_000)
    # tiny passes never (calls into torch cost more than they save)
    assert not bf16.prefer_bf16(200 * 100, 16, 0)


@pytest.mark.parametrize("labels", ["clusters", "random"])
def test_bf16_prefilter_keys_closer_than_bf16_resolution(forced, monkeypatch, labels):
    """Tight clusters: the keys within a cluster differ by far less than bfloat16's spacing, and
    the thresholds (the lowest relevant key, at depth "all") fall between bfloat16 values. The
    candidates must reach e_i below them; with e_i = 0 both cases lose survivors (checked when
    this test was written) and ranks come out wrong."""
    monkeypatch.setattr(rows, "_sample_ranks", lambda depth, ns, nr, dim, pairs=None: np.full(depth.shape, ns))
    rng = np.random.default_rng(5)
    y = rng.integers(0, 12, 400)
    X = rng.standard_normal((12, 48))[y] + 0.02 * rng.standard_normal((400, 48))
    lab = y if labels == "clusters" else rng.integers(0, 30, 400)  # thresholds > 0 / mostly < 0
    rr = relevant_ranks(X, lab, depth="all", block=45, device="cpu")
    _check(rr, brute_ranks(X, lab), len(X) - 1)
    assert forced["bf16"] == 1
    assert forced["int16_blocks" if labels == "clusters" else "float_blocks"] > 0


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_tiles_without_bf16_floors(forced, monkeypatch, threads):
    """Tiles pre-filtered in bfloat16 while the floors' sample GEMM stays float32 (a pass whose
    sample is too small to gain): exact ranks, and the caller's torch thread count kept."""
    monkeypatch.setattr(rows, "prefer_bf16", lambda *a, min_saving=bf16.MIN_SAVING: min_saving == bf16.MIN_SAVING)
    X, y = _data(26, n=300, d=12, n_cls=6)
    before = torch.get_num_threads()
    with search_threads(threads):
        rr = relevant_ranks(X, y, block=40, device="cpu")
    _check(rr, brute_ranks(X, y), int(rr.R.max()))
    assert forced["bf16"] == 1 and forced["floors"] == 0
    assert torch.get_num_threads() == before
