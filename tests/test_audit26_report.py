"""Audit 26 (helper R): the study report, `info`, `spectrum` and the notebooks read as a demanding DML
researcher reads them: provenance complete and true, numbers quoted in the notebooks equal to the
run they quote (recomputed here by brute force from its runs.csv)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from cli_run import cli_output

html5lib = pytest.importorskip("html5lib")

ROOT = Path(__file__).resolve().parent.parent


def _settings(text: str) -> dict[str, str]:
    """The rows of the report's settings table, read with a strict HTML5 parser."""
    parser = html5lib.HTMLParser(strict=True)
    parser.parse(text)
    assert not parser.errors
    doc = html5lib.parse(text, namespaceHTMLElements=False)
    for t in doc.iter("table"):
        head = ["".join(c.itertext()) for c in t.find("thead").iter("th")]
        if head == ["setting", "value"]:
            rows = t.find("tbody").findall("tr")
            return {"".join(r[0].itertext()).strip(): re.sub(r"\s+", " ", "".join(r[1].itertext())).strip()
                    for r in rows}
    raise AssertionError("no settings table")


# ------------------------------------------------------------------------------------------- report
def test_settings_that_follow_the_loss_are_not_called_shared(tmp_path):
    """A digits train-grid of margin and multisimilarity: margin mines with the distance-weighted
    miner and ranks by Euclidean distance, multisimilarity mines its own pairs (no miner) on cosine.
    The page said 'training settings, the same in every run: ... miner distance ...' (the empty
    miner cells were skipped) and named the loss distance nowhere (it differs, but is no axis: the
    loss fixes it). Now the shared settings hold neither, and a row says which value goes with which
    objective."""
    from embedscope.study.report import build_report
    from embedscope.study.run import finish_study

    rng = np.random.default_rng(0)
    rows = []
    for loss, miner, dist in (("margin", "distance", "euclidean"), ("multisimilarity", "", "cosine"),
                              ("triplet", "distance", "euclidean")):
        for s in (0, 1):
            rows.append({"id": f"{loss}_s{s}", "run": f"{loss}_s{s}", "selection": "best", "status": "ok",
                         "loss": loss, "miner": miner, "distance": dist, "sampler": "spc-8", "seed": s,
                         "normalize": True, "untrained": "", "epoch": 2, "dataset": "digits", "arch": "digits_cnn",
                         "embed_dim": 16, "checkpoint": f"/c/{loss}_s{s}.pt", "sha256": "ab" * 32,
                         "N_train": 901, "N_test": 896,
                         **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "rho", "pi_ratio", "MAP@R")}})
    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, n_boot=20, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/", "epoch": "best", "metric": "cosine",
                                                           "seed": 1, "device": "cpu"}, "versions": {}}))
    s = _settings(build_report(d))
    shared = s["training settings, the same in every run"]
    assert "miner" not in shared and "distance" not in shared
    assert "arch digits_cnn" in shared and "sampler spc-8" in shared
    follow = s["training settings that go with the objective (fixed by the axes; –: none)"]
    assert "miner: distance (margin, triplet), – (multisimilarity)" in follow
    assert "distance: cosine (multisimilarity), euclidean (margin, triplet)" in follow


def test_settings_the_same_in_every_run_have_no_extra_row(tmp_path):
    """Where every non-axis setting is shared, no 'go with the objective' row is shown (it would be empty)."""
    from embedscope.study.report import build_report
    from embedscope.study.run import finish_study

    rng = np.random.default_rng(1)
    rows = [{"id": f"{loss}_s{s}", "run": f"{loss}_s{s}", "selection": "best", "status": "ok", "loss": loss,
             "miner": "distance", "seed": s, "normalize": True, "untrained": "", "epoch": 2, "dataset": "digits",
             "checkpoint": f"/c/{loss}_s{s}.pt", "sha256": "cd" * 32,
             **{m: float(rng.uniform(0.2, 0.9)) for m in ("R@1", "rho")}}
            for loss in ("margin", "triplet", "contrastive") for s in (0, 1)]
    d = tmp_path / "study"
    d.mkdir()
    finish_study(d, rows, n_boot=20, seed=1, figures=False)
    (d / "study.json").write_text(json.dumps({"settings": {"source": "runs/", "epoch": "best"}}))
    s = _settings(build_report(d))
    assert "miner distance" in s["training settings, the same in every run"]
    assert not [k for k in s if "go with the objective" in k]


