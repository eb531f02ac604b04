/* Exact ranks of the relevant references of a block of queries, counted row by row from the block's
 * float32 cosine keys (docs/methods.md §1; embedscope/metrics/search/fused.py holds the argument).
 *
 * For one query i (row g of the block, g[m] its float32 key of reference m, |g[m] - k64(i, m)| <= delta_i
 * where k64 is the float64 key computed here pair by pair):
 *   1. L: a key with at least depth_i references (the query itself excluded) keyed >= L: the depth_i-th
 *      largest key of the relevant references when depth_i <= R_i, or higher, an estimate of the depth_i-th
 *      largest key from every 8th key of the row, taken only once counted to hold (else the former, or for
 *      depths beyond R_i the lower edge of the histogram bucket of every key that reaches depth_i).
 *      A reference with g < L - 2 delta lies after those depth_i references: its rank is beyond the depth.
 *   2. The relevant references (the query's class, itself excluded), sorted by g (larger first).
 *   3. Every other reference with g >= L - 4 delta (a "survivor") is placed among them: relevant ones with
 *      g > v + 2 delta are surely before it, those with g < v - 2 delta surely after it, and those within
 *      ±2 delta are compared by their float64 keys (larger first, the lower index on a tie). A relevant
 *      reference with g >= L - 2 delta has every reference before it among the survivors, so its count of
 *      others before it is exact.
 *   4. The relevant references put in their exact order (float64 keys where their g lie within 2 delta),
 *      rank = position among them + others before + 1; those beyond the depth last, by index.
 * Memory: a few arrays of the row's length per call. The GIL is released while counting.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define NBUCKET 1024
#define HALF_SCALE 512.0f /* NBUCKET / 2: buckets of width 1/512 over [-1, 1] */
#define SAMPLE_STEP 8      /* the sampled histogram reads every 8th key ... */
#define SAMPLE_MIN_REFS 256 /* ... of rows of at least this many */
#define SAMPLE_BUCKETS 512  /* ... into buckets of width 1/256 over [-1, 1] */
#define SAMPLE_SIGMAS 3.0  /* its estimate: the ceil(mu + 3 sqrt(mu)) + 1-th largest sampled key, mu = depth / 8 */

typedef struct {
    const float *G;        /* nb x nr float32 keys, row stride nr */
    Py_ssize_t nb, nr, q0, dim;
    int same;
    const int64_t *q_cls;  /* per query (global index), the class index or -1 */
    const int64_t *r_cls;  /* per reference, its class index */
    const int64_t *ref_order, *cstart, *cend; /* the references by class, each class ascending */
    const int64_t *depth_q, *offsets;
    const double *delta, *Q64, *R64;
    double *out_rank;
    int64_t *out_ref;
    unsigned char *unsure; /* per query: 1 when a float64 comparison was too close for this sum's order */
    double eps;            /* twice the largest difference of two float64 sums of one key in different orders */
} Args;

typedef struct {
    int32_t *hist;
    int64_t *diff, *extra, *before, *idx, *tmpi, *surv;
    float *g, *tmpg;
    double *k64;
    unsigned char *mark;
    Py_ssize_t cap;
    int unsure;
} Work;

static double dot64(const double *a, const double *b, Py_ssize_t d) {
    double s = 0.0;
    for (Py_ssize_t k = 0; k < d; k++) s += a[k] * b[k];
    return s;
}

/* (g, idx) pairs sorted by g, larger first, stably (equal g keep the order they came in: index order): a
 * counting sort on up to 256 buckets of g's range, then insertion within what the buckets left unordered */
/* bucket of x = (gmax - g) * scale in [0, nbk - 1]; NaN (a NaN or infinite key) and out-of-range values are
 * clamped, never converted to int as they are (undefined, in practice INT_MIN: a write far outside cnt) */
static inline int sort_bucket(double x, int nbk) {
    if (!(x >= 0.0)) return 0;
    if (x >= (double)(nbk - 1)) return nbk - 1;
    return (int)x;
}

