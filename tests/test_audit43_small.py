"""Audit 43, small leftovers of the session's audits.

What was wrong before:

1. ``import --embeddings f1`` naming one numeric table column: "the embeddings must be a 2-D array (N x D), got
   shape (40,)", where ``--embeddings 'f1*'`` took the same column as a D = 1 embedding; a 1-D key of an
   ``.npz`` named by ``--embeddings`` was refused naming no key.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedscope.errors import EmbedscopeError


# ------------------------------------------------------------------ 1. import --embeddings ONE_COLUMN
def _table(tmp_path):
    p = tmp_path / "t.csv"
    rows = ["f1,f2,label"] + [f"{i}.5,{2 * i}.25,{i % 3}" for i in range(12)]
    p.write_text("\n".join(rows) + "\n")
    return p


def test_import_one_named_column_is_a_d1_embedding(tmp_path):
    from embedscope.importers import import_embeddings

    notes: list[str] = []
    es = import_embeddings(_table(tmp_path), embeddings="f1", notes=notes)
    assert es.embeddings.shape == (12, 1)
    np.testing.assert_allclose(es.embeddings[:, 0], np.arange(12) + 0.5)
    assert es.attrs["import_embedding_columns"] == ["f1"]  # as 'f1*' records it
    assert any(n.startswith("embeddings: 1 column f1") for n in notes)
    prefixed = import_embeddings(_table(tmp_path), embeddings="f1*")
    np.testing.assert_array_equal(prefixed.embeddings, es.embeddings)


def test_import_one_d_npz_key_is_named(tmp_path):
    from embedscope.importers import import_embeddings

    np.savez(tmp_path / "k.npz", e=np.arange(6.0), labels=np.arange(6) % 2)
    with pytest.raises(EmbedscopeError) as e:
        import_embeddings(tmp_path / "k.npz", embeddings="e")
    msg = str(e.value)
    assert "--embeddings e" in msg and "1-D" in msg and "\n" not in msg
