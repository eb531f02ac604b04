"""Bounded reading: ``properties`` reads each embedding file once; ``saliency-agreement`` streams the
maps files in blocks of images instead of holding every model's maps at once."""

from __future__ import annotations

import json

import numpy as np
import pytest

# --------------------------------------------------------------------------- properties: one read per file


def _emb_file(path, seed, n=60):
    from embedscope import store

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    es = store.EmbeddingSet(embeddings=rng.normal(size=(n, 4)).astype(np.float32), labels=labels,
                            paths=[f"img/{i}.png" for i in range(n)],
                            split=np.where(np.arange(n) < 45, "test", "train"), class_names=["a", "b", "c"],
                            properties={"p": rng.integers(0, 2, n), "q": labels % 2},
                            attrs={"dataset": "toy", "checkpoint": f"/ck/{seed}.pt"})
    store.save(path, es)
    return path


def _old_properties(files, **kw):
    """What ``properties`` returned before: the rows of ``properties_of_files`` and a provenance from a
    second ``store.load`` of each file."""
    from embedscope import store
    from embedscope.analyses.image_properties import properties_of_files
    from embedscope.analyses.result import provenance_of

    rows = properties_of_files(files, **kw)
    labels = list(dict.fromkeys(r["model"] for r in rows))
    out = []
    for f, nm in zip(files, labels):
        prov = provenance_of(store.load(f), extra={
            "split": kw.get("split", "test"), "max_r": kw.get("max_r"), "metric": kw.get("metric", "euclidean"),
            "permutations": kw.get("permutations", 0), "cap": "R uncapped (the paper's definition)"})
        out.append((nm, [r for r in rows if r["model"] == nm], prov))
    return out


def test_properties_reads_each_file_once(tmp_path, monkeypatch):
    """``properties`` loaded every file twice (once for the measure, once more for the provenance)."""
    import h5py

    from embedscope import store
    from embedscope.analyses import properties

    files = [_emb_file(tmp_path / "a.h5", 0), _emb_file(tmp_path / "b.h5", 1)]
    expected = _old_properties(files)
    loads, opens = [], []
    real_load, real_file = store.load, h5py.File

    def spy_load(path, *a, **k):
        loads.append(str(path))
        return real_load(path, *a, **k)

    class SpyFile(real_file):
        def __init__(self, name, *a, **k):
            opens.append(str(name))
            super().__init__(name, *a, **k)

    monkeypatch.setattr(store, "load", spy_load)
    monkeypatch.setattr(h5py, "File", SpyFile)
    res = properties(files)
    assert sorted(loads) == sorted(map(str, files))
    # each file is loaded once; with several files, each one's split column and property names are read
    # before any is measured (one light open each: a later file lacking the split or a property is refused
    # up front), so at most two opens per file and never a second load
    assert sorted(set(opens)) == sorted(map(str, files))
    assert all(opens.count(str(f)) <= 2 for f in files)
    for r, (nm, rows, prov) in zip(res, expected, strict=True):
        assert r.model == nm
        assert r.table == rows
        assert r.provenance == prov


def test_properties_cli_output_unchanged(tmp_path, capsys):
    """The command's JSON (rows and provenance) is what the two-read code wrote."""
    from embedscope.cli import main

    files = [_emb_file(tmp_path / "a.h5", 2), _emb_file(tmp_path / "b.h5", 3)]
    expected = _old_properties(files)
    assert main(["properties", *map(str, files), "--json", str(tmp_path / "o.json"), "--no-progress"]) == 0
    got = json.loads((tmp_path / "o.json").read_text())
    assert len(got["models"]) == len(expected)
    for m, (_, rows, prov) in zip(got["models"], expected):
        assert m["provenance"] == json.loads(json.dumps(prov))
        assert len(m["table"]) == len(rows)


# --------------------------------------------------------------------------- saliency-agreement: streamed maps