static void sort_desc(float *g, int64_t *idx, Py_ssize_t n, float *tg, int64_t *ti, int32_t *cnt) {
    if (n < 2) return;
    if (n > 16) {
        float gmax = g[0], gmin = g[0];
        for (Py_ssize_t i = 1; i < n; i++) {
            gmax = g[i] > gmax ? g[i] : gmax;
            gmin = g[i] < gmin ? g[i] : gmin;
        }
        int nbk = 16;
        while (nbk < n && nbk < 256) nbk *= 2;
        if (gmax > gmin) {
            const double scale = (double)(nbk - 1) / ((double)gmax - (double)gmin);
            memset(cnt, 0, (size_t)(nbk + 1) * sizeof(int32_t));
            for (Py_ssize_t i = 0; i < n; i++) cnt[1 + sort_bucket(((double)gmax - (double)g[i]) * scale, nbk)]++;
            for (int k = 0; k < nbk; k++) cnt[k + 1] += cnt[k];
            for (Py_ssize_t i = 0; i < n; i++) {
                const int k = sort_bucket(((double)gmax - (double)g[i]) * scale, nbk);
                const int32_t o = cnt[k]++;
                tg[o] = g[i];
                ti[o] = idx[i];
            }
            memcpy(g, tg, (size_t)n * sizeof(float));
            memcpy(idx, ti, (size_t)n * sizeof(int64_t));
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        const float x = g[i];
        if (!(g[i - 1] < x)) continue;
        const int64_t xi = idx[i];
        Py_ssize_t j = i - 1;
        while (j >= 0 && g[j] < x) {
            g[j + 1] = g[j];
            idx[j + 1] = idx[j];
            j--;
        }
        g[j + 1] = x;
        idx[j + 1] = xi;
    }
}

/* the float64 key of relevant entry k (computed once per row) */
static double key_of(const Args *A, Work *W, Py_ssize_t q, Py_ssize_t k) {
    if (isnan(W->k64[k])) W->k64[k] = dot64(A->Q64 + q * A->dim, A->R64 + W->idx[k] * A->dim, A->dim);
    return W->k64[k];
}

/* Two float64 keys compared: numpy's einsum (pair_keys64, which every other pass uses) sums a key in
 * another order than dot64, so keys within eps of each other (not of identical rows: equal in any order)
 * may compare otherwise there. The row is then ranked by the caller from numpy's keys. */
static inline void check_close(const Args *A, Work *W, double ka, double kb, int64_t ra, int64_t rb) {
    if (fabs(ka - kb) <= A->eps && ra != rb &&
        memcmp(A->R64 + ra * A->dim, A->R64 + rb * A->dim, (size_t)A->dim * sizeof(double)) != 0)
        W->unsure = 1;
}

/* exact order of relevant entries a, b: 1 when a comes before b */
static int before_exact(const Args *A, Work *W, Py_ssize_t q, Py_ssize_t a, Py_ssize_t b, double d2) {
    double ga = W->g[a], gb = W->g[b];
    if (ga - gb > d2) return 1;
    if (gb - ga > d2) return 0;
    double ka = key_of(A, W, q, a), kb = key_of(A, W, q, b);
    check_close(A, W, ka, kb, W->idx[a], W->idx[b]);
    if (ka != kb) return ka > kb;
    return W->idx[a] < W->idx[b];
}

static void swap_entries(Work *W, Py_ssize_t a, Py_ssize_t b) {
    float tg = W->g[a]; W->g[a] = W->g[b]; W->g[b] = tg;
    int64_t t = W->idx[a]; W->idx[a] = W->idx[b]; W->idx[b] = t;
    t = W->before[a]; W->before[a] = W->before[b]; W->before[b] = t;
    double tk = W->k64[a]; W->k64[a] = W->k64[b]; W->k64[b] = tk;
}

static inline int bucket_of(float g) {
    const float x = (g + 1.0f) * HALF_SCALE; /* (NaN: bucket 0; never converted out of int's range) */
    return !(x >= 0.0f) ? 0 : (x >= (float)NBUCKET ? NBUCKET - 1 : (int)x);
}

/* the lower edge of bucket b, less a margin: an element counted in bucket b has g >= b / 512 - 1 up to the
 * rounding of g + 1 (< 2^-23); bucket 0 also holds everything below -1 */
static inline double bucket_floor(int b) { return b == 0 ? -INFINITY : (double)b / (double)HALF_SCALE - 1.0 - 1e-6; }

/* An estimate of the depth-th largest key: below the `need`-th largest of every SAMPLE_STEP-th key, read off a
 * histogram of SAMPLE_BUCKETS buckets over [-1, 1] (a bucket's lower edge); -inf when the sample holds fewer.
 * To be checked: see one_row. */
static double sampled_floor(const float *row, Py_ssize_t nr, int64_t need, int32_t *hist) {
    memset(hist, 0, SAMPLE_BUCKETS * sizeof(int32_t));
    int bmax = 0;
    for (Py_ssize_t m = 0; m < nr; m += SAMPLE_STEP) {
        const float x = (row[m] + 1.0f) * (SAMPLE_BUCKETS / 2);
        const int b = !(x >= 0.0f) ? 0 : (x >= (float)SAMPLE_BUCKETS ? SAMPLE_BUCKETS - 1 : (int)x);
        hist[b]++;
        bmax = b > bmax ? b : bmax;
    }
    int64_t acc = 0;
    for (int b = bmax; b > 0; b--) {
        acc += hist[b];
        if (acc >= need) return (double)b / (SAMPLE_BUCKETS / 2) - 1.0 - 1e-6;
    }
    return -INFINITY;
}

/* L from a histogram of every key (the query's own excluded): exactly `depth` or more keys lie at or above it */
static double full_floor(const float *row, Py_ssize_t nr, int64_t self, int64_t depth, int32_t *hist) {
    memset(hist, 0, NBUCKET * sizeof(int32_t));
    for (Py_ssize_t m = 0; m < nr; m++) hist[bucket_of(row[m])]++;
    if (self >= 0) hist[bucket_of(row[self])]--;
    int64_t acc = 0;
    for (int b = NBUCKET - 1; b > 0; b--) {
        acc += hist[b];
        if (acc >= depth) return bucket_floor(b);
    }
    return -INFINITY;
}

/* the survivors: other-class references keyed >= t, their indices into W->surv; returns how many */
static Py_ssize_t survivors(const Args *A, Work *W, const float *row, float t, int64_t c, int64_t self) {
    const Py_ssize_t nr = A->nr;
    const int64_t *rc = A->r_cls;
    Py_ssize_t n = 0, m = 0;
#ifdef __SSE2__
    const __m128 tv = _mm_set1_ps(t);
    for (; m + 16 <= nr; m += 16) {
        unsigned bits = (unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(row + m), tv)) |
                        (unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(row + m + 4), tv)) << 4 |
                        (unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(row + m + 8), tv)) << 8 |
                        (unsigned)_mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(row + m + 12), tv)) << 12;
        while (bits) {
            const Py_ssize_t j = m + __builtin_ctz(bits);
            bits &= bits - 1;
            W->surv[n] = j;
            n += rc[j] != c && j != self;
        }
    }
