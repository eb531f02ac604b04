"""Strings read from files (class names, property names, model names stored in maps files, file
names) never reach the terminal raw: tables and messages show control characters escaped
(``\\x1b[31m`` as the four characters backslash, x, 1, b), and figures draw them escaped too
(no missing-glyph warning, which would print the raw byte). CSV outputs keep the true strings."""

import csv
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg", force=True)

from embedscope import store  # noqa: E402
from embedscope.cli import main  # noqa: E402

ESC = "\x1b"
RED = "\x1b[31m"
SHOWN = "\\x1b[31m"  # how RED is shown: escaped


def _embedding_file(path, *, class_names=None, n=120, classes=6, properties=None):
    rng = np.random.default_rng(0)
    y = np.arange(n) % classes
    X = (rng.standard_normal((n, 6)) + 3 * rng.standard_normal((classes, 6))[y]).astype(np.float32)
    split = np.where(np.arange(n) % 5 == 0, "train", "test")  # every class in both
    names = class_names or [f"c{i}" for i in range(classes)]
    es = store.EmbeddingSet(embeddings=X, labels=y, paths=[f"img/{i:04d}.png" for i in range(n)], split=split,
                            class_names=names, properties=properties or {}, attrs={"dataset": "synthetic"})
    store.save(path, es)
    return path


def _evil_names(k):
    return [f"{RED}cls{i}" for i in range(k)]


def _glyph_warnings(record):
    return [str(w.message) for w in record if "Glyph" in str(w.message) or ESC in str(w.message)]


def _run(args, capsys):
    """main(args) -> (rc, stdout + stderr, warnings that name a glyph or hold an ESC)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out + cap.err, _glyph_warnings(rec)


# ------------------------------------------------------------------------------------------ tables
def test_format_table_escapes_cells_headers_and_title():
    from embedscope.tables import format_table

    txt = format_table([{f"{RED}col": f"a{RED}b\r\n", "x": 1.5}, {f"{RED}col": "plain", "x": 2.0}],
                       title=f"title {RED}")
    assert ESC not in txt and "\r" not in txt and len(txt.splitlines()) == 5
    head, rule = txt.splitlines()[1:3]
    assert head.startswith(f"{SHOWN}col") and f"a{SHOWN}b\\r\\n" in txt and "title " + SHOWN in txt
    assert len(rule.split()[0]) == len(f"a{SHOWN}b\\r\\n")  # aligned on the escaped text
    assert format_table([], title=RED) == f"{SHOWN}\n(no rows)"


def test_result_format_escapes_model_names():
    from embedscope.analyses.result import Result, combine

    a = Result("geometry", {"rho": 0.5}, model=f"{RED}a")
    b = Result("geometry", {"rho": 0.25}, model="b")
    for txt in (a.format(), str(a), combine([a, b]).format(title=f"t{RED}")):
        assert ESC not in txt and SHOWN in txt
    assert combine([a, b]).to_frame()["model"].tolist() == [f"{RED}a", "b"]  # the data keep the true name


# ------------------------------------------------------------------------------------------ commands
def test_evaluate_per_class_escapes_class_names_and_the_csv_keeps_them(tmp_path, capsys):
    f = _embedding_file(tmp_path / "e.h5", class_names=_evil_names(6))
    pc = tmp_path / "pc.csv"
    rc, out, _ = _run(["evaluate", str(f), "--per-class", str(pc), "--include", "R@1", "--no-progress",
                       "--device", "cpu"], capsys)
    assert rc == 0
    assert ESC not in out and f"{SHOWN}cls" in out
    with open(pc, newline="", encoding="utf-8") as fh:
        classes = {r["class"] for r in csv.DictReader(fh)}
    assert classes == set(_evil_names(6))


@pytest.mark.parametrize("command", ["evaluate", "geometry"])
def test_a_file_name_with_an_escape_is_shown_escaped(tmp_path, capsys, command):
    f = _embedding_file(tmp_path / f"{ESC}[32mevil.h5")
    out_csv = tmp_path / "out.csv"
    extra = ["--include", "R@1", "--no-progress", "--device", "cpu"] if command == "evaluate" else []
    rc, out, _ = _run([command, str(f), "--csv", str(out_csv), *extra], capsys)
    assert rc == 0
    assert ESC not in out and "\\x1b[32mevil" in out
    with open(out_csv, newline="", encoding="utf-8") as fh:
        assert {r["model"] for r in csv.DictReader(fh)} == {f"{ESC}[32mevil"}


def test_add_properties_and_properties_escape_property_names(tmp_path, capsys):
    f = _embedding_file(tmp_path / "p.h5")
    table = tmp_path / "props.csv"
    with open(table, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["path", "parity", f"{RED}evilprop"])
        w.writerows([f"img/{i:04d}.png", i % 2, i % 3] for i in range(120))
    rc, out, _ = _run(["add-properties", str(f), str(table)], capsys)
    assert rc == 0 and ESC not in out and f"added properties parity, {SHOWN}evilprop" in out
    assert f"{RED}evilprop" in store.load(f).properties  # stored under its true name
    props_csv = tmp_path / "props_out.csv"
    rc, out, glyphs = _run(["properties", str(f), "--csv", str(props_csv), "-o", str(tmp_path / "bars.png"),
                            "--no-progress"], capsys)
    assert rc == 0
    assert ESC not in out and f"{SHOWN}evilprop" in out
    assert glyphs == []  # the bar chart's tick label is drawn escaped: no missing-glyph warning
    with open(props_csv, newline="", encoding="utf-8") as fh:
        assert f"{RED}evilprop" in {r["property"] for r in csv.DictReader(fh)}


def test_saliency_agreement_escapes_model_names_from_maps_files(tmp_path, capsys):
    from embedscope.store.saliency import SaliencyMaps, save_maps

    rng = np.random.default_rng(0)
    files = []
    for k, name in enumerate((f"{RED}modelA", "modelB")):
        sm = SaliencyMaps(maps=rng.random((4, 5, 5)), paths=[f"p{i}" for i in range(4)], labels=np.arange(4) % 2,
                          class_names=[f"{RED}a", "b"], images=rng.integers(0, 255, (4, 5, 5), dtype=np.uint8),
                          attrs={"name": name, "family": "ranking"})
        files.append(str(save_maps(tmp_path / f"m{k}.h5", sm)))
    out_csv = tmp_path / "agr.csv"
    rc, out, glyphs = _run(["saliency-agreement", *files, "--csv", str(out_csv), "-o", str(tmp_path / "agr.png"),
                            "--grid", str(tmp_path / "grid.png")], capsys)
    assert rc == 0
    assert ESC not in out and f"{SHOWN}modelA" in out
    assert glyphs == []  # heat-map tick labels and grid titles drawn escaped
    assert f"{RED}modelA" in out_csv.read_text(encoding="utf-8")


def test_tsne_command_with_escaped_class_names_warns_of_no_glyph(tmp_path, capsys):
    f = _embedding_file(tmp_path / "t.h5", class_names=_evil_names(6), n=90)
    rc, out, glyphs = _run(["tsne", str(f), "-o", str(tmp_path / "t.png"), "--n-iter", "20", "--perplexity", "5",
                            "--no-progress"], capsys)
    assert rc == 0 and ESC not in out and glyphs == []


# ------------------------------------------------------------------------------------------ figures
def _draw_quietly(make):
    """Build and draw a figure -> (figure texts, glyph warnings)."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        fig = make()
        fig.canvas.draw()
    try:
        texts = [t.get_text() for t in fig.findobj(Text)]
        for ax in fig.axes:
            texts += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    finally:
        plt.close(fig)
    return texts, _glyph_warnings(rec)


