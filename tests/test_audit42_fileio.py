"""Forty-second session, shared file-writing rules (fileio) and number cells (importers): each test of a fix
fails on the code before it; the others pin a rule decided here (named so in their docstrings)."""

from __future__ import annotations

import pytest

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
