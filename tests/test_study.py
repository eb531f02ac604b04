"""embedscope study / report on tiny digits models: a two-checkpoint study checked against direct
computation, the embedding cache, a killed-and-resumed study, a broken checkpoint, a YAML list on a
real 2-worker Dask cluster equal to the serial result, and the HTML report parsed by html5lib."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from embedscope.cli import main
from embedscope.study.run import run_study

MEASURED = ["R@1", "MAP@R", "NMI", "rho", "pi_ratio", "pi_intra", "pi_inter"]
FAST = {"measures": MEASURED, "figures": False}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    from embedscope.train.grid import train_grid

    d = tmp_path_factory.mktemp("grid")
    train_grid("digits", ["contrastive", "softmax"], [0.0], [0], d / "runs",
               options={"embed_dim": 8, "epochs": 1, "eval_every": 1}, progress=False, echo=lambda s: None)
    return d / "runs"


@pytest.fixture(scope="module")
def first(grid, emb_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("s") / "study"
    res = run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=lambda s: None)
    return out, res


def _r1(X, y):
    """Leave-one-out cosine 1-NN hit rate (docs/methods.md §1), brute force."""
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = U @ U.T
    np.fill_diagonal(S, -np.inf)
    return float((y[np.argmax(S, 1)] == y).mean())


def _rho(X):
    """KL(uniform || s / sum s) of the singular values without the largest (docs/methods.md §2)."""
    s = np.linalg.svd(X.astype(np.float64), compute_uv=False)[1:]
    p = s / s.sum()
    return float(np.mean(np.log((1 / len(s)) / p)))


def test_two_checkpoint_study_matches_direct_computation(first, grid):
    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint

    out, res = first
    df = pd.read_csv(out / "runs.csv")
    assert (df["status"] == "ok").all() and not res["errors"]
    assert sorted(df["selection"]) == ["best", "best", "final", "final", "untrained"]
    assert set(df[df.selection == "best"]["loss"]) == {"contrastive", "softmax"}
    pq = pd.read_parquet(out / "runs.parquet")
    assert list(pq["id"]) == list(df["id"]) and np.allclose(pq["R@1"], df["R@1"])
    ds = get_dataset("digits")
    for _, r in df[df.selection.isin(["best", "untrained"])].head(2).iterrows():
        model, cfg, _ = load_checkpoint(r["checkpoint"])
        X = embed_images(model, ds, progress=False)
        te, tr = ds.split == "test", ds.split == "train"
        assert r["R@1"] == pytest.approx(_r1(X[te], ds.labels[te]), abs=1e-12)
        assert r["rho"] == pytest.approx(_rho(X[tr]), rel=1e-6)
        assert r["normalize"] == cfg["normalize"]
    # the untrained row is the trainer's initialisation: its R@1 is the log's epoch-0 value
    grid_csv = pd.read_csv(grid / "grid.csv")
    u = df[df.selection == "untrained"].iloc[0]
    assert u["R@1"] == pytest.approx(grid_csv["untrained_R@1"].iloc[0], abs=1e-12)
    assert set(df[df.selection != "untrained"]["untrained"]) == {u["id"]}
    assert df["beats_untrained"].notna().sum() == 4
    corr = pd.read_csv(out / "correlations.csv")
    assert {"pearson", "pearson_lo", "pearson_hi", "spearman", "kendall", "granulated_tau"} <= set(corr.columns)
    assert (out / "figures" / "fig5_structure_vs_target.png").exists()
    assert (out / "figures" / "fig5_structure_vs_target.pdf").exists()


def test_cache_is_reused_across_studies_and_report_is_valid_html(first, grid, emb_cache, tmp_path):
    import html5lib

    out, _ = first
    res = run_study(grid, tmp_path / "again", workers=0, cache_dir=emb_cache, n_boot=50, echo=lambda s: None,
                    measures=MEASURED, figures=False)
    assert all(r["cached"] for r in res["computed"])
    a = pd.read_csv(out / "runs.csv").set_index("id")
    b = pd.read_csv(tmp_path / "again" / "runs.csv").set_index("id")
    assert np.array_equal(a.loc[b.index, MEASURED].to_numpy(), b[MEASURED].to_numpy())
    page = tmp_path / "r.html"
    assert main(["report", str(out), "-o", str(page)]) == 0
    assert main(["report", str(out), "-o", str(page)]) == 1  # no silent overwrite
    text = page.read_text()
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)  # raises on a parse error
    assert not parser.errors
    assert "data:image/png;base64," in text
    assert "http://" not in text and "https://" not in text  # nothing fetched from outside
    assert "-0.80" in text and "Published values" in text and "untrained" in text


def test_killed_study_resumes_without_recomputing(first, grid, emb_cache, tmp_path):
    out = tmp_path / "killed"
    seen = []

    def stop(row):
        seen.append(row["id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=lambda s: None, on_row=stop, **FAST)
    assert not (out / "runs.csv").exists() and len(list((out / "rows").glob("*.json"))) == 2
    said = []
    res = run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=said.append, **FAST)
    assert sorted(r["id"] for r in res["computed"]) == sorted(set(r["id"] for r in res["rows"]) - set(seen))
    # the finish (statistics, tables) is a phase of its own: one line before it, not silence
    assert said[-1] == f"study: statistics (50 bootstrap resamples), tables of {len(res['rows'])} rows", said
    a = pd.read_csv(first[0] / "runs.csv").set_index("id")
    b = pd.read_csv(out / "runs.csv").set_index("id")
    assert np.array_equal(a.loc[b.index, MEASURED].to_numpy(), b[MEASURED].to_numpy())
    # a finished study is not recomputed; other settings into the same folder are refused
    said = []
    assert run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=said.append, **FAST)["computed"] == []
    assert "study: every row finished earlier and the statistics are up to date" in said
    # statistics written by another embedscope version are computed again (from the finished rows)
    meta = json.loads((out / "study.json").read_text())
    meta["versions"]["embedscope"] = "0.0.older"
    (out / "study.json").write_text(json.dumps(meta))
    said.clear()
    assert run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=said.append, **FAST)["computed"] == []
    assert not any("up to date" in s for s in said)
    assert json.loads((out / "study.json").read_text())["versions"]["embedscope"] != "0.0.older"
    # ... and so are those made by other statistics or figure code (same version, a local change)
    meta = json.loads((out / "study.json").read_text())
    assert len(meta["stats_code"]) == 16
    meta["stats_code"] = "0" * 16
    (out / "study.json").write_text(json.dumps(meta))
    said.clear()
    assert run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=said.append, **FAST)["computed"] == []
    assert not any("up to date" in s for s in said)
    said.clear()
    assert run_study(grid, out, workers=0, cache_dir=emb_cache, n_boot=50, echo=said.append, **FAST)["computed"] == []
    assert "study: every row finished earlier and the statistics are up to date" in said
    from embedscope.errors import EmbedscopeError

    with pytest.raises(EmbedscopeError, match="other settings"):
        run_study(grid, out, epoch="last", workers=0, cache_dir=emb_cache, echo=lambda s: None)


def test_broken_checkpoint_reports_its_row_and_exit_code(grid, emb_cache, tmp_path, capsys):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    for f in ("digits_contrastive_p0_s0.pt", "digits_softmax_p0_s0.pt"):
        shutil.copy(grid / f, folder / f)
    (folder / "broken.pt").write_bytes(b"not a checkpoint at all")
    rc = main(["study", str(folder), "-o", str(tmp_path / "st"), "--workers", "0", "--cache-dir", str(emb_cache),
               "--no-progress", "--bootstrap", "20", "--no-figures", "--measures", *MEASURED])
    assert rc == 1
    assert "1 of 4 checkpoints failed" in capsys.readouterr().err
    df = pd.read_csv(tmp_path / "st" / "runs.csv").set_index("id")
    assert df.loc["broken_given", "status"] == "error" and "broken.pt" in df.loc["broken_given", "error"]
    assert (df.drop(index="broken_given")["status"] == "ok").all()
    # the integer columns stay integers beside the failed row's gaps (they read 128.0 before)
    import csv

    with open(tmp_path / "st" / "runs.csv", newline="") as f:
        text = {r["id"]: r for r in csv.DictReader(f)}
    ok = [r for k, r in text.items() if k != "broken_given"]
    assert all(r["embed_dim"] == "8" and r["N_test"].isdigit() and "." not in r["seed"] for r in ok)
    assert text["broken_given"]["embed_dim"] == ""
    pq = pd.read_parquet(tmp_path / "st" / "runs.parquet")
    assert str(pq["embed_dim"].dtype) == "Int64" and str(pq["N_test"].dtype) == "Int64"


def _blas_threads():
    from threadpoolctl import threadpool_info

    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_yaml_list_on_two_dask_workers_equals_serial(grid, tmp_path, processes):
    """A real local Dask cluster of 2 workers: worker threads in this process (the default) or worker
    processes; rows, embeddings and figures equal the serial study's, and a threads cluster leaves this
    process's BLAS and torch thread counts as they were."""
    import torch

    y = tmp_path / "list.yaml"
    y.write_text("checkpoints:\n"
                 f"  - path: {grid / 'digits_contrastive_p0_s0.pt'}\n    tags: {{family: pairs}}\n"
                 f"  - path: {grid / 'digits_softmax_p0_s0.pt'}\n    family: classes\n")
    kw = {"measures": MEASURED, "epoch": "last", "n_boot": 20, "echo": lambda s: None}
    ser = run_study(y, tmp_path / "serial", workers=0, cache_dir=tmp_path / "c1", **kw)
    from threadpoolctl import threadpool_limits

    # BLAS on two threads, whatever the environment started it with (one under xdist, tests/conftest.py):
    # a count the study leaves at one shows
    with threadpool_limits(limits=2, user_api="blas"):
        blas, threads = _blas_threads(), torch.get_num_threads()
        assert set(blas.values()) == {2}, blas
        par = run_study(y, tmp_path / "dask", workers=2, worker_processes=processes, cache_dir=tmp_path / "c2", **kw)
        after = _blas_threads()  # (a BLAS first loaded by the study, e.g. faiss's own, is new: compare the others)
    assert {k: after[k] for k in blas} == blas and torch.get_num_threads() == threads
    assert not ser["errors"] and not par["errors"]
    assert not any(r["cached"] for r in par["computed"])  # really measured by the workers
    a = pd.read_csv(tmp_path / "serial" / "runs.csv").set_index("id").sort_index()
    b = pd.read_csv(tmp_path / "dask" / "runs.csv").set_index("id").sort_index()
    assert list(a.index) == list(b.index) and len(a) == 3
    assert np.array_equal(a[MEASURED].to_numpy(), b[MEASURED].to_numpy())
    assert set(a["tag:family"].dropna()) == {"pairs", "classes"}
    # the embeddings themselves are equal to the last bit (one torch thread in every worker)
    from embedscope import store

    par_rows = {r["id"]: r for r in par["rows"]}
    for r in ser["rows"]:  # (each study built its own untrained network: same weights, other file bytes)
        e1 = store.load(tmp_path / "c1" / _cache_name(tmp_path / "c1", r))
        e2 = store.load(tmp_path / "c2" / _cache_name(tmp_path / "c2", par_rows[r["id"]]))
        assert np.array_equal(e1.embeddings, e2.embeddings)
    # drawn by a forked child and this process (serial, threads) or by the worker processes: the same pictures
    for name in ("fig5_structure_vs_target", "fig4_metric_correlations", "ranking_by_tau"):
        assert (tmp_path / "dask" / "figures" / f"{name}.pdf").exists()
        assert (tmp_path / "serial" / "figures" / f"{name}.png").read_bytes() == \
            (tmp_path / "dask" / "figures" / f"{name}.png").read_bytes()


