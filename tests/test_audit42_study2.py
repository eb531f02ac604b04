"""A forty-second reading of a study's loose ends: the warnings of loading a checkpoint (float16 weights
upcast) in its workers, the columns of correlations.csv, and a checkpoint written over while
``embed_cached`` reads it."""

import csv
import json
import threading
import warnings

from conftest import save_digits_checkpoint


def _half(path, seed: int = 0):
    """A digits checkpoint of embedscope's format whose weights are float16 (its config kept)."""
    import torch

    save_digits_checkpoint(path, seed=seed)
    obj = torch.load(path, weights_only=True)
    obj["state_dict"] = {k: v.half() if v.is_floating_point() else v for k, v in obj["state_dict"].items()}
    with open(path, "wb") as fh:
        torch.save(obj, fh)
    return path


def _study(src, out, cache, **kw):
    from embedscope.study.run import run_study

    kw.setdefault("workers", 0)
    return run_study(str(src), out, cache_dir=cache, n_boot=0, measures=["R@1", "rho"], figures=False,
                     progress=False, echo=lambda s: None, **kw)


def _precision(caught, path=None):
    from embedscope.models.checkpoint import PrecisionWarning

    return [w for w in caught if issubclass(w.category, PrecisionWarning)
            and (path is None or str(path) in str(w.message))]


def test_a_half_precision_checkpoint_warns_once_per_run_and_its_row_says_so(tmp_path):
    """Its row (runs.csv's ``warnings``) says the weights were upcast, also in a study run again in the same
    process (was: the row said nothing, and a second run in one process said nothing at all: Python shows
    a warning's text once per place)."""
    d = tmp_path / "ck"
    d.mkdir()
    half = _half(d / "half.pt", seed=1)
    save_digits_checkpoint(d / "full.pt", seed=2)
    out, cache = tmp_path / "st", tmp_path / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for force in (False, True):
            n = len(caught)
            res = _study(d / "*.pt", out, cache, force=force)
            assert len(_precision(caught[n:])) == 1 and len(_precision(caught[n:], half)) == 1
            rows = {r["id"]: r for r in res["rows"]}
            assert "float16" in rows["half_given"]["warnings"] and str(half) in rows["half_given"]["warnings"]
            assert "warnings" not in rows["full_given"]
    with open(out / "runs.csv", newline="") as fh:
        recs = {r["id"]: r for r in csv.DictReader(fh)}
    assert "upcast to float32" in recs["half_given"]["warnings"] and recs["full_given"]["warnings"] == ""
    assert "_warnings" not in json.loads((out / "rows" / "half_given.json").read_text())  # (said, not stored)
    from embedscope.study.report import build_report

    page = build_report(out)  # the report's runs table shows the column (it showed no word of it)
    runs = page[page.index("<h2>Runs</h2>"):]
    assert "loading warned" in runs[:runs.index("</tr>")] and "upcast to float32" in runs


def test_a_worker_thread_never_shows_the_warning_the_study_process_says_it(tmp_path):
    """With worker threads, the warning is shown by the study's own thread, once, before the row's line
    (was: printed from the worker thread, in the middle of the progress bar's drawing)."""
    d = tmp_path / "ck"
    d.mkdir()
    half = _half(d / "half.pt", seed=3)
    out, cache = tmp_path / "st", tmp_path / "cache"
    shown = []
    real = warnings.showwarning

    def spy(message, category, *a, **k):
        shown.append((threading.current_thread() is threading.main_thread(), category, str(message)))

    try:
        warnings.showwarning = spy
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = spy
            res = _study(d / "*.pt", out, cache, workers=1)
    finally:
        warnings.showwarning = real
    from embedscope.models.checkpoint import PrecisionWarning

    ours = [s for s in shown if issubclass(s[1], PrecisionWarning)]
    assert len(ours) == 1 and ours[0][0], shown  # in the main thread
    assert str(half) in ours[0][2]
    assert "float16" in {r["id"]: r for r in res["rows"]}["half_given"]["warnings"]