# ------------------------------------------------------------------------------------------- info
def test_info_shows_where_and_how_the_rows_were_embedded(tmp_path):
    """docs/store.md: the device, the precision, torch's thread count and version decide the last bits
    of a file's rows (two files of one checkpoint differ by ~1e-7 between 1 and 2 threads). `info`
    ('N, D, ... and provenance') printed none of them, nor the run's seed or p_switch."""
    import h5py
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(3)
    cfg = {**default_config("digits_cnn", embed_dim=8), "loss": "margin", "p_switch": 0.3, "seed": 3}
    ck = tmp_path / "net.pt"
    save_checkpoint(ck, build_model(cfg), cfg)
    out = tmp_path / "e.h5"
    cli_output(["embed", str(ck), "--dataset", "digits", "-o", str(out), "--no-progress"])
    with h5py.File(out, "r") as f:
        attrs = {k: f.attrs[k] for k in ("device", "precision", "torch_threads", "torch_version", "checkpoint_format")}
        cfg = json.loads(f.attrs["checkpoint_config"])
    text = cli_output(["info", str(out)])
    rows = {ln.split("  ")[0]: ln.split("  ", 1)[1].strip() for ln in text.splitlines()[2:]}
    for k, v in attrs.items():
        assert rows[k] == str(v), k
    assert rows["device"] == "cpu" and rows["precision"] == "float32"
    assert cfg["seed"] == 3 and "seed=3" in rows["model"] and "p_switch=0.3" in rows["model"]


# ------------------------------------------------------------------------------------------- notebooks
FULL_RUN = ROOT / "notebook-output" / "01_correlation_figures" / "study"


@pytest.mark.skipif(not (FULL_RUN / "runs.csv").exists(),
                    reason="no full-settings run of notebook 01 (make notebooks) to compare its quotes with")
def test_notebook01_quotes_the_fig4_entries_of_its_full_run():
    """Notebook 01's reading and its check table quoted R@1–mAP@C = 0.92 for its full-settings run
    (notebook-output/); that run's Pearson r over the 11 objectives is 0.9146, i.e. 0.91. Each Fig.-4
    entry quoted is recomputed here: objective means of the best-epoch rows, np.corrcoef."""
    import nbformat
    import pandas as pd

    runs = pd.read_csv(FULL_RUN / "runs.csv")
    best = runs[(runs["selection"] == "best") & (runs["status"] == "ok") & ~runs["excluded"].astype(bool)]
    means = best.groupby("objective")[["R@1", "NMI", "mAP@C", "F1"]].mean()
    assert len(means) >= 3
    book = nbformat.read(ROOT / "notebooks" / "01_correlation_figures.ipynb", as_version=4)
    text = "\n".join(c.source for c in book.cells)
    for a, b, md in (("R@1", "NMI", "R@1–NMI"), ("R@1", "mAP@C", "R@1–mAP@C"), ("NMI", "F1", "NMI–F1")):
        r = float(np.corrcoef(means[a], means[b])[0, 1])
        quoted_md = re.findall(rf"{re.escape(md)} (\d\.\d\d)", text)
        quoted_check = re.findall(rf'"Fig\. 4: r\({re.escape(a)}, {re.escape(b)}\)", (-?\d\.\d+)', text)
        assert quoted_md and quoted_check, md
        assert {float(q) for q in quoted_md + quoted_check} == {round(r, 2)}, (md, r, quoted_md, quoted_check)


@pytest.mark.skipif(not (FULL_RUN / "runs.csv").exists(),
                    reason="no full-settings run of notebook 01 (make notebooks) to compare its quotes with")
