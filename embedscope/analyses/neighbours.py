"""``scatter``: similarity to the nearest same-class vs different-class point (Xuan §2.4; docs/methods.md §10)."""

from __future__ import annotations

from typing import Any

import numpy as np

from embedscope.analyses._sources import as_set
from embedscope.analyses.result import Result, model_name, provenance_of
from embedscope.names import SIMILARITY_METRICS, SPLIT_CHOICES
from embedscope.validation import check_choice


def scatter(source: Any, *, split: str = "all", metric: str = "cosine", progress: bool = False,
            name: str | None = None) -> Result:
    """For every point of each split: x = similarity to its most similar same-class point, y = to its
    most similar different-class point (itself excluded, within the split). Bounded memory.

    ``result.values``: per split the share of points below the diagonal (``below_diagonal_<split>``,
    which equals that split's R@1) and the points left out (no same-class partner);
    ``result.table``: one row per point; ``result.arrays["panels"]``: ``{split: (s_same, s_diff)}``.
    """
    from embedscope.metrics import nearest_same_different, share_below_diagonal

    check_choice(metric, "metric", SIMILARITY_METRICS)
    check_choice(split, "split", SPLIT_CHOICES)
    es = as_set(source)
    splits = [split] if split != "all" else es.splits
    panels, rows, summary, values = {}, [], [], {}
    for s in splits:
        part = es.subset(s)
        s_same, s_diff = nearest_same_different(part.embeddings, part.labels, metric=metric, progress=progress)
        panels[s] = (s_same, s_diff)
        share, lone = share_below_diagonal(s_same, s_diff)
        summary.append({"split": s, "N": int(part.n), "classes": int(len(np.unique(part.labels))),
                        "left_out": int(lone), "below_diagonal_R@1": float(share)})
        values[f"below_diagonal_{s}"] = float(share)
        values[f"left_out_{s}"] = int(lone)
        ok = np.isfinite(s_same) & np.isfinite(s_diff)
        for i in range(part.n):
            rows.append({"path": part.paths[i], "split": s, "label": int(part.labels[i]),
                         "class": es.class_names[part.labels[i]], "s_same": float(s_same[i]),
                         "s_diff": float(s_diff[i]),
                         "below_diagonal": float(s_diff[i] < s_same[i]) if ok[i] else float("nan")})
    model = model_name(es, name)
    prov = provenance_of(es, extra={"metric": metric, "splits": summary, "title": f"{model}: {metric} similarity"})
    return Result("scatter", values, prov, table=rows, arrays={"panels": panels}, model=model)