def test_caught_warnings_are_the_threads_own(tmp_path):
    """Another thread's embedscope warning, raised while a task catches its own, is shown as before."""
    from embedscope.errors import EmbedscopeWarning
    from embedscope.study.run import _catch_warnings

    shown = []
    inside, go = threading.Event(), threading.Event()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, *a, **k: shown.append(str(m))

        def task():
            with _catch_warnings() as mine:
                warnings.warn(EmbedscopeWarning("mine"), stacklevel=1)
                inside.set()
                go.wait(5)
            got.extend(mine)

        got = []
        t = threading.Thread(target=task)
        t.start()
        inside.wait(5)
        warnings.warn(EmbedscopeWarning("other"), stacklevel=1)
        go.set()
        t.join(5)
        warnings.warn(EmbedscopeWarning("after"), stacklevel=1)
    assert shown == ["other", "after"]
    assert [g[2] for g in got] == ["mine"]


def test_a_checkpoint_loaded_again_in_the_process_is_caught_again(tmp_path):
    """Python shows a warning's text once per place: a checkpoint measured again in the same process (a
    study run again with --force, a notebook, a long-lived Dask worker) still gives its row the warning."""
    from embedscope.models import load_checkpoint
    from embedscope.study.run import _catch_warnings

    half = _half(tmp_path / "half.pt", seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        for _ in range(2):
            with _catch_warnings() as caught:
                load_checkpoint(half)
            assert [c[1] for c in caught] == ["PrecisionWarning"]


def test_correlations_csv_has_every_key_of_any_row(tmp_path, monkeypatch):
    """Its columns are every key of the correlation rows in first-seen order (were the first row's: a key
    that only a later row had was dropped without a word)."""
    import embedscope.study.stats as stats
    from embedscope.study.run import finish_study

    d = tmp_path / "ck"
    d.mkdir()
    for s in (1, 2, 3):
        save_digits_checkpoint(d / f"n{s}.pt", seed=s)
    res = _study(d / "*.pt", tmp_path / "st", tmp_path / "cache")
    real = stats.study_statistics

    def later_key(*a, **k):
        st = real(*a, **k)
        st["correlations"][-1]["only_later"] = 7
        return st

    monkeypatch.setattr(stats, "study_statistics", later_key)
    finish_study(tmp_path / "again", res["rows"], n_boot=0, figures=False)
    with open(tmp_path / "again" / "correlations.csv", newline="") as fh:
        recs = list(csv.DictReader(fh))
    assert recs[-1]["only_later"] == "7" and recs[0]["only_later"] == ""
    assert list(recs[0])[:4] == ["measure", "split", "target", "level"]


def test_embed_cached_refuses_a_checkpoint_written_over_between_its_load_and_its_sha256(tmp_path, monkeypatch):
    """The network read was the old file's, the sha256 (the cache key) the new one's: the new file's cached
    embedding came back with the old file's config (was: returned; ``measure_entry`` alone refused it)."""
    import shutil

    import pytest

    import embedscope.models as models
    from embedscope.errors import EmbedscopeError
    from embedscope.fileio import sha256_file
    from embedscope.study.run import embed_cached

    cache = tmp_path / "cache"
    new = save_digits_checkpoint(tmp_path / "new.pt", embed_dim=4, seed=5)
    es, info = embed_cached(new, cache_dir=cache)  # the new file's embedding, cached
    assert es.embeddings.shape[1] == 4 and not info["cached"]
    ck = save_digits_checkpoint(tmp_path / "ck.pt", embed_dim=8, seed=6)
    real = models.load_checkpoint

    def written_over_while_read(path, *a, **k):
        model, config, inf = real(path, *a, **k)  # the old bytes read ...
        shutil.copyfile(new, path)  # ... written over before they were hashed
        return model, config, {**inf, "sha256": sha256_file(path)}

    monkeypatch.setattr(models, "load_checkpoint", written_over_while_read)
    with pytest.raises(EmbedscopeError, match="changed while it was read"):
        embed_cached(ck, cache_dir=cache)


def test_warnings_caught_inside_another_catch_leave_the_outer_one_catching():
    """A task's catch inside another (measure_entry called by code that catches too): after the inner one,
    the outer one catches again (was: nothing caught, the warning shown from the worker)."""
    from embedscope.errors import EmbedscopeWarning
    from embedscope.study.run import _catch_warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        shown = []
        warnings.showwarning = lambda m, c, *a, **k: shown.append(str(m))
        with _catch_warnings() as outer:
            with _catch_warnings() as inner:
                warnings.warn(EmbedscopeWarning("inner"), stacklevel=1)
            warnings.warn(EmbedscopeWarning("outer"), stacklevel=1)
    assert [w[2] for w in inner] == ["inner"] and [w[2] for w in outer] == ["outer"] and shown == []
