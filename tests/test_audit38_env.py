"""Session 38: the command line under other environments (a bad MPLBACKEND, a deleted working folder, a
closed stderr, TERM=dumb, `study --no-progress`'s notes) and two end-to-end differences from the peers'
reading (repeated class names with integer labels; lone queries in the neighbours figure). Each test
fails on the code before its fix."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from cli_run import run_cli

from embedscope import store
from embedscope.errors import EmbedscopeError

ES = [sys.executable, "-m", "embedscope"]


@pytest.fixture
def small(tmp_path):
    rng = np.random.default_rng(1)
    p = tmp_path / "s.h5"
    store.save(p, store.EmbeddingSet.from_arrays(rng.normal(size=(60, 6)).astype(np.float32), np.arange(60) % 3,
                                                 split="test"))
    return p


# ------------------------------------------------------------------ repeated class names
def test_repeated_class_names_with_integer_labels_are_refused(tmp_path):
    """Integer labels 0/1/2 named cat, dog, cat: imported silently, and `evaluate --per-class` then gave two
    different classes both called 'cat' (string labels were refused)."""
    X = np.random.default_rng(0).normal(size=(30, 4))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", np.arange(30) % 3)
    (tmp_path / "names.txt").write_text("cat\ndog\ncat\n")
    rc, _, err = run_cli(["import", str(tmp_path / "X.npy"), "--labels", str(tmp_path / "y.npy"), "--class-names",
                          str(tmp_path / "names.txt"), "-o", str(tmp_path / "o.h5")])
    assert rc == 1 and "names.txt: class names repeat 'cat' (positions 0 and 2)" in err  # (named: the names' file)
    assert not (tmp_path / "o.h5").exists()
    with pytest.raises(EmbedscopeError, match="class names repeat 'cat'"):
        store.EmbeddingSet.from_arrays(X, np.arange(30) % 3, class_names=["cat", "dog", "cat"])


def test_a_file_with_repeated_class_names_is_refused_on_reading(small):
    import h5py

    with h5py.File(small, "r+") as f:
        del f["class_names"]
        f.create_dataset("class_names", data=["a", "b", "a"], dtype=h5py.string_dtype("utf-8"))
    with pytest.raises(EmbedscopeError, match=r"s\.h5: class names repeat 'a' \(positions 0 and 2\)"):
        store.load(small)


# ------------------------------------------------------------------ lone queries in the neighbours figure
def test_neighbours_title_leaves_lone_queries_out_as_evaluate_does(tmp_path):
    """Two queries, one of a class the gallery lacks: evaluate's R@1 is 1.0 (1 lone query left out), the
    figure's title said 0.50."""
    from embedscope.analyses.neighbours import neighbour_examples
    from embedscope.viz.neighbours import draw_neighbours

    X = np.array([[1, 0], [0, 1], [1, 0.1], [0.1, 1]], float)
    es = store.EmbeddingSet.from_arrays(X, np.array([0, 5, 0, 1]), split=["query", "query", "gallery", "gallery"])
    ex = neighbour_examples(es, split="query", k=1)
    assert ex.lone.tolist() == [False, True]
    assert ex.hit_rate() == (1.0, 1)
    assert any("1 of the 2 queries have no other image of their class" in n for n in ex.notes)
    pics = np.zeros((2, 8, 8, 3), np.uint8)
    fig = draw_neighbours(ex, list(pics), [list(pics[:1]), list(pics[1:])])
    title = " ".join(fig._suptitle.get_text().split())  # (wrapped to the figure's width)
    assert title.endswith("R@1 of these 2 queries (drawn at random, seed 0): 1.00 (1 lone query left out, as "
                          "evaluate does)"), title
    # the same split (each query left out of its own list): a class of one row is lone there
    same = store.EmbeddingSet.from_arrays(X, np.array([0, 5, 0, 1]), split="test")
    ex2 = neighbour_examples(same, split="test", k=1, queries=4)
    assert ex2.lone.tolist() == [False, True, False, True] and ex2.hit_rate()[1] == 2


def test_neighbours_title_when_every_query_is_lone():
    from embedscope.analyses.neighbours import neighbour_examples
    from embedscope.viz.neighbours import draw_neighbours

    es = store.EmbeddingSet.from_arrays(np.eye(3), np.array([0, 1, 2]), split="test")
    ex = neighbour_examples(es, k=1, queries=2)
    assert ex.hit_rate() == (None, 2)
    pics = np.zeros((2, 8, 8, 3), np.uint8)
    fig = draw_neighbours(ex, list(pics), [list(pics[:1]), list(pics[1:])])
    assert " ".join(fig._suptitle.get_text().split()).endswith("undefined (every query is lone: no image of its class among the "
                                             "references)")


# ------------------------------------------------------------------ environments
def test_a_bad_mplbackend_does_not_stop_a_figure_command(small, tmp_path):
    """MPLBACKEND=nonsense: `import matplotlib` raised after the work ("ValueError: Key backend: ..."; a
    study printed its figure child's traceback). The command line draws into files with Agg."""
    r = subprocess.run([*ES, "spectrum", str(small), "--split", "test", "-o", str(tmp_path / "sp.png"), "--no-progress"],
                       capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "nonsense"})
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "sp.png").stat().st_size > 0 and "Traceback" not in r.stderr


def test_a_deleted_working_folder_is_one_line(small, tmp_path):
    """Every command that imports torch died with "Intel oneMKL FATAL ERROR" and exit code 2 (a usage
    error's); `geometry --json g.json` said "FileNotFoundError: [Errno 2] No such file or directory"."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd {str(gone)!r} && rmdir {str(gone)!r} && exec "$@"'
    r = subprocess.run(["bash", "-c", script, "bash", *ES, "geometry", str(small), "--split", "test", "--json",
                        "g.json"], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip() == ("embedscope: error: the current folder no longer exists (deleted or moved away): "
                                "cd into a folder and run the command again")


def test_a_closed_stderr_leaves_stdout_to_the_output(tmp_path):
    """`2>&-`: print(file=sys.stderr) with stderr None writes to stdout: the error line (and the bars'
    phase lines) went into the command's output."""
    r = subprocess.run(["bash", "-c", 'exec "$@" 2>&-', "bash", *ES, "info", str(tmp_path / "none.h5")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == ""


def test_term_dumb_gets_no_escape_sequence_in_the_error_line(tmp_path):
    from test_audit_ux import run_on_pty

    raw, rc = run_on_pty([*ES, "info", str(tmp_path / "none.h5")], env={"TERM": "dumb"}, timeout=120)
    assert rc == 1 and b"no such file" in raw
    assert b"\x1b" not in raw
    raw, rc = run_on_pty([*ES, "info", str(tmp_path / "none.h5")], env={"TERM": "xterm"}, timeout=120)
    assert b"\r\x1b[K" in raw  # (a terminal that has it: the line starts cleared)


def test_study_no_progress_keeps_the_note_lines(monkeypatch, tmp_path, capsys):
    """docs/studies.md: a cache that cannot be written is said by a `note:` line; `--no-progress` silenced
    every line of the study's echo, the notes with them."""
    import embedscope.study.run as study_run
    from embedscope.cli import main

    def fake(*a, echo, **k):
        echo("embed: 2 checkpoints")
        echo("note: the embedding cache /x cannot be written: ...")
        raise EmbedscopeError("stop here")

    monkeypatch.setattr(study_run, "run_study", fake)
    rc = main(["study", str(tmp_path / "*.pt"), "-o", str(tmp_path / "st"), "--no-progress", "--workers", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "note: the embedding cache /x cannot be written" in out and "embed: 2 checkpoints" not in out
