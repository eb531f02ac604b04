"""A string from a file is escaped once, where it is shown (embedscope/text.py).

``safe`` doubles a backslash, so a name holding the two characters backslash + ``n`` (``cls\\nX`` as
typed in Python: ``LIT``) is not shown like a name holding a line break (``NL``): ``LIT`` is shown
``cls\\\\nX`` (two backslashes), ``NL`` is shown ``cls\\nX`` (one). A message escaped by an inner
``safe()`` or ``{x!r}`` and again by the line that prints it would show two and four backslashes;
these tests count the backslashes between ``cls`` and ``nX`` on the terminal of real commands.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from embedscope import store
from embedscope.cli import main
from embedscope.text import safe

LIT = "cls\\nX"  # a backslash and an n
NL = "cls\nX"  # a line break
ONCE = {LIT: 2, NL: 1}  # backslashes shown between "cls" and "nX" when escaped once


def _backslashes(text: str) -> set[int]:
    """How many backslashes stand between each "cls" and "nX" of ``text`` (a raw line break: none match)."""
    return {len(m.group(1)) for m in re.finditer(r"cls(\\*)nX", text)}


def _shown_once(text: str, *names: str) -> None:
    assert "\x1b" not in text and NL not in text, text  # no raw line break inside a name
    assert _backslashes(text) == {ONCE[n] for n in names}, text


# ------------------------------------------------------------------------------------------ safe
def test_safe_is_unicode_escape_on_ascii_text():
    rng = random.Random(25)
    alphabet = [chr(i) for i in range(128)]
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert safe(s) == s.encode("unicode_escape").decode("ascii"), repr(s)
    assert safe(LIT) != safe(NL) and safe(LIT) == "cls\\\\nX" and safe(NL) == "cls\\nX"
    assert safe("a\\b", keep="\\") == "a\\b"  # the fast path keeps a backslash only when asked


def test_figure_text_keeps_backslashes_and_line_breaks():
    from embedscope.text import figure_text

    assert figure_text("$\\alpha$\nb\x1b") == "$\\alpha$\nb\\x1b"


# ------------------------------------------------------------------------------------------ files
def _embedding_file(path: Path) -> Path:
    """Class names, property names, data set name and a checkpoint config's distance from a file."""
    rng = np.random.default_rng(0)
    n = 60
    y = np.arange(n) % 3
    X = (rng.standard_normal((n, 6)) + 3 * rng.standard_normal((3, 6))[y]).astype(np.float32)
    X *= rng.uniform(0.5, 2.0, (n, 1)).astype(np.float32)  # rows of different norms: the distance note
    es = store.EmbeddingSet(embeddings=X, labels=y, paths=[f"img/{i}.png" for i in range(n)],
                            split=np.where(np.arange(n) % 5 == 0, "train", "test"), class_names=["a", "b", "c"],
                            properties={LIT: (np.arange(n) % 2).astype(float), NL: (np.arange(n) % 4).astype(float)},
                            attrs={"dataset": LIT, "checkpoint_config": {"distance": NL}})
    store.save(path, es)
    return path


def test_info_table_cells(tmp_path, capsys):
    f = _embedding_file(tmp_path / "e.h5")
    assert main(["info", str(f)]) == 0
    out = capsys.readouterr().out
    cells = {line.split("  ", 1)[0]: line for line in out.splitlines()}
    _shown_once(cells["properties"], LIT, NL)
    _shown_once(cells["dataset"], LIT)


def test_properties_table(tmp_path, capsys):
    f = _embedding_file(tmp_path / "e.h5")
    assert main(["properties", str(f), "--no-progress"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("e ") and "cls" in line]
    assert len(rows) == 2
    _shown_once("\n".join(rows), LIT, NL)


def test_evaluate_note(tmp_path, capsys):
    f = _embedding_file(tmp_path / "e.h5")
    assert main(["evaluate", str(f), "--include", "R@1", "--no-progress", "--device", "cpu"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "names the distance 'cls" in notes[0]
    _shown_once(notes[0], NL)


# ------------------------------------------------------------------------------------------ images
def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(path, "PNG")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=8, image_size=32)
    path = tmp_path_factory.mktemp("ckpt") / "shapes.pt"
    save_checkpoint(path, build_model(cfg), cfg)
    return path


@pytest.mark.parametrize("workers", ["0", "1"])
@pytest.mark.parametrize("name", [LIT, NL], ids=["backslash-n", "line-break"])
def test_data_loader_error_line_names_the_class_folder_once(tmp_path, checkpoint, capsys, name, workers):
    root = tmp_path / "folder"
    for i, cls in enumerate(["a", name]):
        for k in range(2):
            _image(root / cls / f"{k}.png", 10 * i + k)
    (root / name / "9.png").write_bytes(b"\x89PNG not really a png")
    out = tmp_path / "x.h5"
    rc = main(["embed", str(checkpoint), "--dataset", "imagefolder", "--root", str(root), "-o", str(out),
               "--device", "cpu", "--no-progress", "--num-workers", workers])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and not out.exists()
    assert len(err.splitlines()) == 1 and err.startswith("embedscope embed: error: cannot read image"), err
    assert safe(root / name / "9.png") in err
    _shown_once(err, name)


@pytest.mark.parametrize("name", [LIT, NL], ids=["backslash-n", "line-break"])
def test_train_note_names_the_smallest_class_once(tmp_path, capsys, name):
    root = tmp_path / "folder"
    for i, cls in enumerate(["a", "b", "c", name, "d", "e"]):
        for k in range(1 if cls == name else 4):
            _image(root / cls / f"{k}.png", 10 * i + k)
    rc = main(["train", "--dataset", "imagefolder", "--root", str(root), "--arch", "shapes_cnn", "--epochs", "1",
               "--image-size", "32", "--embed-dim", "8", "--batch-size", "8", "--train-classes", "4",
               "-o", str(tmp_path / "run.pt"), "--device", "cpu", "--no-progress"])
    assert rc == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "the smallest:" in line]
    assert len(notes) == 1 and notes[0].startswith("note: 1 of 4 training classes"), notes
    _shown_once(notes[0], name)


@pytest.mark.parametrize("name", [LIT, NL], ids=["backslash-n", "line-break"])
def test_study_error_row_on_the_terminal(tmp_path, capsys, name):
    src = tmp_path / "ck"
    src.mkdir()
    (src / f"{name}.pt").write_bytes(b"not a checkpoint")
    rc = main(["study", f"{src}/*.pt", "-o", str(tmp_path / "st"), "--dataset", "digits", "--no-figures"])
    cap = capsys.readouterr()
    assert rc == 1
    row = [line for line in cap.out.splitlines() if line.startswith("[1/1] ")]
    failed = [line for line in cap.err.splitlines() if line.startswith("embedscope study: error: 1 of 1")]
    assert len(row) == 1 and "ERROR" in row[0] and "not a PyTorch checkpoint" in row[0], cap
    assert len(failed) == 1, cap
    for line in (row[0], failed[0]):
        _shown_once(line, name)
