"""Audit 45 (A): small correctness items.

What was wrong before:

1. :func:`embedscope.viz.neighbours.similarity_digits` of an empty array (``np.empty((0,))``,
   ``np.empty((3, 0))``) raised ("cannot reshape array of size 0 into shape (0)") instead of
   returning ``lo``.
2. ``embedscope import`` of a CSV written by ``DataFrame.to_csv(path)`` of a filtered or re-sorted frame:
   the unnamed first column (pandas' row index, 0, 2, 5, 7, ... or a permutation) became an
   embedding dimension (D one too many), since only exactly 0..N-1 was recognised.
3. The checkpoint advice for a file whose name holds a control character read "--head none (for bash or
   zsh: ...) (or --head random ...)", two asides in a row (and "(torch.save({}, 'identity.pth')) (for bash
   ..."): the note that the $'...' quotes are bash's and zsh's now ends the sentence, as a clause.
4. The C extension (``_fused.c``) checked its buffers by item size only: an int64 array where float64 is
   expected (or float64 where int64) was accepted and read as the other type's bits.
5. tests/brute.py computed its float64 keys by a BLAS GEMM, which rounds some keys otherwise than the
   per-pair sums the ranks are defined by: on massive exact ties the reference ordered pairs wrongly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.cli_run import run_cli


# ------------------------------------------------------------------ 1. similarity_digits of nothing
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 3), (0, 0)])
def test_similarity_digits_of_an_empty_array_is_lo(shape):
    from embedscope.viz.neighbours import similarity_digits

    for dtype in (np.float32, np.float64):
        assert similarity_digits(np.empty(shape, dtype=dtype)) == 2
        assert similarity_digits(np.empty(shape, dtype=dtype), lo=3) == 3
        assert similarity_digits(np.empty(shape, dtype=dtype), lo=3, hi=5) == 3


def test_similarity_digits_of_nan_rows_and_scalars():
    from embedscope.viz.neighbours import similarity_digits

    assert similarity_digits(np.full((2, 3), np.nan)) == 2
    assert similarity_digits(np.full((2, 3), np.nan), lo=4) == 4
    assert similarity_digits(np.array(np.nan)) == 2
    assert similarity_digits(np.float64(0.5)) == 2
    assert similarity_digits(np.array(0.99995)) == 5  # (4 decimals would read "1.0000")
    assert similarity_digits([[np.nan, 0.999521, 0.999524]]) == 6  # a NaN beside values: the values count


# ------------------------------------------------------------------ 2. pandas' row index of a filtered frame
def _frame(n=20):
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(n, 3)), columns=["d0", "d1", "d2"])
    df.insert(0, "label", np.arange(n) % 4)
    return df


def _import(tmp_path, df, name, **to_csv):
    from embedscope import store

    csv, out = tmp_path / f"{name}.csv", tmp_path / f"{name}.h5"
    df.to_csv(csv, **to_csv)
    rc, stdout, err = run_cli(["import", csv, "-o", out, "--labels", "label"])
    assert rc == 0, err
    return stdout.splitlines(), store.load(out)


@pytest.mark.parametrize("how", ["filtered", "sorted", "filtered and sorted"])
def test_row_index_of_a_filtered_or_sorted_frame_is_left_out(tmp_path, how):
    df = _frame()
    if "filtered" in how:
        df = df[df["d0"] > -0.5]  # 0, 1, 3, ...: gaps
    if "sorted" in how:
        df = df.sort_values("d1")  # a permutation
    assert not np.array_equal(df.index, np.arange(len(df)))
    lines, es = _import(tmp_path, df, "a")
    assert es.embeddings.shape == (len(df), 3)  # before: (N, 4), 'Unnamed: 0' a dimension
    np.testing.assert_array_equal(es.embeddings, df[["d0", "d1", "d2"]].to_numpy(dtype=np.float32))
    np.testing.assert_array_equal(es.labels, df["label"].to_numpy())
    assert es.attrs["import_embedding_columns"] == ["d0", "d1", "d2"]
    assert lines[0] == (f"embeddings: 3 columns d0, d1, d2; left out 'Unnamed: 0': the row index of a filtered or "
                        f"sorted frame ({len(df)} distinct integers in {df.index.min()}..{df.index.max()}; pandas' "
                        "to_csv without index=False)")


def test_row_index_written_as_whole_floats_is_left_out(tmp_path):
    df = _frame()
    df.index = np.arange(20, dtype=float) * 2  # 0.0, 2.0, ...: whole numbers in a float column
    lines, es = _import(tmp_path, df, "f")
    assert es.embeddings.shape == (20, 3) and "left out 'Unnamed: 0'" in lines[0]


def test_row_index_0_to_n_keeps_its_note_and_other_unnamed_columns_stay(tmp_path):
    lines, es = _import(tmp_path, _frame(), "a")  # 0..N-1: as before
    assert lines[0] == ("embeddings: 3 columns d0, d1, d2; left out 'Unnamed: 0': the row index 0..19 (pandas' "
                        "to_csv without index=False)") and es.embeddings.shape == (20, 3)
    for i, index in enumerate((np.arange(20) - 1, np.arange(20) % 7, np.arange(20) * 0.5)):
        df = _frame()
        df.index = index  # a negative value, repeats, fractions: not a row index, an embedding column as before
        lines, es = _import(tmp_path, df, f"k{i}")
        assert lines[0] == "embeddings: 4 columns Unnamed: 0, d0, d1, d2" and es.embeddings.shape == (20, 4)
    df = _frame()
    df.index = np.arange(20)[::-1] * 3
    df = df.rename_axis("row")  # a named column is never taken for the row index
    lines, es = _import(tmp_path, df, "named")
    assert lines[0] == "embeddings: 4 columns row, d0, d1, d2" and es.embeddings.shape == (20, 4)


def test_a_table_of_labels_and_a_sparse_row_index_has_no_embedding(tmp_path):
    (tmp_path / "only.csv").write_text(",label\n0,a\n3,b\n5,a\n")
    rc, _, err = run_cli(["import", tmp_path / "only.csv", "-o", tmp_path / "only.h5"])
    assert rc == 1 and "Traceback" not in err
    assert err.strip().endswith("no numeric columns left for the embeddings (name them with --embeddings COLUMN or "
                                "PREFIX*; 'Unnamed: 0', distinct non-negative integers, was left out as a row index)")


# ------------------------------------------------------------------ 3. the bash note after the sentence
def _hint_cases():
    """(state dict, object) of each kind of foreign file the advice names a command for."""
    import argparse

    import torch
    from torchvision.models import resnet18

    net = resnet18(weights=None)
    sd = net.state_dict()
    own = {**sd, "fc.weight": torch.zeros(128, 512), "fc.bias": torch.zeros(128)}  # the user's embedding layer
    seq = torch.nn.Sequential(*list(net.children())[:-1]).state_dict()  # numbered keys
    timm_obj = {"arch": "convnext_atto", "args": argparse.Namespace(), "state_dict": {}}
    return [(sd, None), (own, None), (seq, None), ({"stem.0.weight": torch.zeros(2, 3, 4, 4)}, timm_obj),
            ({"patch_embed.proj.weight": torch.zeros(2, 3, 4, 4)}, None)]


def test_the_bash_note_ends_the_advice_instead_of_a_second_aside(tmp_path):
    from embedscope.models.checkpoint import BASH_NOTE, _foreign_state_dict_hint, keep_layer_hint
    from embedscope.text import safe

    path = tmp_path / "r18\x1b[31m.pth"  # a control character: the command is in bash's $'...' quotes
    for sd, obj in _hint_cases():
        line = safe(_foreign_state_dict_hint(sd, path, obj))
        assert "$'" in line and "--head random" in line, line
        assert line.endswith(BASH_NOTE) and line.count(BASH_NOTE) == 1, line
        assert ") (" not in line, line  # before: "--head none (for bash or zsh: ...) (or --head random ...)"
    hint = safe(keep_layer_hint(path, "timm:resnet18"))  # before: "(torch.save({}, 'identity.pth')) (for bash ..."
    assert hint.endswith("(torch.save({}, 'identity.pth'))" + BASH_NOTE) and ") (" not in hint, hint
    assert safe(keep_layer_hint(tmp_path / "plain.pth")).endswith("(torch.save({}, 'identity.pth'))")


def test_embed_of_a_torchvision_file_with_a_control_character_reads_naturally(tmp_path):
    import torch
    from torchvision.models import resnet18

    from tests.cli_run import one_error_line

    f = tmp_path / "r18\x1b[31m.pth"
    torch.save(resnet18(weights=None).state_dict(), f)
    rc, _, err = run_cli(["embed", f, "--dataset", "digits", "-o", tmp_path / "e.h5", "--no-progress"])
    shown = str(tmp_path).replace("\\", "\\\\") + "/r18\\x1b[31m.pth"
    assert rc == 1 and one_error_line(err, "embed").endswith(
        f"embed it with no checkpoint as --arch resnet18 --weights $'{shown}' --head none (or --head random for a "
        "seeded random linear head on the features), or as --trunk with --embedder; the $'...' quotes are bash's "
        "and zsh's: plain sh does not read them")
    assert "\x1b" not in err and not (tmp_path / "e.h5").exists()


# ------------------------------------------------------------------ 4. the C extension checks the item type
_BUFFERS = {"G": np.float32, "q_cls": np.int64, "r_cls": np.int64, "ref_order": np.int64, "cstart": np.int64,
            "cend": np.int64, "depth_q": np.int64, "offsets": np.int64, "delta": np.float64, "Q64": np.float64,
            "R64": np.float64, "out_rank": np.float64, "out_ref": np.int64, "unsure": np.uint8}
#: of the same item size, another type: read as the expected type's bits before
_OTHER = {np.float32: (np.int32, np.uint32), np.float64: (np.int64, np.uint64), np.int64: (np.float64, np.uint64),
          np.uint8: ("S1",)}


def _fused_module():
    return pytest.importorskip("embedscope.metrics.search._fused")


@pytest.mark.parametrize("name", list(_BUFFERS))
def test_count_rows_refuses_a_buffer_of_another_type_of_the_same_size(name):
    from tests.test_audit44_fused_c import _args, _call

    _fused_module()
    want = np.dtype(_BUFFERS[name])
    for other in _OTHER[_BUFFERS[name]]:
        d = _args()
        d[name] = d[name].astype(other)
        assert d[name].itemsize == want.itemsize
        with pytest.raises(ValueError, match=f"_fused: {name} must be {want.name}"):
            _call(d)
    d = _args()  # the expected types run, as do the other 1-byte types for unsure
    _call(d)
    for byte in (np.int8, np.bool_):
        d = _args()
        d["unsure"] = d["unsure"].astype(byte)
        _call(d)


def test_count_rows_no_longer_writes_float_bits_into_an_int64_output():
    from tests.test_audit44_fused_c import _args, _call

    _fused_module()
    d = _args()
    d["out_rank"] = np.zeros(d["npairs"], dtype=np.int64)  # before: filled with the ranks' float64 bits, no error
    with pytest.raises(ValueError, match="out_rank must be float64"):
        _call(d)
    assert not d["out_rank"].any()


def test_rank_sums_checks_types_and_takes_explicit_little_endian_formats():
    import ctypes
    import sys

    _fused = _fused_module()
    off, ranks, lim = np.array([0, 2, 3]), np.array([1.0, 3.0, 2.0]), np.array([5.0, 1.0])
    hits, psum = np.zeros(2), np.zeros(2)
    _fused.rank_sums(2, 3, off, ranks, lim, hits, psum)
    assert hits.tolist() == [2.0, 0.0] and psum.tolist() == [1.0 + 2.0 / 3.0, 0.0]
    bad = {"offsets": off.astype(np.float64), "ranks": ranks.astype(np.int64), "limit": lim.astype(np.int64),
           "hits": np.zeros(2, np.int64), "psum": np.zeros(2, np.int64)}
    for i, name in enumerate(bad):  # before: an int64 offsets array read as doubles, ranks read as ints' bits, ...
        args = [off, ranks, lim, np.zeros(2), np.zeros(2)]
        args[i] = bad[name]
        with pytest.raises(ValueError, match=f"_fused: {name} must be"):
            _fused.rank_sums(2, 3, *args)
    if sys.byteorder == "little":  # ctypes writes '<q', '<d': the native order spelled out, taken
        c_off, c_rk, c_lim = (ctypes.c_int64 * 3)(0, 2, 3), (ctypes.c_double * 3)(*ranks), (ctypes.c_double * 2)(*lim)
        c_hits, c_psum = (ctypes.c_double * 2)(), (ctypes.c_double * 2)()
        assert memoryview(c_off).format == "<q" and memoryview(c_rk).format == "<d"
        _fused.rank_sums(2, 3, c_off, c_rk, c_lim, c_hits, c_psum)
        assert list(c_hits) == hits.tolist() and list(c_psum) == psum.tolist()
        with pytest.raises(ValueError, match="offsets must be int64, got a buffer of format '>q'"):  # another order
            _fused.rank_sums(2, 3, off.astype(">i8"), ranks, lim, np.zeros(2), np.zeros(2))


# ------------------------------------------------------------------ 5. the brute force's keys per pair
def _tied_rows(seed, n, d, distinct=12, classes=4):
    """``n`` rows drawn from ``distinct`` rows of entries in {0, 0.5, 1}: duplicates, and rows whose cosines
    tie in exact arithmetic without being equal (massive exact ties)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 3, (distinct, d)) * 0.5
    base[base.max(axis=1) == 0, 0] = 1.0  # (no zero row)
    return base[rng.integers(0, distinct, n)], rng.integers(0, classes, n)


