"""Audit 27 of `embedscope saliency` / `saliency-agreement` as a researcher runs them (docs/saliency.md,
docs/methods.md §8).

Checked and found right (recomputed outside embedscope: SmoothGrad by plain autograd, one noisy copy at a
time with the image's seeded noise, both orders, Euclidean and cosine, digits and RGB shapes; --pairs'
two maps and nearest retrievals; Pearson r, JSD and the Fisher-z aggregate with scipy): the numbers of
the files, the JSON and the CSVs. Bugs found here, each with its test below:

* ``--noise inf`` passed the argument check and failed after the checkpoint and the data were loaded,
  with exit 1 and a message naming ``noise``, not ``--noise``; ``--noise -0`` was printed and stored as
  ``-0.0``;
* a maps file given twice under two names (a link) was compared with itself (r = 1) instead of being
  refused as the same name twice is;
* two files of one model name and one file name in different folders got the same table and JSON name
  (``m (m.h5)`` twice): their pair could not be told apart;
* float64 images given as a numpy array (or a sequence of arrays) were rounded to float32 before a float64
  model, which a float64 tensor is not;
* ``--n-samples`` too large for memory failed with torch's allocator message ("run with --debug").
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from test_audit26_saliency import _ckpt, _run

from embedscope.cli import main
from embedscope.errors import EmbedscopeError


@pytest.fixture(scope="module")
def maps(tmp_path_factory):
    """Two models' maps files of the same 5 digits."""
    d = tmp_path_factory.mktemp("a27sal")
    out = []
    for k, loss in enumerate(("margin", "arcface")):
        ck = _ckpt(d / f"{loss}.pt", k, loss=loss)
        f = d / f"{loss}.h5"
        rc, _, err = _run(["saliency", ck, "--dataset", "digits", "--n-images", 5, "--n-samples", 2, "-o", f,
                           "--no-progress"])
        assert rc == 0, err
        out.append(f)
    return d, out


# ---------------------------------------------------------------- --noise
@pytest.mark.parametrize("value", ["inf", "Infinity", "1e999"])
def test_noise_inf_is_a_usage_error_before_any_work(tmp_path, value):
    """It was accepted, then the run failed with exit 1 after loading the checkpoint (here: none exists)."""
    rc, _, err = _run(["saliency", tmp_path / "missing.pt", "--dataset", "digits", "--noise", value,
                       "-o", tmp_path / "m.h5"])
    assert rc == 2, err
    assert "--noise" in err and "finite number >= 0" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not (tmp_path / "m.h5").exists()


def test_noise_minus_zero_is_zero(tmp_path):
    from embedscope.store.saliency import load_maps

    ck = _ckpt(tmp_path / "m.pt", 0, loss="margin")
    rc, out, err = _run(["saliency", ck, "--dataset", "digits", "--n-images", 2, "--n-samples", 1, "--noise", "-0",
                         "-o", tmp_path / "m.h5", "--no-progress"])
    assert rc == 0, err
    assert "noise 0.0," in out and "-0" not in out
    noise = load_maps(tmp_path / "m.h5").attrs["noise"]
    assert noise == 0 and np.copysign(1.0, noise) == 1.0


# ---------------------------------------------------------------- one file twice
def test_a_maps_file_given_twice_through_a_link_is_refused(maps, tmp_path):
    d, (a, _) = maps
    link = tmp_path / "link.h5"
    os.symlink(a, link)
    out = tmp_path / "agr.json"
    rc, _, err = _run(["saliency-agreement", a, link, "--json", out])
    assert rc == 2 and "given twice" in err and "link.h5" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    hard = tmp_path / "hard.h5"
    os.link(a, hard)
    assert _run(["saliency-agreement", hard, a])[0] == 2
    # a copy is another file (the same maps: r = 1, allowed)
    copy = tmp_path / "copy.h5"
    copy.write_bytes(a.read_bytes())
    rc, _, err = _run(["saliency-agreement", a, copy, "--json", out])
    assert rc == 0, err
    assert json.loads(out.read_text())["pairs"][0]["r_mean"] == pytest.approx(1.0)


def test_same_name_in_two_folders_gets_two_names(maps, tmp_path):
    """Both were 'm (m.h5)' in the table, the CSV and the JSON."""
    import h5py

    _, (a, b) = maps
    files = []
    for k, src in enumerate((a, b)):
        (tmp_path / f"run{k}").mkdir()
        f = tmp_path / f"run{k}" / "m.h5"
        f.write_bytes(src.read_bytes())
        with h5py.File(f, "a") as h:
            h.attrs["name"] = "m"
        files.append(f)
    out = tmp_path / "agr.json"
    rc, stdout, err = _run(["saliency-agreement", *files, "--json", out])
    assert rc == 0, err
    names = json.loads(out.read_text())["names"]
    assert len(set(names)) == 2, names
    assert all(n.startswith("m (") and n.endswith(f"{os.sep}m.h5)") for n in names), names
    assert {n.split("(")[1].split(os.sep)[-2] for n in names} == {"run0", "run1"}
    # one name, other file names: the file names suffice (as before)
    c = tmp_path / "c.h5"
    c.write_bytes(files[1].read_bytes())
    rc, _, err = _run(["saliency-agreement", files[0], c, "--json", out, "--force"])
    assert rc == 0, err
    assert json.loads(out.read_text())["names"] == ["m (m.h5)", "m (c.h5)"]


