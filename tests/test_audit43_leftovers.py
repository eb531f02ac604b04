"""Audit 43 (leftovers of the earlier audits: the store, file output, terminal text).

What was wrong before:

1. ``store.update_properties`` called from Python rewrote a file without write permission (``chmod 444``):
   only ``add-properties`` refused it;
2. a study's measure ``NR-Prec:<property>`` (a property name may have 255 characters) was shown whole in the
   terminal table, its notes and the report's tables, where other long names are shortened (``SHOWN_NAME``);
3. ``evaluate`` / ``spectrum`` of several files: the light read of each file's split column swallowed h5py's
   lock error (a file another process writes), so the file was refused only after the files before it;
4. ``atomic_output(..., force=True)`` on a symbolic link replaced the link by a regular file, leaving the file it
   named as it was (``cp`` and a shell's ``>`` write the target); a link to nothing passed ``check_writable``
   without force and was refused only after the work;
5. a NUL inside (not at the end of) a path, split, class name or property text passed ``from_arrays`` and was
   refused only by ``store.save``;
6. ``update_properties``' own read of the file passed h5py's lock error through raw (``BlockingIOError``); one
   name given as a string was iterated by letter, and a name the set lacks was a KeyError; an output path
   holding a NUL was os.open's ValueError; a named pipe given as an embedding or maps file hung (HDF5 waited
   for a writer); a folder given as a paths file was "no such paths file".
"""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from embedscope import store
from embedscope.errors import EmbedscopeError
from embedscope.store.embeddings import EmbeddingSet

N = 4
PATHS = [f"img/{i}.jpg" for i in range(N)]


def _h5(path, **properties):
    """A small embedding file of the project's own store."""
    es = EmbeddingSet(embeddings=np.eye(N, 3, dtype=np.float32), labels=np.array([0, 0, 1, 1]), paths=PATHS,
                      split=["test"] * N, class_names=["a", "b"], properties=properties)
    store.save(path, es)
    return path


# ----------------------------------------------------------------------------- 1. update_properties, read-only


def test_update_properties_refuses_a_read_only_file(tmp_path):
    from embedscope.store.embeddings import load, update_properties

    h5 = _h5(tmp_path / "e.h5")
    es = load(h5)
    es.properties = {"w": np.arange(N)}
    before = h5.read_bytes()
    os.chmod(h5, 0o444)
    try:
        with pytest.raises(EmbedscopeError, match=r"e\.h5: the file is read-only \(no write permission\): .*"
                                                  r"make it writable first \(chmod u\+w\)"):
            update_properties(h5, es, ["w"])
        assert h5.read_bytes() == before and (h5.stat().st_mode & 0o777) == 0o444
        assert os.listdir(tmp_path) == ["e.h5"]  # no temporary left
    finally:
        os.chmod(h5, 0o644)
    update_properties(h5, es, ["w"])  # writable again: updated
    with h5py.File(h5, "r") as f:
        assert f["properties/w"][()].tolist() == list(range(N))


# ----------------------------------------------------------------------------- 5. a NUL inside a text


def _held(*values):
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


@pytest.mark.parametrize("kw, what", [
    ({"paths": ["x", "a\x00b", "y"]}, "paths"),
    ({"paths": _held("x", "a\x00b", "y")}, "paths"),
    ({"paths": np.array(["x", "a\x00b", "y"])}, "paths"),
    ({"paths": np.array([b"x", b"a\x00b", b"y"])}, "paths"),
    ({"split": ["train", "te\x00st", "test"]}, "split"),
    ({"split": np.array(["train", "te\x00st", "test"])}, "split"),
    ({"y": [0, 1, 1], "class_names": ["a", "b\x00c"]}, "class_names"),
    ({"y": [0, 1, 1], "class_names": [b"a", b"b\x00c"]}, "class_names"),
    ({"properties": {"p": ["a", "a\x00b", "c"]}}, "property 'p'"),
    ({"properties": {"p": np.array(["a", "a\x00b", "c"])}}, "property 'p'"),
])
def test_a_nul_inside_a_text_is_refused_by_from_arrays(kw, what):
    """It passed from_arrays and only store.save refused it, naming the row: refused where the set is made, in
    the words of a trailing NUL."""
    kw = {"y": [0, 1, 1], **kw}
    with pytest.raises(EmbedscopeError, match=rf"^{what}: row 1 holds a NUL character, which HDF5 text cannot store$"):
        EmbeddingSet.from_arrays(np.eye(3), **kw)