@pytest.mark.parametrize("metric,n,d,seed", [("cosine", 300, 7, 307), ("cosine", 150, 33, 183),
                                             ("euclidean", 200, 16, 1)])
def test_ranks_on_massive_exact_ties_equal_the_brute_force(metric, n, d, seed):
    """The brute force's keys were a BLAS GEMM's (Q @ R.T), which rounds some keys apart from the per-pair
    sums the library's ranks are defined by: 56 of these 300 queries (d = 7), 33 of 150 (d = 33) were ranked
    otherwise by the reference than by the library."""
    from brute import pair_key_matrix, relevant_ranks_reference, unit_rows

    from embedscope.metrics import relevant_ranks
    from embedscope.metrics.search.knn import pair_keys64

    X, y = _tied_rows(seed, n, d)
    Q = unit_rows(X) if metric == "cosine" else X
    qi, rj = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    np.testing.assert_array_equal(-pair_key_matrix(Q, Q, metric).ravel(), pair_keys64(Q, Q, qi, rj, metric))
    rr = relevant_ranks(X, y, metric=metric, depth="all", device="cpu")
    ref = relevant_ranks_reference(X, y, metric=metric)
    wrong = [i for i, (rk, rf) in enumerate(ref)
             if not (np.array_equal(rr.ranks[rr.offsets[i]:rr.offsets[i + 1]], rk)
                     and np.array_equal(rr.refs[rr.offsets[i]:rr.offsets[i + 1]], rf))]
    assert wrong == []
