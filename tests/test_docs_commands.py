"""Commands and options that the docs show, checked against the command line."""

import pytest

from embedscope.cli import main


@pytest.mark.parametrize("command", ["embed", "saliency"])
def test_dataset_help_names_shapes(command, capsys):
    """docs/properties.md embeds `--dataset shapes --root shapes_set` (and saliency takes it too): the
    --dataset help of embed and saliency names shapes, as train's does."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--dataset DATASET digits, shapes" in out


def test_import_from_a_folder_with_an_undecodable_name(tmp_path, monkeypatch, capsys):
    """docs/import.md's first command run in a folder whose name holds an undecodable byte (Linux
    file names are bytes): the output's import_source attribute then held a lone surrogate and the
    write stopped with "UnicodeEncodeError: ... surrogates not allowed". The attribute is now stored
    with the byte escaped; a NUL in a text attribute is a one-line EmbedscopeError naming it."""
    import os

    import numpy as np

    from embedscope import store
    from embedscope.errors import EmbedscopeError

    d = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xffdir")
    os.mkdir(d)
    monkeypatch.chdir(d)
    np.save("X.npy", np.random.default_rng(0).standard_normal((20, 4)).astype("float32"))
    with open("y.txt", "w") as f:
        f.write("\n".join(str(i % 4) for i in range(20)))
    assert main(["import", "X.npy", "--labels", "y.txt", "--split-by-class", "0.5", "-o", "mine.h5"]) == 0
    es = store.load("mine.h5")
    assert es.attrs["import_source"].endswith("bad\\xffdir/X.npy")
    es.attrs["note"] = "a\x00b"
    with pytest.raises(EmbedscopeError, match="attribute 'note' holds a NUL character"):
        store.save("other.h5", es)
    assert not os.path.exists("other.h5")


def test_train_log_with_an_undecodable_weights_path(tmp_path):
    """`embedscope train --weights bad\\xffdir/R.pth ...` (docs/training.md): the log CSV's `weights`
    column held a lone surrogate and writing the log stopped the run ("UnicodeEncodeError ...
    surrogates not allowed") after its checkpoint was written, leaving an unfinished run. Text files are
    now written with such a byte escaped."""
    import os

    from embedscope.fileio import write_text

    name = os.fsdecode(b"bad\xffdir/R.pth")
    p = write_text(tmp_path / "log.csv", f"weights\n{name}\n")
    assert p.read_text(encoding="utf-8") == "weights\nbad\\xffdir/R.pth\n"


def test_spc_error_suggests_only_larger_samplers(capsys):
    """`embedscope train --dataset digits --sampler spc-4` (5 training classes, batch 40) said "or a
    larger n (spc-4, spc-8)", offering the sampler just refused; it now names only larger ones."""
    assert main(["train", "--dataset", "digits", "--sampler", "spc-4", "--epochs", "0", "-o", "never.pt"]) == 1
    err = capsys.readouterr().err
    assert "needs 10 classes per batch" in err and "or a larger n (spc-8)" in err


def test_parquet_and_study_in_a_folder_with_an_undecodable_name(tmp_path):
    """`embedscope geometry F --parquet OUT` (docs/geometry.md) and `embedscope study` (docs/studies.md)
    with their files in a folder whose name holds an undecodable byte stopped with "UnicodeEncodeError
    ... surrogates not allowed": Arrow was given the path (and the study's table the checkpoint path
    text). Parquet is now read and written through a file object, and the study's text is escaped."""
    import os

    import pandas as pd

    d = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xffdir")
    os.mkdir(d)
    ckpt, emb = os.path.join(d, "u.pt"), os.path.join(d, "u.h5")
    assert main(["train", "--dataset", "digits", "--epochs", "0", "--embed-dim", "8", "-o", ckpt,
                 "--no-progress"]) == 0
    assert main(["embed", ckpt, "--dataset", "digits", "-o", emb, "--no-progress"]) == 0
    pq = os.path.join(d, "g.parquet")
    assert main(["geometry", emb, "--parquet", pq]) == 0
    with open(pq, "rb") as fh:
        assert "rho" in set(pd.read_parquet(fh)["measure"])
    out = os.path.join(d, "study")
    assert main(["study", ckpt, "-o", out, "--workers", "0", "--no-figures", "--bootstrap", "0",
                 "--cache-dir", os.path.join(d, "cache"), "--no-progress"]) == 0
    runs = pd.read_csv(os.path.join(out, "runs.csv"))
    assert any("bad\\xffdir" in str(c) for c in runs["checkpoint"])


def test_every_python_entry_point_of_the_architecture_page_exists():
    # docs/architecture.md lists the functions the notebooks call beyond the analyses: each must exist
    # under the name given there (a rename would otherwise leave the table and the notebooks behind)
    import importlib
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("## Python entry points beyond the analyses", 1)[1]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `embedscope.")]
    names = []
    for row in rows:  # "`mod.fn(args)`, `fn2(args)`": later names live in the first one's module
        first = re.match(r"\| `(embedscope[\w.]+)\.(\w+)\(", row)
        names.append((first.group(1), first.group(2)))
        cell = row.split("|")[1]
        for extra in re.findall(r", `(\w+)\(", cell):
            names.append((first.group(1), extra))
        for mod, fn in re.findall(r"`(embedscope[\w.]+)\.(\w+)\(", cell)[1:]:
            names.append((mod, fn))
    assert len(rows) >= 12 and len(names) >= 18
    for mod, fn in names:
        assert callable(getattr(importlib.import_module(mod), fn)), f"{mod}.{fn}"