def test_notebook01_check_table_quotes_its_full_run_to_two_decimals():
    """The other quotes of the check table that need no bootstrap, recomputed from the full run's runs.csv:
    Pearson r over objective means (and over runs) of the best-epoch rows, the six objectives of best R@1,
    the untrained networks' test R@1."""
    import nbformat
    import pandas as pd

    runs = pd.read_csv(FULL_RUN / "runs.csv")
    ok = runs[(runs["status"] == "ok") & ~runs["excluded"].astype(bool)]
    best = ok[ok["selection"] == "best"]
    means = best.groupby("objective")[["R@1", "rho", "pi_ratio", "pi_intra", "pi_inter", "effective_rank"]].mean()
    top6 = means.sort_values("R@1", ascending=False).head(6)
    unt = ok[ok["selection"] == "untrained"].groupby("seed")["R@1"].first()
    brute = {"r(rho), objectives": np.corrcoef(means["rho"], means["R@1"])[0, 1],
             "r(rho), runs": np.corrcoef(best["rho"], best["R@1"])[0, 1],
             "r(rho), the six objectives of best R@1": np.corrcoef(top6["rho"], top6["R@1"])[0, 1],
             "r(RankMe), objectives": np.corrcoef(means["effective_rank"], means["R@1"])[0, 1],
             "r(RankMe), runs": np.corrcoef(best["effective_rank"], best["R@1"])[0, 1],
             "untrained test R@1, lowest seed": unt.min(), "untrained test R@1, highest seed": unt.max(),
             **{f"r({m}), objectives": np.corrcoef(means[m], means["R@1"])[0, 1]
                for m in ("pi_ratio", "pi_intra", "pi_inter")}}
    book = nbformat.read(ROOT / "notebooks" / "01_correlation_figures.ipynb", as_version=4)
    text = "\n".join(c.source for c in book.cells if c.cell_type == "code")
    for label, value in brute.items():
        quoted = re.findall(rf'\("{re.escape(label)}", (-?\d+\.\d+),', text)
        assert len(quoted) == 1, label
        digits = len(quoted[0].split(".")[1])
        assert float(quoted[0]) == round(float(value), digits), (label, value, quoted[0])


def _boot_pearson(x: np.ndarray, y: np.ndarray, n_boot: int = 2000, seed: int = 1234) -> tuple[float, float]:
    """docs/studies.md's bootstrap, written out: default_rng(seed).integers(0, n, (B, n)), Pearson r of each
    resample that has two values on both sides, the 2.5 / 97.5 percentiles."""
    n = len(x)
    idx = np.random.default_rng(seed).integers(0, n, (n_boot, n))
    vals = [np.corrcoef(x[i], y[i])[0, 1] for i in idx if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0]
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


@pytest.mark.skipif(not (FULL_RUN / "runs.csv").exists(),
                    reason="no full-settings run of notebook 01 (make notebooks) to compare its quotes with")
def test_notebook01_fig5_table_and_docs_quote_their_full_run():
    """The Fig.-5 table of notebook 01's reading (and docs/studies.md) quoted r(ρ) over the 33 runs as
    −0.47 (it is −0.4649), π_ratio's interval over runs from −0.16 (−0.1546) and π_intra's to +0.63
    (+0.6249): numbers rounded twice (−0.465 → −0.47). Every r and interval of the table is recomputed
    here from runs.csv (objective means in sorted order, runs in id order; 2,000 resamples, seed 1234,
    the notebook's), and Kendall τ over objectives with scipy."""
    import nbformat
    import pandas as pd
    from scipy.stats import kendalltau

    runs = pd.read_csv(FULL_RUN / "runs.csv")
    best = runs[(runs["selection"] == "best") & (runs["status"] == "ok") & ~runs["excluded"].astype(bool)]
    best = best.sort_values("id")
    book = nbformat.read(ROOT / "notebooks" / "01_correlation_figures.ipynb", as_version=4)
    md = "\n".join(c.source for c in book.cells if c.cell_type == "markdown")
    num = r"([+−-]\d\.\d\d)"
    names = {"ρ": "rho", "π_ratio": "pi_ratio", "π_intra": "pi_intra", "π_inter": "pi_inter"}
    seen = 0
    for label, m in names.items():
        row = re.search(rf"^\| {re.escape(label)} \| (.*)$", md, re.M)
        assert row, label
        q = [float(v.replace("−", "-")) for v in re.findall(num, row.group(1))]
        g = best.groupby("objective")[[m, "R@1"]].mean().sort_index()
        xo, yo = g[m].to_numpy(), g["R@1"].to_numpy()
        xr, yr = best[m].to_numpy(), best["R@1"].to_numpy()
        want = [np.corrcoef(xo, yo)[0, 1], *_boot_pearson(xo, yo)]
        if m == "rho":
            want.append(kendalltau(xo, yo).statistic)
        want += [np.corrcoef(xr, yr)[0, 1], *_boot_pearson(xr, yr)]
        assert q[:len(want)] == [round(float(w), 2) for w in want], (label, q, [round(float(w), 4) for w in want])
        seen += 1
    assert seen == 4
    docs = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    xr, yr = best["rho"].to_numpy(), best["R@1"].to_numpy()
    r, (lo, hi) = np.corrcoef(xr, yr)[0, 1], _boot_pearson(xr, yr)
    quoted = f"({r:+.2f} [{lo:+.2f}, {hi:+.2f}] over the 33 runs)".replace("-", "−")
    assert quoted in docs, quoted


