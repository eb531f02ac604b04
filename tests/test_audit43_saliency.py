"""Audit 43 of `embedscope saliency` / `saliency-agreement` (a fresh user's pass; docs/saliency.md).

Each test failed on the code before its fix. Tiny data: a 4-pixel-wide model, 8x8 digits, 1-2 noisy copies.
"""

import pytest
import torch
from torch import nn

from embedscope.errors import EmbedscopeError
from embedscope.saliency.smoothgrad import pair_saliency_maps, saliency_maps


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(64, 4)

    def forward(self, x):
        return self.lin(x.flatten(1))


@pytest.fixture(scope="module")
def tiny():
    return _Tiny(), torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kw, msg", [
    # a seed beyond --seed's range [0, 2**32) wrapped to a smaller one's noise: seed=2**32 gave seed 0's maps
    ({"seed": 2**32}, "seed must be at most 4294967295"),
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"seed": 1.5}, "seed must be an integer, got 1.5"),
    ({"seed": "a"}, "seed must be an integer, got 'a'"),  # (a ValueError traceback)
    # int() truncated: n_samples=2.5 computed 2 copies, 0.5 said 'got 0'; None was a TypeError
    ({"n_samples": 2.5}, "n_samples must be an integer, got 2.5"),
    ({"n_samples": 0.5}, "n_samples must be an integer, got 0.5"),
    ({"n_samples": None}, "n_samples must be an integer, got None"),
    ({"n_samples": True}, "n_samples must be an integer, got True"),
    ({"n_samples": 2, "batch_size": 1.5}, "batch_size must be an integer, got 1.5"),
])
def test_saliency_maps_checks_seed_and_counts(tiny, kw, msg):
    model, x = tiny
    args = {"n_samples": 1, **kw}
    with pytest.raises(EmbedscopeError, match=msg):
        saliency_maps(model, x, **args)
    with pytest.raises(EmbedscopeError, match=msg):
        pair_saliency_maps(model, x, x.flip(0), **args)


def test_saliency_to_file_checks_seed_and_counts_before_the_work(tmp_path, monkeypatch):
    from embedscope.saliency import run

    def no_model(*a, **k):  # the checks come before the checkpoint is loaded
        raise AssertionError("loaded the model")

    monkeypatch.setattr("embedscope.models.load_model", no_model)
    out = tmp_path / "maps.h5"
    for kw, msg in (({"seed": -1}, "seed must be an integer >= 0"),  # (numpy's ValueError in the image choice)
                    ({"seed": 2**32}, "seed must be at most"),  # (other images than seed 0, seed 0's noise)
                    ({"n_images": 2.5}, "n_images must be an integer, got 2.5"),  # (explained 2)
                    ({"n_samples": "x"}, "n_samples must be an integer, got 'x'"),
                    ({"batch_size": 0}, "batch_size must be a positive integer, got 0")):
        with pytest.raises(EmbedscopeError, match=msg):
            run.saliency_to_file("nope.pt", "digits", out, **{"n_images": 2, "n_samples": 1, **kw})
    assert not out.exists()


def test_paths_file_names_the_path_listed_twice(tmp_path):
    """'lists a path twice' did not say which (in a list of hundreds of paths)."""
    from embedscope.data import get_dataset
    from embedscope.saliency.run import select_images

    ds = get_dataset("digits").subset("test")
    f = tmp_path / "paths.txt"
    f.write_text(f"{ds.paths[0]}\n{ds.paths[3]}\n# c\n{ds.paths[1]}\n{ds.paths[3]}\n")
    with pytest.raises(EmbedscopeError, match=f"lists {ds.paths[3]} twice"):
        select_images(ds, paths_file=f)


def _maps_file(path, paths, seed, attrs=None):
    import numpy as np

    from embedscope.store.saliency import SaliencyMaps, save_maps

    maps = np.random.default_rng(seed).random((len(paths), 4, 4)).astype(np.float32)
    save_maps(path, SaliencyMaps(maps=maps, paths=np.array(paths), labels=np.zeros(len(paths), dtype=np.int64),
                                 class_names=np.array(["c"]), attrs={"name": path.stem, **(attrs or {})}))
    return path