#endif
    for (; m < nr; m++)
        if (row[m] >= t && rc[m] != c && m != self) W->surv[n++] = m;
    return n;
}

static void one_row(const Args *A, Work *W, Py_ssize_t r) {
    const Py_ssize_t q = A->q0 + r, nr = A->nr;
    const int64_t c = A->q_cls[q];
    const int64_t o0 = A->offsets[q], P = A->offsets[q + 1] - o0;
    if (c < 0 || P <= 0) return;
    const float *row = A->G + r * nr;
    const int64_t depth = A->depth_q[q];
    const double d2 = 2.0 * A->delta[q];
    const int64_t self = A->same ? (int64_t)q : -1;
    W->unsure = 0;

    /* the relevant references: L_sure, the depth-th largest of their keys (at least depth references keyed
     * >= it), needs only their smallest or largest for the depths asked in practice (R_i, 1) */
    Py_ssize_t n = 0;
    float gmin = INFINITY, gmax = -INFINITY;
    for (int64_t s = A->cstart[c]; s < A->cend[c]; s++) {
        int64_t m = A->ref_order[s];
        if (m == self) continue;
        const float v = row[m];
        W->g[n] = v;
        W->idx[n++] = m;
        gmin = v < gmin ? v : gmin;
        gmax = v > gmax ? v : gmax;
    }
    /* (n == P: checked by the caller) */
    int sorted = 0;
    double L_sure = -INFINITY;
    if (depth == n) L_sure = gmin;
    else if (depth == 1) L_sure = gmax;
    else if (depth < n) {
        sort_desc(W->g, W->idx, n, W->tmpg, W->tmpi, W->hist);
        sorted = 1;
        L_sure = W->g[depth - 1];
    }
    /* L: a key with at least `depth` references keyed >= L. L_sure is one; a sampled estimate of the
     * depth-th largest key is a higher one (fewer survivors) once counted to hold */
    double L = L_sure;
    int tried_sample = 0;
    if (nr >= SAMPLE_MIN_REFS) {
        const double mu = (double)depth / SAMPLE_STEP;
        const int64_t need = (int64_t)ceil(mu + SAMPLE_SIGMAS * sqrt(mu)) + 1;
        const double est = sampled_floor(row, nr, need, W->hist);
        if (est > L) { L = est; tried_sample = 1; }
    }
    if (!tried_sample && depth > n) L = full_floor(row, nr, self, depth, W->hist);
    Py_ssize_t ns;
    float t;
    for (;;) {
        double cut = L - 2.0 * d2;
        t = (float)cut;
        if ((double)t > cut) t = nextafterf(t, -INFINITY);
        ns = survivors(A, W, row, t, c, self);
        if (!tried_sample) break;
        /* the estimate holds when at least `depth` references are keyed >= L */
        int64_t above = 0;
        for (Py_ssize_t k = 0; k < n; k++) above += (double)W->g[k] >= L;
        for (Py_ssize_t i = 0; i < ns && above < depth; i++) above += (double)row[W->surv[i]] >= L;
        if (above >= depth) break;
        tried_sample = 0; /* (rare) the sure floor, or every key's histogram */
        L = depth <= n ? L_sure : full_floor(row, nr, self, depth, W->hist);
    }
    /* the relevant references keyed >= t, sorted (those below are beyond the depth, and after every one
     * that can be ranked within it) */
    if (!sorted) {
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (W->g[i] >= t) {
                const float v = W->g[i];
                const int64_t m = W->idx[i];
                W->g[i] = W->g[k];
                W->idx[i] = W->idx[k];
                W->g[k] = v;
                W->idx[k++] = m;
            }
        }
        /* (the swap keeps the kept ones in index order: each is moved down past skipped ones only) */
        n = k;
        sort_desc(W->g, W->idx, n, W->tmpg, W->tmpi, W->hist);
    } else {
        while (n > 0 && W->g[n - 1] < t) n--;
    }
    const double rel_cut = L - d2;

    for (Py_ssize_t k = 0; k < n; k++) {
        W->k64[k] = NAN;
        W->diff[k] = 0;
        W->extra[k] = 0;
    }
    W->diff[n] = 0;

    /* each survivor among the relevant references */
    const float *gs = W->g;
    for (Py_ssize_t i = 0; i < ns; i++) {
        const Py_ssize_t m = W->surv[i];
        const double v = row[m];
        /* float bounds equivalent to g >= v - 2 delta and g <= v + 2 delta for float g */
        float lo = (float)(v - d2), hi = (float)(v + d2);
        if ((double)lo < v - d2) lo = nextafterf(lo, INFINITY);
        if ((double)hi > v + d2) hi = nextafterf(hi, -INFINITY);
        /* a0: the relevant entries keyed >= lo (sorted larger first); branch-free */
        Py_ssize_t a0 = 0;
        if (n > 0) {
            Py_ssize_t len = n;
            while (len > 1) {
                const Py_ssize_t half = len >> 1;
                a0 += gs[a0 + half - 1] >= lo ? half : 0;
                len -= half;
            }
            a0 += gs[a0] >= lo;
        }
        W->diff[a0]++;
        double km = NAN;
        for (Py_ssize_t k = a0 - 1; k >= 0 && gs[k] <= hi; k--) {
            if (isnan(km)) km = dot64(A->Q64 + q * A->dim, A->R64 + m * A->dim, A->dim);
            double kk = key_of(A, W, q, k);
            check_close(A, W, km, kk, m, W->idx[k]);
            if (km > kk || (km == kk && m < W->idx[k])) W->extra[k]++;
        }
    }
    int64_t run = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        run += W->diff[k];
        W->before[k] = run + W->extra[k];
    }

    /* the exact order (insertion: entries out of order lie within 2 delta of one another) */
    for (Py_ssize_t k = 1; k < n; k++) {
        Py_ssize_t j = k;
        while (j > 0 && before_exact(A, W, q, j, j - 1, d2)) {
            swap_entries(W, j, j - 1);
            j--;
        }
    }
    if (W->unsure) { /* (the caller ranks this row) */
        A->unsure[q] = 1;
        return;
    }
    Py_ssize_t out = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        const int64_t rank = p + 1 + W->before[p];
        if ((double)W->g[p] < rel_cut || rank > depth) break;
        A->out_rank[o0 + out] = (double)rank;
        A->out_ref[o0 + out] = W->idx[p];
        W->mark[W->idx[p]] = 1;
        out++;
    }
    for (int64_t s = A->cstart[c]; s < A->cend[c]; s++) {
        int64_t m = A->ref_order[s];
        if (m == self) continue;
        if (W->mark[m]) { W->mark[m] = 0; continue; }
        A->out_rank[o0 + out] = INFINITY;
        A->out_ref[o0 + out] = m;
        out++;
    }
}

