"""Thirty-fifth session's audit of the loaders: a short row of a shapes set's properties.csv (was a
TypeError), a non-integral CARS196 class (was truncated to another class), and listed images outside
the data set's folder (an absolute path or one through '..': was read from anywhere and stored as
given; a '../' path got a hint about a folder named '..')."""

import csv

import numpy as np
import pytest
from test_data_loaders import make_cars, make_cub

from embedscope.cli import main
from embedscope.data import get_dataset
from embedscope.data.cars import load_cars196
from embedscope.data.cub import load_cub200
from embedscope.errors import EmbedscopeError


@pytest.fixture
def shapes(tmp_path):
    out = tmp_path / "set"
    assert main(["make-shapes", "-o", str(out), "--n-images", "12", "--size", "16", "--no-progress"]) == 0
    return out


def _edit_row(path, line, fn):
    lines = path.read_text().splitlines()
    lines[line - 1] = fn(lines[line - 1])
    path.write_text("\n".join(lines) + "\n")


def test_a_short_shapes_row_names_the_file_and_line(shapes):
    f = shapes / "properties.csv"
    _edit_row(f, 4, lambda s: ",".join(s.split(",")[:2]))
    with pytest.raises(EmbedscopeError, match=r"properties\.csv:4: malformed line \(2 cells where the header has"):
        get_dataset("shapes", str(shapes))
    _edit_row(f, 4, lambda s: s + ",1,2,3,4,5,6,7,8,9,10,11,12")
    with pytest.raises(EmbedscopeError, match=r"properties\.csv:4: malformed line"):
        get_dataset("shapes", str(shapes))


def test_a_non_numeric_shapes_cell_names_the_line(shapes):
    f = shapes / "properties.csv"
    header = next(csv.reader(open(f)))
    col = header.index("obj_hue")
    _edit_row(f, 6, lambda s: ",".join("abc" if i == col else v for i, v in enumerate(s.split(","))))
    with pytest.raises(EmbedscopeError, match=r"properties\.csv:6: column 'obj_hue' holds a non-numeric value 'abc'"):
        get_dataset("shapes", str(shapes))


def _rewrite_cars(root, change):
    from scipy.io import loadmat, savemat

    m = loadmat(root / "cars_annos.mat")
    change(m["annotations"])
    savemat(root / "cars_annos.mat", {"annotations": m["annotations"], "class_names": m["class_names"]})


def test_a_non_integral_cars_class_is_refused(tmp_path):
    make_cars(tmp_path, 4, [1, 2, 3, 4])
    assert load_cars196(tmp_path).labels.tolist() == [0, 1, 2, 3]

    def frac(a):
        a[0, 1]["class"] = np.array([[2.5]])
    _rewrite_cars(tmp_path, frac)
    with pytest.raises(EmbedscopeError, match="annotation 2 has no integer class"):
        load_cars196(tmp_path)

    def whole(a):
        a[0, 1]["class"] = np.array([[2.0]])  # a double that is a whole number: a class
    _rewrite_cars(tmp_path, whole)
    assert load_cars196(tmp_path).labels.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("bad", ["../elsewhere/000002.jpg", "car_ims/../../x.jpg", "ABS"])
def test_a_listed_image_outside_the_folder_is_refused(tmp_path, bad):
    root = tmp_path / "cars"
    root.mkdir()
    make_cars(root, 4, [1, 2, 3, 4])
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "000002.jpg").write_bytes((root / "car_ims" / "000002.jpg").read_bytes())
    (tmp_path / "x.jpg").write_bytes((root / "car_ims" / "000002.jpg").read_bytes())
    path = str(tmp_path / "elsewhere" / "000002.jpg") if bad == "ABS" else bad

    def move(a):
        a[0, 1]["relative_im_path"] = np.array([path])
    _rewrite_cars(root, move)
    with pytest.raises(EmbedscopeError, match=r"is not a path inside the data set's folder") as e:
        load_cars196(root)
    assert "holds another" not in str(e.value)


def test_cub_lists_are_checked_alike(tmp_path):
    make_cub(tmp_path, 4, lambda c: 2)
    f = tmp_path / "images.txt"
    _edit_row(f, 1, lambda s: s.split(" ")[0] + " ../" + s.split(" ")[1])
    with pytest.raises(EmbedscopeError, match=r"'images/\.\./001\.Bird_1/.*' is not a path inside"):
        load_cub200(tmp_path)
