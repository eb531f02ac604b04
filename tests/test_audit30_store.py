"""Audit 30 (A): ``info`` on a saliency-maps file in bounded memory; ``add-properties --force`` that does
not grow the file.

* ``embedscope info MAPS.h5`` read every map (as float32) and every stored image to print a summary: a
  377 MB file of 1,500 maps of 224 x 224 with their images peaked at 658 MB RSS. It now checks the maps a
  block of rows at a time and reads no image (``store.saliency.scan_maps_open``): 72 MB, whatever N, the
  same table and the same errors;
* replacing a property left the old one's bytes in the file (HDF5 does not give back a deleted dataset's
  space): a file grew by the property's size at each ``--force``. A replacement now builds the file
  afresh, every other object copied by HDF5 as it is;
* odd maps files: a single value for the paths was read one character per path (accepted), for the
  labels an IndexError; a group where a dataset belongs, a missing retrieval dataset, text or complex
  maps, undecodable paths and a format_version that is no integer were tracebacks' one-liners or
  silently converted; retrieval maps outside [0, 1] were accepted (the queries' refused). Each is now
  one line naming the file and what is wrong. ``info`` also counts the all-zero maps (a collapsed
  model's) and says whose images a pairs file holds when it holds only one side's.
"""

from __future__ import annotations

import errno
import os

import h5py
import numpy as np
import pytest
from cli_run import cli_output, run_cli
from faults import fail_writes
from test_audit29_memory import _peak_mib

from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store import embeddings as emb
from embedscope.store import saliency as sal
from embedscope.store.saliency import SaliencyMaps, load_maps, save_maps

# ----------------------------------------------------------------------------- info on a maps file

_ATTRS = {"name": "m", "family": "ranking", "n_samples": 5, "noise": 0.1, "order": "paper", "dataset": "digits",
          "input_size": 6, "created": "2026-01-02T03:04:05+00:00", "embedscope_version": "9.9",
          "checkpoint_config": {"arch": "r", "embed_dim": 8, "seed": 1, "dataset": None}}


def _maps(n: int, *, images: int | None = 3, pairs: bool = False, h: int = 6, w: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)

    def pics():
        return rng.integers(0, 255, (n, h, w, 3) if images == 3 else (n, h, w), dtype=np.uint8)
    ret = None
    if pairs:
        ret = {"maps": rng.random((n, h, w)).astype(np.float32), "paths": [f"r{i}" for i in range(n)],
               "labels": np.arange(n) % 2, "distance": rng.random(n).astype(np.float32),
               "images": pics() if images else None}
    return SaliencyMaps(maps=rng.random((n, h, w)).astype(np.float32), paths=[f"p{i}" for i in range(n)],
                        labels=np.arange(n) % 3, class_names=["a", "b", "c"], images=pics() if images else None,
                        retrieval=ret, attrs=dict(_ATTRS))


def _table(rows) -> str:
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v) for _, v in rows)
    lines = [f"{'field':<{width}}  value", f"{'-' * width}  {'-' * vwidth}"]
    return "\n".join([*lines, *(f"{k:<{width}}  {v}".rstrip() for k, v in rows)]) + "\n"


def _expected(name: str, what: str, classes: int, images: str):
    return _table([("file", name), ("kind", f"saliency maps of {what}"), ("map size", "6 x 5"),
                   ("classes", str(classes)), ("images stored", images), ("name", "m"), ("family", "ranking"),
                   ("n_samples", "5"), ("noise", "0.1"), ("order", "paper"), ("input_size", "6"),
                   ("dataset", "digits"), ("embedscope_version", "9.9"), ("created", "2026-01-02T03:04:05+00:00"),
                   ("format_version", "1"), ("model", "arch=r, embed_dim=8, seed=1")])


@pytest.mark.parametrize("n, images, pairs, what, classes, shown", [
    (7, 3, False, "7 images", 3, "yes"), (7, 1, False, "7 images", 3, "yes"), (1, None, False, "1 image", 1, "no"),
    (0, None, False, "0 images", 0, "no"), (5, 3, True, "5 pairs (query + nearest retrieval)", 3, "yes"),
    (0, None, True, "0 pairs (query + nearest retrieval)", 0, "no")])
