"""Tests written against mutants of the code around the measures (audit 29, helper G): each one
fails for a small plausible bug, named in its docstring. The rest of the suite let through the
Parquet index, quoted(), the miner of --p-switch, SOP's split and the noise keys; the CSV and
undecodable-byte bugs it caught only through whole commands, which these check directly."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from embedscope import tables, text
from embedscope.fileio import write_text


def test_csv_writes_nan_as_empty_cells_inf_spelled_and_numpy_values_as_numbers(tmp_path):
    """docs/properties.md, saliency.md, geometry.md: a NaN is an empty CSV cell (mutant: the raw value
    written, ``nan``); an infinity is ``inf`` / ``-inf``, as in a Result's CSV (docs/architecture.md)."""
    p = tmp_path / "t.csv"
    rows = [{"a": 1, "b": float("nan"), "c": np.float64("nan")},
            {"a": np.int64(2), "b": np.float32(0.5), "c": float("inf")}]
    tables.write_csv(p, rows)
    assert p.read_text(encoding="utf-8") == "a,b,c\n1,,\n2,0.5,inf\n"


def test_csv_keeps_the_given_column_order(tmp_path):
    """The header is ``columns`` in the order given, or the first row's keys in their order (mutant:
    sorted); a key no column names is left out, a column a row lacks is an empty cell (mutant:
    ``r[c]``, a KeyError)."""
    p = tmp_path / "t.csv"
    tables.write_csv(p, [{"z": 1, "a": 2, "m": 3}])
    assert p.read_text(encoding="utf-8") == "z,a,m\n1,2,3\n"
    q = tmp_path / "u.csv"
    tables.write_csv(q, [{"z": 1, "a": 2, "extra": 9}], ["m", "z", "a"])
    assert q.read_text(encoding="utf-8") == "m,z,a\n,1,2\n"


def test_parquet_has_no_index_column(tmp_path):
    """write_parquet writes the frame's columns only, whatever its index (a filtered or sorted frame,
    as the study's runs.parquet; mutant: ``index=`` left at pandas' default, which stores a
    ``__index_level_0__`` column)."""
    pd = pytest.importorskip("pandas")
    pq = pytest.importorskip("pyarrow.parquet")

    frame = pd.DataFrame({"b": [1.5, 2.5, 3.5], "a": ["x", "y", "z"]}, index=[7, 3, 5])
    p = tmp_path / "t.parquet"
    tables.write_parquet(p, frame)
    assert pq.read_schema(p).names == ["b", "a"]
    back = tables.read_parquet(p)
    assert list(back.index) == [0, 1, 2] and back["a"].tolist() == ["x", "y", "z"]


def test_undecodable_file_name_byte_is_written_escaped(tmp_path):
    """A path with a byte that is not UTF-8 (kept by Python as a lone surrogate) is written into a text
    output as ``\\xff`` (mutant: encoded with ``replace``, a ``?`` that names another file)."""
    name = b"caf\xff.png".decode("utf-8", "surrogateescape")
    p = tmp_path / "t.txt"
    write_text(p, f"path {name} é\n")
    assert p.read_bytes() == "path caf\\xff.png é\n".encode("utf-8")


def test_text_module_examples():
    """embedscope.text's docstring examples (safe, figure_text, quoted) hold (mutant: quoted() as
    repr, which escaped a value's backslash before the message line escaped it again)."""
    res = doctest.testmod(text)
    assert res.attempted >= 4 and res.failed == 0
    assert text.quoted("C:\\data") == "'C:\\data'" and text.quoted(2.5) == "2.5"
    assert text.safe(f"value {text.quoted('a' + chr(92) + 'b')}") == "value 'a\\\\b'"


def test_p_switch_without_a_miner_uses_distance_weighted_mining():
    """docs/methods.md §5: ``--p-switch`` on a loss without a miner switches triplets of Roth's
    distance-weighted miner (mutant: another miner named); ``p_switch=0`` without a miner is none."""
    from embedscope.train.miners import DistanceWeightedMiner, RhoSwitchMiner, build_miner

    m = build_miner(None, p_switch=0.3, seed=0)
    assert isinstance(m, RhoSwitchMiner) and type(m.base) is DistanceWeightedMiner and m.name == "rho-distance"
    assert m.p_switch == 0.3 and build_miner(None, p_switch=0.0) is None


def test_sop_split_is_the_files_own_not_the_first_half_of_the_classes(tmp_path):
    """docs/datasets.md: SOP's split is Ebay_train.txt / Ebay_test.txt (11,318 / 11,316 classes), not the
    first half of the classes that CUB and CARS use (11,317 of 22,634; mutant: the half split). Here the
    files hold 3 training classes and 1 test class."""
    from embedscope.data.sop import load_sop

    header = "image_id class_id super_class_id path"
    rows = {"Ebay_train.txt": [1, 2, 2, 3], "Ebay_test.txt": [4, 4]}
    for fname, classes in rows.items():
        lines = [header]
        for k, cid in enumerate(classes):
            rel = f"chair_final/{cid}_{k}.JPG"
            (tmp_path / "chair_final").mkdir(exist_ok=True)
            (tmp_path / rel).write_bytes(b"")
            lines.append(f"{k + 1} {cid} 1 {rel}")
        (tmp_path / fname).write_text("\n".join(lines) + "\n")
    ds = load_sop(tmp_path)
    assert list(ds.split) == ["train"] * 4 + ["test"] * 2
    assert list(ds.labels) == [0, 1, 1, 2, 3, 3]
    assert list(load_sop(tmp_path, train_classes=2).split) == ["train"] * 3 + ["test"] * 3


def test_noise_seeds_of_paths_differ_for_every_byte_of_the_path():
    """``embedscope saliency`` keys each image's noise by its path (docs/methods.md §8): two images whose
    paths share all but their last characters get independent noise (mutant: the key cut to its first
    bytes, so every image of one folder got the same noise); a key's seed depends on nothing else."""
    from embedscope.saliency.smoothgrad import image_seed

    folder = "CUB_200_2011/images/001.Black_footed_Albatross/"
    keys = [folder + f"Black_Footed_Albatross_00{k}_796111.jpg" for k in range(1, 6)]
    seeds = [image_seed(7, k) for k in keys]
    assert len(set(seeds)) == len(keys)
    assert seeds == [image_seed(7, k) for k in keys]  # the same seed in any call
    assert image_seed(7, keys[0], stream=1) != seeds[0] and image_seed(8, keys[0]) != seeds[0]
    assert image_seed(7, keys[0].encode("utf-8")) == seeds[0]  # a path as bytes: the same key
