"""Thirty-ninth session, a second reading of the study's stale-statistics check (fails on the code before it)."""

from __future__ import annotations

import json

from conftest import save_digits_checkpoint

FAST = {"measures": ["R@1", "rho"], "figures": False, "n_boot": 0, "workers": 0}


def test_statistics_of_a_row_measured_again_under_its_id_are_not_taken_as_up_to_date(tmp_path, emb_cache):
    """A checkpoint retrained under its name is measured again with the same row id; a study stopped
    between runs.csv and correlations.json kept the statistics of the old values, which the next run
    took as up to date (correlations.json named the rows' ids only)."""
    from embedscope.study.run import run_study

    ck = tmp_path / "ck"
    ck.mkdir()
    for i, name in enumerate("abc"):
        save_digits_checkpoint(ck / f"{name}.pt", seed=i + 1)
    out = tmp_path / "study"
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    stale = (out / "correlations.json").read_text()
    (ck / "c.pt").unlink()
    save_digits_checkpoint(ck / "c.pt", seed=9)  # retrained: the same id, other values
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lambda s: None, **FAST)
    fresh = json.loads((out / "correlations.json").read_text())
    assert fresh["correlations"] != json.loads(stale)["correlations"]
    (out / "correlations.json").write_text(stale)  # as a stop between runs.csv and correlations.json left it
    lines = []
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lines.append, **FAST)
    assert not any("up to date" in ln for ln in lines), lines
    assert json.loads((out / "correlations.json").read_text())["correlations"] == fresh["correlations"]
    lines = []  # a finished study read back from its rows' files is still served as it is
    run_study(str(ck / "*.pt"), out, cache_dir=emb_cache, echo=lines.append, **FAST)
    assert any("up to date" in ln for ln in lines), lines


def test_a_cache_that_fills_during_a_study_is_said_once(tmp_path, monkeypatch):
    """A cache writable at the start whose writes then fail (a disk that fills) kept no embeddings without a
    word (the note promised for a cache that cannot be written came only from the check at the start)."""
    import errno

    import embedscope.store
    from embedscope.study.run import run_study

    ck = tmp_path / "ck"
    ck.mkdir()
    for i, name in enumerate("ab"):
        save_digits_checkpoint(ck / f"{name}.pt", seed=i + 1)
    cache = tmp_path / "cache"
    real = embedscope.store.save

    def full(path, *a, **k):
        if str(path).startswith(str(cache)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, *a, **k)

    monkeypatch.setattr(embedscope.store, "save", full)
    lines = []
    out = tmp_path / "study"
    res = run_study(str(ck / "*.pt"), out, cache_dir=cache, echo=lines.append, **FAST)
    notes = [ln for ln in lines if "could not be written to the cache" in ln]
    assert len(notes) == 1 and "embeddings measured in this run" in notes[0], lines
    assert "No space left on device" in notes[0]
    assert all(r["status"] == "ok" for r in res["rows"])
    assert "_cache_error" not in (out / "runs.csv").read_text()
    assert not any("_cache_error" in f.read_text() for f in (out / "rows").glob("*.json"))
