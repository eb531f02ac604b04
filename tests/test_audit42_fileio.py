"""Forty-second session, shared file-writing rules (fileio) and number cells (importers): each test of a fix
fails on the code before it; the others pin a rule decided here (named so in their docstrings)."""

from __future__ import annotations

import numpy as np
import pytest
from held_file import held_for_writing

from embedscope.errors import EmbedscopeError

# ---------------------------------------------------------------------------------------------------------
# 1. the refused-lock folder rule, one function (folder_lock's ``made``) for train, study and make-shapes


def test_a_refused_folder_lock_gives_the_folders_made_to_the_other_writer(tmp_path):
    """The rule was written three times (train, study, make-shapes: a ``locked`` flag, a try/except): it is
    folder_lock's ``made`` now. Refused: the list is emptied and the output group forgets the folders, so
    that the refused writer's failure removes none of them; taken: they stay the writer's."""
    import embedscope.fileio as F

    folder = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError), F.output_group():
        made = F.track_new_folders(folder)
        F.make_folders(folder, folder)
        with F.folder_lock(folder, "the other writer"):  # the other writer, which found the folders there
            with pytest.raises(EmbedscopeError, match="another process is writing it now"):
                with F.folder_lock(folder, "this writer", made=made):
                    pass
            assert made == []
            raise RuntimeError("this writer fails")  # its output group rolls back
    assert folder.is_dir()  # the other writer's folders, kept
    made = F.make_folders(tmp_path / "c", tmp_path / "c")
    with F.folder_lock(tmp_path / "c", "this writer", made=made):
        assert made == [tmp_path / "c"]  # taken: still this writer's, removed if it fails


def test_a_study_refused_the_folder_lock_keeps_the_other_studys_new_folders(tmp_path, monkeypatch):
    """As train (test_audit39_misc): study A makes <out>/rows, study B takes the lock first; A's refusal
    leaves both folders to B (through folder_lock's rule now, the study's call site's own flag before)."""
    import embedscope.fileio as F
    from embedscope.study.run import run_study

    out = tmp_path / "study"
    held = []
    made = F.make_folders

    def make_then_other_locks(folder, user_path):
        created = made(folder, user_path)
        lock = F.folder_lock(out, "the other study")
        lock.__enter__()  # study B, between A's mkdir and A's lock
        held.append(lock)
        return created

    monkeypatch.setattr(F, "make_folders", make_then_other_locks)
    try:
        with pytest.raises(EmbedscopeError, match="another process is writing it now"):
            run_study(str(tmp_path / "ck" / "*.pt"), out, cache_dir=tmp_path / "cache", echo=lambda s: None,
                      measures=["R@1", "rho"], figures=False, n_boot=0, workers=0)
        assert (out / "rows").is_dir()  # B's folders, B still holding them
    finally:
        for lock in held:
            lock.__exit__(None, None, None)


# ---------------------------------------------------------------------------------------------------------
# 2. HDF5's lock failure read from its message (h5py gives the errno only in the text and in "[Errno N]")


@pytest.fixture(scope="module")
def held_h5(tmp_path_factory):
    """An HDF5 source (not an embedscope file) that another process holds open for writing; the message of
    h5py's real error reading it."""
    import h5py

    path = tmp_path_factory.mktemp("held") / "src.h5"
    with h5py.File(path, "w") as f:
        f["emb"] = np.arange(12, dtype=np.float32).reshape(6, 2)
        f["label"] = np.array([0, 0, 1, 1, 2, 2])
    with held_for_writing(path) as message:
        if message is None:
            pytest.skip("HDF5 file locking is off here (HDF5_USE_FILE_LOCKING or the file system)")
        yield path, message


def test_the_real_hdf5_lock_error_is_read_as_another_writer(held_h5, tmp_path):
    """The installed h5py/HDF5's own message (h5py 3.16 / HDF5 2.0: "[Errno 11] Unable to synchronously open
    file (unable to lock file, errno = 11, error message = 'Resource temporarily unavailable')")."""
    import h5py

    from embedscope.fileio import hdf5_lock_failure

    path, message = held_h5
    line = hdf5_lock_failure(path, message)
    assert line is not None and "open for writing by another process" in line and "LOCKING" not in line
    with pytest.raises(OSError) as e:  # a second writer: the same lock, the same line
        h5py.File(path, "a")
    assert hdf5_lock_failure(path, str(e.value).splitlines()[0]) == line


