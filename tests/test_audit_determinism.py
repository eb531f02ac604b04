"""Determinism audit: the same call gives the same result, and a result records what it depends on
(seeds, thread counts) so that it can be made again (docs/methods.md §1, §10)."""

from __future__ import annotations

import contextlib
import io

from embedscope import store
from embedscope.analyses import neighbour_examples
from embedscope.cli import main
from embedscope.synthetic import embedding_set


def _cli(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    assert rc == 0, err.getvalue()
    return out.getvalue()


# --- neighbours: the seed that drew the queries is part of the result and of the command's output -

def test_neighbour_examples_record_the_seed_of_drawn_queries():
    es = embedding_set(120, 6, 6, seed=0)
    ex = neighbour_examples(es, queries=4, k=2, seed=3)
    assert ex.seed == 3 and ex.selection == "4 random queries, seed 3"
    again = neighbour_examples(es, queries=4, k=2, seed=ex.seed)
    assert list(again.query_paths) == list(ex.query_paths)
    given = neighbour_examples(es, paths=list(ex.query_paths[:2]), k=2)
    assert given.seed is None and given.selection == "2 queries given by path"


def test_neighbours_command_prints_the_seed(tmp_path):
    es = embedding_set(120, 6, 6, seed=0)
    f = tmp_path / "e.h5"
    store.save(f, es)
    from PIL import Image

    root = tmp_path / "data"
    for p in es.paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (20, 20, 200)).save(root / p)
    text = _cli(["neighbours", str(f), "--queries", "3", "--n-retrievals", "2", "--seed", "5", "--root", str(root),
                 "-o", str(tmp_path / "n.png")])
    assert "3 queries, top-2 in 'test'" in text and "(drawn with --seed 5)" in text
    (tmp_path / "q.txt").write_text(str(es.subset("test").paths[0]) + "\n", encoding="utf-8")
    text = _cli(["neighbours", str(f), "--paths-file", str(tmp_path / "q.txt"), "--n-retrievals", "2",
                 "--root", str(root), "-o", str(tmp_path / "m.png")])
    assert "1 query, top-2 in 'test'" in text and "(from --paths-file)" in text