def _figures():
    from embedscope.viz.properties import property_bars
    from embedscope.viz.saliency import agreement_heatmaps
    from embedscope.viz.spectrum import plot_spectra
    from embedscope.viz.study import fig4, fig5, ranking_chart
    from embedscope.viz.tsne import plot_joint_tsne, plot_tsne, plot_yoked_tsne

    rng = np.random.default_rng(0)
    names = _evil_names(3)
    y = np.arange(30) % 3
    Y = rng.standard_normal((30, 2))
    objs = [{"objective": f"{RED}obj{i}", "R@1": 0.5 + 0.1 * i, "rho": 0.2 + 0.1 * i} for i in range(3)]
    stats = {"target": "R@1", "objectives": objs, "measures": ["rho"],
             "correlations": [{"measure": "rho", "split": "train", "level": "objectives", "pearson": 0.5}],
             "ranking": [{"measure": f"{RED}m", "split": "train", "kendall": 0.4, "kendall_lo": 0.1,
                          "kendall_hi": 0.7}],
             "metric_matrix": {"names": [f"{RED}R@1", "R@2"], "pearson": [[1.0, 0.5], [0.5, 1.0]]}}
    pairs = {"a vs b": {"jsd_base": "bits"}}
    res = {"names": [f"{RED}a", "b"], "families": ["ranking", "ranking"], "n_images": 4, "pairs": pairs,
           "r_mean": [[1, 0.5], [0.5, 1]], "r_spread": [[0, 0.1], [0.1, 0]], "jsd_mean": [[0, 0.2], [0.2, 0]],
           "jsd_std": [[0, 0.01], [0.01, 0]], "blocks": []}
    rows = [{"model": f"{RED}m", "property": f"{RED}prop", "NR-Prec": 3.0, "ceiling": 9.0}]
    return {
        "tsne": lambda: plot_tsne(Y, y, class_names=names),
        "joint": lambda: plot_joint_tsne(Y[:15], Y[15:], y[:15], y[15:], class_names=names, title=f"{RED}t"),
        "yoked": lambda: plot_yoked_tsne(Y, Y + 0.1, y, names=(f"{RED}A", "B"), class_names=names, inset_class=1,
                                         split="test"),
        "properties": lambda: property_bars(rows, title=f"{RED}title"),
        "spectrum": lambda: plot_spectra([{"label": f"{RED}m", "spectrum": [3.0, 2.0, 1.0],
                                           "class_mean": [0.5, 0.3, 0.2], "class_std": [0.1, 0.1, 0.1]}],
                                         by_class=True, title=f"{RED}t"),
        "fig5": lambda: fig5(stats),
        "fig4": lambda: fig4(stats),
        "ranking": lambda: ranking_chart(stats),
        "heatmaps": lambda: agreement_heatmaps(res),
    }