/* whether a buffer's struct-module format names the item type expected: kind 'f' float32, 'd' float64, 'q'
 * int64 ('q', or 'l' where long is 8 bytes), 'B' a byte ('B', 'b' or '?'); a native byte order only ('@',
 * '=', no prefix, or the host's own '<' / '>'). Item sizes agree by then: an int64 array where float64 is
 * expected (or float64 where int64, uint32 where float32) has the size but not the type, and was read as
 * the other type's bits */
static int format_ok(const char *fmt, char kind) {
    if (fmt == NULL) fmt = "B"; /* (PEP 3118: NULL is unsigned bytes) */
#if PY_LITTLE_ENDIAN
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
#else
    if (*fmt == '@' || *fmt == '=' || *fmt == '>' || *fmt == '!') fmt++;
#endif
    if (fmt[0] == '\0' || fmt[1] != '\0') return 0;
    switch (kind) {
    case 'f': return fmt[0] == 'f';
    case 'd': return fmt[0] == 'd';
    case 'q': return fmt[0] == 'q' || (fmt[0] == 'l' && sizeof(long) == 8);
    case 'B': return fmt[0] == 'B' || fmt[0] == 'b' || fmt[0] == '?';
    default: return 0;
    }
}

static const char *kind_name(char kind) {
    switch (kind) {
    case 'f': return "float32";
    case 'd': return "float64";
    case 'q': return "int64";
    default: return "uint8 (or int8, bool)";
    }
}