def test_texts_without_a_nul_are_kept_as_before():
    es = EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1], paths=np.array([b"x", b"y", b"z"]), split="train",
                                  class_names=[b"a", "b"], properties={"p": ["x", "y", "z"], "q": [1, 2, 3]})
    assert es.paths.tolist() == ["x", "y", "z"] and es.class_names.tolist() == ["a", "b"]
    assert es.properties["p"].tolist() == ["x", "y", "z"]


# ----------------------------------------------------------------------------- 2. long NR-Prec:<property> names


LONG_A, LONG_B = "NR-Prec:" + "w" * 240 + "a", "NR-Prec:" + "w" * 240 + "b"  # (alike but for one letter)


@pytest.fixture(scope="module")
def long_study(tmp_path_factory):
    """A study folder of synthetic rows (no training) that measured two properties of 241-character names."""
    import itertools
    import json

    from embedscope.study.run import finish_study

    rng = np.random.default_rng(0)
    rows = []
    for k, (name, s) in enumerate(itertools.product(("a", "b", "c", "d"), (0, 1))):
        rows.append({"id": f"{name}_s{s}", "run": f"{name}_s{s}", "selection": "final", "status": "ok", "loss": name,
                     "seed": s, "normalize": True, "untrained": "", "epoch": 3, "dataset": "digits",
                     "arch": "digits_cnn", "embed_dim": 16, "checkpoint": f"/ckpts/{name}_s{s}.pt",
                     "sha256": f"{k:02x}" * 32, "N_train": 901, "N_test": 896,
                     **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "MAP@R", "rho", LONG_A, LONG_B)}})
    d = tmp_path_factory.mktemp("long") / "study"
    d.mkdir()
    finish_study(d, rows, n_boot=0, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({
        "settings": {"source": "runs/", "epoch": "final", "metric": "cosine", "seed": 1, "device": "cpu"},
        "versions": {"embedscope": "x"}, "host": "h", "stats_code": "abc",
        "measures": {m: {"split": "test", "direction": "higher", "meaning": "m"} for m in ("rho", LONG_A, LONG_B)}}))
    return d


def test_the_report_shortens_long_measure_names(long_study):
    import re

    from embedscope.study.report import build_report

    stats_text = (long_study / "correlations.json").read_text()
    assert LONG_A in stats_text and LONG_B in stats_text  # (the files keep them whole)
    page = build_report(long_study)
    html5lib = pytest.importorskip("html5lib")
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(page)
    assert not parser.errors  # (the tooltips' spans are HTML as the page's)
    shown = re.sub(r'title="[^"]*"', "", page)  # (each whole name is its shortened one's tooltip)
    assert "w" * 100 not in shown  # (was: each name whole, in the correlation, robustness and measures tables)
    assert f'title="{LONG_A}"' in page and f'title="{LONG_B}"' in page
    a = [m for m in re.findall(r"NR-Prec:w+…w+a\b", shown)]
    b = [m for m in re.findall(r"NR-Prec:w+…w+b\b", shown)]
    assert a and b and max(map(len, a + b)) <= 80  # (two names, shown apart)