def _maps_file(path, maps, paths, *, labels=None, name=None, family="ranking", images=False):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    n = len(paths)
    labels = np.zeros(n, dtype=np.int64) if labels is None else np.asarray(labels)
    imgs = (np.arange(n * maps.shape[1] * maps.shape[2]) % 251).astype(np.uint8).reshape(n, *maps.shape[1:]) \
        if images else None
    sm = SaliencyMaps(maps=maps, paths=paths, labels=labels, class_names=["c0", "c1"], images=imgs,
                      attrs={"name": name or path.stem, "family": family})
    save_maps(path, sm)
    return path


def _random_files(tmp_path, n, m=3, hw=32, seed=0):
    files = []
    for k in range(m):
        rng = np.random.default_rng(seed + k)
        files.append(_maps_file(tmp_path / f"m{k}.h5", rng.random((n, hw, hw), dtype=np.float32),
                                [f"img/{i}" for i in range(n)]))
    return files


def _peak(fn):
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_agreement_memory_bounded_by_a_block(tmp_path):
    """saliency-agreement held every model's maps in float32 at once (and float64 copies of two of
    them): its peak grew with N x maps (about 5.5 times all the maps in float32). Read in blocks of
    images, the peak is a block's worth plus what grows with N alone (paths, per-image values)."""
    from embedscope.saliency.run import agreement_of_files

    peaks, sizes = [], []
    for n in (1000, 4000):
        d = tmp_path / str(n)
        d.mkdir()
        files = _random_files(d, n)
        sizes.append(3 * n * 32 * 32 * 4)  # every model's maps in float32
        peaks.append(_peak(lambda files=files: agreement_of_files(files, block=32)))
    assert peaks[1] < sizes[1] / 4, (peaks, sizes)
    # four times the images: the peak grows by far less than the maps do
    assert peaks[1] - peaks[0] < (sizes[1] - sizes[0]) / 10, (peaks, sizes)


def _old_agreement(files, jsd_base=2):
    """The computation before streaming: every file loaded whole, matched, agreement_matrix on the arrays."""
    from embedscope.metrics.agreement import FAMILY_ORDER, agreement_matrix
    from embedscope.store.saliency import load_maps, match_maps

    items = [load_maps(f) for f in files]
    names = [sm.name for sm in items]
    fams = [str(sm.attrs.get("family")) for sm in items]
    matched, _ = match_maps(items, names)
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    perm = sorted(range(len(files)), key=lambda i: (rank.get(fams[i], len(FAMILY_ORDER)), fams[i], i))
    res = agreement_matrix([matched[i].maps for i in perm], names=[names[i] for i in perm],
                           families=[fams[i] for i in perm], jsd_base=jsd_base)
    res["paths"] = matched[perm[0]].paths
    return res


