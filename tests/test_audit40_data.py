"""Findings of the fortieth session's audit of the data sets' official layouts (each test fails on the
code before its fix)."""

from __future__ import annotations

import shutil

import pytest
from test_audit21_data import make_cars_split, make_cub_tgz

from embedscope.data.cars import load_cars196
from embedscope.data.cub import load_cub200
from embedscope.errors import EmbedscopeError, EmbedscopeWarning


def test_cubs_missing_attribute_names_warning_is_the_projects_own(tmp_path):
    base, _ = make_cub_tgz(tmp_path)
    (tmp_path / "attributes.txt").unlink()
    # (before: a bare UserWarning, printed by the command line in Python's two-line format)
    with pytest.warns(EmbedscopeWarning, match=r"attributes\.txt .* no attr:"):
        load_cub200(base)


def test_a_devkit_on_its_own_is_not_named_as_the_root_to_pass(tmp_path):
    make_cars_split(tmp_path / "full", [1, 2], [3, 4])
    # a devkit unpacked into a folder of its own name, the images elsewhere (a Kaggle re-distribution)
    (tmp_path / "kaggle" / "car_devkit").mkdir(parents=True)
    shutil.copytree(tmp_path / "full" / "devkit", tmp_path / "kaggle" / "car_devkit" / "devkit")
    shutil.copytree(tmp_path / "full" / "cars_train", tmp_path / "kaggle" / "cars_train" / "cars_train")
    with pytest.raises(EmbedscopeError) as e:
        load_cars196(tmp_path / "kaggle")
    assert "pass --root" not in str(e.value)  # (before: 'pass --root kaggle/car_devkit', which fails too)
    # the split download one level down is still named
    with pytest.raises(EmbedscopeError, match=r"pass --root .*full"):
        load_cars196(tmp_path)