def test_info_of_a_maps_file_prints_what_it_printed(tmp_path, monkeypatch, n, images, pairs, what, classes, shown):
    """The table of the code that read every map (the text it printed, by hand), also read a map at a time."""
    monkeypatch.chdir(tmp_path)
    save_maps("m.h5", _maps(n, images=images, pairs=pairs))
    expected = _expected("m.h5", what, classes, shown)
    assert cli_output(["info", "m.h5"]) == expected
    monkeypatch.setattr(sal, "STREAM_ELEMENTS", 30)  # one map per block
    assert cli_output(["info", "m.h5"]) == expected


def _big_maps(path, n=2000, h=32, w=32):
    """A maps file written with h5py a block at a time (8 MB of maps as float32, 6 MB of images)."""
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        m = f.create_dataset("maps", (n, h, w), np.float16, chunks=sal._row_chunks((n, h, w), 2))
        im = f.create_dataset("images", (n, h, w, 3), np.uint8, chunks=sal._row_chunks((n, h, w, 3), 1))
        for s in range(0, n, 500):
            m[s:s + 500] = rng.random((500, h, w)).astype(np.float16)
            im[s:s + 500] = rng.integers(0, 255, (500, h, w, 3), dtype=np.uint8)
        f.create_dataset("paths", data=np.array([f"i/{i}" for i in range(n)], dtype=object),
                         dtype=h5py.string_dtype())
        f.create_dataset("labels", data=np.arange(n) % 10)
        f.create_dataset("class_names", data=np.array([f"c{i}" for i in range(10)], dtype=object),
                         dtype=h5py.string_dtype())
        emb.write_attrs(f.attrs, {"format": sal.FORMAT, "format_version": 1, "kind": "maps", "name": "big"})
    return path


def test_info_of_a_maps_file_holds_neither_the_maps_nor_the_images(tmp_path, monkeypatch):
    """The old code peaked at 20 MiB here (the maps as float16 and float32, the images); now one block."""
    from embedscope.cli import main

    p = _big_maps(tmp_path / "big.h5")
    monkeypatch.setattr(sal, "STREAM_ELEMENTS", 1 << 16)
    out = cli_output(["info", str(p)])  # (the modules it imports, imported first)
    assert "saliency maps of 2000 images" in out and "classes         10" in out
    assert _peak_mib(lambda: main(["info", str(p)])) < 3


def _bad(tmp_path, name, change, base=None):
    p = tmp_path / f"{name}.h5"
    save_maps(p, base or _maps(5, pairs=True))
    with h5py.File(p, "r+") as f:
        change(f)
    return p


def _replace(key, value):
    def change(f):
        del f[key]
        f[key] = value
    return change


def _nan_in_last_map(f):
    m = f["maps"][()]
    m[-1, -1, -1] = np.nan
    _replace("maps", m)(f)


# (name, how the file is spoiled, the error after the file's path)
_SPOILED = [
    ("nan_last", _nan_in_last_map, "saliency maps: maps contain NaN or inf"),
    ("range", lambda f: _replace("maps", f["maps"][()] * 3)(f), None),  # (the range: load_maps's words)
    ("dup", _replace("paths", np.array([b"a", b"a", b"b", b"c", b"d"])),
     "saliency maps: duplicate paths (maps are matched between models by path)"),
    ("nlabels", _replace("labels", np.array([0, 1])), "saliency maps: 2 labels for 5 maps"),
    ("2d", _replace("maps", np.zeros((5, 30), np.float16)), "saliency maps: maps must be 3-D (N x H x W), got shape (5, 30)"),
    ("images", _replace("images", np.zeros((5, 6, 4), np.uint8)), "saliency maps: images must be uint8 N x H x W "
     "(x 3) matching the maps (5, 6, 5), got uint8 (5, 6, 4)"),
    ("rshape", _replace("retrieval/maps", np.zeros((5, 6, 4), np.float16)),
     "saliency maps: retrieval maps have shape (5, 6, 4), query maps (5, 6, 5)"),
    ("rnan", _replace("retrieval/maps", np.full((5, 6, 5), np.inf, np.float16)),
     "saliency maps: retrieval maps contain NaN or inf"),
    ("rdist", _replace("retrieval/distance", np.zeros(3, np.float32)),
     "saliency maps: retrieval distance has shape (3,), expected (5,)"),
    ("version", lambda f: f.attrs.__setitem__("format_version", 9), "format_version 9 is newer than this embedscope "
     "reads (1)"),
    # what was a traceback's one-liner, silently converted or accepted
    ("scalar_labels", _replace("labels", np.int64(1)), "saliency maps: labels must hold one label per map, got shape ()"),
    ("scalar_paths", _replace("paths", b"abcde"), "saliency maps: paths must hold one path per map, got shape ()"),
    ("maps_group", lambda f: (f.__delitem__("maps"), f.create_group("maps")),
     "'maps' is an HDF5 group, expected a dataset"),
    ("images_group", lambda f: (f.__delitem__("images"), f.create_group("images")),
     "'images' is an HDF5 group, expected a dataset"),
    ("retrieval_dataset", lambda f: (f.__delitem__("retrieval"), f.create_dataset("retrieval", data=1)),
     "'retrieval' is an HDF5 dataset, expected a group (of the pairs' retrieved images)"),
    ("no_rmaps", lambda f: f.__delitem__("retrieval/maps"), "damaged saliency-maps file, missing retrieval/maps"),
    ("no_rpaths", lambda f: f.__delitem__("retrieval/paths"), "damaged saliency-maps file, missing retrieval/paths"),
    ("text_maps", _replace("maps", np.full((5, 6, 5), b"0.5")), "saliency maps: maps must be floating point, got |S3"),
    ("complex_maps", _replace("maps", np.zeros((5, 6, 5), np.complex64)),
     "saliency maps: maps must be floating point, got complex64"),
    ("utf8", _replace("paths", np.array([b"\xff", b"b", b"c", b"d", b"e"])), "'paths' holds invalid UTF-8 text"),
    ("rrange", _replace("retrieval/maps", np.full((5, 6, 5), 7, np.float16)),
     "saliency maps: retrieval maps must lie in [0, 1], got [7, 7]"),
    ("text_version", lambda f: f.attrs.__setitem__("format_version", "abc"), "format_version must be an integer, "
     "got 'abc'"),
    ("array_version", lambda f: f.attrs.__setitem__("format_version", np.array([1, 2])),
     "format_version must be an integer, got array([1, 2])"),
]