def test_the_study_table_shortens_long_measure_names(long_study, tmp_path, monkeypatch, capsys):
    import json

    import embedscope.study.run as study_run
    from embedscope.cli import main

    stats = json.loads((long_study / "correlations.json").read_text())
    monkeypatch.setattr(study_run, "run_study", lambda *a, **k: {"stats": stats, "errors": [], "rows": []})
    (tmp_path / "ckpts").mkdir()
    capsys.readouterr()
    assert main(["study", str(tmp_path / "ckpts"), "-o", str(tmp_path / "st"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if not line.startswith(("note:", "study ", "wrote "))]
    assert max(len(line) for line in table) < 200, out  # (was 241 characters and more per row)
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("NR-Prec:")]
    assert len(rows) == 2 and rows[0] != rows[1] and all("…" in r for r in rows)


def test_the_study_notes_shorten_long_measure_names():
    """The notes under the table (terminal and report) named them whole too."""
    from embedscope.study.stats import study_notes

    stats = {"n_points": {"runs": 4}, "target": "R@1", "measures": ["rho", LONG_A, LONG_B],
             "correlations": [{"measure": LONG_A, "level": "runs", "note": "constant over the points"},
                              {"measure": LONG_B, "level": "runs"}, {"measure": "rho", "level": "runs"}],
             "undefined": {LONG_A: {"runs": ["a_s0"], "reasons": {"one value": 1}},
                           LONG_B: {"runs": ["a_s0"], "reasons": {"two values": 1}}},
             "objectives": [{"objective": "a", "n_seeds": 2, f"{LONG_A}_n": 1}]}
    lines = study_notes(stats)
    assert len(lines) == 3 and all("w" * 100 not in line for line in lines), lines
    assert all("…" in line for line in lines)
    assert lines[1].count("NR-Prec:") == 2  # (both named, shortened: apart)


# ----------------------------------------------------------------------------- 4. an output that is a link


def test_force_writes_through_a_symbolic_link(tmp_path):
    """The link was replaced by a regular file holding the output, the file it named left as it was; now the
    file it names is written, as cp and a shell's > do, its temporary file in that file's folder."""
    from embedscope import fileio

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    target = tmp_path / "elsewhere" / "t.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "out" / "link.txt"
    os.symlink("../elsewhere/t.txt", link)
    with fileio.atomic_output(link, force=True) as tmp:
        assert tmp.parent == target.parent  # (a rename across file systems would fail)
        tmp.write_text("new")
    assert os.readlink(link) == "../elsewhere/t.txt" and target.read_text() == "new"
    assert (target.stat().st_mode & 0o777) == 0o640  # (the replaced file's mode kept)
    assert os.listdir(tmp_path / "out") == ["link.txt"] and os.listdir(tmp_path / "elsewhere") == ["t.txt"]
    # a link to a link (and a folder's link on the way): the last file
    os.symlink("link.txt", tmp_path / "out" / "link2.txt")
    fileio.write_text(tmp_path / "out" / "link2.txt", "newer", force=True)
    assert target.read_text() == "newer" and os.path.islink(tmp_path / "out" / "link2.txt")


def test_a_link_to_nothing_is_an_existing_output_and_written_with_force(tmp_path):
    from embedscope import fileio

    link = tmp_path / "link.txt"
    os.symlink("t.txt", link)
    with pytest.raises(EmbedscopeError, match=r"link\.txt already exists \(use --force"):
        fileio.check_writable(link)  # (before the work: it was refused only as the output was published)
    fileio.write_text(link, "new", force=True)
    assert os.readlink(link) == "t.txt" and (tmp_path / "t.txt").read_text() == "new"


def test_a_link_that_loops_or_leads_nowhere_is_one_line(tmp_path):
    from embedscope import fileio

    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(EmbedscopeError, match=r"a: a symbolic link that loops"):
        fileio.write_text(tmp_path / "a", "x", force=True)
    os.symlink("no/such/folder/t.txt", tmp_path / "c")
    with pytest.raises(EmbedscopeError, match=r"c: a symbolic link to .*no/such/folder/t\.txt, whose folder does "
                                              r"not exist"):
        fileio.write_text(tmp_path / "c", "x", force=True)
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "c"]


def test_an_output_group_puts_back_the_file_a_link_names(tmp_path):
    from embedscope import fileio

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "t.txt").write_text("old")
    os.symlink("d/t.txt", tmp_path / "link.txt")
    with pytest.raises(KeyboardInterrupt), fileio.output_group([tmp_path / "link.txt"]):
        fileio.write_text(tmp_path / "link.txt", "new", force=True)
        assert (tmp_path / "d" / "t.txt").read_text() == "new"
        raise KeyboardInterrupt
    assert (tmp_path / "d" / "t.txt").read_text() == "old" and os.readlink(tmp_path / "link.txt") == "d/t.txt"
    assert os.listdir(tmp_path / "d") == ["t.txt"]


# ----------------------------------------------------------------------------- 6. update_properties, a held file


def test_update_properties_of_a_file_another_process_holds_is_one_line(tmp_path):
    """Its own read of the file (under the update lock) passed h5py's BlockingIOError through raw: "[Errno 11]
    Unable to synchronously open file (unable to lock file, ...)"."""
    from held_file import held_for_writing

    from embedscope.store.embeddings import load, update_properties

    h5 = _h5(tmp_path / "e.h5")
    es = load(h5)
    es.properties = {"w": np.arange(N)}
    with held_for_writing(h5) as message:
        if message is None:
            pytest.skip("HDF5 file locking is off here")
        with pytest.raises(EmbedscopeError, match=r"e\.h5: open for writing by another process \(HDF5 file lock\)"):
            update_properties(h5, es, ["w"])
    assert os.listdir(tmp_path) == ["e.h5"]