def test_quickstart_reads_the_checkouts_demo_output_before_a_folder_above(tmp_path, monkeypatch):
    """The quickstart searched the working folder and every folder above it before the checkout: run
    from /tmp/<anything>/, it read another user's /tmp/demo-output/digits.h5 (found so on the audit
    machine) instead of the checkout's own `make demo` files. The cell's demo_file() is run here with
    a checkout and a foreign demo-output/ above the working folder."""
    import types

    import nbformat

    book = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    src = next(c.source for c in book.cells if c.cell_type == "code" and "def demo_file" in c.source)
    fn = src[src.index("def demo_file"):]
    fn = fn[:fn.index("\n\n\n")] if "\n\n\n" in fn else fn
    repo, foreign = tmp_path / "checkout", tmp_path / "shared"
    for base in (repo, foreign):
        (base / "demo-output").mkdir(parents=True)
        (base / "demo-output" / "digits.h5").write_bytes(b"x")
    (repo / "embedscope").mkdir()
    work = foreign / "work" / "nb"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    ns = {"Path": Path, "embedscope": types.SimpleNamespace(__file__=str(repo / "embedscope" / "__init__.py"))}
    exec(compile(fn, "quickstart", "exec"), ns)
    assert ns["demo_file"]("digits.h5") == repo / "demo-output" / "digits.h5"
    (repo / "demo-output" / "digits.h5").unlink()  # not in the checkout (an installed package): the folders above
    assert ns["demo_file"]("digits.h5") == foreign / "demo-output" / "digits.h5"


# ------------------------------------------------------------------------------------------- spectrum
def test_spectrum_figure_says_the_class_spectra_are_centred(tmp_path, monkeypatch):
    """`spectrum --by-class --center -o fig.png` drew the centred class-conditioned spectra under the
    same panel title as the uncentred ones ('Per class (mean ± s.d. over classes)'): the figure alone
    could not say which it shows (the JSON records center, the PNG did not)."""
    import embedscope.viz.spectrum as vs
    from embedscope import store

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 30)
    X = rng.normal(size=(4, 8))[y] + 0.3 * rng.normal(size=(120, 8))
    es = store.EmbeddingSet(X.astype(np.float32), y, [f"i{i}" for i in range(120)], np.array(["train"] * 120),
                            [str(c) for c in range(4)])
    f = store.save(tmp_path / "e.h5", es)
    titles = []
    real = vs.plot_spectra

    def spy(*a, **k):
        fig = real(*a, **k)
        titles.append(fig.axes[1].get_title())
        return fig

    monkeypatch.setattr(vs, "plot_spectra", spy)
    for extra, name in (([], "plain"), (["--center"], "centred")):
        cli_output(["spectrum", str(f), "--by-class", *extra, "-o", str(tmp_path / f"{name}.png"), "--no-progress"])
        assert (tmp_path / f"{name}.png").exists()
    assert titles == ["Per class (mean ± s.d. over classes)", "Per class, centred (mean ± s.d. over classes)"]