@pytest.mark.parametrize("name, change, error", _SPOILED, ids=[s[0] for s in _SPOILED])
def test_a_spoiled_maps_file_is_one_line_from_info_and_load_maps(tmp_path, monkeypatch, name, change, error):
    """info (a map at a time) and load_maps (every map at once) refuse the file in the same words."""
    p = _bad(tmp_path, name, change)
    with pytest.raises(EmbedscopeError) as e:
        load_maps(p)
    if error is None:
        error = "saliency maps: maps must lie in [0, 1], got "
        m = h5py.File(p, "r")["maps"][()].astype(np.float32)
        error += f"[{float(m.min()):.3g}, {float(m.max()):.3g}]"
    assert str(e.value) == f"{p}: {error}"
    monkeypatch.setattr(sal, "STREAM_ELEMENTS", 30)  # one map per block
    rc, out, err = run_cli(["info", str(p)])
    assert rc == 1 and out == "" and err == f"embedscope info: error: {p}: {error}\n"


# ----------------------------------------------------------------------------- add-properties --force


def _emb_file(path, n=400):
    rng = np.random.default_rng(2)
    es = store.EmbeddingSet.from_arrays(rng.standard_normal((n, 16)).astype(np.float32), np.arange(n) % 4,
                                        split="test", paths=[f"i/{i}.jpg" for i in range(n)],
                                        properties={"keep": np.arange(n) % 3})
    return store.save(path, es)


def _props_table(path, n, seed):
    rng = np.random.default_rng(seed)
    path.write_text("path,w,t\n" + "".join(f"i/{i}.jpg,{rng.random()!r},{'x' * (i % 40)}{seed}\n" for i in range(n)),
                    encoding="utf-8")
    return path


def _add(path, table, force=False):
    from embedscope.data.properties import add_properties_to_file

    return add_properties_to_file(path, table, force=force)


def _foreign(p):
    """What another tool adds with h5py: compressed and chunked data, a nested group, links, attributes of
    several types on the root, the properties group, a property and a dataset, an object named twice."""
    with h5py.File(p, "r+") as f:
        d = f.create_dataset("extra/gz", data=np.arange(5000, dtype=np.int16).reshape(50, 100), chunks=(7, 30),
                             compression="gzip", compression_opts=7, shuffle=True, fillvalue=3)
        d.attrs["unit"] = "px"
        d.attrs["scale"] = np.float32(0.5)
        f.create_dataset("contig", data=np.linspace(0, 1, 999))
        f.create_dataset("fixed", data=np.array([b"ab", b"cde"], dtype="S3"))
        f["twice"] = f["contig"]
        f["soft"] = h5py.SoftLink("/extra/gz")
        f["ext"] = h5py.ExternalLink("other.h5", "/x")
        f.attrs["fixed_text"] = np.bytes_(b"fixed")
        f.attrs["ints"] = np.arange(4, dtype=np.uint8)
        f.attrs.create("vlen", "v\u00e9", dtype=h5py.string_dtype("utf-8"))
        f["properties"].attrs["source"] = "my tool"
        f["properties/keep"].attrs["note"] = np.int64(7)