@pytest.mark.parametrize("which", list(_figures()))
def test_figures_draw_control_characters_escaped_without_warnings(which):
    texts, glyphs = _draw_quietly(_figures()[which])
    assert glyphs == []
    assert not any(ESC in t for t in texts)
    assert any(SHOWN in t for t in texts)  # shown, escaped, where the name is drawn


def test_figure_text_keeps_line_breaks_and_save_figure_cleans(tmp_path):
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import save_figure
    from embedscope.viz.style import figure_text

    assert figure_text(f"a{RED}\nb\tc") == f"a{SHOWN}\nb\\tc"
    fig, ax = plt.subplots()
    ax.set_title(f"{RED}raw title")
    ax.set_xticks([0, 1], [f"{RED}x", "y"])
    try:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            save_figure(fig, tmp_path / "f.png")
        assert _glyph_warnings(rec) == [] and ax.get_title() == f"{SHOWN}raw title"
    finally:
        plt.close(fig)


def test_dollar_signs_in_names_are_drawn_as_they_are(tmp_path):
    """A class name like ``a$b$`` is not typeset as mathematics, and a malformed one (``$\\frac{$``)
    does not stop the drawing: texts are drawn without mathtext, fixed tick labels with ``$`` escaped."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import save_figure
    from embedscope.viz.style import clean_figure

    names = ["a$b$", "$\\frac{$"]
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label=names[0])
    ax.set_title(names[1])
    ax.legend()
    ax.set_xticks([0, 1], names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clean_figure(fig)
        clean_figure(fig)  # idempotent
        fig.canvas.draw()
        save_figure(fig, tmp_path / "d.png")
    assert ax.get_legend().get_texts()[0].get_text() == names[0]
    assert all(not t.get_parse_math() for t in (ax.title, ax.get_legend().get_texts()[0]))
    shown = [t._preprocess_math(t.get_text()) for t in ax.get_xticklabels()]  # what matplotlib renders
    assert shown == [(names[0], False), (names[1], False)]
    plt.close(fig)


def test_written_file_names_are_shown_escaped(tmp_path, capsys):
    """The 'wrote ...' lines of import, saliency, study, report and make-shapes name their outputs
    escaped (an output folder named with an escape printed it raw before)."""
    from conftest import save_digits_checkpoint

    d = tmp_path / f"{ESC}[32mout"
    d.mkdir()
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "e.npz", emb=rng.standard_normal((40, 4)).astype(np.float32), labels=np.arange(40) % 4)
    ck = save_digits_checkpoint(d / "net.pt")
    runs = [
        ["import", str(tmp_path / "e.npz"), "--labels", "labels", "-o", str(d / "e.h5")],
        ["saliency", str(ck), "--dataset", "digits", "--n-images", "2", "--n-samples", "2", "--device", "cpu",
         "--no-progress", "-o", str(d / "maps.h5")],
        ["study", str(ck), "-o", str(d / "study"), "--workers", "0", "--no-figures", "--bootstrap", "10",
         "--no-progress"],
        ["report", str(d / "study"), "-o", str(d / "report.html")],
        ["make-shapes", "-o", str(d / "shapes"), "--n-images", "24"],
    ]
    for argv in runs:
        rc, out, err = _run(argv, capsys)
        assert rc in (0, 1), (argv[0], err)  # a one-checkpoint study can end with its statistics' note
        assert "wrote" in out and ESC not in out and ESC not in err and "\\x1b[32mout" in out, (argv[0], out, err)