def test_spectrum_index_axis_has_whole_number_ticks(tmp_path):
    """k is the index of a singular value: the spectrum of a D = 16 digits model with --n-components 8
    --exclude-top 2 was saved with ticks at k = 2.5, 7.5, 12.5 (matplotlib's default locator, once the
    legend moved beside the panel). Every tick inside the axes is now a whole number, on both panels,
    for the sizes a user draws (D = 2 ... 128)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.spectrum import plot_spectra

    rng = np.random.default_rng(0)
    for D in (2, 7, 16, 128):
        entries = []
        for i in range(5 if D % 2 else 2):  # 5 curves: the legends beside the panels (a wider figure)
            s = np.sort(rng.uniform(0.1, 20, D))[::-1]
            m = s[:35] / s[:35].sum()
            entries.append({"label": f"model {i} " + "x" * (3 * i), "spectrum": s, "rho": 0.3,
                            "class_mean": m, "class_std": 0.1 * m})
        fig = plot_spectra(entries, exclude_top=min(2, D - 1), n_components=max(1, D // 2), by_class=True,
                           title="t")
        fig.savefig(tmp_path / f"s{D}.png", dpi=100)  # the ticks as saved (the layout runs again)
        for ax in fig.axes:
            lo, hi = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
            assert ticks and all(float(t).is_integer() for t in ticks), (D, ticks)
        plt.close(fig)


def test_notebook03_quotes_the_untrained_pair_of_the_images_it_picks(tmp_path):
    """Notebook 03's reading quoted the two untrained networks' agreement as r = 0.769 (JSD 0.099): a run
    of 2026-11-28, before `select_images` took the first n of one seeded permutation (commit 18c9435):
    the 300 test images it picks now give 0.763 (0.101). The untrained networks need no training, so
    the number is recomputed here as the notebook computes it (its images, l = 50, σ = 0.15, seed 0),
    the Fisher-z mean of the per-image Pearson r and the mean JSD written out in numpy."""
    import nbformat
    import torch

    from embedscope.data import get_dataset
    from embedscope.models import default_config
    from embedscope.saliency import load_maps, saliency_to_file
    from embedscope.saliency.run import select_images
    from embedscope.study.plan import build_untrained

    book = nbformat.read(ROOT / "notebooks" / "03_saliency.ipynb", as_version=4)
    text = "\n".join(c.source for c in book.cells)
    assert 'EPOCHS, D, N_IMAGES = 10, 32, 300' in text and "N_SAMPLES, NOISE = 50, 0.15" in text
    quoted = re.search(r"\*\*Two untrained networks agree most\*\* \(r = (\d\.\d+), JSD (\d\.\d+)\)", text)
    assert quoted
    test_set = get_dataset("digits").subset("test")
    images = tmp_path / "images.txt"
    images.write_text("\n".join(test_set.paths[select_images(test_set, n_images=300, seed=0)]) + "\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the notebook
    try:
        maps = []
        for seed in (0, 1):
            cfg = {**default_config("digits_cnn", embed_dim=32), "dataset": "digits", "loss": "margin", "seed": seed}
            ck = build_untrained(cfg, tmp_path / f"untrained_s{seed}.pt")
            saliency_to_file(ck, "digits", tmp_path / f"m{seed}.h5", paths_file=images, n_samples=50, noise=0.15,
                             seed=0, force=True, progress=False)
            m = load_maps(tmp_path / f"m{seed}.h5")
            maps.append((list(m.paths), m.maps.astype(np.float64).reshape(len(m.maps), -1)))
    finally:
        torch.set_num_threads(threads)
    (pa, a), (pb, b) = maps
    assert pa == pb and len(pa) == 300
    r = np.array([np.corrcoef(x, y)[0, 1] for x, y in zip(a, b)])
    p, q = a / a.sum(1, keepdims=True), b / b.sum(1, keepdims=True)
    mid = (p + q) / 2

    def kl(u, v):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(u > 0, u * np.log2(u / v), 0.0).sum(1)

    jsd = (kl(p, mid) + kl(q, mid)) / 2
    assert float(quoted.group(1)) == round(float(np.tanh(np.arctanh(r).mean())), 3)
    assert float(quoted.group(2)) == round(float(jsd.mean()), 3)


def test_rows_record_the_device_they_were_embedded_on_and_the_report_shows_it(tmp_path):
    """runs.csv's embed_device (the device kind of the cache key) per row, and the report's device line
    counts them; study.json's versions name the libraries of the outputs (scikit-learn's digits)."""
    import csv
    import json

    from embedscope.cli import main
    from embedscope.study.report import _devices

    ck = tmp_path / "m.pt"
    assert main(["train", "--dataset", "digits", "--epochs", "1", "--embed-dim", "8", "--seed", "0",
                 "-o", str(ck), "--no-progress"]) == 0
    out = tmp_path / "study"
    assert main(["study", str(ck), "-o", str(out), "--workers", "0", "--measures", "R@1", "rho",
                 "--bootstrap", "0", "--no-figures", "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    with open(out / "runs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["embed_device"] == "cpu" for r in rows if r["status"] == "ok")
    versions = json.loads((out / "study.json").read_text())["versions"]
    assert {"scikit-learn", "matplotlib", "pandas", "pyarrow"} <= set(versions)
    n = sum(r["status"] == "ok" for r in rows)
    assert _devices("auto", [r for r in rows if r["status"] == "ok"]) == f"auto; embedded on cpu ({n} row{'' if n == 1 else 's'})"
    assert _devices("auto", [{"embed_device": ""}]) == "auto"  # rows of an older version
    assert _devices("auto", [{"embed_device": "cpu"}, {"embed_device": "cuda/float32"}, {"embed_device": "cpu"}]) == \
        "auto; embedded on cpu (2 rows), cuda/float32 (1 row)"