def _contents(p, skip=()):
    """Every object of the file (links as links) and every attribute, with types, layouts and values."""
    out = {}
    with h5py.File(p, "r") as f:
        def attrs(o):
            return {k: (o.attrs.get_id(k).dtype, o.attrs.get_id(k).get_type().get_class(),
                        repr(o.attrs[k])) for k in o.attrs}
        out["/"] = attrs(f)

        def walk(g):
            for k in g:
                path = f"{g.name.rstrip('/')}/{k}"
                if path in skip:
                    continue
                link = g.get(k, getlink=True)
                if not isinstance(link, h5py.HardLink):
                    out[path] = repr((type(link).__name__, getattr(link, "path", None), getattr(link, "filename", None)))
                    continue
                o = g[k]
                if isinstance(o, h5py.Group):
                    out[path] = ("group", attrs(o))
                    walk(o)
                else:
                    out[path] = (o.dtype, o.shape, o.chunks, o.compression, o.compression_opts, o.shuffle,
                                 o.fillvalue, o.id.get_type().get_class(), attrs(o), o[()].tobytes()
                                 if o.dtype.kind != "O" else list(o[()]))
        walk(f)
        out["twice is contig"] = f["twice"] == f["contig"]
    return out


def test_replacing_a_property_does_not_grow_the_file(tmp_path):
    """Three replacements of a 400-row float and text property: the old code grew the file each time (by
    the property's size, ~25 kB here); the file now stays within 2 kB of the one of a single add, and
    replacements do not change its size."""
    p = _emb_file(tmp_path / "e.h5")
    _foreign(p)
    assert _add(p, _props_table(tmp_path / "t0.csv", 400, 0)) == ["w", "t"]
    one, sizes = os.path.getsize(p), []
    for seed in (1, 2, 3):
        _add(p, _props_table(tmp_path / f"t{seed}.csv", 400, seed), force=True)
        sizes.append(os.path.getsize(p))
    # (the first rebuild also drops what _foreign's edits had left unused: smaller than "one")
    assert max(sizes) <= one + 2048 and max(sizes) - min(sizes) < 1024, (one, sizes)
    es = store.load(p)
    rng = np.random.default_rng(3)
    assert es.properties["w"].tolist() == [rng.random() for _ in range(400)]
    assert es.properties["t"].tolist() == [f"{'x' * (i % 40)}3" for i in range(400)]
    assert b"x2\x00" not in p.read_bytes() and b"xxxxxxxxxxxxx1" not in p.read_bytes()  # the old values gone


def test_a_replacement_keeps_everything_else_as_it_was(tmp_path):
    """Every dataset, group, link and attribute but the replaced property: type, shape, chunks, filters,
    fill value, attributes (types included) and bytes as before; an object of two names still one."""
    p = _emb_file(tmp_path / "e.h5")
    _foreign(p)
    _add(p, _props_table(tmp_path / "t0.csv", 400, 0))
    before = _contents(p, skip={"/properties/w", "/properties/t"})
    os.chmod(p, 0o604)
    _add(p, _props_table(tmp_path / "t1.csv", 400, 1), force=True)
    after = _contents(p, skip={"/properties/w", "/properties/t"})
    assert after.keys() == before.keys() and after["twice is contig"]
    for k in before:
        assert repr(after[k]) == repr(before[k]), k
    assert os.stat(p).st_mode & 0o777 == 0o604 and sorted(os.listdir(tmp_path)) == ["e.h5", "t0.csv", "t1.csv"]
    with h5py.File(p, "r") as f:
        assert f["properties/w"][()].tolist() == np.loadtxt(tmp_path / "t1.csv", delimiter=",", skiprows=1,
                                                            usecols=1).tolist()
        assert f["properties/w"].attrs.keys() == set() and f["properties/keep"].attrs["note"] == 7