# ---------------------------------------------------------------- float64 images
def _double_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 8 * 8, 6)).double()


def test_float64_arrays_stay_float64_for_a_float64_model():
    from embedscope.saliency import saliency_maps

    model = _double_model()
    x = torch.rand(4, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 1.2345678901234
    kw = dict(n_samples=3, seed=1, device="cpu")
    want = saliency_maps(model, x, **kw)
    assert np.array_equal(saliency_maps(model, x.numpy(), **kw), want)
    assert np.array_equal(saliency_maps(model, [xi.numpy() for xi in x], **kw), want)
    # the input seen by the model is the float64 one, not its float32 rounding
    seen = []
    hook = model[0].register_forward_pre_hook(lambda m, inp: seen.append(inp[0].detach().clone()))
    try:
        saliency_maps(model, x.numpy(), n_samples=1, noise=0.0, device="cpu")
    finally:
        hook.remove()
    assert seen[-1].dtype == torch.float64
    assert torch.equal(seen[-1].contiguous().reshape(4, -1), x.reshape(4, -1))
    # a float32 model still gets float32 inputs from float64 arrays
    m32 = _double_model().float()
    a = saliency_maps(m32, x.numpy(), **kw)
    assert np.array_equal(a, saliency_maps(m32, x.float(), **kw))


# ---------------------------------------------------------------- too many copies
def test_too_many_copies_is_one_line_naming_n_samples(maps, tmp_path):
    from embedscope.saliency import saliency_maps

    with pytest.raises(EmbedscopeError, match=r"noisy copies .* GiB .*--n-samples"):
        saliency_maps(_double_model().float(), torch.rand(1, 1, 8, 8), n_samples=10 ** 13, device="cpu")
    d, _ = maps
    rc, _, err = _run(["saliency", d / "margin.pt", "--dataset", "digits", "--n-images", 1, "--n-samples", 10 ** 13,
                       "-o", tmp_path / "m.h5", "--no-progress"])
    assert rc == 1 and "--n-samples" in err and "--debug" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.h5").exists()


def test_a_paths_file_with_a_byte_order_mark(tmp_path):
    """A paths file saved by a Windows editor starts with a BOM: it is no part of the first path
    (was "\\ufeffdigits/0007": not found)."""
    from embedscope.fileio import read_paths_file

    f = tmp_path / "paths.txt"
    f.write_bytes("\ufeffdigits/0007\n# a comment\ndigits/0012\n".encode("utf-8"))
    assert read_paths_file(f) == ["digits/0007", "digits/0012"]


@pytest.mark.parametrize("argv", [["saliency", "x.pt", "-o", "m.h5", "--figure", "f.png", "--figure-images", "65"],
                                  ["saliency-agreement", "a.h5", "b.h5", "--grid", "g.png", "--grid-images", "300"]])
def test_a_saliency_figure_of_too_many_images_is_a_usage_error(argv, capsys):
    """300 images made a 900 x 93,125 px PNG in 3 minutes: a figure draws at most 64 (every map is in the file)."""

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "a figure draws at most 64 images" in err and "Traceback" not in err


def test_info_summarises_a_saliency_maps_file(tmp_path, capsys):
    """`info maps.h5` refused the file ("a saliency-maps file ..., not an embedding file"); it now
    shows what the file holds and how it was made, with names from the file escaped."""
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(0)
    sm = SaliencyMaps(maps=rng.random((3, 5, 4)).astype(np.float32), paths=["a", "b", "c"],
                      labels=np.array([0, 1, 1]), class_names=["x", "y"],
                      attrs={"name": "m\x1b[31m", "family": "ranking", "order": "paper", "n_samples": 7,
                             "noise": 0.2, "distance": "cosine"})
    save_maps(tmp_path / "m.h5", sm)
    assert main(["info", str(tmp_path / "m.h5")]) == 0
    out = capsys.readouterr().out
    rows = {ln[:19].strip(): ln[19:].strip() for ln in out.splitlines()[2:] if ln.strip()}  # (the field column)
    assert rows["kind"] == "saliency maps of 3 images" and rows["map size"] == "5 x 4"
    assert rows["classes"] == "2" and rows["n_samples"] == "7" and rows["noise"] == "0.2"
    assert rows["distance"] == "cosine" and "\x1b" not in out and "m\\x1b[31m" in out