def test_one_image_is_said_in_the_singular(tmp_path, monkeypatch):
    """'saliency agreement on 1 images', '1 images in common', and saliency's '1 images: SmoothGrad ...'."""
    from cli_run import cli_output

    a = _maps_file(tmp_path / "a.h5", ["x/1", "x/2"], 0)
    b = _maps_file(tmp_path / "b.h5", ["x/2", "x/3"], 1)
    out = cli_output(["saliency-agreement", str(a), str(b)])
    assert "saliency agreement on 1 image (" in out and "note: 1 image in common; left out: 1 of a, 1 of b" in out, out

    from embedscope.saliency import run

    def fake(*a, pairs=False, **k):  # the summary line of one explained image (pair)
        return {"output": str(tmp_path / "m.h5"), "n_images": 1, "distance": "euclidean", "distance_source": "config",
                "family": "ranking", "order": "paper", "pairs": pairs, "seconds": 0.0, "amp": "none", "figure": None,
                "figure_images": None, "notes": [], "pair_same_class": 1.0}

    monkeypatch.setattr(run, "saliency_to_file", fake)
    for extra, head in (([], "1 image: SmoothGrad"), (["--pairs"], "1 pair (query + nearest retrieval): SmoothGrad")):
        out = cli_output(["saliency", "ck.pt", "--dataset", "digits", "-o", str(tmp_path / "m.h5"), *extra])
        assert out.startswith(head), out


