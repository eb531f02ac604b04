"""Audit 43, small leftovers of the session's audits.

What was wrong before:

1. ``import --embeddings f1`` naming one numeric table column: "the embeddings must be a 2-D array (N x D), got
   shape (40,)", where ``--embeddings 'f1*'`` took the same column as a D = 1 embedding; a 1-D key of an
   ``.npz`` named by ``--embeddings``, or a table's numeric column taken by its name (``x``), was refused naming
   no key or column.
2. ``properties``' terminal table showed a p-value that underflowed to 0 as ``0.0000`` (beside ``5.15e-240``):
   now ``< 1e-300`` below 1e-300, as docs/properties.md writes it; the CSV keeps the exact value.
3. ``import --properties color color`` kept the property once without a word: a usage error, as ``properties``'.
4. ``toy -o bl``, ``bl`` a symbolic link to nothing, trained, then said "bl/fig6.png: cannot be written (No such file
   or directory)", not that ``bl`` is a link: now one line before the work, in make-shapes' words.
5. Notebook 01 with ``EMBEDSCOPE_NB_SHAPES`` naming a set without ``shapes.json``: a raw FileNotFoundError; now
   one line saying what is missing and how to make it.
6. The figure commands' ``--no-progress`` (``add_figure_output``) and ``properties``' said "hide the progress bar",
   the shared helper "hide the progress bars (without a terminal: one line per phase)": now one wording, the
   shared one, saying that no progress is shown at all.
7. ``info``'s model line left out ``head`` (``random``, ``none``), the head seed, the backbone seed and the weights
   a baseline was built from: ``embed --arch resnet18 --head random --head-seed 1`` and ``--head-seed 2`` (or a
   random backbone and an ImageNet one) showed one line for two networks.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


# ------------------------------------------------------------------ 1. import --embeddings ONE_COLUMN
def _table(tmp_path):
    p = tmp_path / "t.csv"
    rows = ["f1,f2,label"] + [f"{i}.5,{2 * i}.25,{i % 3}" for i in range(12)]
    p.write_text("\n".join(rows) + "\n")
    return p


def test_import_one_named_column_is_a_d1_embedding(tmp_path):
    from embedscope.importers import import_embeddings

    notes: list[str] = []
    es = import_embeddings(_table(tmp_path), embeddings="f1", notes=notes)
    assert es.embeddings.shape == (12, 1)
    np.testing.assert_allclose(es.embeddings[:, 0], np.arange(12) + 0.5)
    assert es.attrs["import_embedding_columns"] == ["f1"]  # as 'f1*' records it
    assert any(n.startswith("embeddings: 1 column f1") for n in notes)
    prefixed = import_embeddings(_table(tmp_path), embeddings="f1*")
    np.testing.assert_array_equal(prefixed.embeddings, es.embeddings)


def test_import_one_d_npz_key_is_named(tmp_path):
    from embedscope.importers import import_embeddings

    np.savez(tmp_path / "k.npz", e=np.arange(6.0), labels=np.arange(6) % 2)
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(tmp_path / "k.npz", embeddings="e")
    msg = str(e.value)
    assert "--embeddings e" in msg and "1-D" in msg and "\n" not in msg


def test_import_one_d_column_found_by_its_name_is_named(tmp_path):
    from embedscope.importers import import_embeddings

    (tmp_path / "x.csv").write_text("x,label\n1,0\n2,1\n3,0\n4,1\n")
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(tmp_path / "x.csv")
    msg = str(e.value)
    assert "column 'x'" in msg and "--embeddings x" in msg and "\n" not in msg


# ------------------------------------------------------------------ 2. properties: p-values on the terminal
def test_properties_terminal_shows_an_underflowed_p_value_as_below_the_floor(tmp_path):
    from cli_run import cli_output

    from embedscope.store import EmbeddingSet, save

    rng = np.random.default_rng(0)
    prop = np.arange(60) % 2
    X = rng.normal(size=(60, 3)).astype(np.float32)
    X[:, 0] += 20 * prop  # 'big' clusters perfectly: its z-test tail underflows to 0
    save(tmp_path / "p.h5", EmbeddingSet.from_arrays(X, np.arange(60) % 3, properties={"big": prop.astype(str)}))
    out = cli_output(["properties", str(tmp_path / "p.h5"), "--no-progress", "--csv", str(tmp_path / "p.csv")])
    big = next(line for line in out.splitlines() if " big " in line)
    assert "< 1e-300" in big and "0.0000" not in big
    import pandas as pd

    assert pd.read_csv(tmp_path / "p.csv").set_index("property").loc["big", "p_value"] == 0.0  # exact


def test_properties_p_values_one_rule_and_aligned():
    from embedscope.cli.properties import shown_p_values

    rows = [{"p_value": 0.0}, {"p_value": 5.15e-240}, {"p_value": 4e-320}, {"p_value": 0.7235}, {"p_value": float("nan")}]
    cells, headers = shown_p_values(rows, ["p_value"], "-")
    assert [c["p_value"].strip() for c in cells] == ["< 1e-300", "5.15e-240", "< 1e-300", "0.7235", "-"]
    assert len({len(c["p_value"]) for c in cells} | {len(headers[0])}) == 1  # right-aligned, header too


# ------------------------------------------------------------------ 3. import --properties X X
def test_import_refuses_a_property_named_twice(tmp_path):
    from cli_run import one_error_line, run_cli

    _table(tmp_path)
    rc, out, err = run_cli(["import", tmp_path / "t.csv", "--properties", "f2", "f2", "-o", tmp_path / "o.h5"])
    assert rc == 2 and "--properties names 'f2' twice" in one_error_line(err, "import")
    assert not (tmp_path / "o.h5").exists()


# ------------------------------------------------------------------ 4. toy -o LINK_TO_NOTHING
def test_toy_output_folder_a_link_to_nothing_is_said_before_the_work(tmp_path, monkeypatch):
    from embedscope.train import toy

    def trained(*a, **k):
        raise AssertionError("trained before the output folder was checked")

    monkeypatch.setattr(toy, "train_toy", trained)
    (tmp_path / "bl").symlink_to(tmp_path / "nowhere" / "x")
    with pytest.raises(EmbedscopeError) as e:
        toy.run_toy(tmp_path / "bl", seeds=1, progress=False)
    msg = str(e.value)
    assert "symbolic link to" in msg and "does not exist" in msg and "\n" not in msg
    assert not (tmp_path / "nowhere").exists()


# ------------------------------------------------------------------ 5. notebook 01: a set without shapes.json
def test_notebook01_set_without_shapes_json_says_what_to_do(tmp_path, monkeypatch):
    import json
    import os
    from pathlib import Path

    book = json.loads((Path(__file__).parents[1] / "notebooks" / "01_correlation_figures.ipynb").read_text("utf-8"))
    cell = next("".join(c["source"]) for c in book["cells"]
                if c["cell_type"] == "code" and "EMBEDSCOPE_NB_SHAPES" in "".join(c["source"]))
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "properties.csv").write_text("file,shape\n")
    monkeypatch.setenv("EMBEDSCOPE_NB_SHAPES", str(tmp_path / "set"))
    with pytest.raises(FileNotFoundError) as e:  # (before the set is read or rendered)
        exec(cell, {"TESTBED": "shapes", "OUT": tmp_path / "out", "N_IMAGES": 480, "SIZE": 24, "os": os, "Path": Path})
    msg = str(e.value)
    assert "shapes.json" in msg and "make-shapes" in msg and "EMBEDSCOPE_NB_SHAPES" in msg and "\n" not in msg


# ------------------------------------------------------------------ 6. --no-progress: one wording
@pytest.mark.parametrize("command", ["scatter", "tsne", "neighbours", "yoke", "properties", "toy", "train"])
def test_no_progress_help_is_one_wording(command, capsys):
    from embedscope.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-progress hide the progress bars (without a terminal: one line per phase): no progress is shown" in text


# ------------------------------------------------------------------ 7. info: which network made the embeddings
def _model_row(tmp_path, cfg):
    from cli_run import cli_output

    from embedscope.store import EmbeddingSet, save

    es = EmbeddingSet.from_arrays(np.eye(4, dtype=np.float32), [0, 0, 1, 1])
    es.attrs["checkpoint_config"] = cfg
    save(tmp_path / "e.h5", es, force=True)
    lines = [ln for ln in cli_output(["info", str(tmp_path / "e.h5")]).splitlines() if ln.startswith("model ")]
    assert len(lines) == 1
    return lines[0].split(None, 1)[1]


def test_info_model_line_tells_baselines_apart(tmp_path):
    # embed --arch resnet18 --head random --head-seed 1, no --weights: a random backbone drawn from seed 1
    base = {"arch": "resnet18", "dataset": None, "embed_dim": 128, "frozen_bn": False, "head": "random",
            "normalize": True, "source_format": "imagenet-baseline"}
    assert _model_row(tmp_path, {**base, "head_seed": 1, "backbone_seed": 1}) == (
        "arch=resnet18, backbone_seed=1, embed_dim=128, head=random, head_seed=1, normalize=True")
    # the same with ImageNet weights: the file it started from, by name
    assert _model_row(tmp_path, {**base, "head_seed": 2, "weights": "/w/imagenet/resnet18-f37072fd.pth"}) == (
        "arch=resnet18, embed_dim=128, head=random, head_seed=2, normalize=True, weights=resnet18-f37072fd.pth")
    # --head none: the pooled features (no head seed: none is drawn)
    assert _model_row(tmp_path, {**base, "head": "none", "head_seed": 0, "backbone_seed": 0}) == (
        "arch=resnet18, backbone_seed=0, embed_dim=128, head=none, normalize=True")
    # a trained checkpoint (linear head, trained from scratch): as before
    trained = {"arch": "digits_cnn", "dataset": "digits", "embed_dim": 8, "head": "linear", "head_seed": 0,
               "loss": "margin", "normalize": True, "seed": 0, "weights": None}
    assert _model_row(tmp_path, trained) == "arch=digits_cnn, dataset=digits, embed_dim=8, loss=margin, normalize=True, seed=0"
