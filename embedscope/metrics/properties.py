"""Which image properties an embedding clusters: R-Precision and Normalized R-Precision per property (docs/methods.md §9).

Kobs et al. (ICCV 2021, §4, Eq. 4-5). For property k and query q with value v = a_k(q), N_v the
number of images with value v among the n images:

* ``R = N_v - 1`` (the query excluded), or ``min(N_v - 1, max_r)`` with a cap (the reference code's
  ``max_r = 1023``, Kobs' Table 6);
* ``h`` = the number of the R nearest neighbours of q (exact ranks; ties: lower index first,
  docs/methods.md §1) that share the value v;
* **R-Prec_k** = mean_q h / R (Eq. 4);
* **NR-Prec_k** = mean_q (h - mu) / sigma with p = N_v / n' (n' = number of non-lone queries),
  mu = R p, sigma = sqrt(R p (1 - p)) (Eq. 5 with the code's square root);
* values that occur once ("lone") are dropped as queries and counted; the **ceiling** (NR-Prec of
  perfect clustering) is the mean of sqrt(R (1 - p) / p) over the same queries.

Higher is better (more clustering of that property). The paper calls NR-Prec >= 2.576 "significant
at 1%"; that rule treats a mean of per-query z-scores as a standard normal, which it is not (the
mean of Q z-scores has a spread of about 1/sqrt(Q) under the null, and a bias). :func:`property_precision`
reports beside it a z-test against the exact null mean and variance of each query's hypergeometric
z-score (a random arrangement of the other images' values), assuming queries independent: the
p-value is one-sided (clustering above chance). The null mean is exact; the spread is not:
queries share neighbours, and on random Gaussian embeddings with permuted values the true spread
of NR-Prec was 1.14-1.24x ``null_sd`` (p < 0.01 in 2-3.5% of null runs), so the p-value is
approximate and somewhat liberal (docs/methods.md §9). ``permutations=P`` adds a permutation test
that holds whatever the dependence between queries: the values shuffled over the images, NR-Prec
recomputed exactly by the same engine (each shuffled property is one more row of it).

Undefined numbers are NaN, and each property's ``undefined`` says why (every value lone; one value
holding every query, p = 1; every row of X the same point, as ranked: a collapsed model, whose hits
would only measure the row order that breaks its ties; every row one of two points, as 1-D rows under
cosine, +1 or -1, where the row order picks some query's hits of that property).

Engine: exact, in bounded memory, for any R (uncapped R can be n/3). Per block of queries the
float32 key block (one GEMM, never N x N at once) gives each query's sorted top-L float32 keys
(L = the block's largest R + 16): by ``torch.topk`` for short lists, by one SIMD partition and sort
of whole rows packed with their columns for long ones (R deep: a property with few values and no
cap); below ``NUMPY_BELOW`` rows the GEMM and the lists are numpy's (no torch import; the same
hits). The exact R-th key t lies within delta of the R-th float32 key s (delta: a rigorous float32
error bound of the key), so everything above s + 2 delta is surely among the R nearest, everything
below s - 2 delta surely not, and only the few references in the band are ranked by float64 keys
computed pair by pair (lower index first on ties). A band that reaches the end of the list makes
that row retry with a longer list. No kNN label matrix of all queries is kept; the places of the
R-th key's band are found by binary search in the sorted lists, and where the sure hits run deep
they are counted by one scan of the rows' float32 keys above the band, not through the lists'
columns. Where a row's bands are wide (many equal keys: a collapsed model, whose every key ties),
the union of its properties' bands is ranked once (``_union_rows``),
with the keys read from a table between the distinct rows when X has few of them. A nearly collapsed
model with a few far rows (outliers, :func:`~embedscope.metrics.search.knn.outlier_refs`), whose
distance sets every query's bound (10^4 times the bulk's own at 1e-5 noise and outliers 0.1 away: 17-40x
slower), is counted with the outliers apart (``_Engine._outliers_apart``; up to N/64, at most 256, and more, up to
N/4, where a sample of rows shows that the loose bound would fill the windows about the deepest R with
float64 keys), as the retrieval searches do:
the other rows by their own bound, the outliers ranked among each query's neighbours from their exact
float64 keys, the outlier queries from their full float64 rows (the keys between the bulk and the outliers
computed once for both: a key of (q, r) is that of (r, q)); the same hits, bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from embedscope.device import ieee_float32
from embedscope.errors import EmbedscopeError
from embedscope.metrics.scale import unit_rows
from embedscope.metrics.search.knn import KeySpace, cross_keys64, padded_row_order, pair_keys64, prepare, union_places
from embedscope.text import quoted
from embedscope.validation import as_values, missing_entries

__all__ = ["property_precision", "compare_groups", "SIGNIFICANCE_Z"]

SIGNIFICANCE_Z = 2.576  # Kobs' "significant at 1%" rule
SLACK = 16
PERM_GROUP_ENTRIES = 1 << 23  # shuffled property rows x n per call of the engine (permutation test)
BIG_WINDOW = 16  # a row with a window of this many places or more ranks the union of its windows (_Engine._union_rows)
UNION_ENTRIES = 1 << 22  # rows x places of the top-L lists per pass of _Engine._union_rows
LONG_LIST = 8  # a top-L list with LONG_LIST * L >= n comes from one sort of whole rows, not torch.topk (_Engine._top)
DEEP_COUNT = 16  # sure hits up to a place W with DEEP_COUNT * W >= n are counted by a scan of the rows (_count_same_above)
KEY_TABLE = 1 << 22  # largest table of float64 keys between distinct rows of X (few distinct rows: a collapsed model)
# X with at most this many distinct rows (as ranked): each query's hits are checked for a dependence on the row
# order that breaks ties (_row_order_queries): a model collapsed to two points, as 1-D rows or collinear rows
# under cosine (every row normalises to +u or -u), where each query's neighbours are two tied groups. With more
# distinct rows, repeated rows keep the documented tie-break (lower index first, docs/methods.md §1) and a note
FEW_ROWS = 2
# X with fewer rows than this: the engine's GEMM and top-L lists run in numpy, without importing torch (1.3 s of
# a digits-sized `embedscope properties`); from it on, torch's (its topk is faster on long rows). The same hit
# counts either way: the float32 keys only choose the candidates, the float64 keys rank (docs/PERFORMANCE.md)
NUMPY_BELOW = 8192
# more far rows than min(N / 64, 256) (up to N / 4, knn.outlier_most) are taken apart (_Engine._outliers_apart)
# where the engine of all rows would hold more float64 keys per row in its windows about the deepest R than
# this many times the outliers (knn.window_pays). Measured (6,000 x 128, 94-600 outliers, docs/PERFORMANCE.md):
# apart paid 1.4-2.2x at 0.42-1.4 and 6-13x at 9-63, broke even (0.96-1.15x) at 0.21 and lost 0.45-0.64x at
# 0.02-0.04 (classes of 60 only); since the far rows' keys are held once (twenty-eighth session), quiet:
# 1.75x at 0.42, 1.44x at 0.21, 1.15x at 0.13, 0.81x at 0.10 (900-1,200 far rows 2e-3 away)
APART_WINDOW_RATIO = 0.15
# the float64 keys between the bulk's rows and the outliers (_Engine._outliers_apart) are computed once and
# held where there are at most this many (knn.OUTLIER_MAX_KEYS, as the kNN search holds them: 128 MiB), and
# serve both the bulk queries (read by rows) and the outlier queries (by columns: a key of (q, r) is that of
# (r, q)); beyond it (at most 256 outliers and N > 65,536), per block of bulk queries and per outlier query
APART_KEYS = 1 << 24
FAR_ROW_ENTRIES = 1 << 20  # outlier queries x n float64 keys ranked per pass (_Engine._hits_apart; ~50 MB)


#: the most permutations ``property_precision`` draws (each is a full NR-Prec pass: 10**7 would take days)
MAX_PERMUTATIONS = 1_000_000


def _encode(values, n: int, name: str) -> np.ndarray:
    v = as_values(values, f"property '{name}'")  # (a torch tensor that requires grad, or of bfloat16; ["a", nan] as objects)
    if v.ndim != 1 or v.shape[0] != n:
        raise EmbedscopeError(f"property '{name}' has shape {v.shape}, expected ({n},) to match X")
    if v.dtype.kind == "f" and not np.all(np.isfinite(v)):
        raise EmbedscopeError(f"property '{name}' holds NaN or inf values")
    if v.dtype.kind in "mMO" and missing_entries(v).any():  # (a datetime column with gaps: NaT was one shared value)
        what = "NaT" if v.dtype.kind in "mM" else "None, NaN, NaT or NA"
        raise EmbedscopeError(f"property '{name}' holds missing values ({what})")
    if v.dtype.kind == "O":  # values compare as they are (1 and "1", None and "None" were equal as strings)
        try:
            _, codes = np.unique(v, return_inverse=True)
        except TypeError:
            kinds = sorted({type(x).__name__ for x in v})
            raise EmbedscopeError(f"property '{name}' mixes values of types {', '.join(kinds)}; "
                                  "give one type per property") from None
        return codes.astype(np.int64).ravel()
    _, codes = np.unique(v, return_inverse=True)
    return codes.astype(np.int64).ravel()


def _pair_keys64(X64: np.ndarray, qi: np.ndarray, rj: np.ndarray, metric: str) -> np.ndarray:
    """Exact float64 ranking keys (larger = nearer) of pairs, each reduced on its own: the search's
    :func:`~embedscope.metrics.search.knn.pair_keys64` (gathers into reused buffers; bitwise the
    same keys as the retrieval measures give the same pairs)."""
    return pair_keys64(X64, X64, np.asarray(qi, dtype=np.int64), np.asarray(rj, dtype=np.int64), metric)


def _cross_keys64(X64: np.ndarray, qs: np.ndarray, rs: np.ndarray, metric: str) -> np.ndarray:
    """:func:`_pair_keys64` of every row ``qs`` with every row ``rs``, as a (len(qs), len(rs)) array, bit
    for bit (:func:`~embedscope.metrics.search.knn.cross_keys64`: no gathered row per pair). The key of
    (q, r) is also that of (r, q), bit for bit (the same products or squared differences, summed in the
    same order; what the searches' window-key reuse relies on too)."""
    return cross_keys64(X64, X64, qs, rs, metric)


REPEAT_CHUNK = 1 << 22  # entries of X gathered at once by _repeated_rows


def _repeated_rows(A: np.ndarray) -> int:
    """The number of rows of ``A`` equal to an earlier row, element for element (-0.0 = 0.0): n minus the
    number of distinct rows. In O(n d) memory-light passes, never N x N: a 64-bit hash of each row's bits
    (column blocks), the rows sorted by it, and rows of equal hash compared exactly; should two distinct
    rows share a hash, the exact :func:`~embedscope.metrics.search.knn.identical_rows` decides."""
    n, d = A.shape
    if n < 2:
        return 0
    h = _row_hash(A)
    o = np.argsort(h, kind="stable")
    same = np.flatnonzero(h[o[1:]] == h[o[:-1]])
    a, b = o[same], o[same + 1]
    rows = max(1, REPEAT_CHUNK // max(d, 1))
    for s in range(0, len(a), rows):
        if not np.array_equal(A[a[s:s + rows]], A[b[s:s + rows]]):  # a hash collision: decide exactly
            from embedscope.metrics.search.knn import identical_rows

            return int(n - len(identical_rows(A + 0.0)[0]))
    return int(len(same))  # equal hashes hold equal rows: a run of r equal rows counts r - 1


def _row_hash(A: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's float64 bits (-0.0 as 0.0), by column blocks of ``REPEAT_CHUNK`` entries:
    equal rows hash alike (distinct rows almost never do; :func:`_repeated_rows` checks)."""
    n, d = A.shape
    mult = np.random.default_rng(0x5EED).integers(1, 1 << 62, size=d, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    h = np.zeros(n, dtype=np.uint64)
    step = max(1, REPEAT_CHUNK // max(n, 1))
    for c in range(0, d, step):
        bits = np.ascontiguousarray(A[:, c:c + step] + 0.0, dtype=np.float64).view(np.uint64)  # + 0.0: -0.0 -> 0.0
        h += (bits * mult[c:c + step]).sum(axis=1, dtype=np.uint64)  # arithmetic mod 2^64
    return h


def _collapsed_why(metric: str, d: int) -> str:
    """Why a property's ranking numbers are undefined when every row (as ranked) is the same point."""
    where = ("every row of X points in the same direction (cosine"
             + ("; one dimension: every row normalises to +1 or -1" if d == 1 else "") + ")"
             if metric == "cosine" else "every row of X is the same point")
    return (f"{where}, so every distance ties and each query's neighbours are the lowest row indices: "
            "the hits would measure row order (a collapsed model)")


class _Engine:
    """Hit counts h[k, q] within each query's top R[k, q] (exact ranks, bounded memory)."""

    def __init__(self, X: np.ndarray, metric: str, block: int | None = None, cut: int | None = None):
        """``cut``: the depth R at which more outliers than min(N / 64, 256) are weighed
        (:meth:`_outliers_apart`; property_precision: the deepest R, whose windows cost most); None: only
        those few, as before."""
        X64 = np.ascontiguousarray(X, dtype=np.float64)
        if metric == "cosine":  # (rows of extreme scale normalised exactly: knn.prepare)
            X64 = prepare(X64, "cosine", "X")
        # the float32 copies and their bound as the retrieval searches keep them (KeySpace: a nearly
        # collapsed model is measured about its mean, so that its keys separate); X64: the rows
        # ranked (as given, or Euclidean rows of extreme norms times a power of two: the same order)
        ks = KeySpace(X64, X64, metric, True)
        # the float32 work in numpy below NUMPY_BELOW rows (no torch import), else in torch
        torch = None
        if X64.shape[0] >= NUMPY_BELOW:
            import torch
        self._setup(ks, metric, block, torch)
        self.apart = self._outliers_apart(ks, block, cut)

    def _setup(self, ks: KeySpace, metric: str, block: int | None, torch) -> None:
        """The engine's rows, float32 copies and bound from the KeySpace ``ks`` (a same-set search)."""
        self.X64, self.metric = ks.Q64, metric
        self.n = ks.Q64.shape[0]
        self.torch = torch
        tensor = (lambda a: a) if self.torch is None else self.torch.from_numpy
        self.X32 = tensor(ks.Q32)
        self.two = ks.two
        self.rsub = None if ks.rsub32 is None else tensor(ks.rsub32)
        self.qoff = None if ks.plain else ks.qoff  # a key is the float32 value less qoff
        # twice the forward-error bound of a float32 key (GEMM, norms, subtraction), whatever the order
        self.delta = 2.0 * ks.delta
        self.block = block or int(max(16, min(1024, (1 << 25) // max(self.n, 1))))
        self._table = None  # (row -> distinct row, keys between distinct rows), made when first needed
        self._kbuf = None  # the float32 key block (keys32), reused
        self._keybuf = None  # the packed keys of long top-L lists (_top), reused over blocks
        self.apart = None  # the engine of the bulk where outliers are taken apart (_outliers_apart)
        self.out = None  # (a bulk's engine) the rows of all X, the bulk's indices in it, the outliers'
        self._kap = None  # (a bulk's engine) its rows' float64 keys against the outliers, held (APART_KEYS)

    def _outliers_apart(self, ks: KeySpace, block: int | None, cut: int | None = None) -> "_Engine | None":
        """The engine of the "bulk" of a nearly collapsed model whose few far rows (outliers,
        :func:`~embedscope.metrics.search.knn.outlier_refs`) would loosen every query's float32 bound
        by their distance over the bulk's spread (10^4 at 1e-5 noise and outliers 0.1 away), or None
        (no outliers; scale not 1; the bulk's bound, median over its rows, not ``knn.OUTLIER_GAIN``
        times tighter than the bound of all rows; more than min(N / 64, 256) outliers, up to N / 4
        (:func:`~embedscope.metrics.search.knn.outlier_most`, only with a ``cut``), where the engine of
        all rows would not fill its windows about each row's ``cut``-th key with float64 keys all the
        same: :func:`~embedscope.metrics.search.knn.window_pays`, ``APART_WINDOW_RATIO``). Its rows are
        copies, bit for bit, of the bulk's rows of ``self.X64`` (ascending indices, so that its columns
        break ties as the rows' indices do);
        :meth:`hits` counts the bulk queries' hits with it (:meth:`_outliers_first`: the outliers ranked
        among the bulk's rows exactly) and the outlier queries' from their full float64 rows: the same
        hits as without it, exactly (every key the same :func:`_pair_keys64` of the same two rows)."""
        from embedscope.metrics.search import knn

        if ks.scale != 1.0:
            return None
        far = knn.outlier_refs(ks, None if cut is None else knn.outlier_most(self.n, self.n))
        if far is None:
            return None
        near = np.setdiff1d(np.arange(self.n), far)
        if near.size < 2:
            return None
        R_in = self.X64[near]
        sub = KeySpace(R_in, R_in, self.metric, True)
        if sub.scale != 1.0 or knn.OUTLIER_GAIN * float(np.median(sub.delta)) > float(np.median(ks.delta[near])):
            return None  # (no gain: the bulk's bound is not much tighter)
        if not knn.window_pays(ks, sub, near, far.size, 1 if cut is None else cut, APART_WINDOW_RATIO):
            return None  # (many outliers, and the windows of all rows narrow all the same)
        bulk = _Engine.__new__(_Engine)
        bulk._setup(sub, self.metric, block, self.torch)
        bulk.out = (self.X64, near, far)
        return bulk

    def repeated_rows(self) -> int:
        """How many rows repeat an earlier row exactly as they are ranked (:func:`_repeated_rows` of the
        rows the keys come from: after the L2 normalisation of cosine), each such row's keys tie with its
        twin's everywhere, and their order among a query's neighbours is the row order (docs/methods.md §1)."""
        return _repeated_rows(self.X64)

    def _keys(self, qi: np.ndarray, rj: np.ndarray) -> np.ndarray:
        """:func:`_pair_keys64` of the pairs; where X has few distinct rows (a collapsed model), read from
        a table of the keys between them (bit for bit the same: a key depends only on its two rows' bits)."""
        if not self._table:
            return _pair_keys64(self.X64, qi, rj, self.metric)
        uid, tab, nu = self._table[:3]
        return tab[uid[qi] * nu + uid[rj]]

    def _make_table(self) -> None:
        """The table of :meth:`_keys` (and the keys' dense ranks) if X has at most sqrt(KEY_TABLE) and n / 4
        distinct rows (compared bit for bit)."""
        if self._table is not None:
            return
        from embedscope.metrics.search.knn import identical_rows

        first, uid = identical_rows(self.X64)
        nu = len(first)
        if nu * nu > KEY_TABLE or 4 * nu > self.n:
            self._table = False  # looked at: too many distinct rows
            return
        tab = _pair_keys64(self.X64, np.repeat(first, nu), np.tile(first, nu), self.metric)
        u, trank = np.unique(-tab, return_inverse=True)  # dense ranks, largest key first
        self._table = (uid, tab, nu, trank.ravel().astype(np.int64), len(u))

    def keys32(self, s: int, e: int):
        """Float32 values of queries s..e against all (self = -inf): keys plus ``qoff`` (Euclidean:
        2 q.r - |r|^2; a centred search, see KeySpace, the same of its centred rows)."""
        torch = self.torch
        rows = max(e - s, min(self.block, self.n))
        if torch is None:  # numpy (a small X): the same steps, the same error bound (bits may differ)
            if self._kbuf is None or self._kbuf.shape[0] < e - s:
                self._kbuf = np.empty((rows, self.n), dtype=np.float32)
            K = np.matmul(self.X32[s:e], self.X32.T, out=self._kbuf[:e - s])
            if self.two != 1.0:
                K *= np.float32(self.two)
            if self.rsub is not None:
                K -= self.rsub
            ar = np.arange(e - s)
            K[ar, ar + s] = -np.inf
            return K
        if self._kbuf is None or self._kbuf.shape[0] < e - s:
            self._kbuf = torch.empty((rows, self.n), dtype=torch.float32)
        with ieee_float32():  # the bound is float32's: never a reduced-precision product
            K = torch.matmul(self.X32[s:e], self.X32.T, out=self._kbuf[:e - s])  # reused: no page faults per block
        if self.two != 1.0:
            K.mul_(self.two)
        if self.rsub is not None:
            K.sub_(self.rsub)
        ar = torch.arange(e - s)
        K[ar, ar + s] = -float("inf")
        return K

    def hits(self, codes: np.ndarray, R: np.ndarray, progress: bool = False) -> np.ndarray:
        """codes (P, n) value codes; R (P, n) depths (0 = not a query) -> hits (P, n). ``progress``: one bar
        over the n queries, which reaches n: with the outliers taken apart (:meth:`_outliers_apart`) the bulk
        queries advance it as they are counted, and each outlier query by one."""
        bar = None
        if progress:
            from embedscope.progress import progress_bar

            bar = progress_bar(total=codes.shape[1], desc="properties", unit="q")
        if self.apart is not None:
            H = self._hits_apart(codes, R, bar)
        else:
            H = self._hits(codes, R, bar)
        if bar is not None:
            bar.close()
        return H

    def _hits(self, codes: np.ndarray, R: np.ndarray, bar=None, ocodes: np.ndarray | None = None) -> np.ndarray:
        """:meth:`hits` of this engine's own rows; ``bar`` advanced by each block's queries. ``ocodes``: (a
        bulk's engine, :meth:`_outliers_apart`) the outliers' codes (P, outliers), ranked with every query."""
        P, n = codes.shape
        H = np.zeros((P, n), dtype=np.int64)
        for s in range(0, n, self.block):
            e = min(n, s + self.block)
            if R[:, s:e].max() > 0:
                K = self.keys32(s, e)
                rows = np.arange(s, e)
                L = int(min(n - 1, R[:, s:e].max() + SLACK))
                while len(rows):
                    rows = self._rows(K, rows, s, codes, R, H, L, ocodes)
                    L = min(n - 1, 4 * L)
            if bar is not None:
                bar.update(e - s)
        return H

    def _hits_apart(self, codes: np.ndarray, R: np.ndarray, bar=None) -> np.ndarray:
        """:meth:`hits` with the outliers taken apart (:meth:`_outliers_apart`): the bulk queries by the
        bulk's engine (the outliers ranked among their neighbours exactly), each outlier query from its
        full float64 row (few x n keys; ties to the lower index). ``bar``: advanced by every query, bulk
        and outlier, n in all.

        Where some outliers are queries and the keys between the bulk's rows and the outliers fit
        ``APART_KEYS``, these keys are computed once (:func:`_cross_keys64`) and kept by the bulk's engine
        (for later calls too: the permutation test's): its queries read their rows, the outlier queries
        their columns (the key of (q, r) is that of (r, q), bit for bit), so that an outlier query computes
        only its keys to the outliers; each outlier query's first places by :func:`_first_places`."""
        bulk = self.apart
        _, near, far = bulk.out
        P, n = codes.shape
        H = np.zeros((P, n), dtype=np.int64)
        asked = np.flatnonzero(R[:, far].any(axis=0))  # the outliers that are queries (places in far)
        if bulk._kap is None and asked.size and near.size * far.size <= APART_KEYS:
            bulk._kap = _cross_keys64(self.X64, near, far, self.metric)
        H[:, near] = bulk._hits(np.ascontiguousarray(codes[:, near]), np.ascontiguousarray(R[:, near]), bar,
                                ocodes=np.ascontiguousarray(codes[:, far]))
        if bar is not None:
            for _ in range(far.size - asked.size):  # (the others: nothing to count)
                bar.update(1)
        step = max(1, FAR_ROW_ENTRIES // n)
        refs = np.arange(n)
        for a in range(0, asked.size, step):
            g = asked[a:a + step]
            q = far[g]
            if bulk._kap is not None:  # rows of the held keys' columns, and the keys among the outliers
                key = np.empty((g.size, n))
                key[:, near] = bulk._kap[:, g].T
                key[:, far] = _cross_keys64(self.X64, q, far, self.metric)
            else:  # each query's row at once (knn.pair_keys64's long runs: the query broadcast, no gathers)
                key = np.empty((g.size, n))
                for i, qi in enumerate(q):
                    key[i] = self._keys(np.full(n, qi), refs)
            top = _first_places(key, q, int(R[:, q].max()))
            for k in range(P):
                Rk = R[k, q]
                act = np.flatnonzero(Rk > 0)
                if not len(act):
                    continue
                W = int(Rk[act].max())
                same = codes[k][top[act, :W]] == codes[k, q[act]][:, None]
                same &= np.arange(W)[None, :] < Rk[act][:, None]
                H[k, q[act]] = same.sum(axis=1)
            if bar is not None:
                for _ in range(g.size):
                    bar.update(1)
        return H

    def _outliers_first(self, v32, idx: np.ndarray, rows: np.ndarray, codes: np.ndarray, Rr: np.ndarray,
                        ocodes: np.ndarray, L: int, full: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A bulk's engine, :meth:`_outliers_apart`.) The outliers among the nearest of bulk queries ``rows``
        -> (the depths left to the bulk, (P, m); the outliers' hits, (P, m); the rows to retry with longer lists).

        Per row, the outliers in the order (float64 key desc, index asc) (:func:`_pair_keys64`: exact); the j-th
        (1-based) has the place j + B_j among all rows, B_j the bulk rows before it, counted as the bands are:
        the list's float32 values above its key + 2 delta surely are, those below its key - 2 delta surely are
        not, and the ones between get float64 keys (ties: the lower index first). B_j grows with j, so a row
        stops at its first outlier past its deepest R. A property's top R are then the outliers with j + B_j
        <= R (j* of them) and the bulk's top R - j*: the order is total, and its first R places hold a prefix
        of each part. Where the band reaches the list's end (not the whole row) and the outlier may be within
        the depth, the row is retried with a longer list."""
        Xf, near, far = self.out
        m, nf = len(rows), far.size
        kap = self._kap[rows] if self._kap is not None else _cross_keys64(Xf, near[rows], far, self.metric)
        o = _stable_argsort(-kap)  # (far ascending: equal keys keep the lower index first)
        kap = np.take_along_axis(kap, o, 1)
        fo = far[o]
        qoff = self.qoff[rows] if self.qoff is not None else None
        dl = self.delta[rows]
        deepest = Rr.max(axis=0)
        place = np.full((m, nf), np.iinfo(np.int64).max)  # each outlier's place among all rows (past the depth: max)
        retry = np.zeros(m, dtype=bool)
        live = np.flatnonzero(deepest > 0)
        for j in range(nf):
            if not len(live):
                break
            c = kap[live, j]
            qa = None if qoff is None else qoff[live]
            cert = _count_above(v32, live, qa, c + 2 * dl[live], strict=True)
            hi = _count_above(v32, live, qa, c - 2 * dl[live], strict=False)
            before = cert.copy()
            ln = hi - cert
            w = np.flatnonzero(ln > 0)
            if len(w):
                lw = ln[w]
                wr = np.repeat(w, lw)
                at = np.repeat(cert[w], lw) + np.arange(int(lw.sum())) - np.repeat(np.cumsum(lw) - lw, lw)
                ref = idx[live[wr], at]
                k64 = self._keys(rows[live[wr]], ref)
                tie = (k64 > c[wr]) | ((k64 == c[wr]) & (near[ref] < fo[live[wr], j]))
                before += np.bincount(wr, weights=tie, minlength=len(live)).astype(np.int64)
            pos = j + 1 + before
            unsure = (hi >= L) & (not full) & (pos <= deepest[live])  # the band runs past the list
            retry[live[unsure]] = True
            inside = (pos <= deepest[live]) & ~unsure
            place[live[inside], j] = pos[inside]
            live = live[inside]
        Rb = np.empty_like(Rr)
        Ho = np.empty_like(Rr)
        qc = codes[:, rows]
        for k in range(codes.shape[0]):
            top = place <= Rr[k][:, None]
            Rb[k] = Rr[k] - top.sum(axis=1)
            Ho[k] = (top & (ocodes[k][o] == qc[k][:, None])).sum(axis=1)
        return Rb, Ho, retry

    def _top(self, sub, L: int) -> tuple[np.ndarray, np.ndarray]:
        """Each row's L largest float32 values, sorted (descending), and their columns.

        A short list (L < n / LONG_LIST) by ``torch.topk``; a long one (deep R: a property with few values
        and no cap) by one SIMD partition and sort of whole rows, each value packed with its column into an int64 so
        that the sort carries the columns (equal values: lower column first): ~2x faster than
        ``topk`` at L = n / 3 and no slower from L = n / 8 (measured, docs/PERFORMANCE.md). Without torch
        (``sub`` a numpy array: X smaller than NUMPY_BELOW) a short list by ``np.argpartition`` and a sort of
        the L values: equal values may come in another order than topk's, which changes no count (the
        sure hits are the values above a band, the band is ranked by float64 keys)."""
        torch = self.torch
        m, n = sub.shape
        if LONG_LIST * L < n:
            if torch is None:
                part = np.argpartition(sub, n - L, axis=1)[:, n - L:]  # the L largest, unordered
                v32 = np.take_along_axis(sub, part, axis=1)
                o = np.argsort(v32, axis=1)[:, ::-1]  # descending
                return np.take_along_axis(v32, o, axis=1), np.take_along_axis(part, o, axis=1)
            v32, idx = torch.topk(sub, L, dim=1, largest=True, sorted=True)
            return v32.numpy(), idx.numpy()
        if self._keybuf is None or self._keybuf.shape[0] < m:
            shape = (max(m, min(self.block, self.n)), n)
            self._keybuf = np.empty(shape, dtype=np.int64) if torch is None else torch.empty(shape, dtype=torch.int64)
        key = _packed_descending(sub, self._keybuf)
        _sort_rows(key, L)
        idx = key[:, :L]
        idx &= 0xFFFFFFFF  # the column (key's low half), in place: the sorted keys are not needed again
        return _Listed(_as_numpy(sub), idx), idx

    def _rows(self, K, rows: np.ndarray, s: int, codes, R, H, L: int, ocodes=None) -> np.ndarray:
        """Count hits of the given rows with top-L lists; return rows whose band reached the list end.
        ``ocodes``: (a bulk's engine) the outliers' codes: each row's outliers within a property's depth
        are counted first and the bulk's lists go the rest of the depth (:meth:`_outliers_first`)."""
        if len(rows) == K.shape[0]:
            sub = K
        else:
            sub = K[rows - s] if self.torch is None else K[self.torch.from_numpy(rows - s)]
        v32, idx = self._top(sub, L)
        qoff = self.qoff[rows] if self.qoff is not None else None
        dl = self.delta[rows]
        full = L >= self.n - 1
        retry = np.zeros(len(rows), dtype=bool)
        P, m = codes.shape[0], len(rows)
        Rr, Ho = R[:, rows], None  # the depths the lists go (less the outliers within them: a bulk's engine)
        if self.out is not None:
            Rr, Ho, retry = self._outliers_first(v32, idx, rows, codes, Rr, ocodes, L, full)
        # per property and row: the window [lo, hi) of places to rank in float64, and how many of it are taken
        LO, HI, NEED = (np.zeros((P, m), dtype=np.int64) for _ in range(3))
        for k in range(P):
            Rk = Rr[k]
            act = np.flatnonzero(Rk > 0)
            if not len(act):
                continue
            qa = None if qoff is None else qoff[act]
            sth = _value64(v32, act, Rk[act] - 1, qa)
            lo = _count_above(v32, act, qa, sth + 2 * dl[act], strict=True)  # first position with v <= s + 2d
            hi = _count_above(v32, act, qa, sth - 2 * dl[act], strict=False)  # first position with v < s - 2d
            if not full:
                bad = hi >= L
                retry[act[bad]] = True
                act, lo, hi = act[~bad], lo[~bad], hi[~bad]
                if not len(act):
                    continue
            W = int(lo.max())  # the sure hits lie before lo: only that many columns are looked at
            if DEEP_COUNT * W >= self.n:
                # a deep list: count in the rows' float32 values above each row's place lo, not through
                # the list's columns (a scan of the row beats gathering W codes per row)
                H[k, rows[act]] = _count_same_above(_as_numpy(sub), act, v32, lo, codes[k], rows[act])
            else:
                same = codes[k][idx[act, :W]] == codes[k, rows[act]][:, None]
                H[k, rows[act]] = (same & (np.arange(W)[None, :] < lo[:, None])).sum(1)
            LO[k, act], HI[k, act], NEED[k, act] = lo, hi, Rk[act] - lo
        lens = HI - LO
        lens[:, retry] = 0
        # rows with a large window (many float32 near-ties: a collapsed model) rank the union of their windows once
        big = lens.max(0) >= BIG_WINDOW
        if big.any():
            self._union_rows(np.flatnonzero(big), rows, idx, codes, LO, HI, NEED, H, L)
            lens[:, big] = 0
        bq, bk, bpos, bneed = [], [], [], []
        for k in range(P):
            act = np.flatnonzero(lens[k])
            if not len(act):
                continue
            ln = lens[k, act]
            tot = int(ln.sum())
            offs = np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln)
            bq.append(np.repeat(act, ln))
            bk.append(np.full(tot, k))
            bpos.append(np.repeat(LO[k, act], ln) + offs)
            bneed.append(np.repeat(NEED[k, act], ln))
        if bq:
            bq, bk, bpos, bneed = (np.concatenate(x) for x in (bq, bk, bpos, bneed))
            ref = idx[bq, bpos]
            k64 = self._keys(rows[bq], ref)
            grp = bk * len(rows) + bq
            order = np.lexsort((ref, -k64, grp))
            g = grp[order]
            start = np.searchsorted(g, g, side="left")
            rank = np.arange(len(g)) - start
            chosen = order[rank < bneed[order]]
            hit = codes[bk[chosen], ref[chosen]] == codes[bk[chosen], rows[bq[chosen]]]
            np.add.at(H, (bk[chosen], rows[bq[chosen]]), hit.astype(np.int64))
        if Ho is not None:
            H[:, rows] += Ho
        # rows to retry start from zero for every property
        H[:, rows[retry]] = 0
        return rows[retry]

    def _union_rows(self, big: np.ndarray, rows, idx, codes, LO, HI, NEED, H, L: int) -> None:
        """Add the window hits of rows ``big`` (local to ``rows``) with large windows to ``H``.

        The windows of a row's properties are mostly the same places (with every key tied, all of
        them the whole row): each place of their union gets its float64 key once, the union is
        sorted per row by (key descending, reference ascending), and each property takes from it,
        in that order, the first ``NEED`` places of its own window. The same ranks as sorting each
        window on its own (the order of a subset is the order restricted to it). Rows go in groups
        of at most UNION_ENTRIES places of their lists: memory does not grow with rows x n x P."""
        self._make_table()
        P = codes.shape[0]
        W1 = L + 1  # hi <= L
        step = max(1, UNION_ENTRIES // W1)
        for a in range(0, len(big), step):
            c = big[a:a + step]
            nc = len(c)
            ru, pu = _union(LO[:, c].T, HI[:, c].T, W1)  # the union of the windows: rows, places, in row order
            q = rows[c]
            ref = idx[c[ru], pu]
            order = self._row_order(ru, q[ru], ref, nc)
            ru, pu, ref = ru[order], pu[order], ref[order]
            start = np.searchsorted(ru, np.arange(nc), side="left")  # each row's first sorted place
            for k in range(P):
                lk, hk, nk = LO[k, c], HI[k, c], NEED[k, c]
                if not np.any(hk > lk):
                    continue
                inw = (pu >= lk[ru]) & (pu < hk[ru])
                cw = np.cumsum(inw)
                before = np.where(start > 0, cw[np.maximum(start - 1, 0)], 0)  # window places in earlier rows
                take = inw & (cw - before[ru] <= nk[ru])  # the first NEED of the window, in key order
                hit = take & (codes[k][ref] == codes[k][q][ru])
                H[k, q] += np.bincount(ru[hit], minlength=nc)

    def _row_order(self, ru: np.ndarray, qi: np.ndarray, ref: np.ndarray, nc: int) -> np.ndarray:
        """np.lexsort((ref, -k64, ru)) of the pairs' float64 keys, as one integer sort of (row, key rank,
        reference) where that fits 63 bits; equal keys (0.0 and -0.0 too) share a rank, as in the sort."""
        if not len(ru):
            return np.zeros(0, dtype=np.int64)
        nr = int(ref.max()) + 1
        if self._table:  # the keys' ranks from the table's
            uid, tab, nu, trank, nd = self._table
            t = uid[qi] * nu + uid[ref]
            if nc * nd * nr >= 1 << 62:
                return np.lexsort((ref, -tab[t], ru))
            return np.argsort((ru * nd + trank[t]) * nr + ref)  # distinct: any sort gives the order
        k64 = _pair_keys64(self.X64, qi, ref, self.metric)
        nd, rank = _dense_ranks(ru, -k64, nc)  # ranks of (row, key descending)
        if nd * nr >= 1 << 62:
            return np.lexsort((ref, -k64, ru))
        return np.argsort(rank * nr + ref)


def _first_places(key: np.ndarray, q: np.ndarray, W: int) -> np.ndarray:
    """The first ``W`` references of each row of float64 keys ``key`` (g, n) in the order (key desc, index
    asc), the row's query ``q[i]`` left out -> (g, W): those of np.lexsort((refs, -key)) over the other
    references, without sorting whole rows. The W-th value t of each row (np.partition; the query +inf,
    never among the first n - 1) splits it: every key above t and, of those equal to t (0.0 and -0.0 too,
    as in a sort), the lowest indices, W in all, taken in index order and sorted by key (stably in the
    rows that hold equal keys)."""
    g, n = key.shape
    nk = np.negative(key)  # ascending = key descending
    rg = np.arange(g)
    nk[rg, q] = np.inf
    t = np.partition(nk, W - 1, axis=1)[:, W - 1:W]
    sel = nk < t
    eq = nk == t
    eq[rg, q] = False  # (t is +inf only where fewer than W others are finite: the query stays out)
    need = W - np.count_nonzero(sel, axis=1)
    cut = np.flatnonzero(np.count_nonzero(eq, axis=1) > need)  # rows with more ties at t than places left
    if cut.size:  # the lowest indices of their ties
        eq[cut] &= np.cumsum(eq[cut], axis=1) <= need[cut, None]
    sel |= eq
    cols = (np.flatnonzero(sel) % n).reshape(g, W)  # W per row, ascending index
    return np.take_along_axis(cols, _stable_argsort(np.take_along_axis(nk, cols, 1)), 1)


def _stable_argsort(v: np.ndarray) -> np.ndarray:
    """np.argsort(v, axis=1, kind="stable") of a 2-D float array without NaN: numpy's SIMD quicksort, and
    the stable sort only in the rows that hold equal values (0.0 and -0.0 too), whose order it decides."""
    o = np.argsort(v, axis=1)
    s = np.take_along_axis(v, o, 1)
    tied = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))
    if tied.size:
        o[tied] = np.argsort(v[tied], axis=1, kind="stable")
    return o


def _as_numpy(a) -> np.ndarray:
    """A float32 key block as a numpy array (a torch tensor's own memory, or the array itself)."""
    return a if isinstance(a, np.ndarray) else a.numpy()


class _Listed:
    """The sorted float32 values of top-L lists read through their columns (``v[rows, places]``), so
    that a long list's values are never gathered whole: only the few places the windows look at."""

    def __init__(self, K: np.ndarray, idx: np.ndarray):
        self.K, self.idx = K, idx
        self.shape = idx.shape

    def __getitem__(self, rc):
        r, c = rc
        return self.K[r, self.idx[r, c]]


def _value64(v32: np.ndarray, act: np.ndarray, pos: np.ndarray, qoff) -> np.ndarray:
    """The float64 values ``v32[act, pos]`` (less the rows' ``qoff``) that the windows compare."""
    v = v32[act, pos].astype(np.float64)
    return v if qoff is None else v - qoff


def _count_above(v32: np.ndarray, act: np.ndarray, qoff, c: np.ndarray, *, strict: bool) -> np.ndarray:
    """Per row ``act[i]`` of the descending ``v32``: how many of its leading values (as float64, less
    ``qoff``) are > c[i] (``strict``) or >= c[i]; a binary search per row, all rows at once (float64 of
    a float32 less a constant is monotone, so the values that pass are a prefix)."""
    lo = np.zeros(len(act), dtype=np.int64)
    hi = np.full(len(act), v32.shape[1], dtype=np.int64)
    live = np.arange(len(act))
    while len(live):
        mid = (lo[live] + hi[live]) // 2
        v = _value64(v32, act[live], mid, None if qoff is None else qoff[live])
        ok = v > c[live] if strict else v >= c[live]
        lo[live] = np.where(ok, mid + 1, lo[live])
        hi[live] = np.where(ok, hi[live], mid)
        live = live[lo[live] < hi[live]]
    return lo


def _count_same_above(Kn: np.ndarray, act: np.ndarray, v32: np.ndarray, lo: np.ndarray, code: np.ndarray,
                      q: np.ndarray) -> np.ndarray:
    """Per row ``act[i]``: the references among its first ``lo[i]`` places that share the query's value,
    counted in the row's float32 values: the first lo places are exactly the values above the value at
    place lo (the window test is monotone in it, so the value at lo - 1 is strictly larger; the query
    itself is -inf), or every reference where lo is the whole row."""
    L = v32.shape[1]
    thr = np.full(len(act), -np.inf, dtype=np.float32)
    inside = lo < L
    thr[inside] = v32[act[inside], lo[inside]]
    narrow = code.astype(np.min_scalar_type(int(code.max(initial=0))), copy=False)  # codes are >= 0
    out = np.empty(len(act), dtype=np.int64)
    step = max(1, (1 << 22) // max(Kn.shape[1], 1))  # rows per pass: a few MB of masks
    for a in range(0, len(act), step):
        b = slice(a, a + step)
        above = Kn[act[b]] > thr[b, None]
        above &= narrow[None, :] == narrow[q[b], None]
        out[b] = above.view(np.uint8).sum(axis=1, dtype=np.int64)
    return out


def _packed_descending(sub, buf=None) -> np.ndarray:
    """int64 keys of a (rows, n) float32 tensor whose ascending order is the values' descending order,
    equal values by column: (the value's order-reversed bits << 32) | column. Floats order as the
    signed integers i ^ ((i >> 31) & 0x7fffffff) of their bits; -0.0 just below 0.0, -inf lowest.
    ``buf``: an int64 tensor of at least that shape to write into (reused over blocks: a fresh
    allocation of this size costs its page faults each time). A numpy ``sub`` (and ``buf``): the same
    keys, bit for bit, in numpy."""
    m, n = sub.shape
    if isinstance(sub, np.ndarray):
        i = sub.view(np.int32)
        t = i >> 31
        t &= 0x7FFFFFFF
        t ^= i
        np.invert(t, out=t)  # descending
        if buf is None or buf.shape[1] != n or buf.shape[0] < m:
            buf = np.empty((m, n), dtype=np.int64)
        key = buf[:m]
        key[...] = t  # sign-extended, as torch's copy_
        del t
        key <<= 32
        key |= np.arange(n, dtype=np.int64)
        return key
    torch = __import__("torch")
    i = sub.view(torch.int32)
    t = i >> 31
    t &= 0x7FFFFFFF
    t ^= i
    t.bitwise_not_()  # descending
    if buf is None or buf.shape[1] != n or buf.shape[0] < m:
        buf = torch.empty((m, n), dtype=torch.int64)
    key = buf[:m]
    key.copy_(t)
    del t
    key <<= 32
    key |= torch.arange(n, dtype=torch.int64)
    return key.numpy()


def _sort_rows(a: np.ndarray, L: int) -> None:
    """Put the L smallest of each row of ``a`` first, sorted, in place (numpy's SIMD partition and
    sort; below n / 2 a partition first halves the sort), the rows split over the search threads."""
    from embedscope.metrics.search.threads import n_search_threads

    n = a.shape[1]

    def work(b: np.ndarray) -> None:
        if 2 * L < n:
            b.partition(L - 1, axis=1)
            b[:, :L].sort(axis=1)
        else:
            b.sort(axis=1)

    nt = min(n_search_threads(), len(a))
    if nt <= 1:
        work(a)
        return
    from concurrent.futures import ThreadPoolExecutor

    cuts = np.linspace(0, len(a), nt + 1).astype(int)
    with ThreadPoolExecutor(nt) as pool:
        list(pool.map(lambda j: work(a[cuts[j]:cuts[j + 1]]), range(nt)))


def _dense_ranks(ru: np.ndarray, v: np.ndarray, nc: int) -> tuple[int, np.ndarray]:
    """Ranks of (row, value) in increasing order, equal pairs sharing a rank (0.0 and -0.0 too):
    (an upper bound of the ranks, each element's rank). ``ru``: rows, non-decreasing. Where rows
    have similar lengths, one argsort per padded row (SIMD, in cache: several times np.unique's
    one sort of every value, which the rows then also split); else np.unique per value."""
    n = ru.size
    counts = np.bincount(ru, minlength=nc)
    width = int(counts.max(initial=0))
    if nc * width > 2 * n + 4096:
        u, inv = np.unique(v, return_inverse=True)
        return nc * len(u), ru * len(u) + inv.ravel()
    start = np.cumsum(counts) - counts
    o = padded_row_order(ru, np.arange(n) - start[ru], v, counts)  # elements by (row, value)
    s = v[o]
    brk = np.ones(n, dtype=bool)
    np.not_equal(s[1:], s[:-1], out=brk[1:])
    brk[start[counts > 0]] = True
    rank = np.empty(n, dtype=np.int64)
    rank[o] = np.cumsum(brk) - 1
    return int(brk.sum()), rank


def _union(lo: np.ndarray, hi: np.ndarray, W1: int) -> tuple[np.ndarray, np.ndarray]:
    """Places (row, place) of the union of the windows [lo, hi) of each row (lo, hi: (rows, P); place < W1),
    in row order and place order: the search's union of windows (:func:`~.search.knn.union_places`)
    over the places row · W1 + place."""
    base = np.arange(len(lo), dtype=np.int64)[:, None] * W1
    U = union_places((base + lo).ravel(), (base + hi).ravel())
    ru = U // W1
    return ru, U - ru * W1


def property_precision(X, properties: Mapping[str, Any], *, metric: str = "euclidean", max_r: int | None = None,
                       normalize: bool = False, block: int | None = None, progress: bool = False,
                       permutations: int = 0, seed: int | None = None) -> dict[str, dict[str, Any]]:
    """R-Precision, Normalized R-Precision, ceiling and significance of each property (docs/methods.md §9).

    Parameters
    ----------
    X : array (n, D)
        Embeddings (all images; each is a query and a reference, the query itself excluded).
    properties : dict name -> array (n,)
        Per-image property values (numbers or strings; equality defines "same value").
    metric : {"euclidean", "cosine"}
        Euclidean on the raw embeddings is the reference code's choice for every loss (default).
    max_r : int or None
        ``None``: R = N_v - 1, the paper's definition. ``1023``: R = min(N_v - 1, 1023), the
        reference code and Kobs' Table 6 (pytorch-metric-learning 0.9.96's faiss depth limit).
    normalize : bool
        L2-normalise the rows first (then Euclidean and cosine rank alike).
    permutations : int
        ``P > 0``: also a permutation test (docs/methods.md §9: a test that holds): the property values are
        shuffled over the images P times (one seeded shuffle of the images per draw, the same for
        every property), NR-Prec recomputed exactly each time (the embedding and its ranking fixed),
        and ``perm_p_value`` = (1 + #{NR-Prec_perm >= NR-Prec}) / (1 + P), one-sided, exact for the
        shuffles drawn; ``perm_mean`` / ``perm_sd`` are the mean and spread of the shuffled
        NR-Precs. Costs about P times the measure itself. ``0`` (default): no test.
    seed : int or None
        Seed of the shuffles (``None``, the default: 0). Only with ``permutations > 0``: given without
        them it would seed nothing, and is refused (as the command's ``--seed`` without ``--permutations``).

    Returns
    -------
    dict name -> dict
        ``R-Prec`` (Eq. 4), ``NR-Prec`` (Eq. 5; higher = more clustered; 0 = chance), ``ceiling``
        (NR-Prec of perfect clustering, averaged like NR-Prec), ``null_mean`` / ``null_sd`` (exact
        mean and standard deviation of the mean z-score if every query's hits were hypergeometric,
        queries independent), ``z`` and ``p_value`` (one-sided), ``significant_2.576`` (the paper's
        rule, NR-Prec >= 2.576: True or False, None where NR-Prec is undefined), ``n_values``,
        ``lone_values``, ``lone_queries`` (dropped), ``queries``,
        ``max_r`` and ``capped`` (whether the cap changed any R); with ``permutations``:
        ``perm_p_value``, ``perm_mean``, ``perm_sd``, ``permutations``; ``repeated_rows`` (the rows of X
        equal to an earlier row as ranked, after the L2 normalisation of cosine: their ties with their
        twins go by row order; the same for every property) and ``undefined``, a dict naming each NaN
        number and why: every value lone (no query: every number); one value holding every query
        (p = 1, sigma = 0: NR-Prec, ceiling, null, z, p-values); every row the same point
        (``repeated_rows`` = n - 1, a collapsed model: the neighbours are the lowest row indices, so
        R-Prec, NR-Prec, z and the p-values, which would measure row order, are NaN; the ceiling and the
        null, numbers of the value counts, stay; no hits are counted and no shuffles drawn); every row
        one of two points (1-D rows under cosine normalise to +1 or -1; collinear rows to +u or -u), when
        some query's R nearest end inside a tied group holding its value and others, so that the row
        order picks its hits (R-Prec, NR-Prec, z, p-values; a property whose hits no tie decides, as the
        sign of 1-D rows, keeps its numbers); one shuffle (``perm_sd``). Empty when every number is defined.

    Notes
    -----
    The null: with the arrangement of the other images' values random, query q's hits are
    hypergeometric (population n - 1, successes N_v - 1, draws R); its z-score has mean
    (R (N_v - 1)/(n - 1) - R p)/sigma (slightly negative) and variance Var(h)/sigma^2. The mean over
    Q queries is compared with the mean of those means, its variance taken as the mean of the
    variances / Q. Queries share neighbours, so this spread is approximate and too small (measured
    on random Gaussian embeddings with permuted values: the true spread 1.14-1.24x ``null_sd``);
    treat ``p_value`` as approximate and liberal, and use ``permutations`` for a test that holds.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> r = property_precision(X, {"side": np.array([0, 0, 1, 1])})
    >>> r["side"]["R-Prec"], r["side"]["NR-Prec"] == r["side"]["ceiling"]
    (1.0, True)
    """
    from embedscope.validation import check_bool, check_int, check_matrix

    normalize = check_bool(normalize, "normalize")

    if metric not in ("euclidean", "cosine"):
        raise EmbedscopeError(f"unknown metric '{metric}' (choose euclidean or cosine)")
    block = check_int(block, "block (queries per block)", allow_none=True)
    if not isinstance(properties, Mapping):
        raise EmbedscopeError(f"properties must be a mapping name -> values (e.g. {{'colour': values}}), "
                              f"got {type(properties).__name__}")
    X = check_matrix(X, "X", min_rows=2, dtype=np.float64)
    if normalize:
        X, zero = unit_rows(X)  # (rows of extreme scale normalised exactly)
        if zero.any():
            raise EmbedscopeError("X has an all-zero row: it cannot be L2-normalised")
    max_r = check_int(max_r, "max_r", allow_none=True)
    # the cap as asked is reported (a table said max_r 40 of 40 images where the provenance said 1023);
    # one beyond int64 (10**30: it overflowed inside) as the rows' count, which caps nothing as it does
    asked_r = max_r if max_r is None or max_r <= np.iinfo(np.int64).max else X.shape[0]
    if max_r is not None:
        max_r = min(max_r, X.shape[0])  # (a cap beyond the rows caps nothing)
    permutations = check_int(permutations, "permutations", min=0, max=MAX_PERMUTATIONS)
    seed = _check_seed(seed, permutations)
    if not properties:
        raise EmbedscopeError("no properties given")
    n = X.shape[0]
    names = list(properties)
    codes = np.stack([_encode(properties[k], n, k) for k in names])
    P = len(names)
    R = np.zeros((P, n), dtype=np.int64)
    Nv = np.zeros((P, n), dtype=np.int64)
    for k in range(P):
        cnt = np.bincount(codes[k])
        Nv[k] = cnt[codes[k]]
        r = Nv[k] - 1
        if max_r is not None:
            r = np.minimum(r, int(max_r))
        R[k] = r
    eng = _Engine(X, metric, block, cut=max(int(R.max()), 1))
    repeated = eng.repeated_rows()
    # every row (as ranked) the same point: each query's neighbours are the lowest other row indices
    # (ties to the lower index, docs/methods.md §1), so the hits would measure row order: not counted
    collapsed = repeated == n - 1
    if collapsed:
        H = np.zeros((P, n), dtype=np.int64)
        perm_nr = np.full((P, permutations), np.nan) if permutations else None
        tied = [None] * P
    else:
        # few distinct rows (1-D cosine: +1 and -1): a query whose R-th neighbour falls inside a group of tied
        # rows that mixes its value with others has hits picked by the row order: that property's ranking
        # numbers are undefined, as a collapsed model's (they were numbers that changed when rows were reordered)
        dep = _row_order_queries(eng, codes, R, n - repeated)
        tied = [_tied_why(int(dep[k]), int((R[k] > 0).sum()), n - repeated, metric, X.shape[1]) if dep[k] else None
                for k in range(P)]
        H = eng.hits(codes, R, progress=progress)
        perm_nr = _permuted_nr_prec(eng, codes, R, Nv, permutations, seed, progress) if permutations else None
    return {name: _summary(k, codes, R, Nv, H, perm_nr, asked_r, repeated,
                           _collapsed_why(metric, X.shape[1]) if collapsed else tied[k])
            for k, name in enumerate(names)}


def _row_order_queries(eng: _Engine, codes: np.ndarray, R: np.ndarray, distinct: int) -> np.ndarray:
    """Per property, the number of queries whose hit count depends on the row order that breaks ties
    (docs/methods.md §1), checked when X has at most ``FEW_ROWS`` distinct rows as ranked (else 0s).

    A query's other rows fall into groups of equal float64 key (the rows of one distinct row, and distinct
    rows at equal keys), taken nearest first; its R nearest end inside one group. If that group holds rows of
    the query's value and rows of other values and is not taken whole, which of them are among the R nearest
    is the row order's choice (lower index first): the hits, and R-Prec and NR-Prec, measure row order.
    Queries of one distinct row and one value share their groups and R, so each such pair is checked once."""
    P, n = codes.shape
    out = np.zeros(P, dtype=np.int64)
    if distinct > FEW_ROWS or distinct < 2:
        return out
    from embedscope.metrics.search.knn import identical_rows

    first, uid = identical_rows(eng.X64)
    nu = len(first)
    tab = _pair_keys64(eng.X64, np.repeat(first, nu), np.tile(first, nu), eng.metric).reshape(nu, nu)
    rows_of = np.bincount(uid, minlength=nu)  # rows per distinct row
    for k in range(P):
        nv = int(codes[k].max()) + 1
        C = np.zeros((nu, nv), dtype=np.int64)  # rows of each distinct row holding each value
        np.add.at(C, (uid, codes[k]), 1)
        Rv = np.zeros(nv, dtype=np.int64)  # R of the queries of each value (N_v - 1, capped: one per value)
        Rv[codes[k]] = R[k]
        for i in range(nu):
            vals = np.flatnonzero(C[i] > 0)  # the values of the queries at distinct row i
            vals = vals[Rv[vals] > 0]
            if not len(vals):
                continue
            key = tab[i]
            o = np.argsort(-key, kind="stable")
            start = np.r_[True, key[o[1:]] != key[o[:-1]]]
            grp = np.cumsum(start) - 1  # the group (equal key, nearest first) of each distinct row in order o
            ng = int(grp[-1]) + 1
            size = np.bincount(grp, weights=rows_of[o], minlength=ng).astype(np.int64)
            same = np.stack([np.bincount(grp, weights=C[o, v], minlength=ng) for v in vals]).astype(np.int64)
            gi = grp[np.flatnonzero(o == i)[0]]  # the query itself is no neighbour of its own
            size[gi] -= 1
            same[:, gi] -= 1
            end = np.cumsum(size)  # rows up to and including each group
            r = Rv[vals]
            g = np.searchsorted(end, r)  # the group holding the R-th nearest
            before = np.where(g > 0, end[np.maximum(g - 1, 0)], 0)
            part = r - before < size[g]  # the group is cut, not taken whole
            s = same[np.arange(len(vals)), g]
            mixed = (s > 0) & (s < size[g])
            out[k] += int(C[i, vals][part & mixed].sum())
    return out


def _tied_why(m: int, nq: int, distinct: int, metric: str, d: int) -> str:
    """Why a property's ranking numbers are undefined when ``m`` of its ``nq`` queries have hits that the row
    order picks (:func:`_row_order_queries`)."""
    how = ("one dimension under cosine: every row normalises to +1 or -1, so X has "
           if metric == "cosine" and d == 1 else "X has only ")
    as_ranked = " after L2 normalisation" if metric == "cosine" else ""
    return (f"{how}{distinct} distinct rows{as_ranked}, and for {m} of {nq} queries the R nearest end inside a "
            "group of tied rows holding their value and others: the row order (lower index first) picks which "
            "are counted, so the hits would measure row order")


def _check_seed(seed, permutations: int) -> int:
    """The seed of the permutation test's shuffles: ``None`` -> 0; one given without ``permutations`` (it
    would seed nothing, without a word; an explicit 0 is refused too) is an error."""
    from embedscope.validation import check_int

    seed = check_int(seed, "seed", min=0, allow_none=True)
    if seed is not None and not permutations:
        raise EmbedscopeError(f"seed={seed} seeds the shuffles of the permutation test: give permutations=P "
                              "(or leave out seed)")
    return 0 if seed is None else seed


#: a property's numbers that can be undefined (NaN), as ``undefined`` names them
RANKING_FIELDS = ("R-Prec", "NR-Prec", "ceiling", "null_mean", "null_sd", "z", "p_value")
PERM_KEYS = ("perm_p_value", "perm_mean", "perm_sd")


def _summary(k: int, codes: np.ndarray, R: np.ndarray, Nv: np.ndarray, H: np.ndarray, perm_nr, max_r,
             repeated: int, collapsed: str | None) -> dict[str, Any]:
    """One property's numbers (:func:`property_precision`'s Returns), and in ``undefined`` why each
    undefined one is NaN, the reason made where the NaN is. ``collapsed``: why the ranking's numbers would
    measure row order (a collapsed model, :func:`_collapsed_why`; hits picked by the row order, :func:`_tied_why`),
    or None."""
    n = codes.shape[1]
    cnt = np.bincount(codes[k])
    q = R[k] > 0
    nq = int(q.sum())
    nan = float("nan")
    res: dict[str, Any] = {
        "n_values": int((cnt > 0).sum()), "lone_values": int((cnt == 1).sum()),
        "lone_queries": int(n - nq), "queries": nq, "max_r": None if max_r is None else int(max_r),
        "capped": bool(max_r is not None and np.any(Nv[k][q] - 1 > max_r)),
        # the rule's verdict is undefined (None) with NR-Prec: not "not significant"
        **dict.fromkeys(RANKING_FIELDS, nan), "significant_2.576": None, "repeated_rows": int(repeated),
    }
    if perm_nr is not None:  # every property has the same keys: NaN where NR-Prec is undefined
        res.update(_perm_summary(nan, perm_nr[k]))
    why: dict[str, str] = {}
    res["undefined"] = why
    perm = PERM_KEYS if perm_nr is not None else ()
    if nq == 0:
        why.update(dict.fromkeys(RANKING_FIELDS + perm, (
            f"every value occurs once ({res['lone_values']} lone values): no image has another image of "
            "its value, so there is no query")))
        return res
    r = R[k][q].astype(np.float64)
    nv = Nv[k][q].astype(np.float64)
    p = nv / nq
    if np.all(p >= 1.0):  # one value holds every query: sigma = 0, z = 0/0
        if collapsed and res["lone_values"]:
            why["R-Prec"] = collapsed
        else:  # the R nearest of every query are all of its value (with collapsed rows too: no other value)
            res["R-Prec"] = float(np.mean(H[k][q] / r)) if not collapsed else 1.0
        nl = res["lone_values"]
        one = (f"only one value occurs more than once (besides {nl} lone value{'s' if nl > 1 else ''}, no "
               f"quer{'ies' if nl > 1 else 'y'})" if nl else "one value only (every image has it)")
        why.update(dict.fromkeys(RANKING_FIELDS[1:] + perm, (
            f"{one}: p = N_v/n' = {nq}/{nq} = 1, so sigma = sqrt(R p (1 - p)) = 0 and every z is 0/0")))
        return res
    sig, z = _query_z(H[k][q].astype(np.float64), r, p)  # sigma > 0: two values at least, each with N_v < n'
    with np.errstate(divide="ignore", invalid="ignore"):
        M, Kp = n - 1.0, nv - 1.0
        eh = r * Kp / M
        vh = r * Kp * (M - Kp) * (M - r) / (M * M * (M - 1)) if M > 1 else np.zeros_like(r)
        ez = (eh - r * p) / sig
        vz = vh / sig ** 2
    res["ceiling"] = float(np.mean(np.sqrt(r * (1 - p) / p)))
    m0 = float(np.mean(ez))
    sd0 = float(math.sqrt(np.sum(vz)) / nq)
    res["null_mean"], res["null_sd"] = m0, sd0
    if collapsed:  # the numbers of the counts stay (ceiling, null); the ranking's are row order
        why.update(dict.fromkeys(("R-Prec", "NR-Prec", "z", "p_value") + perm, collapsed))
        return res
    res["R-Prec"] = float(np.mean(H[k][q] / r))
    nr = float(np.mean(z))
    res["NR-Prec"] = nr
    if sd0 > 0:
        zz = (nr - m0) / sd0  # one-sided normal tail, as scipy.stats.norm.sf (whose import costs 0.6-0.8 s)
        res["z"], res["p_value"] = float(zz), 0.5 * math.erfc(zz / math.sqrt(2.0))
    else:
        why.update(dict.fromkeys(("z", "p_value"), "the null spread of NR-Prec is 0"))
    res["significant_2.576"] = bool(nr >= SIGNIFICANCE_Z)
    if perm_nr is not None:
        res.update(_perm_summary(nr, perm_nr[k]))
        if not np.isfinite(res["perm_sd"]):
            why["perm_sd"] = "one shuffle has no spread (give 2 permutations or more)"
    return res


def _nr_prec(h: np.ndarray, R: np.ndarray, Nv: np.ndarray) -> float:
    """NR-Prec (Eq. 5) of one property's hit counts ``h``, depths ``R`` and value counts ``Nv`` (all (n,))."""
    q = R > 0
    nq = int(q.sum())
    if nq == 0:
        return float("nan")
    h, r, nv = (a[q].astype(np.float64) for a in (h, R, Nv))
    sig, z = _query_z(h, r, nv / nq)
    ok = sig > 0
    return float(np.mean(z[ok])) if ok.any() else float("nan")


def _query_z(h: np.ndarray, r: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query sigma = sqrt(R p (1 - p)) and z = (h - R p) / sigma (Eq. 5; z is not finite where sigma = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        sig = np.sqrt(r * p * (1 - p))
        return sig, (h - r * p) / sig


def _permuted_nr_prec(eng: _Engine, codes: np.ndarray, R: np.ndarray, Nv: np.ndarray, permutations: int, seed: int,
                      progress: bool) -> np.ndarray:
    """NR-Prec of every property under ``permutations`` seeded shuffles of the images' values -> (K, P).

    The values move, the embedding (and so every query's ranking) stays: a shuffled property is one
    more row of the hit-count engine, counted exactly as the real one (same ranks, same ties). Rows
    go to the engine in groups that keep its (rows, n) arrays near ``PERM_GROUP_ENTRIES`` (2^23); each group's
    shuffles are drawn when it comes (the same sequence of draws from one generator: the same
    shuffles as drawing all P first), so memory does not grow with P x n."""
    K, n = codes.shape
    rng = np.random.default_rng(seed)
    out = np.empty((K, permutations))
    group = max(1, PERM_GROUP_ENTRIES // max(n * K, 1))
    bar = None
    if progress:
        from embedscope.progress import progress_bar

        bar = progress_bar(total=permutations, desc="permutations", unit="perm")
    for s in range(0, permutations, group):
        # (g, n): one shuffle per draw, for all properties
        pj = np.stack([rng.permutation(n) for _ in range(min(group, permutations - s))])
        pc = codes[:, pj].transpose(1, 0, 2).reshape(-1, n)  # row (j, k): property k shuffled by pj[j]
        pr = R[:, pj].transpose(1, 0, 2).reshape(-1, n)
        pn = Nv[:, pj].transpose(1, 0, 2).reshape(-1, n)
        H = eng.hits(pc, pr)
        for i in range(len(pc)):
            j, k = divmod(i, K)
            out[k, s + j] = _nr_prec(H[i], pr[i], pn[i])
        if bar is not None:
            bar.update(len(pj))
    if bar is not None:
        bar.close()
    return out


def _perm_summary(observed: float, null: np.ndarray) -> dict[str, Any]:
    """Permutation p-value (one-sided, (1 + #{null >= observed}) / (1 + P)), mean and spread of the null."""
    fin = null[np.isfinite(null)]
    if not np.isfinite(observed) or not len(fin):
        nan = float("nan")
        return {"perm_p_value": nan, "perm_mean": nan, "perm_sd": nan, "permutations": int(len(null))}
    # a shuffled value equal to the observed one up to rounding counts as reaching it
    tol = 1e-12 * max(1.0, abs(observed))
    return {"perm_p_value": float((1 + np.count_nonzero(fin >= observed - tol)) / (1 + len(fin))),
            "perm_mean": float(fin.mean()), "perm_sd": float(fin.std(ddof=1)) if len(fin) > 1 else float("nan"),
            "permutations": int(len(fin))}


def compare_groups(values_by_model: Mapping[str, Mapping[str, float]], groups: Mapping[str, str]
                   ) -> dict[str, dict[str, Any]]:
    """Compare two groups of models (e.g. ranking vs classification losses) per property (docs/methods.md §9).

    ``values_by_model[model][property]`` is one value per model (e.g. its NR-Prec, or the mean of
    its folds); ``groups[model]`` names its group (exactly two groups). Per property: the
    Mann-Whitney U of the first group (sorted names), the two-sided p-value (scipy's exact
    distribution when there are no ties, else its asymptotic one; ``method`` says which), the
    group medians and sizes (``n_<group>``). A model whose value is NaN (undefined, e.g. the NR-Prec of a
    collapsed model) is left out of that property's test and counted in ``n_undefined_<group>``; a group
    left without values has U, p and its median NaN (``method`` None).

    The reference code (Kobs et al.) pools the four folds of each loss as independent samples and,
    under its pinned scipy 1.6, reports the one-sided p, so its "1%" is a two-sided 2% test; here
    each model contributes one value and the test is two-sided.
    """
    from scipy.stats import mannwhitneyu

    for what, arg in (("values_by_model", values_by_model), ("groups", groups)):
        if not isinstance(arg, Mapping):
            raise EmbedscopeError(f"compare_groups: {what} must be a mapping keyed by model name, "
                                  f"got {type(arg).__name__}")
    bad = [m for m in groups if not isinstance(values_by_model.get(m, {}), Mapping)]  # (a list: a key may be None)
    if bad:
        raise EmbedscopeError(f"compare_groups: values_by_model[{quoted(bad[0])}] must map property names to values, "
                              f"got {type(values_by_model[bad[0]]).__name__}")
    bad = [g for g in groups.values() if not isinstance(g, str)]
    if bad:
        raise EmbedscopeError(f"compare_groups: group names must be texts, got {quoted(bad[0])}")
    names = sorted(set(groups.values()))
    if len(names) != 2:
        raise EmbedscopeError(f"compare_groups needs exactly two groups, got {len(names)} ({', '.join(names)})")
    missing = [m for m in groups if m not in values_by_model]
    if missing:
        raise EmbedscopeError(f"no values for model(s) {', '.join(missing[:3])}")
    props = sorted(set.intersection(*(set(values_by_model[m]) for m in groups)))
    for prop in props:
        for m in groups:
            v = values_by_model[m][prop]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or np.isinf(v):
                raise EmbedscopeError(f"compare_groups: values_by_model[{quoted(m)}][{quoted(prop)}] must be a number "
                                      f"(NaN: undefined), got {quoted(v)}")
    out = {}
    for prop in props:
        a = np.array([values_by_model[m][prop] for m in groups if groups[m] == names[0]], dtype=float)
        b = np.array([values_by_model[m][prop] for m in groups if groups[m] == names[1]], dtype=float)
        # a model whose value is undefined (NaN) is left out and counted: one NaN made U, p and its group's
        # median NaN, with "exact" as the method and the NaN model among the n
        na, nb = int(np.isnan(a).sum()), int(np.isnan(b).sum())
        a, b = a[~np.isnan(a)], b[~np.isnan(b)]
        res = {"U": float("nan"), "p_value": float("nan"), "method": None,
               f"median_{names[0]}": float(np.median(a)) if a.size else float("nan"),
               f"median_{names[1]}": float(np.median(b)) if b.size else float("nan"),
               f"n_{names[0]}": len(a), f"n_{names[1]}": len(b),
               f"n_undefined_{names[0]}": na, f"n_undefined_{names[1]}": nb}
        if a.size and b.size:
            ties = len(np.unique(np.concatenate([a, b]))) < len(a) + len(b)
            method = "asymptotic" if ties else "exact"
            r = mannwhitneyu(a, b, alternative="two-sided", method=method)
            res.update(U=float(r.statistic), p_value=float(r.pvalue), method=method)
        out[prop] = res
    return out
