"""Audit 25 (evaluate / neighbours / geometry loose ends).

* A file whose model was trained with another distance than the ranking's (its ``checkpoint_config``)
  and whose rows are not of one norm (an unnormalised model) gets one note from ``evaluate`` and
  ``neighbours``: ranked by cosine (the trainer's log's protocol), ``--metric euclidean`` ranks as
  trained, or no --metric does (dot, snr, a distance embedscope does not know: a note, not a crash).
  Rows of one norm (every model embedscope trains) get none.
* ``evaluate --k 1 2 --include R@1``: the 2 was silently not computed; refused as the other options
  an --include leaves unused.
* ``neighbours``: the height is fitted to square picture slots in two layouts (a loop of up to four
  that rarely met its tolerance), and captions of 20 retrievals with long class names no longer run
  into each other.
* ``geometry`` of a split with rows of all zeros: the spectral measures are reported (checked against
  numpy's SVD here), the cosine ones are '–' with the reason (the whole file was refused); a split of
  one row is named as such.
"""

import json
import re

import numpy as np
import pytest
from cli_run import cli_output, one_error_line, run_cli

from embedscope import store


def _raw_set(config, *, unit=False, n=60, d=8, seed=0, digits_paths=False):
    """Rows of very different norms (an unnormalised model) whose cosine and Euclidean rankings
    differ, with ``config`` as the recorded checkpoint_config."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 6
    X = rng.normal(size=(n, d)) + 1.5 * np.eye(d)[y]
    X *= rng.uniform(0.2, 6.0, size=(n, 1))
    if unit:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    attrs = {"checkpoint_config": config} if config is not None else {}
    paths = [f"digits/{i:04d}" for i in range(n)] if digits_paths else None
    if digits_paths:
        attrs["dataset"] = "digits"
    return store.EmbeddingSet.from_arrays(X.astype(np.float32), y, paths=paths, attrs=attrs)


def _r1_brute(X, y, metric):
    """R@1 of every row against the others (itself excluded), ties to the lower index."""
    X = np.asarray(X, dtype=np.float64)
    if metric == "cosine":
        Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
        score = Xn @ Xn.T
    else:
        score = -((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(score, -np.inf)
    nn = np.argmax(score, axis=1)  # (the first maximum: the lower index)
    return float(np.mean(y[nn] == y))


def _notes(out):
    return [ln for ln in out.splitlines() if ln.startswith("note:")]


def test_evaluate_notes_a_model_trained_with_another_distance(tmp_path):
    es = _raw_set({"loss": "lifted", "normalize": False})  # generalised lifted: raw Euclidean distances
    f = store.save(tmp_path / "lifted.h5", es)
    js = tmp_path / "r.json"
    out = cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--no-progress", "--json", str(js)])
    notes = _notes(out)
    assert len(notes) == 1, out
    assert "trained with the euclidean distance" in notes[0] and "ranked here by cosine" in notes[0]
    assert "--metric euclidean ranks them as the model was trained" in notes[0]
    X = es.embeddings
    cos_r1 = json.loads(js.read_text())["values"]["R@1"]
    assert cos_r1 == pytest.approx(_r1_brute(X, es.labels, "cosine"), abs=1e-12)  # the default stays cosine
    js.unlink()
    out = cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--metric", "euclidean", "--no-progress",
                      "--json", str(js)])
    assert _notes(out) == []  # ranked as trained: nothing to say
    eu_r1 = json.loads(js.read_text())["values"]["R@1"]
    assert eu_r1 == pytest.approx(_r1_brute(X, es.labels, "euclidean"), abs=1e-12)
    assert eu_r1 != cos_r1  # the note is about a real difference on these rows


def test_unit_rows_and_files_without_a_config_get_no_note(tmp_path):
    for name, es in (("unit", _raw_set({"loss": "lifted"}, unit=True)), ("bare", _raw_set(None)),
                     ("untrained", _raw_set({"arch": "digits_cnn", "normalize": False}))):
        f = store.save(tmp_path / f"{name}.h5", es)
        out = cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--no-progress"])
        assert _notes(out) == [], (name, out)


@pytest.mark.parametrize("config, says", [
    ({"loss": "npair", "normalize": False}, "trained with the dot product"),
    ({"loss": "snr", "distance": "snr"}, "trained with the SNR distance"),
    ({"loss": "proxynca", "distance": "sqeuclidean"}, "--metric euclidean ranks them as the model was trained "
                                                       "(the order of the squared Euclidean distance)"),
    ({"loss": "mystery", "distance": "manhattan\x1b[2J"}, "names the distance 'manhattan\\x1b[2J', which embedscope "
                                                          "does not know"),
    ({"loss": "my_own_loss"}, "names the loss 'my_own_loss', which embedscope does not know"),
])
def test_recorded_distances_no_metric_ranks_by_are_a_note_not_a_crash(tmp_path, config, says):
    f = store.save(tmp_path / "m.h5", _raw_set(config))
    out = cli_output(["evaluate", str(f), "--include", "R@1", "P@1", "--k", "1", "--no-progress"])
    notes = _notes(out)
    assert len(notes) == 1 and says in notes[0], out
    if "dot product" in says or "SNR" in says:
        assert "no --metric ranks by" in notes[0] and "cosine and euclidean" in notes[0]
    assert "\x1b" not in out  # a string from the file, escaped


def test_an_snr_model_of_unit_rows_is_noted(tmp_path):
    """SNR, var(b - a) / var(a) over the dimensions, also weighs the rows' means: unit rows are ranked
    otherwise than by cosine (checked here by brute force), so an SNR model is noted whatever its norms."""
    es = _raw_set({"loss": "snr"}, unit=True)
    X = es.embeddings.astype(np.float64)
    cos = X @ X.T
    np.fill_diagonal(cos, -np.inf)
    snr = np.array([[np.var(b - a) / np.var(a) for b in X] for a in X])
    np.fill_diagonal(snr, np.inf)
    assert (cos.argmax(1) != snr.argmin(1)).any()  # the two rank the nearest neighbour differently
    f = store.save(tmp_path / "snr.h5", es)
    notes = _notes(cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--no-progress"]))
    assert len(notes) == 1 and "trained with the SNR distance" in notes[0] and "all of norm 1" in notes[0]
    assert "no --metric ranks by the SNR distance" in notes[0]


def test_cosine_model_ranked_by_euclidean_is_noted(tmp_path):
    f = store.save(tmp_path / "c.h5", _raw_set({"loss": "multisimilarity", "normalize": False}))
    assert _notes(cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--no-progress"])) == []
    notes = _notes(cli_output(["evaluate", str(f), "--include", "R@1", "--k", "1", "--metric", "euclidean",
                               "--no-progress"]))
    assert len(notes) == 1 and "--metric cosine ranks them as the model was trained" in notes[0]


def test_neighbours_notes_the_recorded_distance(tmp_path):
    from embedscope.analyses import neighbour_examples

    es = _raw_set({"loss": "lifted", "normalize": False}, digits_paths=True)
    ex = neighbour_examples(es, queries=3, k=2)
    assert len(ex.notes) == 1 and "--metric euclidean ranks them as the model was trained" in ex.notes[0]
    assert neighbour_examples(es, queries=3, k=2, metric="euclidean").notes == []
    assert neighbour_examples(_raw_set({"loss": "lifted"}, unit=True, digits_paths=True), queries=3, k=2).notes == []
    # the command prints it (the digits are drawn from their pixels: a digits file of these paths)
    from sklearn.datasets import load_digits

    d = load_digits()
    X = d.data[:60].astype(np.float32) * np.linspace(0.2, 5, 60, dtype=np.float32)[:, None]
    f = store.save(tmp_path / "d.h5", store.EmbeddingSet.from_arrays(
        X, d.target[:60], paths=[f"digits/{i:04d}" for i in range(60)],
        attrs={"dataset": "digits", "checkpoint_config": {"loss": "npair", "normalize": False}}))
    out = cli_output(["neighbours", str(f), "--queries", "2", "--n-retrievals", "2", "-o", str(tmp_path / "g.png"),
                      "--no-progress"])
    notes = _notes(out)
    assert len(notes) == 1 and "trained with the dot product" in notes[0], out


# ----------------------------------------------------------------------------- evaluate --k with --include R@<k>
@pytest.mark.parametrize("k, include, unused", [(["1", "2"], ["R@1"], "R@2 is not computed"),
                                                (["4", "1", "2"], ["R@1", "P@1"], "R@2 and R@4 are not computed")])
def test_k_left_out_of_an_include_of_named_r_at_k_is_refused(tmp_path, k, include, unused):
    f = store.save(tmp_path / "e.h5", _raw_set(None))
    rc, out, err = run_cli(["evaluate", f, "--k", *k, "--include", *include, "--no-progress"])
    assert rc == 2 and out == ""
    line = one_error_line(err, "evaluate")
    assert unused in line and "add R@k for every --k" in line


def test_k_named_in_the_include_runs(tmp_path):
    f = store.save(tmp_path / "e.h5", _raw_set(None))
    for include in (["R@2", "R@1"], ["R@1", "R@k"]):
        out = cli_output(["evaluate", str(f), "--k", "2", "1", "--include", *include, "--no-progress"])
        assert re.findall(r"^(R@\d+)\s", out, flags=re.M) == ["R@1", "R@2"]


# ----------------------------------------------------------------------------- neighbours layout
def _draw(n, k, name_len=60):
    import matplotlib

    matplotlib.use("Agg", force=True)
    from embedscope.analyses.neighbours import NeighbourExamples

    rng = np.random.default_rng(0)
    names = np.array([f"class_{c}_" + "long_name_" * (name_len // 10) for c in range(3)], dtype=object)
    ql = names[rng.integers(0, 3, n)]
    rl = names[rng.integers(0, 3, (n, k))]
    sim = -np.sort(-rng.uniform(0.9, 1.0, (n, k)), axis=1)
    ex = NeighbourExamples(query_paths=np.array([f"q{i}" for i in range(n)]), query_labels=ql,
                           ref_paths=np.array([[f"r{i}_{j}" for j in range(k)] for i in range(n)]), ref_labels=rl,
                           similarity=sim, correct=rl == ql[:, None], query_split="test", reference_split="test",
                           metric="cosine", seed=0, selection=f"{n} random queries, seed 0")
    img = np.arange(64, dtype=np.float32).reshape(8, 8)
    from embedscope.viz.neighbours import draw_neighbours

    return draw_neighbours(ex, [img] * n, [[img] * k for _ in range(n)])


@pytest.mark.parametrize("n, k", [(1, 20), (2, 20), (3, 1), (12, 3)])
def test_neighbours_slots_are_square_in_two_layouts(monkeypatch, n, k):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    calls = []
    original = Figure.tight_layout
    monkeypatch.setattr(Figure, "tight_layout", lambda self, *a, **kw: (calls.append(1), original(self, *a, **kw))[1])
    fig = _draw(n, k)
    try:
        assert len(calls) <= 2  # direct: one layout measures, one lays out at the fitted height
        W, H = fig.get_size_inches()
        for ax in fig.axes:
            box = ax.get_position(original=True)
            assert box.height * H == pytest.approx(box.width * W, abs=0.01)  # square slot: no empty bands
            assert ax.get_aspect() == 1.0  # the pictures keep their shape
    finally:
        plt.close(fig)


def test_neighbours_captions_of_long_names_do_not_overlap():
    import matplotlib.pyplot as plt

    fig = _draw(2, 20)
    try:
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        rows: dict = {}
        for ax in fig.axes:
            box = ax.xaxis.label.get_window_extent(r)
            rows.setdefault(round(ax.get_position().y0, 3), []).append(box)
        for boxes in rows.values():
            boxes.sort(key=lambda b: b.x0)
            for a, b in zip(boxes, boxes[1:]):
                assert a.x1 <= b.x0, (a, b)  # each caption ends before the next begins
    finally:
        plt.close(fig)


# ----------------------------------------------------------------------------- geometry with zero rows
def _brute_spectral(X):
    X = np.asarray(X, dtype=np.float64)
    s = np.linalg.svd(X, compute_uv=False)
    t = s[1:]
    p = t / t.sum()
    rho = float(np.mean(np.log((1.0 / t.size) / p)))
    q = s / s.sum()
    rho_all = float(np.mean(np.log((1.0 / s.size) / q)))
    q = q + 1e-7
    rankme = float(np.exp(-np.sum(q * np.log(q))))
    lam = np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2 / (len(X) - 1)
    lam = lam[: min(len(X) - 1, X.shape[1])]
    k = np.arange(1, lam.size + 1)
    alpha = float(-np.polyfit(np.log(k), np.log(lam), 1)[0])
    return {"rho": rho, "rho_all": rho_all, "effective_rank": rankme, "alpha": alpha}


def test_geometry_reports_the_spectral_measures_of_a_split_with_zero_rows(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 5)).astype(np.float32)
    X[[4, 11]] = 0
    f = store.save(tmp_path / "z.h5", store.EmbeddingSet.from_arrays(
        X, np.arange(30) % 3, split="train", paths=[f"img{i}.jpg" for i in range(30)]))
    js = tmp_path / "g.json"
    out = cli_output(["geometry", str(f), "--json", str(js)])
    values = json.loads(js.read_text())["values"]
    for key, want in _brute_spectral(X).items():
        assert values[key] == pytest.approx(want, rel=1e-9, abs=1e-12), key
    for key in ("pi_intra", "pi_inter", "pi_ratio", "alignment", "uniformity"):
        assert values[key] is None  # NaN -> null
        assert re.search(rf"\n{key}\s+–", out)
    assert ("undefined (–): pi_intra, pi_inter, pi_ratio, alignment, uniformity (2 of the 30 train rows are all "
            "zeros (the first: row 4, path 'img4.jpg'): no direction, so the cosine distance is undefined)") in out
    assert values["n"] == 30 and values["n_classes"] == 3 and values["n_singleton"] == 0
    # spectrum draws it too
    out = cli_output(["spectrum", str(f), "-o", str(tmp_path / "s.png"), "--no-progress"])
    assert "wrote" in out


def test_geometry_of_only_zero_rows_or_one_row_is_one_line(tmp_path):
    f = store.save(tmp_path / "zeros.h5", store.EmbeddingSet.from_arrays(np.zeros((4, 3), np.float32), [0, 0, 1, 1],
                                                                         split="train"))
    rc, _, err = run_cli(["geometry", f])
    assert rc == 1 and "4 train embedding(s) are all zeros" in one_error_line(err, "geometry")
    f = store.save(tmp_path / "one.h5", store.EmbeddingSet.from_arrays(np.ones((1, 3), np.float32), [0],
                                                                       split="train"))
    rc, _, err = run_cli(["geometry", f])
    assert rc == 1
    assert one_error_line(err, "geometry").endswith(f"{f}: the train split has 1 row: the geometry measures need "
                                                     "at least two")
