"""Bring-your-own properties (add-properties, join on path) and real data sets' properties (docs/methods.md §9)."""

from __future__ import annotations

import numpy as np
import pytest

from embedscope import store
from embedscope.cli import main
from embedscope.data.properties import join_properties
from embedscope.errors import EmbedscopeError


def _h5(path, n=6):
    es = store.EmbeddingSet(embeddings=np.arange(n * 2, dtype=np.float32).reshape(n, 2), labels=np.zeros(n, int),
                            paths=[f"img/{i}.jpg" for i in range(n)], split=["test"] * n, class_names=["a"],
                            properties={"old": np.arange(n)})
    store.save(path, es)
    return path


def test_add_properties_joins_on_path(tmp_path, capsys):
    h5 = _h5(tmp_path / "e.h5")
    csv = tmp_path / "p.csv"
    order = [3, 1, 0, 5, 4, 2]
    csv.write_text("path,colour,size\n" + "".join(f"img/{i}.jpg,{'red' if i % 2 else 'blue'},{i * 10}\n"
                                                   for i in order))
    assert main(["add-properties", str(h5), str(csv)]) == 0
    es = store.load(h5)
    assert list(es.properties["colour"]) == ["blue", "red"] * 3
    assert es.properties["size"].tolist() == [0, 10, 20, 30, 40, 50]
    assert es.properties["old"].tolist() == list(range(6))
    # again: clash without --force, replaced with it
    assert main(["add-properties", str(h5), str(csv)]) == 1
    assert "already has" in capsys.readouterr().err
    assert main(["add-properties", str(h5), str(csv), "--force"]) == 0


def test_parquet_table(tmp_path):
    import pandas as pd

    h5 = _h5(tmp_path / "e.h5")
    pq = tmp_path / "p.parquet"
    pd.DataFrame({"path": [f"img/{i}.jpg" for i in range(6)], "v": [1.5] * 6}).to_parquet(pq)
    assert main(["add-properties", str(h5), str(pq)]) == 0
    assert store.load(h5).properties["v"].tolist() == [1.5] * 6


