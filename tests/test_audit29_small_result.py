"""Audit 29 (proposal for embedscope/analyses/result.py): print(evaluate(..., per_class=True)) shows the
classes with the lowest MAP@R, as `embedscope evaluate --per-class` prints them (it showed the values only)."""

import numpy as np
from cli_run import cli_output

from embedscope import store
from embedscope.analyses import combine, evaluate


def _file(path, names):
    rng = np.random.default_rng(0)
    y = np.arange(120) % len(names)
    X = (rng.standard_normal((120, 6)) + 2 * rng.standard_normal((len(names), 6))[y]).astype(np.float32)
    es = store.EmbeddingSet(embeddings=X, labels=y, paths=[f"img/{i:04d}.png" for i in range(120)],
                            split=np.array(["test"] * 120), class_names=names, attrs={"dataset": "synthetic"})
    store.save(path, es)
    return path


def _block(text, title):
    """The lines of the table titled ``title`` (up to its first blank or unindented non-table line)."""
    lines = text.splitlines()
    i = next(j for j, ln in enumerate(lines) if ln.endswith(title))
    out = [lines[i]]
    for ln in lines[i + 1:]:
        if not ln or ln.startswith(("(", "wrote", "note")):
            break
        out.append(ln)
    return out


def test_print_of_a_per_class_evaluate_shows_the_worst_classes_as_the_command(tmp_path):
    f = _file(tmp_path / "m.h5", [f"class {c}" for c in "abcdefgh"])
    r = evaluate(f, per_class=True, name="m")
    shown = str(r)
    title = "m: the 5 classes with the lowest MAP@R"
    cli = cli_output(["evaluate", str(f), "--names", "m", "--per-class", str(tmp_path / "pc.csv"),
                      "--no-progress", "--device", "cpu"])
    assert _block(shown, title) == _block(cli, title)
    # the five lowest MAP@R, computed independently of worst_classes
    low = sorted(r.table, key=lambda row: (row["MAP@R"], row["class"]))[:5]
    rows = _block(shown, title)[3:]
    assert [ln.split("  ")[0] for ln in rows] == [row["class"] for row in low]
    assert shown.endswith(f"(every class: to_frame(table=True), {len(r.table)} rows)")
    # several files: one table per model, as the command
    s = combine([r, evaluate(f, per_class=True, name="n")])
    assert "m: the 5 classes with the lowest MAP@R" in str(s) and "n: the 5 classes with the lowest MAP@R" in str(s)
    # without per_class: nothing more than before
    assert "lowest MAP@R" not in str(evaluate(f, name="m"))