def test_figures_without_a_forked_child_are_the_same(first, tmp_path, monkeypatch):
    """The serial study drew Fig. 5 in a forked child; where fork is unavailable, or the child fails,
    this process draws every figure itself: the same files."""
    import embedscope.study.run as run

    out, res = first
    monkeypatch.setattr(run, "_draw_in_child", _fail)
    failed = run._start_figures(res["stats"], tmp_path / "failed")()
    monkeypatch.setattr(run, "_can_fork", lambda: False)
    here = run._start_figures(res["stats"], tmp_path / "here")()
    assert list(here) == ["fig5_structure_vs_target", "fig4_metric_correlations", "ranking_by_tau"]
    for name, png in here.items():
        ref = (out / "figures" / f"{name}.png").read_bytes()
        assert png.read_bytes() == ref and failed[name].read_bytes() == ref
        assert png.with_suffix(".pdf").exists() and failed[name].with_suffix(".pdf").exists()


def _fail(*args):
    raise SystemExit(3)


def _cache_name(emb_cache, row):
    """The embedding cache file of a study row (the one file whose provenance names its checkpoint)."""
    from embedscope import store

    for f in sorted(emb_cache.glob("*.h5")):
        if store.load(f).attrs.get("checkpoint_sha256") == row["sha256"]:
            return f.name
    raise AssertionError(f"no cached embedding of {row['id']}")