def test_unmatched_and_duplicate_paths_are_one_line(tmp_path, capsys):
    paths = np.array(["a", "b", "c"])
    with pytest.raises(EmbedscopeError, match="duplicate path.*a"):
        join_properties(paths, {"path": np.array(["a", "a", "b", "c"]), "x": np.arange(4)})
    with pytest.raises(EmbedscopeError, match="1 image.*no row, e.g. c"):
        join_properties(paths, {"path": np.array(["a", "b"]), "x": np.arange(2)})
    with pytest.raises(EmbedscopeError, match="match no image.*zz"):
        join_properties(paths, {"path": np.array(["a", "b", "c", "zz"]), "x": np.arange(4)})
    h5 = _h5(tmp_path / "e.h5")
    bad = tmp_path / "bad.csv"
    bad.write_text("file,x\na,1\n")
    assert main(["add-properties", str(h5), str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert "no 'path' column" in err and "\n" not in err


# ----------------------------------------------------------------------------- real data sets' properties
def test_cub_attributes_certainty_and_boxes(tmp_path):
    from test_data_loaders import make_cub

    from embedscope.data import get_dataset
    from embedscope.data.cub import load_cub200

    root = make_cub(tmp_path, 2, lambda c: 3)  # 6 images, 8 x 6 px
    (root / "attributes").mkdir()
    (root / "attributes" / "attributes.txt").write_text("1 has_wing_color::blue\n2 has_size::small_(5_-_9_in)\n")
    lines = []
    for iid in range(1, 7):
        lines.append(f"{iid} 1 {iid % 2} {1 + iid % 4} 3.5")  # present on odd ids, certainty 2,3,4,1,2,3
        lines.append(f"{iid} 2 1 4 1.0 extra")  # the official file has lines with an extra field
    (root / "attributes" / "image_attribute_labels.txt").write_text("\n".join(lines) + "\n")
    boxes = {1: (2, 2), 2: (4, 3), 3: (8, 6), 4: (1, 6), 5: (8, 1), 6: (6, 6)}
    (root / "bounding_boxes.txt").write_text("".join(f"{i} 0.0 0.0 {w}.0 {h}.0\n" for i, (w, h) in boxes.items()))
    ds = get_dataset("cub200", str(root))
    assert ds.properties["attr:has_wing_color::blue"].tolist() == [1, 0, 1, 0, 1, 0]
    assert ds.properties["attr:has_size::small_(5_-_9_in)"].tolist() == [1] * 6
    sure = load_cub200(str(root), attribute_certainty=3)
    # certainty ids of the present ones (ids 1, 3, 5): 2, 4, 2 -> only id 3 counts
    assert sure.properties["attr:has_wing_color::blue"].tolist() == [0, 0, 1, 0, 0, 0]
    area = np.array([w * h / 48 for w, h in boxes.values()])
    aspect = np.array([w / h for w, h in boxes.values()])
    for name, x in (("bbox_area", area), ("bbox_aspect", aspect)):
        # quantile bins: the order of the codes follows the order of the values
        codes = ds.properties[name]
        assert codes.min() >= 0 and codes.max() <= 4
        assert all(codes[i] <= codes[j] for i in range(6) for j in range(6) if x[i] < x[j])
    # missing lines are one-line errors
    (root / "bounding_boxes.txt").write_text("1 0 0 2 2\n")
    with pytest.raises(EmbedscopeError, match="image id 2 has no line"):
        get_dataset("cub200", str(root))


def test_cub_without_attribute_files_has_no_properties(tmp_path):
    from test_data_loaders import make_cub

    from embedscope.data import get_dataset

    assert get_dataset("cub200", str(make_cub(tmp_path, 2, lambda c: 1))).properties == {}


def test_cars_make_body_year_and_boxes(tmp_path):
    from test_data_loaders import make_cars

    from embedscope.data import get_dataset
    from embedscope.data.cars import parse_class_name

    make_cars(tmp_path, 3, [1, 2, 3, 1])
    ds = get_dataset("cars196", str(tmp_path))
    assert ds.properties["make"].tolist() == ["Maker"] * 4
    assert ds.properties["year"].tolist() == [2001, 2002, 2003, 2001]
    assert ds.properties["body_type"].tolist() == ["other"] * 4
    assert set(ds.properties) == {"make", "body_type", "year", "bbox_area", "bbox_aspect"}
    assert parse_class_name("Aston Martin V8 Vantage Convertible 2012") == ("Aston Martin", "convertible", 2012)
    assert parse_class_name("Rolls-Royce Phantom Drophead Coupe Convertible 2012") == (
        "Rolls-Royce", "convertible", 2012)
    assert parse_class_name("Ram C/V Cargo Van Minivan 2012") == ("Ram", "minivan", 2012)
    assert parse_class_name("Dodge Ram Pickup 3500 Crew Cab 2010") == ("Dodge", "pickup", 2010)
    assert parse_class_name("AM General Hummer SUV 2000") == ("AM General", "suv", 2000)
    assert parse_class_name("Chevrolet Corvette ZR1 2012") == ("Chevrolet", "other", 2012)


def test_quantile_bins_balanced():
    from embedscope.data.properties import quantile_bins

    x = np.random.default_rng(0).random(1000)
    assert np.bincount(quantile_bins(x, 5)).tolist() == [200] * 5


def test_add_properties_keeps_what_other_tools_wrote(tmp_path):
    """docs/store.md: other tools may add to the file with plain h5py; add-properties keeps it all
    (groups, datasets, attributes of datasets and of the root), replacing only the named properties."""
    import os

    import h5py

    h5 = _h5(tmp_path / "e.h5")
    with h5py.File(h5, "r+") as f:
        f.create_dataset("my_notes", data=np.arange(3))
        f.create_group("extra_group").create_dataset("d", data=[1.5, 2.5])
        f["embeddings"].attrs["unit"] = "cm"
        f.attrs["who"] = "me"
    os.chmod(h5, 0o640)
    csv = tmp_path / "p.csv"
    csv.write_text("path,colour,old\n" + "".join(f"img/{i}.jpg,c{i % 2},{-i}\n" for i in range(6)))
    assert main(["add-properties", str(h5), str(csv), "--force"]) == 0
    with h5py.File(h5, "r") as f:
        assert f["my_notes"][()].tolist() == [0, 1, 2]
        assert f["extra_group/d"][()].tolist() == [1.5, 2.5]
        assert f["embeddings"].attrs["unit"] == "cm" and f.attrs["who"] == "me"
    es = store.load(h5)
    assert es.properties["old"].tolist() == [0, -1, -2, -3, -4, -5]  # replaced (--force)
    assert list(es.properties["colour"]) == ["c0", "c1"] * 3
    assert np.array_equal(es.embeddings, np.arange(12, dtype=np.float32).reshape(6, 2))
    assert os.stat(h5).st_mode & 0o777 == 0o640  # the file keeps its mode
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left
