"""viz/style.py (one class -> colour map for every figure), the lazy front door of embedscope.viz,
the spectrum figure's left-out band, saving."""

import subprocess
import sys

import matplotlib
import numpy as np
import pytest

from embedscope.errors import EmbedscopeError
from embedscope.viz.style import ClassPalette, class_colors, palette_colors

matplotlib.use("Agg")


def test_palette_keyed_by_name_and_stable_across_subsets():
    names = [f"class {i}" for i in range(12)]
    full = ClassPalette(names)
    sub = ClassPalette.from_labels(np.array([7, 3, 7]), class_names=names)  # a subset of one file
    assert sub["class 7"] == full["class 7"] and sub["class 3"] == full["class 3"]
    assert len({full[n] for n in names}) == 12  # distinguishable
    assert class_colors(names) == dict(full.items())
    assert full["class 5"] == palette_colors(12)[5]
    # integer labels without names: label i keeps the colour of "i" whatever the subset
    a = ClassPalette.from_labels(np.arange(10))
    b = ClassPalette.from_labels(np.array([5, 6, 9]))
    assert a["5"] == b["5"] and a["9"] == b["9"]
    with pytest.raises(EmbedscopeError, match="unique"):
        ClassPalette(["a", "b", "a"])
    with pytest.raises(EmbedscopeError, match="not in the colour map"):
        full["nope"]
    assert len({c for c in palette_colors(200)}) == 200


def test_same_class_same_colour_in_every_figure():
    import matplotlib.pyplot as plt

    from embedscope.viz import plot_joint_tsne, plot_tsne, plot_yoked_tsne

    rng = np.random.default_rng(0)
    names = ["cat", "dog", "owl", "eel", "bee", "ant"]
    lab_all = np.repeat(np.arange(6), 10)
    Y = rng.normal(size=(60, 2))

    def colour_of(fig_ax, Y_drawn, labels, cls):
        offs = fig_ax.collections[0].get_offsets()
        cols = fig_ax.collections[0].get_facecolors()[:, :3]
        want = {tuple(np.round(Y_drawn[i], 9)) for i in np.flatnonzero(labels == cls)}
        got = {tuple(np.round(c, 6)) for o, c in zip(np.asarray(offs), cols) if tuple(np.round(o, 9)) in want}
        assert len(got) == 1
        return got.pop()

    f1 = plot_tsne(Y, lab_all, class_names=names)
    sub = lab_all >= 3  # a subset holding classes 3..5 only
    f2 = plot_tsne(Y[sub], lab_all[sub], class_names=names)
    f3 = plot_yoked_tsne(Y[sub], Y[sub] + 1, lab_all[sub], class_names=names)
    f4 = plot_joint_tsne(Y[:30], Y[sub], lab_all[:30], lab_all[sub], class_names=names)
    for cls in (3, 4, 5):
        c = colour_of(f1.axes[0], Y, lab_all, cls)
        assert colour_of(f2.axes[0], Y[sub], lab_all[sub], cls) == c
        assert colour_of(f3.axes[0], Y[sub], lab_all[sub], cls) == c
        assert colour_of(f4.axes[1], Y[sub], lab_all[sub], cls) == c
        assert c == tuple(np.round(ClassPalette(names)[names[cls]][:3], 6))
    # one explicit palette ties figures of different class lists together
    pal = ClassPalette(["x", "y", "z"] + names)
    f5 = plot_tsne(Y, lab_all, class_names=names, palette=pal)
    assert colour_of(f5.axes[0], Y, lab_all, 0) == tuple(np.round(pal["cat"][:3], 6))
    plt.close("all")


