"""Audit 36 (a helper playing a new user with real data-set names): three figures cut each name on its
own, so real names became identical — CARS196's "Chevrolet Silverado 1500 Extended Cab 2012" and
"... Regular Cab 2012" both read "Chevrole…ab 2012" under every neighbour (the query and its
other-class retrieval alike), CUB's attributes has_upperparts_color::iridescent and
has_upper_tail_color::iridescent one tick label twice. Names cut alike are now kept apart
(short_texts), as the legends already were."""

from __future__ import annotations

import numpy as np

from embedscope.viz.figures import use_agg

CARS = ["Chevrolet Silverado 1500 Extended Cab 2012", "Chevrolet Silverado 1500 Regular Cab 2012"]
CUB = ["attr:has_upperparts_color::iridescent", "attr:has_upper_tail_color::iridescent"]


def test_neighbour_captions_keep_alike_names_apart():
    use_agg()
    import matplotlib.pyplot as plt

    from embedscope.analyses.neighbours import NeighbourExamples
    from embedscope.viz.neighbours import draw_neighbours

    ex = NeighbourExamples(query_paths=np.array(["a.jpg", "b.jpg"]), query_labels=np.array(CARS),
                           ref_paths=np.array([["c.jpg", "d.jpg"], ["e.jpg", "f.jpg"]]),
                           ref_labels=np.array([CARS, CARS[::-1]]), similarity=np.array([[0.9, 0.8], [0.9, 0.7]]),
                           correct=np.array([[True, False], [True, False]]), query_split="test",
                           reference_split="test", metric="cosine")
    img = np.zeros((8, 8))
    fig = draw_neighbours(ex, [img, img], [[img, img], [img, img]])
    captions = [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()]
    first = [c.split("\n")[1] if c.startswith("query") else c.split("\n")[0][2:] for c in captions]
    assert len(set(first)) == 2, captions  # two classes, two names (one name before)
    plt.close(fig)


def test_property_ticks_keep_alike_names_apart():
    use_agg()
    import matplotlib.pyplot as plt

    from embedscope.viz.properties import property_bars

    rows = [{"model": "m", "property": p, "NR-Prec": v, "ceiling": 5.0} for p, v in zip(CUB, (1.0, 0.5))]
    fig = property_bars(rows)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert len(ticks) == 2 and ticks[0] != ticks[1], ticks
    plt.close(fig)


def test_saliency_row_labels_keep_alike_names_apart():
    from embedscope.viz.saliency import _cut_names

    cut = _cut_names(CARS + CARS, 16)
    assert len(cut) == 2 and len(set(cut.values())) == 2 and all(len(v) <= 16 for v in cut.values())