def test_a_replacement_keeps_a_user_block(tmp_path):
    p = tmp_path / "e.h5"
    es = store.load(_emb_file(tmp_path / "plain.h5"))
    with h5py.File(p, "w", userblock_size=512) as f:
        for k in ("embeddings", "labels"):
            f[k] = getattr(es, k)
        for k in ("paths", "split", "class_names"):
            f.create_dataset(k, data=getattr(es, k).astype(object), dtype=h5py.string_dtype())
        f.create_dataset("properties/w", data=np.zeros(400))
    with open(p, "r+b") as fh:
        fh.write(b"MY HEADER")
    _add(p, _props_table(tmp_path / "t1.csv", 400, 1), force=True)
    assert p.read_bytes()[:9] == b"MY HEADER"
    with h5py.File(p, "r") as f:
        assert f.userblock_size == 512 and f["properties/w"][0] != 0


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError(errno.ENOSPC, "No space left on device")])
def test_a_replacement_stopped_while_hdf5_copies_leaves_the_file_as_it_was(tmp_path, monkeypatch, stop):
    """Ctrl-C or a full disk met by H5Ocopy writing the new file (through the Python file): the file, its
    bytes and mode as before, the temporary file removed; a full disk is one line naming the file."""
    p = _emb_file(tmp_path / "e.h5")
    _add(p, _props_table(tmp_path / "t0.csv", 400, 0))
    os.chmod(p, 0o640)
    raw = p.read_bytes()
    fail_writes(monkeypatch, emb, stop, after=3)  # (the copy under way)
    with pytest.raises(KeyboardInterrupt if stop is KeyboardInterrupt else EmbedscopeError) as e:
        _add(p, _props_table(tmp_path / "t1.csv", 400, 1), force=True)
    if stop is not KeyboardInterrupt:
        assert str(e.value) == f"{p}: no space left on device"
    assert p.read_bytes() == raw and sorted(os.listdir(tmp_path)) == ["e.h5", "t0.csv", "t1.csv"]
    monkeypatch.undo()
    _add(p, tmp_path / "t1.csv", force=True)
    assert os.stat(p).st_mode & 0o777 == 0o640


def test_a_plain_add_still_copies_the_bytes(tmp_path, monkeypatch):
    """Adding properties (none replaced): the file copied as it is (the fast path), nothing rebuilt."""
    p = _emb_file(tmp_path / "e.h5")
    monkeypatch.setattr(emb, "_rebuilt_without", None)  # (a call: a TypeError)
    assert _add(p, _props_table(tmp_path / "t0.csv", 400, 0)) == ["w", "t"]
    assert store.load(p).properties["keep"].tolist() == [i % 3 for i in range(400)]


def _rows(out: str) -> dict[str, str]:
    return {ln[:19].strip(): ln[19:].strip() for ln in out.splitlines()[2:] if ln.strip()}


def test_info_counts_the_all_zero_maps(tmp_path, monkeypatch):
    """A collapsed model's maps are all zero (docs/saliency.md; the figures then show bare images): info
    said nothing of it. It now counts them, read a map at a time (a row only when there are some)."""
    sm = _maps(7, images=None)
    sm.maps[[1, 4, 6]] = 0
    sm.maps[2, 0, 0] = 0  # (one zero value: not an all-zero map)
    save_maps(tmp_path / "m.h5", sm)
    monkeypatch.setattr(sal, "STREAM_ELEMENTS", 60)  # two maps per block
    expected = int(np.count_nonzero(~load_maps(tmp_path / "m.h5").maps.reshape(7, -1).any(axis=1)))
    assert expected == 3
    assert _rows(cli_output(["info", str(tmp_path / "m.h5")]))["all-zero maps"] == "3 of 7 (zero gradients)"
    pairs = _maps(5, images=None, pairs=True)
    pairs.retrieval["maps"][:] = 0
    save_maps(tmp_path / "p.h5", pairs)
    assert _rows(cli_output(["info", str(tmp_path / "p.h5")]))["all-zero maps"] == \
        "queries 0 of 5, retrievals 5 of 5 (zero gradients)"
    save_maps(tmp_path / "ok.h5", _maps(5, images=None, pairs=True))
    assert "all-zero maps" not in _rows(cli_output(["info", str(tmp_path / "ok.h5")]))


@pytest.mark.parametrize("drop, shown", [("images", "the retrievals' only"), ("retrieval/images", "the queries' only"),
                                         (None, "yes")])
def test_info_says_whose_images_a_pairs_file_holds(tmp_path, drop, shown):
    """A pairs file holding the images of its queries only was "images stored: yes" (the pairs figure
    needs both)."""
    p = save_maps(tmp_path / "p.h5", _maps(5, pairs=True))
    if drop:
        with h5py.File(p, "r+") as f:
            del f[drop]
    assert _rows(cli_output(["info", str(p)]))["images stored"] == shown