def test_maps_file_named_svg_is_refused(tmp_path, monkeypatch):
    """`saliency -o maps.svg` wrote the HDF5 maps file under an SVG picture's name (the CLI let .svg through
    for saliency_to_file to refuse, which refused only .png and .pdf)."""
    from cli_run import one_error_line, run_cli

    from embedscope.errors import UsageError
    from embedscope.saliency import run

    monkeypatch.setattr("embedscope.models.load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    out = tmp_path / "maps.svg"
    rc, _, err = run_cli(["saliency", "ck.pt", "--dataset", "digits", "-o", str(out)])
    assert rc == 2 and "writes HDF5, not SVG" in one_error_line(err, "saliency")
    with pytest.raises(UsageError, match="names the maps file .*not an SVG picture"):
        run.saliency_to_file("ck.pt", "digits", out, n_images=1, n_samples=1)
    assert not out.exists()


@pytest.mark.parametrize("value, msg", [(0, "must be a positive integer, got 0"), (-1, "must be a positive integer, got -1"),
                                        (2.5, "must be an integer, got 2.5"), (65, "must be at most 64, got 65")])
def test_figure_image_counts_checked_in_python(tmp_path, monkeypatch, value, msg):
    """agreement_of_files(grid_images=0) was matplotlib's ValueError after the work (2.5: a TypeError), and
    saliency_to_file truncated figure_images=2.5 to 2 and drew any number (the command lines allow 1 to 64)."""
    from embedscope.errors import UsageError
    from embedscope.saliency import run

    a = _maps_file(tmp_path / "a.h5", ["x/1", "x/2"], 0)
    b = _maps_file(tmp_path / "b.h5", ["x/1", "x/2"], 1)
    grid = tmp_path / "grid.png"
    with pytest.raises(UsageError, match=f"grid_images {msg}"):
        run.agreement_of_files([a, b], grid=grid, grid_images=value)
    assert not grid.exists()
    monkeypatch.setattr("embedscope.models.load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    with pytest.raises(UsageError, match=f"figure_images {msg}"):
        run.saliency_to_file("ck.pt", "digits", tmp_path / "m.h5", n_images=1, n_samples=1, figure=tmp_path / "f.png",
                             figure_images=value)


def test_agreement_of_files_takes_lists_not_letters(tmp_path):
    """A string where a list goes was iterated letter by letter: agreement_of_files("a.h5") read the files 'a',
    '.', ... ("a: no such file"), names="xy" named the models 'x' and 'y'; families=[1, 2] was a TypeError,
    block="a" another."""
    from embedscope.errors import UsageError
    from embedscope.saliency import run

    a = _maps_file(tmp_path / "a.h5", ["x/1", "x/2"], 0)
    b = _maps_file(tmp_path / "b.h5", ["x/1", "x/2"], 1)
    for files in (str(a), a):
        with pytest.raises(UsageError, match="needs a list of at least two maps files, got"):
            run.agreement_of_files(files)
    with pytest.raises(UsageError, match="2 files but 1 --names"):
        run.agreement_of_files([a, b], names="xy")
    with pytest.raises(UsageError, match="families must be texts, one per file, got 1"):
        run.agreement_of_files([a, b], families=[1, 2])
    with pytest.raises(EmbedscopeError, match="block must be an integer, got 'a'"):
        run.agreement_of_files([a, b], block="a")
    assert run.agreement_of_files((a, b), names=("x", "y"), block=1)["names"] == ["x", "y"]


@pytest.mark.parametrize("switch", ["pairs", "unsafe_pickle", "ema", "progress"])
def test_saliency_to_file_switches_are_bools(tmp_path, monkeypatch, switch):
    """A string is truthy: pairs="no" computed pair maps, and unsafe_pickle="no" reached the checkpoint reader as
    permission for the full unpickler (it tests `if not unsafe_pickle`)."""
    from embedscope.saliency import run

    monkeypatch.setattr("embedscope.models.load_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    with pytest.raises(EmbedscopeError, match=f"{switch} must be True or False, got 'no'"):
        run.saliency_to_file("ck.pt", "digits", tmp_path / "m.h5", n_images=1, n_samples=1, **{switch: "no"})


def test_a_setting_a_file_does_not_record_is_not_a_difference(tmp_path):
    """A maps file without the settings (written by save_maps from Python) was counted as differing from every
    other file: four notes 'different post-processing orders (paper: a; ?: b)', SmoothGrad settings, 'differently
    transformed images (...; b: ?)' and 'different data sets (?; digits)'. Now one note names what it lacks, and
    files that record a setting are still compared on it."""
    from embedscope.saliency.run import agreement_of_files

    full = {"order": "paper", "n_samples": 5, "noise": 0.15, "transform": "digits: x/16 as 1x8x8", "dataset": "digits"}
    a = _maps_file(tmp_path / "a.h5", ["x/1", "x/2"], 0, full)
    b = _maps_file(tmp_path / "b.h5", ["x/1", "x/2"], 1)
    c = _maps_file(tmp_path / "c.h5", ["x/1", "x/2"], 2, {**full, "order": "code", "transform": ""})
    notes = agreement_of_files([a, b])["notes"]
    assert notes == ["b: its file does not record its post-processing order, SmoothGrad settings, input transform and "
                     "data set, so whether they match the other files' is not known (a maps file not written by "
                     "embedscope saliency?)"], notes
    notes = agreement_of_files([a, b, c])["notes"]
    assert "the files use different post-processing orders (paper: a; code: c): compare maps of one order " \
           "(docs/saliency.md)" in notes, notes
    assert not any("differently transformed" in n or "different data sets" in n or "SmoothGrad settings (" in n
                   for n in notes), notes
    assert any(n.startswith("c: its file does not record its input transform, so whether it matches") for n in notes)


def test_agreement_names_the_two_outputs_on_one_file(tmp_path):
    """It said only 'two outputs name the same file' (evaluate, spectrum, geometry name both options)."""
    from cli_run import one_error_line, run_cli

    a = _maps_file(tmp_path / "a.h5", ["x/1", "x/2"], 0)
    b = _maps_file(tmp_path / "b.h5", ["x/1", "x/2"], 1)
    d = tmp_path
    for args, needle in ((["--csv", f"{d}/t.csv", "--per-image-csv", f"{d}/t.csv"],
                          f"(--csv {d}/t.csv, --per-image-csv {d}/t.csv)"),
                         (["-o", f"{d}/f.png", "--grid", f"{d}/f.png"], f"(-o {d}/f.png, --grid {d}/f.png)")):
        rc, _, err = run_cli(["saliency-agreement", str(a), str(b), *args])
        assert rc == 2 and f"two outputs name the same file {needle}" in one_error_line(err, "saliency-agreement")
    assert sorted(p.name for p in d.iterdir()) == ["a.h5", "b.h5"]


def test_agreement_grid_says_when_it_draws_fewer_images(tmp_path):
    """saliency --figure notes that it draws the first 6 of N maps; saliency-agreement --grid drew 6 of N silently."""
    from embedscope.saliency.run import agreement_of_files

    a = _maps_file(tmp_path / "a.h5", [f"x/{i}" for i in range(3)], 0)
    b = _maps_file(tmp_path / "b.h5", [f"x/{i}" for i in range(3)], 1)
    res = agreement_of_files([a, b], grid=tmp_path / "g.png", grid_images=2)
    assert "the grid draws the first 2 of the 3 images (--grid-images; every map is in the maps files)" in res["notes"]
    res = agreement_of_files([a, b], grid=tmp_path / "h.png", grid_images=3)
    assert not any("grid draws" in n for n in res["notes"])


def test_select_images_checks_its_count_and_seed():
    """select_images (the notebook's image choice) truncated n_images=2.5 to 2 and raised numpy's ValueError for
    seed=-1."""
    from embedscope.data import get_dataset
    from embedscope.saliency.run import select_images

    ds = get_dataset("digits").subset("test")
    for kw, msg in (({"n_images": 2.5}, "n_images must be an integer, got 2.5"),
                    ({"n_images": 0}, "n_images must be a positive integer, got 0"),
                    ({"n_images": 2, "seed": -1}, "seed must be an integer >= 0, got -1"),
                    ({"n_images": 2, "seed": 2**32}, "seed must be at most 4294967295")):
        with pytest.raises(EmbedscopeError, match=msg):
            select_images(ds, **kw)
    assert len(select_images(ds, n_images=2, seed=2**32 - 1)) == 2