def _same(a, b):
    """Equal to the last bit (NaN where NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes(), (a, b)


@pytest.mark.parametrize("block", [1, 3, 7, None])
@pytest.mark.parametrize("jsd_base", [2, "e"])
def test_agreement_streamed_equals_whole_arrays_bit_for_bit(tmp_path, block, jsd_base):
    """Partly overlapping files in different orders (rows read out of order), constant and all-zero
    maps (undefined r and JSD), maps equal between models (r clipped): every matrix, per-image value
    and block mean equals the whole-array computation to the last bit, whatever the block size."""
    from embedscope.saliency.run import agreement_of_files

    rng = np.random.default_rng(5)
    n, hw = 23, 6
    base = rng.random((n, hw, hw), dtype=np.float32)
    base[4] = 0.5  # constant
    base[9] = 0.0  # all zero
    paths = [f"img/{i:02d}" for i in range(n)]
    labels = np.arange(n) % 2
    a = _maps_file(tmp_path / "a.h5", base, paths, labels=labels, family="classification", images=True)
    perm = rng.permutation(n)[:19]  # b holds 19 of the images, shuffled
    b_maps = base[perm].copy()
    b_maps[::3] = rng.random(b_maps[::3].shape, dtype=np.float32)  # a third different, the rest equal to a's
    b = _maps_file(tmp_path / "b.h5", b_maps, [paths[i] for i in perm], labels=labels[perm], family="ranking")
    keep = np.sort(rng.permutation(n)[:20])[::-1]  # c: 20 images, reversed order
    c = _maps_file(tmp_path / "c.h5", rng.random((len(keep), hw, hw), dtype=np.float32), [paths[i] for i in keep],
                   labels=labels[keep], family="untrained")
    files = [a, b, c]
    got = agreement_of_files(files, block=block, jsd_base=jsd_base)
    ref = _old_agreement(files, jsd_base=jsd_base)
    assert got["n_images"] == ref["n_images"] == len(set(perm) & set(keep))
    assert list(got["paths"]) == list(ref["paths"]) and got["names"] == ref["names"]
    for k in ("r_mean", "r_spread", "jsd_mean", "jsd_std", "n_undefined_r"):
        _same(got[k], ref[k])
    assert got["pairs"].keys() == ref["pairs"].keys()
    for key, pr in ref["pairs"].items():
        assert got["pairs"][key].keys() == pr.keys()
        for k, v in pr.items():
            if isinstance(v, (np.ndarray, float)):
                _same(got["pairs"][key][k], v)
            else:
                assert got["pairs"][key][k] == v, (key, k)
    assert np.isnan(got["pairs"][(0, 1)]["pearson"]).any() and np.isnan(got["pairs"][(0, 1)]["jsd"]).any()
    assert got["pairs"][(0, 1)]["n_clipped_r"] > 0
    assert json.dumps(got["blocks"]) == json.dumps(ref["blocks"])  # NaN-safe, every digit


def test_agreement_command_output_unchanged_and_values_checked(tmp_path, capsys):
    """The command's JSON equals the whole-array computation; a file with a map outside [0, 1] is
    still refused in one line (the check reads the file block by block)."""
    from embedscope.cli import main

    files = _random_files(tmp_path, 40, m=2, hw=8, seed=3)
    out = tmp_path / "o.json"
    assert main(["saliency-agreement", *map(str, files), "--json", str(out), "--grid", str(tmp_path / "g.png")]) == 0
    js = json.loads(out.read_text())
    ref = _old_agreement(files)
    assert js["matrices"]["r_mean"] == json.loads(json.dumps(ref["r_mean"].tolist()))
    pr = ref["pairs"][(0, 1)]
    assert js["per_image"]["m0 vs m1"]["pearson"] == pr["pearson"].tolist()
    assert js["per_image"]["m0 vs m1"]["jsd"] == pr["jsd"].tolist()
    assert (tmp_path / "g.png").stat().st_size > 100
    import h5py

    with h5py.File(files[1], "r+") as f:
        f["maps"][37, 0, 0] = 1.5
    capsys.readouterr()
    assert main(["saliency-agreement", *map(str, files)]) == 1
    err = capsys.readouterr().err.strip()
    assert "maps must lie in [0, 1], got [" in err and "1.5]" in err and "\n" not in err


def test_maps_are_chunked_by_whole_maps(tmp_path):
    """h5py's chunk guess cut each map into tiles shared by hundreds of rows ((1000, 4, 4) for
    8000 maps of 32 x 32), so reading one row read pieces of 64 chunks; save_maps now writes
    chunks of whole maps (about CHUNK_BYTES), which a block of rows, in any order, reads directly."""
    import h5py

    from embedscope.store.saliency import CHUNK_BYTES

    f = _maps_file(tmp_path / "m.h5", np.zeros((300, 32, 32), np.float32), [f"p{i}" for i in range(300)],
                   images=True)
    with h5py.File(f) as h:
        assert h["maps"].chunks == (CHUNK_BYTES // (32 * 32 * 2), 32, 32)
        assert h["images"].chunks == (CHUNK_BYTES // (32 * 32), 32, 32)
    g = _maps_file(tmp_path / "big.h5", np.zeros((3, 300, 300), np.float32), ["a", "b", "c"])
    with h5py.File(g) as h:
        assert h["maps"].chunks == (1, 300, 300)  # a map larger than CHUNK_BYTES: one per chunk