def test_front_door_is_lazy_and_keeps_old_names():
    code = ("import sys, embedscope.viz as v; assert 'matplotlib' not in sys.modules; "
            "assert 'openTSNE' not in sys.modules; print(len(v.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 20
    import embedscope.metrics as metrics
    import embedscope.tsne as tsne
    import embedscope.viz as viz
    from embedscope.metrics.neighbours import nearest_same_different
    from embedscope.tsne.yoked import yoked_tsne
    from embedscope.viz.scatter import nearest_same_different as old_nsd  # old import path
    from embedscope.viz.tsne import stratified_subsample as old_sub
    from embedscope.viz.tsne import yoked_tsne as old_yoked

    assert viz.yoked_tsne is yoked_tsne is old_yoked is tsne.yoked_tsne
    assert viz.nearest_same_different is nearest_same_different is old_nsd is metrics.nearest_same_different
    assert viz.stratified_subsample is old_sub is tsne.stratified_subsample
    assert viz.joint_tsne is tsne.joint_tsne and viz.share_below_diagonal is metrics.share_below_diagonal
    from embedscope.viz.figures import PAPER_RC
    from embedscope.viz.style import PAPER_RC as rc

    assert PAPER_RC is rc
    for name in viz.__all__:
        getattr(viz, name)
    with pytest.raises(AttributeError):
        _ = viz.no_such_thing


def test_left_out_of_rho_visible_at_d128():
    """At D = 128 a band one index wide is a sliver: the left-out values are ringed on every curve,
    a dashed line marks the boundary, and the legend names it."""
    import matplotlib.pyplot as plt

    from embedscope.viz import plot_spectra

    rng = np.random.default_rng(0)
    s1 = np.sort(rng.uniform(0.1, 1, 128))[::-1] ** 3
    s2 = s1 * np.r_[3.0, np.ones(127)]
    for top in (1, 3):
        fig = plot_spectra([{"label": "a", "spectrum": s1}, {"label": "b", "spectrum": s2}], exclude_top=top)
        ax = fig.axes[0]
        fig.canvas.draw()
        rings = [ln for ln in ax.lines if ln.get_marker() == "o" and ln.get_linestyle() == "None"]
        assert len(rings) == 2
        for ln, s in zip(rings, (s1, s2)):
            assert list(ln.get_xdata()) == list(range(1, top + 1))
            np.testing.assert_allclose(ln.get_ydata(), (s / s.sum())[:top])
            assert ln.get_markersize() >= 5 and ln.get_markerfacecolor() == "none"
            # every ring lies wholly inside the axes
            px = ax.transData.transform(np.c_[ln.get_xdata(), ln.get_ydata()])
            bbox = ax.get_window_extent()
            assert np.all(px[:, 0] - 4 > bbox.x0)
        bounds = [ln for ln in ax.lines if ln.get_linestyle() == "--" and list(ln.get_xdata()) == [top + 0.5] * 2]
        assert len(bounds) == 1
        texts = [t.get_text() for t in ax.get_legend().get_texts()]
        assert f"left out of ρ (top {top})" in texts
    fig = plot_spectra([{"label": "a", "spectrum": s1}], exclude_top=0)
    assert not [ln for ln in fig.axes[0].lines if ln.get_marker() == "o"]
    plt.close("all")


def test_save_figure_and_paths_unchanged(tmp_path):
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import figure_paths, save_figure

    assert figure_paths(tmp_path / "f.png") == (tmp_path / "f.png", tmp_path / "f.pdf")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    png, pdf = save_figure(fig, tmp_path / "f", force=False)
    assert png.stat().st_size > 1000 and pdf.stat().st_size > 1000
    with pytest.raises(EmbedscopeError):
        save_figure(fig, tmp_path / "f.png")
    with pytest.raises(EmbedscopeError, match=r"\.png or \.pdf"):
        figure_paths(tmp_path / "f.jpg")
    plt.close(fig)


def test_colours_do_not_depend_on_the_order_a_file_lists_its_classes():
    # embeddings imported from elsewhere may list the same classes in another order: a class keeps
    # its colour in separate figures of the two files; names with numbers sort as numbers
    names = ["class 10", "class 2", "owl", "Bee", "class 1"] + [f"k{i}" for i in range(20)]
    rng = np.random.default_rng(3)
    a, b = ClassPalette(names), ClassPalette([names[i] for i in rng.permutation(len(names))])
    assert all(a[n] == b[n] for n in names)
    assert a.names[:5] == ("Bee", "class 1", "class 2", "class 10", "k0")
    assert ClassPalette(["10", "9", "1"]).names == ("1", "9", "10")
    # figures: the same class, the same colour, whatever the file's order
    import matplotlib.pyplot as plt

    from embedscope.viz import plot_tsne

    order = ["dog", "cat", "owl"]
    Y, lab = rng.normal(size=(9, 2)), np.repeat(np.arange(3), 3)
    f1 = plot_tsne(Y, lab, class_names=order)
    rev = order[::-1]
    f2 = plot_tsne(Y, 2 - lab, class_names=rev)  # the same images, classes listed in reverse

    def colours(fig):
        offs = np.asarray(fig.axes[0].collections[0].get_offsets())
        cols = fig.axes[0].collections[0].get_facecolors()[:, :3]
        return {tuple(np.round(o, 9)): tuple(np.round(c, 6)) for o, c in zip(offs, cols)}

    assert colours(f1) == colours(f2)
    plt.close("all")


def _distinct_from_the_definition(n):
    """tab10, then greedily the candidate farthest (CIELAB) from every colour chosen so far, among the
    15-level sRGB grid of lightness 35-82 and chroma >= 25; the whole sequence, repeated past its end."""
    from embedscope.viz.style import _lab

    g = np.linspace(0.0, 1.0, 15)
    cand = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    lab = _lab(cand)
    ok = (lab[:, 0] >= 35) & (lab[:, 0] <= 82) & (np.hypot(lab[:, 1], lab[:, 2]) >= 25)
    cand, lab = cand[ok], lab[ok]
    chosen = [np.array(matplotlib.colormaps["tab10"](i)[:3]) for i in range(10)]
    left = list(range(len(cand)))
    d = np.array([min(np.linalg.norm(lab[c] - _lab(s[None])[0]) for s in chosen) for c in range(len(cand))])
    while left:
        j = int(np.argmax(d))
        if d[j] <= 0:
            break
        chosen.append(cand[j])
        left.remove(j)
        d = np.minimum(d, np.linalg.norm(lab - lab[j], axis=1))
    seq = [(float(c[0]), float(c[1]), float(c[2]), 1.0) for c in chosen]
    return [seq[i % len(seq)] for i in range(n)]


def test_distinct_colours_are_made_as_far_as_asked_and_equal_the_whole_sequence(monkeypatch):
    import embedscope.viz.style as st

    monkeypatch.setattr(st, "_DISTINCT", [])
    monkeypatch.setattr(st, "_GREEDY", {})
    ref = _distinct_from_the_definition(2500)
    assert st.distinct_colors(3) == ref[:3]
    assert len(st._DISTINCT) == 10  # tab10 only: nothing more was needed
    assert st.distinct_colors(40) == ref[:40] and len(st._DISTINCT) == 40
    assert st.distinct_colors(12) == ref[:12]
    assert st.distinct_colors(2500) == ref  # the whole sequence (~2,000), then repeated
    assert len(set(ref)) < 2500 and ref[len(set(ref))] == ref[0]