static int get_buf(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t itemsize, char kind, Py_ssize_t count,
                   const char *name) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "_fused: %s is not a C-contiguous%s buffer", name,
                         writable ? " writable" : "");
        }
        return -1;
    }
    if (view->itemsize != itemsize || !format_ok(view->format, kind)) {
        PyErr_Format(PyExc_ValueError, "_fused: %s must be %s, got a buffer of format '%.20s' (item size %zd)", name,
                     kind_name(kind), view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    if (count < 0 || count > PY_SSIZE_T_MAX / itemsize || view->len < itemsize * count) {
        PyErr_Format(PyExc_ValueError, "_fused: %s is too short: %zd items needed, got %zd", name, count,
                     view->len / itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *count_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[14];
    Py_ssize_t nb, nr, q0, nq, dim, ncls, npairs;
    int same;
    double eps;
    if (!PyArg_ParseTuple(args, "OnnnnnnnpdOOOOOOOOOOOOO", &o[0], &nb, &nr, &q0, &nq, &dim, &ncls, &npairs, &same,
                          &eps, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12], &o[13]))
        return NULL;
    if (nb < 0 || nr < 1 || q0 < 0 || nq < 0 || nb > nq || q0 > nq - nb || dim < 1 || ncls < 0 || npairs < 0 ||
        nq >= PY_SSIZE_T_MAX || nb > PY_SSIZE_T_MAX / nr || nq > PY_SSIZE_T_MAX / dim || nr > PY_SSIZE_T_MAX / dim) {
        PyErr_SetString(PyExc_ValueError, "_fused.count_rows: sizes out of range");
        return NULL;
    }
    Py_buffer v[14];
    /* item size, writable, type (format_ok) */
    const int spec[14][3] = {{4, 0, 'f'}, {8, 0, 'q'}, {8, 0, 'q'}, {8, 0, 'q'}, {8, 0, 'q'}, {8, 0, 'q'},
                             {8, 0, 'q'}, {8, 0, 'q'}, {8, 0, 'd'}, {8, 0, 'd'}, {8, 0, 'd'}, {8, 1, 'd'},
                             {8, 1, 'q'}, {1, 1, 'B'}};
    const Py_ssize_t counts[14] = {nb * nr, nq, nr, nr, ncls, ncls, nq, nq + 1, nq, nq * dim, nr * dim,
                                   npairs, npairs, nq};
    const char *names[14] = {"G", "q_cls", "r_cls", "ref_order", "cstart", "cend", "depth_q", "offsets",
                             "delta", "Q64", "R64", "out_rank", "out_ref", "unsure"};
    int got = 0;
    for (; got < 14; got++)
        if (get_buf(o[got], &v[got], spec[got][1], spec[got][0], (char)spec[got][2], counts[got], names[got]) < 0) break;
    PyObject *result = NULL;
    if (got == 14) {
        Args A = {v[0].buf, nb, nr, q0, dim, same, v[1].buf, v[2].buf, v[3].buf, v[4].buf, v[5].buf, v[6].buf,
                  v[7].buf, v[8].buf, v[9].buf, v[10].buf, v[11].buf, v[12].buf, v[13].buf, eps};
        /* the largest relevant set of the block bounds the per-row arrays */
        Py_ssize_t cap = 1;
        for (Py_ssize_t r = 0; r < nb; r++) {
            Py_ssize_t p = (Py_ssize_t)(A.offsets[q0 + r + 1] - A.offsets[q0 + r]);
            if (p > cap && p <= npairs) cap = p; /* (beyond npairs: refused below, never allocated) */
        }
        Work W;
        memset(&W, 0, sizeof(W));
        W.cap = cap;
        W.hist = malloc(NBUCKET * sizeof(int32_t));
        W.surv = malloc((size_t)nr * sizeof(int64_t));
        W.diff = malloc((size_t)(cap + 1) * sizeof(int64_t));
        W.extra = malloc((size_t)cap * sizeof(int64_t));
        W.before = malloc((size_t)cap * sizeof(int64_t));
        W.idx = malloc((size_t)cap * sizeof(int64_t));
        W.tmpi = malloc((size_t)cap * sizeof(int64_t));
        W.g = malloc((size_t)cap * sizeof(float));
        W.tmpg = malloc((size_t)cap * sizeof(float));
        W.k64 = malloc((size_t)cap * sizeof(double));
        W.mark = calloc((size_t)nr, 1);
        if (!W.hist || !W.diff || !W.extra || !W.before || !W.idx || !W.tmpi || !W.g || !W.tmpg || !W.k64 || !W.mark || !W.surv) {
            PyErr_NoMemory();
        } else {
            int bad = 0;
            /* ref_order a permutation of 0..nr-1 (a repeated reference would be written twice: past P) */
            for (Py_ssize_t m = 0; m < nr && !bad; m++) {
                const int64_t x = A.ref_order[m];
                bad = x < 0 || x >= nr || W.mark[x];
                if (!bad) W.mark[x] = 1;
            }
            memset(W.mark, 0, (size_t)nr);
            for (Py_ssize_t r = 0; r < nb && !bad; r++) { /* the relevant sets the caller counted */
                int64_t c = A.q_cls[q0 + r], want = A.offsets[q0 + r + 1] - A.offsets[q0 + r];
                if (c >= ncls || (c < 0 && want != 0) || want < 0 || A.offsets[q0 + r] < 0 ||
                    A.offsets[q0 + r + 1] > npairs)
                    bad = 1;
                else if (c >= 0) {
                    int64_t have = A.cend[c] - A.cstart[c];
                    if (A.cstart[c] < 0 || A.cend[c] > nr || have < 0) bad = 1;
                    else if (A.same && (q0 + r >= nr || have - 1 != want)) bad = 1;
                    else if (!A.same && have != want) bad = 1;
                    /* same: the query itself must be among them (one_row gathers every one but it: a row
                     * whose class does not hold it would gather want + 1 into arrays of cap) */
                    for (int64_t s = A.cstart[c]; s < A.cend[c] && !bad && A.same; s++) have -= A.ref_order[s] == q0 + r;
                    if (!bad && A.same && have != want) bad = 1;
                }
                if (!bad && (A.depth_q[q0 + r] < 1)) bad = 1;
            }
            if (bad) {
                PyErr_SetString(PyExc_ValueError, "_fused.count_rows: inconsistent class layout");
            } else {
                Py_BEGIN_ALLOW_THREADS
                for (Py_ssize_t r = 0; r < nb; r++) one_row(&A, &W, r);
                Py_END_ALLOW_THREADS
                result = Py_None;
                Py_INCREF(result);
            }
        }
        free(W.hist); free(W.diff); free(W.extra); free(W.before); free(W.idx); free(W.tmpi);
        free(W.g); free(W.tmpg); free(W.k64); free(W.mark); free(W.surv);
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* per query i, over its entries ranks[offsets[i]:offsets[i + 1]] (increasing, inf beyond the depth) with
 * rank <= limit[i]: hits[i] = their number, psum[i] = sum of m / rank (m: the entry's 1-based position),
 * summed in entry order (RelevantRanks.hits and .precision_sum, the same values bit for bit) */
static PyObject *rank_sums(PyObject *self, PyObject *args) {
    PyObject *o[5];
    Py_ssize_t nq, npairs;
    (void)self;
    if (!PyArg_ParseTuple(args, "nnOOOOO", &nq, &npairs, &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    if (nq < 0 || nq >= PY_SSIZE_T_MAX || npairs < 0) {
        PyErr_SetString(PyExc_ValueError, "_fused.rank_sums: sizes out of range");
        return NULL;
    }
    Py_buffer v[5];
    const int spec[5][3] = {{8, 0, 'q'}, {8, 0, 'd'}, {8, 0, 'd'}, {8, 1, 'd'}, {8, 1, 'd'}};
    const Py_ssize_t counts[5] = {nq + 1, npairs, nq, nq, nq};
    const char *names[5] = {"offsets", "ranks", "limit", "hits", "psum"};
    int got = 0;
    for (; got < 5; got++)
        if (get_buf(o[got], &v[got], spec[got][1], spec[got][0], (char)spec[got][2], counts[got], names[got]) < 0) break;
    PyObject *result = NULL;
    if (got == 5) {
        const int64_t *off = v[0].buf;
        const double *rk = v[1].buf, *lim = v[2].buf;
        double *hits = v[3].buf, *psum = v[4].buf;
        int bad = off[0] != 0;
        for (Py_ssize_t i = 0; i < nq && !bad; i++) bad = off[i + 1] < off[i] || off[i + 1] > npairs;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_fused.rank_sums: offsets out of order");
        } else {
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < nq; i++) {
                double h = 0.0, p = 0.0;
                for (int64_t k = off[i]; k < off[i + 1]; k++) {
                    const double r = rk[k];
                    if (r <= lim[i]) {
                        h += 1.0;
                        p += (double)(k - off[i] + 1) / r;
                    } else {
                        h += 0.0;
                        p += 0.0;
                    }
                }
                hits[i] = h;
                psum[i] = p;
            }
            Py_END_ALLOW_THREADS
            result = Py_None;
            Py_INCREF(result);
        }
    }
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"count_rows", count_rows, METH_VARARGS,
     "count_rows(G, nb, nr, q0, nq, dim, ncls, npairs, same, eps, q_cls, r_cls, ref_order, cstart, cend, depth_q, "
     "offsets, delta, Q64, R64, out_rank, out_ref, unsure): the exact relevant ranks of queries q0..q0+nb-1 "
     "(see embedscope/metrics/search/fused.py)"},
    {"rank_sums", rank_sums, METH_VARARGS,
     "rank_sums(nq, npairs, offsets, ranks, limit, hits, psum): per query, the relevant entries ranked within "
     "limit and the sum of position / rank over them"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", "Fused counting of relevant ranks.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }
