"""The property-controlled shapes set (docs/methods.md §9): independence, classes, determinism, embed."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from embedscope.cli import main
from embedscope.data import get_dataset
from embedscope.data import shapes as S
from embedscope.errors import EmbedscopeError


def test_properties_independent_and_uniform():
    props = S.draw_properties(6000, seed=3)
    names = list(props)
    assert names == list(S.PROPERTY_NAMES)
    # every value appears and each property is close to uniform (chi-square goodness of fit)
    from scipy.stats import chisquare

    for k, v in props.items():
        vals = np.arange(len(S.SHAPES)) if k == "shape" else np.asarray(S.PROPERTY_VALUES[k])
        counts = np.array([(v == x).sum() for x in vals])
        assert counts.min() > 0, k
        assert chisquare(counts).pvalue > 1e-4, k
    # pairwise independence: chi-square test of every contingency table (45 pairs; Bonferroni 1%)
    pvals = []
    for a, b in itertools.combinations(names, 2):
        _, ia = np.unique(props[a], return_inverse=True)
        _, ib = np.unique(props[b], return_inverse=True)
        table = np.zeros((ia.max() + 1, ib.max() + 1))
        np.add.at(table, (ia, ib), 1)
        pvals.append(chi2_contingency(table)[1])
    assert min(pvals) > 0.01 / len(pvals)


def test_a_dependent_property_would_be_caught():
    # the test above can fail: a property copied from the shape gives a tiny p-value
    props = S.draw_properties(2000, seed=3)
    dep = props["shape"] % 4
    table = np.zeros((24, 4))
    np.add.at(table, (props["shape"], dep), 1)
    assert chi2_contingency(table)[1] < 1e-100


def test_deterministic_and_seed_dependent():
    a = S.draw_properties(50, seed=1)
    b = S.draw_properties(50, seed=1)
    c = S.draw_properties(50, seed=2)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)
    ia = S.render({k: v[:6] for k, v in a.items()}, 24, supersample=1)
    ib = S.render({k: v[:6] for k, v in b.items()}, 24, supersample=1)
    assert ia.shape == (6, 24, 24, 3) and ia.dtype == np.uint8
    assert np.array_equal(ia, ib)


def _scene(**over):
    base = {"shape": 1, "obj_hue": 0.0, "obj_sat": 0.9, "obj_val": 0.9, "bg_hue": 0.5, "yaw": 0, "scale": 1.0,
            "cam_elev": 22, "light_elev": 45, "light_azim": 45}
    base.update(over)
    return {k: np.array([v]) for k, v in base.items()}


def _img(**over):
    return S.render(_scene(**over), 32, supersample=1)[0].astype(float)


def test_each_property_changes_the_image_and_shape_varies_between_classes():
    ref = _img()
    changes = {"shape": 0, "obj_hue": 0.5, "obj_sat": 0.3, "obj_val": 0.45, "bg_hue": 0.0, "yaw": 45,
               "scale": 0.7, "cam_elev": 46, "light_elev": 20, "light_azim": 225}
    for k, v in changes.items():
        diff = np.abs(_img(**{k: v}) - ref).mean()
        assert diff > 0.5, (k, diff)
    # the object is red, the floor/backdrop is not: red dominates somewhere in the middle
    assert (ref[..., 0] - ref[..., 2]).max() > 60
    # the light matters through shading and a cast shadow: with the sun behind the object the lit
    # pixels differ from the sun in front
    assert np.abs(_img(light_azim=180) - _img(light_azim=0)).max() > 40


def test_loader_classes_split_and_properties(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "DEFAULT_N", 120)  # the real default (4,800 at 64 px) takes minutes
    monkeypatch.setattr(S, "DEFAULT_SIZE", 24)
    with pytest.raises(EmbedscopeError, match="does not exist"):  # a mistyped --root is not made a cache
        get_dataset("shapes", str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()
    (tmp_path / "cache").mkdir()
    ds = get_dataset("shapes", str(tmp_path / "cache"))  # generated into --root on first use
    assert len(ds) == S.DEFAULT_N
    assert list(ds.class_names) == list(S.SHAPE_NAMES) and len(ds.class_names) >= 20
    assert set(ds.labels[ds.split == "train"]) == set(range(S.TRAIN_SHAPES))
    assert set(ds.labels[ds.split == "test"]) == set(range(S.TRAIN_SHAPES, len(S.SHAPES)))
    assert np.array_equal(ds.properties["shape"], ds.labels)
    assert set(ds.properties) == set(S.PROPERTY_NAMES)
    im = ds.load_image(0)
    assert im.size == (S.DEFAULT_SIZE, S.DEFAULT_SIZE) and im.mode == "RGB"
    again = get_dataset("shapes", str(tmp_path / "cache"))  # from the cache
    assert np.array_equal(again.images, ds.images)
    assert (tmp_path / "cache").is_dir()
    # a folder that is neither a make-shapes folder nor such a cache is not silently made one
    other = tmp_path / "photos"
    other.mkdir()
    (other / "a.jpg").write_bytes(b"x")
    with pytest.raises(EmbedscopeError, match="holds no properties.csv"):
        get_dataset("shapes", str(other))
    assert sorted(p.name for p in other.iterdir()) == ["a.jpg"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert len(get_dataset("shapes", str(empty))) == S.DEFAULT_N


def test_make_shapes_cli_and_folder_root(tmp_path, capsys, monkeypatch):
    out = tmp_path / "set"
    assert main(["make-shapes", "-o", str(out), "--n-images", "30", "--size", "24", "--seed", "5",
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(open(out / "properties.csv")))
    assert len(rows) == 30 and rows[0]["path"] == "images/000000.png"
    props = S.draw_properties(30, 5)
    assert [r["shape"] for r in rows] == [S.SHAPE_NAMES[i] for i in props["shape"]]
    assert [int(r["yaw"]) for r in rows] == props["yaw"].tolist()
    # refused without --force
    assert main(["make-shapes", "-o", str(out), "--n-images", "30", "--size", "24", "--no-progress"]) == 1
    assert "already exists" in capsys.readouterr().err
    ds = get_dataset("shapes", str(out))
    assert len(ds) == 30 and ds.images is None
    assert np.array_equal(ds.properties["yaw"], props["yaw"])
    img = np.asarray(ds.load_image(3))
    assert np.array_equal(img, S.render({k: v[3:4] for k, v in props.items()}, 24)[0])
    # --force with fewer images: the folder holds the new set only (the old set's extra images went);
    # a file of the user's own in images/ stays
    (out / "images" / "mine.png").write_bytes(b"x")
    assert main(["make-shapes", "-o", str(out), "--n-images", "12", "--size", "24", "--force", "--no-progress"]) == 0
    assert sorted(p.name for p in (out / "images").iterdir()) == sorted([f"{i:06d}.png" for i in range(12)] + ["mine.png"])
    assert len(list(csv.DictReader(open(out / "properties.csv")))) == 12


def test_embed_shapes_writes_properties(tmp_path, monkeypatch):
    from embedscope import store
    from embedscope.models import build_model, default_config, save_checkpoint

    out = tmp_path / "set"
    assert main(["make-shapes", "-o", str(out), "--n-images", "40", "--size", "32", "--no-progress"]) == 0
    cfg = default_config("resnet18", embed_dim=8, image_size=32)
    ckpt = tmp_path / "r18.pt"
    save_checkpoint(ckpt, build_model(cfg), cfg)
    h5 = tmp_path / "e.h5"
    assert main(["embed", str(ckpt), "--dataset", "shapes", "--root", str(out), "-o", str(h5),
                 "--device", "cpu", "--no-progress"]) == 0
    es = store.load(h5)
    assert es.n == 40 and set(es.properties) == set(S.PROPERTY_NAMES)
    props = S.draw_properties(40, 0)
    for k in S.PROPERTY_NAMES:
        assert np.array_equal(es.properties[k], props[k]), k


def test_bad_parameters_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:  # a usage error, before anything is rendered
        main(["make-shapes", "-o", str(tmp_path / "s"), "--size", "8", "--no-progress"])
    assert e.value.code == 2 and "16-512 pixels" in capsys.readouterr().err and not (tmp_path / "s").exists()
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["make-shapes", "-o", str(f), "--n-images", "2", "--size", "16", "--no-progress"]) == 1
    assert "not a folder" in capsys.readouterr().err