def test_study_embeds_like_embed_images(grid):
    """The study decodes the images once and embeds with one torch thread: the same numbers as
    embed_images with one thread."""
    import torch

    from embedscope.data import get_dataset
    from embedscope.embed import embed_images
    from embedscope.models import load_checkpoint
    from embedscope.study.run import _input_tensor, _one_cpu_thread

    model, _, _ = load_checkpoint(grid / "digits_contrastive_p0_s0.pt")
    before = torch.get_num_threads()
    with _one_cpu_thread():
        assert torch.get_num_threads() == 1
        ref = embed_images(model, get_dataset("digits"), progress=False, batch_size=256)
        got = embed_images(model, get_dataset("digits"), progress=False, batch_size=256,
                           inputs=_input_tensor("digits", None, None, 8))
    assert torch.get_num_threads() == before
    assert got.dtype == np.float32 and np.array_equal(got, ref)


def test_default_workers_follow_the_cpu_affinity(monkeypatch):
    """One local worker per CPU this process may run on (a container's CPU set), not per CPU of
    the machine; --workers 0 is serial."""
    import os

    from embedscope.study.run import _ClusterBox

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    box = _ClusterBox(None, None)
    assert box.n == 1 and not box.serial and box.threads
    assert _ClusterBox(0, None).serial
    assert _ClusterBox(3, None).n == 3