def test_import_of_an_hdf5_source_held_by_a_writer_says_so(held_h5):
    """import read it as "cannot read as hdf5 (BlockingIOError: [Errno 11] Unable to synchronously open file
    (unable to lock file, ...))", as if the file were the problem: now the line store.load gives."""
    from embedscope.importers import import_embeddings

    path, _ = held_h5
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(path, embeddings="emb", labels="label")
    assert "open for writing by another process (HDF5 file lock)" in str(e.value)
    assert "BlockingIOError" not in str(e.value)


@pytest.mark.parametrize("first, expect, absent", [
    # HDF5 1.10.x's ENOSYS has its own text, which was read as "damaged or truncated"
    ("Unable to open file (file locking disabled on this file system (use HDF5_USE_FILE_LOCKING environment "
     "variable to override), errno = 38, error message = 'Function not implemented')",
     "this file system may not support file locks", "damaged"),
    ("Unable to open file (file locking disabled on this file system (use HDF5_USE_FILE_LOCKING environment "
     "variable to override))", "this file system may not support file locks", "another process"),
    # no errno in the text: h5py's [Errno N] in front of it
    ("[Errno 11] Unable to synchronously open file (unable to lock file)", "open for writing by another process",
     "LOCKING"),
    ("[Errno 37] Unable to synchronously open file (unable to lock file)", "HDF5_USE_FILE_LOCKING=FALSE",
     "another process"),
    # an unknown form, no errno anywhere: both causes (it was "another process" alone, a guess)
    ("Unable to synchronously open file (unable to lock file: Resource temporarily unavailable)",
     "either another process has it open for writing", "damaged"),
    # Cray DVS: Linux's internal ENOTSUPP
    ("[Errno 524] Unable to create file (unable to lock file, errno = 524, error message = 'Unknown error 524')",
     "errno = 524, error message = 'Unknown error 524'): this file system", "another process"),
])
def test_hdf5_lock_failure_forms(tmp_path, first, expect, absent):
    from embedscope.store.embeddings import _open_failure

    line = _open_failure(tmp_path / "x.h5", first)
    assert expect in line and absent not in line
    assert "HDF5_USE_FILE_LOCKING=FALSE" not in line or "another process" not in line or "either" in line


# ---------------------------------------------------------------------------------------------------------
# 3. a signed zero in a property column (decided: as the documented integer rule reads '+7'; no change)


def _cells(*cells):
    import io

    import pandas as pd

    text = "c\n" + "\n".join(cells) + "\n"
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)["c"].to_numpy(dtype=object)
    return raw, pd.read_csv(io.StringIO(text))["c"].to_numpy()


@pytest.mark.parametrize("cells, expect", [
    (("-0", "1"), ["-0", "1"]),  # an integer column: a cell is read as the integer it writes exactly; int()
    (("+7", "1"), ["+7", "1"]),  # drops the sign of -0 as of +7 (two texts, '-0' and '0', are not one value)
    (("0", "-0", "5"), ["0", "-0", "5"]),
    (("-0", "1.5"), [-0.0, 1.5]),  # a float column: every number none zero-padded, '-0' and '+7' too
    (("+7", "1.5"), [7.0, 1.5]),
    (("-0.0", "1"), [-0.0, 1.0]),
    (("-007", "1.5"), ["-007", "1.5"]),  # zero-padded: the column stays text (documented)
    (("-00", "1"), ["-00", "1"]),
])
def test_a_signed_zero_is_read_by_the_documented_rules(cells, expect):
    """Decided rule, no change: '-0' in a column of integers stays text as '+7' does (ints_if_exact: an integer
    only when written as Python writes it, so that no two texts become one value); beside a float it is the
    number -0.0 as '+7' is 7.0 (property_cells: every cell a number, none zero-padded); '-0.0' is a float."""
    from embedscope.importers import property_cells

    got = property_cells(*_cells(*cells))
    assert got.tolist() == expect
    if isinstance(expect[0], float):
        assert got.dtype.kind == "f" and np.signbit(got[0]) == cells[0].startswith("-")


