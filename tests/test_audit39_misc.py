"""Thirty-ninth session's small fixes, each failing on the code before it."""

import numpy as np
from cli_run import run_cli

from embedscope.analyses import geometry
from embedscope.store import EmbeddingSet, save


def _set(dim, seed=0):
    rng = np.random.default_rng(seed)
    return EmbeddingSet.from_arrays(rng.standard_normal((40, dim)), np.repeat(np.arange(4), 10), split="train")


def test_rho_of_one_kept_singular_value_says_it_is_zero_by_construction(tmp_path):
    r = geometry(_set(2))
    assert r["rho"] == 0 and r["rho_all"] > 0
    (note,) = r.provenance["notes"]
    assert "rho is 0 by construction" in note and "top 1 of 2" in note
    assert "rho is 0 by construction" in str(r)
    assert not geometry(_set(3)).provenance.get("notes")
    assert not geometry(_set(2), exclude_top=0).provenance.get("notes")
    assert "by construction" in geometry(_set(6), n_components=2).provenance["notes"][0]
    save(tmp_path / "e.h5", _set(2))
    rc, out, err = run_cli(["geometry", str(tmp_path / "e.h5")])
    assert rc == 0 and "note: rho is 0 by construction" in out, err
    rc, out, err = run_cli(["spectrum", str(tmp_path / "e.h5")])
    assert rc == 0 and out.count("rho is 0 by construction") == 1, err


def test_training_at_embed_dim_2_says_rho_is_zero_by_construction(tmp_path):
    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "2", "--epochs", "0", "--no-progress",
                            "-o", str(tmp_path / "m.pt")])
    assert rc == 0, err
    assert out.count("note: rho is 0 by construction at --embed-dim 2") == 1
    rc, out, err = run_cli(["train", "--dataset", "digits", "--embed-dim", "3", "--epochs", "0", "--no-progress",
                            "-o", str(tmp_path / "m3.pt")])
    assert rc == 0 and "by construction" not in out, err