def test_an_exclude_column_no_row_will_have_is_refused_before_any_work(grid, emb_cache, tmp_path, monkeypatch):
    """A misspelt --exclude column was refused only after every checkpoint was embedded and measured;
    it is now refused once the plan is known, before any row, and leaves no study folder behind."""
    from embedscope.errors import UsageError
    from embedscope.study import run as study_run

    def no_rows(*a, **k):
        raise AssertionError("a row was measured")

    monkeypatch.setattr(study_run, "measure_entry", no_rows)
    out = tmp_path / "s"
    with pytest.raises(UsageError, match="no such column 'losss'"):
        run_study(grid, out, workers=0, cache_dir=emb_cache, exclude=["losss==softmax"], echo=lambda s: None, **FAST)
    assert not out.exists()
    # a tag, a config column and a measure are known
    from embedscope.study.stats import check_exclude_columns

    check_exclude_columns(["loss==softmax", "group==b", "R@1<0.5", "embed_seconds>9"], {"group"},
                          {"R@1"}, ("NR-Prec:",))
    with pytest.raises(UsageError, match="no such column .nosuch."):
        check_exclude_columns(["nosuch>0"], {"group"}, {"R@1"})


def test_an_exclude_comparison_of_a_text_column_is_refused():
    import pandas as pd

    from embedscope.errors import UsageError
    from embedscope.study.stats import _exclude_mask

    df = pd.DataFrame({"loss": ["margin", "softmax"], "p_switch": [0.0, 0.3]})
    with pytest.raises(UsageError, match="the column 'loss' holds text, not numbers: compare it with == or !="):
        _exclude_mask(df, ["loss>1"])
    assert _exclude_mask(df, ["p_switch>0"]).tolist() == [False, True]


def test_every_column_a_study_writes_can_be_named_by_exclude(first):
    """check_exclude_columns refuses, before any work, a column no row will have; it knows the rows'
    columns from ROW_COLUMNS, the config columns, the tags and the measures. Every column of a real
    runs.csv is among them (a column added to the rows must be added there too)."""
    from embedscope.study.plan import CONFIG_COLUMNS
    from embedscope.study.stats import ROW_COLUMNS, check_exclude_columns

    out, _ = first
    cols = pd.read_csv(out / "runs.csv").columns
    measures = {c for c in cols if c not in ROW_COLUMNS and c not in CONFIG_COLUMNS and not c.startswith("tag:")}
    from embedscope.study.measures import registry

    assert measures <= set(registry()[0])  # everything else is a measure of the registry
    check_exclude_columns([f"{c}==0" for c in cols if "@" not in c and ":" not in c], set(), set(registry()[0]))