# ---------------------------------------------------------------------------------------------------------
# 4. labels, split, paths and class names of a CSV/TSV: one rule for a table's column and a one-column file


def _import(tmp_path, table, **files):
    from embedscope.importers import import_embeddings

    (tmp_path / "e.csv").write_text(table)
    kw = {}
    for opt, text in files.items():
        name = {"labels": "y.csv", "paths": "p.csv", "class_names": "cn.csv", "labels_txt": "y.txt"}[opt]
        (tmp_path / name).write_text(text)
        kw["labels" if opt == "labels_txt" else opt] = str(tmp_path / name)
    return import_embeddings(tmp_path / "e.csv", **kw)


def test_an_integer_label_with_spaces_around_it_is_one_class_in_a_table_too(tmp_path):
    """A table's label column of ' 7 ', '7', '3' made three classes (' 7 ' kept as text) where the same cells in
    a one-column labels file, a .txt and a property column read 7: decided that spaces around an integer are no
    part of a label (pandas reads the column as integers through them); around text they are kept."""
    table = "path,label,e0\na.png, 7 ,0.1\nb.png,7,0.2\nc.png,3,0.3\n"
    es = _import(tmp_path, table)
    assert es.labels.tolist() == [1, 1, 0] and list(es.class_names) == ["3", "7"]
    for opt, text in (("labels", "y\n 7 \n7\n3\n"), ("labels_txt", " 7 \n7\n3\n")):  # (as before)
        es = _import(tmp_path, table.replace("path,label,e0", "path,lab,e0"), **{opt: text})
        assert list(es.class_names) == ["3", "7"], opt
    es = _import(tmp_path, "path,label,e0\na.png, cat ,0.1\nb.png,cat,0.2\nc.png,3,0.3\n")
    assert sorted(es.class_names) == [" cat ", "3", "cat"]  # texts as written


def test_one_column_files_of_names_are_not_read_as_floats(tmp_path):
    """A one-column CSV of paths '1.10', '1e3' stored the paths '1.1' and '1000.0'; class names '1.10' and '1.1'
    were the number 1.1 twice ('class names repeat'). Now as a table's column of them: texts as written. A labels
    file keeps its numbers (test_import_audit_fixes: '0.5' refused; '1.0', '2.0' the classes 1 and 2)."""
    table = "path,label,e0,e1\na.png,0,0.1,1\nb.png,1,0.2,2\nc.png,0,0.3,3\n"
    es = _import(tmp_path, table.replace("path,", "id,"), paths="path\n1.10\n1e3\n 7 \n")
    assert list(es.paths) == ["1.10", "1e3", " 7 "]  # (paths exactly as written, no space removed either)
    es = _import(tmp_path, table, class_names="1.10\n1.1\n")
    assert list(es.class_names) == ["1.10", "1.1"]
    es = _import(tmp_path, "path,e0,e1\na.png,0.1,1\nb.png,0.2,2\nc.png,0.3,3\n", labels="1.0\n2.0\n1.0\n")
    assert list(es.class_names) == ["1", "2"] and es.labels.tolist() == [0, 1, 0]  # (as before)


# ---------------------------------------------------------------------------------------------------------
# 5. a paths file and a .txt of values: lines end at a newline only


def test_a_line_of_a_paths_file_or_txt_ends_at_a_newline_only(tmp_path):
    """str.splitlines() also cut at \\x0c, \\x1c-\\x1e, \\x85 and \\u2028: a file name 'caf\\x85.jpg' (a cp1252 '…'
    read as Latin-1) became the two paths 'caf' and '.jpg'. CRLF and CR still end a line."""
    from embedscope.fileio import read_paths_file
    from embedscope.importers import read_vector

    p = tmp_path / "paths.txt"
    p.write_bytes("caf\u0085.jpg\nb\x0cc\u2028.jpg\r\nd.jpg\re.jpg\n\n".encode())
    want = ["caf\u0085.jpg", "b\x0cc\u2028.jpg", "d.jpg", "e.jpg"]
    assert read_paths_file(p) == want
    assert read_vector(p, "paths").tolist() == want