# ----------------------------------------------------------------------------- 3. the light reads, a held file


def test_several_files_one_held_by_another_process_is_refused_before_any_work(tmp_path, monkeypatch):
    """evaluate / spectrum of several files read each one's split column first, to refuse a file before the
    files before it are computed; a file another process held for writing was skipped there (h5py's lock
    error swallowed) and refused only once the analysis reached it."""
    from held_file import held_for_writing

    import embedscope.analyses.retrieval as retrieval

    a, b = _h5(tmp_path / "a.h5"), _h5(tmp_path / "b.h5")
    computed = []
    real = retrieval.evaluate
    monkeypatch.setattr(retrieval, "evaluate", lambda es, **kw: computed.append(kw.get("name")) or real(es, **kw))
    with held_for_writing(b) as message:
        if message is None:
            pytest.skip("HDF5 file locking is off here")
        with pytest.raises(EmbedscopeError, match=r"^.*b\.h5: open for writing by another process \(HDF5 file lock\)"):
            retrieval.evaluate_many([a, b], split="test")
    assert computed == []  # (was: a.h5 computed first)


def test_update_properties_takes_one_name_and_refuses_a_name_the_set_lacks(tmp_path):
    """A name as a string was iterated by letter (``"colour"``: KeyError 'c'); a name the set does not hold was
    a KeyError."""
    from embedscope.store.embeddings import load, update_properties

    h5 = _h5(tmp_path / "e.h5")
    es = load(h5)
    es.properties = {"colour": np.arange(N)}
    with pytest.raises(EmbedscopeError, match=r"e\.h5: no property 'missing' in the set to write"):
        update_properties(h5, es, ["missing"])
    update_properties(h5, es, "colour")
    with h5py.File(h5, "r") as f:
        assert sorted(f["properties"]) == ["colour"]



def test_an_output_path_holding_a_nul_is_one_line(tmp_path):
    """os.open's ValueError "embedded null byte" came out of write_text / store.save called from Python."""
    from embedscope import fileio

    with pytest.raises(EmbedscopeError, match=r"a file name cannot hold a NUL character$"):
        fileio.write_text(tmp_path / "a\x00b.txt", "x")
    with pytest.raises(EmbedscopeError, match=r"a file name cannot hold a NUL character$"):
        store.save(str(tmp_path / "a\x00b.h5"), EmbeddingSet.from_arrays(np.eye(3), [0, 1, 1]), force=True)
    assert os.listdir(tmp_path) == []



@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_given_as_an_embedding_file_is_one_line_not_a_wait(tmp_path):
    """HDF5's open of a named pipe waited for a writer, for ever (store.load, load_maps, info, every command
    reading an embedding file). In a child process: the wait would hang the test run."""
    import subprocess
    import sys

    fifo = tmp_path / "e.h5"
    os.mkfifo(fifo)
    code = ("import sys\nfrom embedscope import store\nfrom embedscope.cli import main\n"
            "from embedscope.store import load_maps\n"
            "for f in (store.load, load_maps):\n"
            "    try:\n        f(sys.argv[1])\n    except Exception as e:\n        print(e)\n"
            "print(main(['info', sys.argv[1]]))\n")
    p = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.stdout.splitlines() == [
        f"{fifo} is not a regular file (a device, a named pipe or a socket), expected an embedding file (.h5)",
        f"{fifo} is not a regular file (a device, a named pipe or a socket), expected a saliency-maps file (.h5)",
        "1"], p.stderr
    assert p.stderr.startswith("embedscope info: error: ") and "is not a regular file" in p.stderr


def test_a_paths_file_that_is_a_folder_is_named_so(tmp_path):
    """It was "no such paths file", for a folder that is there."""
    from embedscope.fileio import read_paths_file

    with pytest.raises(EmbedscopeError, match=r"is not a regular file \(a folder, a device or a named pipe\), "
                                              r"expected a paths file$"):
        read_paths_file(tmp_path)
    with pytest.raises(EmbedscopeError, match=r"nope\.txt: no such paths file$"):
        read_paths_file(tmp_path / "nope.txt")
