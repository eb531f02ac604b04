"""The analyses layer: one call per question, one Result layout, the measure registry."""

import json

import numpy as np
import pandas as pd
import pytest

from embedscope import store
from embedscope.analyses import MEASURES, compute_measures, evaluate, evaluate_many, geometry, spectrum
from embedscope.analyses.result import Result, combine
from embedscope.errors import EmbedscopeError, UsageError
from embedscope.metrics import geometry_report, retrieval_metrics
from embedscope.synthetic import embedding_set

KEYS = ["R@1", "P@1", "R-Precision", "MAP@R", "mAP@C"]


@pytest.fixture(scope="module")
def es():
    return embedding_set(240, 12, 8, noise=1.2, seed=3)


@pytest.fixture(scope="module")
def path(es, tmp_path_factory):
    p = tmp_path_factory.mktemp("an") / "model.h5"
    store.save(p, es)
    return p


def test_evaluate_equals_the_metric_and_records_provenance(es, path):
    r = evaluate(path, include=KEYS, ks=(1,))
    te = es.subset("test")
    ref = retrieval_metrics(te.embeddings, te.labels, include=KEYS, ks=(1,))
    assert list(r.values) == KEYS
    for k in KEYS:
        assert r[k] == ref[k]
    p = r.provenance
    assert p["file"] == str(path) and len(p["sha256"]) == 64 and p["query_split"] == "test"
    assert p["n_lone"] == ref["n_lone"] and p["lone_queries"] == "exclude" and r.model == "model"
    # the same from an in-memory set and from arrays
    assert evaluate(es, include=KEYS, ks=(1,)).values == r.values


def test_result_layout_frame_csv_json_parquet(path, tmp_path):
    r = evaluate(path, include=KEYS, ks=(1,))
    f = r.to_frame()
    assert isinstance(f, pd.DataFrame) and list(f.columns) == ["measure", "value", "model"]
    assert f["value"].dtype == np.float64 and list(f["measure"]) == KEYS
    r.to_csv(tmp_path / "r.csv")
    back = pd.read_csv(tmp_path / "r.csv")
    np.testing.assert_allclose(back["value"], f["value"], rtol=1e-15)
    r.to_parquet(tmp_path / "r.parquet")
    assert pd.read_parquet(tmp_path / "r.parquet").equals(f)
    d = r.to_json(tmp_path / "r.json")
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["analysis"] == "evaluate" and on_disk["values"] == d["values"]
    assert set(on_disk) >= {"analysis", "model", "values", "provenance"}
    with pytest.raises(EmbedscopeError, match="already exists"):
        r.to_csv(tmp_path / "r.csv")
    assert "R@1" in r.format() and "lone" in r.format()


def test_per_class_table_is_the_mean_over_each_class_queries(es):
    r = evaluate(es, include=["R@1", "R-Precision", "MAP@R"], ks=(1,), per_class=True)
    te = es.subset("test")
    pq = retrieval_metrics(te.embeddings, te.labels, include=["R@1", "R-Precision", "MAP@R"], ks=(1,),
                           per_query=True)["per_query"]
    for row in r.table:
        m = te.labels == row["label"]
        assert row["n"] == m.sum() and row["class"] == te.class_names[row["label"]]
        for k in ("R@1", "R-Precision", "MAP@R"):
            assert row[k] == pytest.approx(np.nanmean(pq[k][m]), abs=1e-12)
    table = r.to_frame(table=True)
    assert {"class", "n", "R@1", "MAP@R"} <= set(table.columns)


def test_evaluate_many_side_by_side(es, tmp_path):
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    store.save(a, es)
    noisy = store.EmbeddingSet.from_arrays(es.embeddings + np.random.default_rng(1).normal(
        scale=0.5, size=es.embeddings.shape).astype(np.float32), es.labels, split=es.split, paths=es.paths,
        class_names=es.class_names)
    store.save(b, noisy)
    rs = evaluate_many([a, b], names=["clean", "noisy"], include=["R@1"], ks=(1,))
    assert rs.models == ["clean", "noisy"] and rs["clean"]["R@1"] > rs["noisy"]["R@1"]
    f = rs.to_frame()
    assert list(f["model"]) == ["clean", "noisy"] and set(f["measure"]) == {"R@1"}
    assert "clean" in rs.format() and "noisy" in rs.format()
    with pytest.raises(UsageError, match="one per file"):
        evaluate_many([a, b], names=["x"])


def test_query_gallery_protocol():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = np.repeat(np.arange(10), 4)
    split = np.tile(["query", "gallery", "gallery", "query"], 10)
    es = store.EmbeddingSet.from_arrays(X, y, split=split)
    r = evaluate(es, query_split="query", reference_split="gallery", include=["R@1", "MAP@R"], ks=(1,))
    q, g = es.subset("query"), es.subset("gallery")
    ref = retrieval_metrics(q.embeddings, q.labels, X_ref=g.embeddings, y_ref=g.labels, include=["R@1", "MAP@R"],
                            ks=(1,))
    assert r["R@1"] == ref["R@1"] and r["MAP@R"] == ref["MAP@R"]
    assert r.provenance["protocol"].startswith("separate")


def test_geometry_and_spectrum(es):
    r = geometry(es)
    tr = es.subset("train")
    ref = geometry_report(tr.embeddings, tr.labels)
    for k in ("rho", "pi_ratio", "effective_rank", "uniformity"):
        assert r[k] == ref[k]
    assert isinstance(r["n"], int) and "meaning" in r.format()
    rs = spectrum([es, es.subset("train")], names=["all", "train"], by_class=True, k=5)
    assert rs["all"]["rho"] == r["rho"]
    kinds = {row["kind"] for row in rs[0].table}
    assert kinds == {"singular_value", "normalised", "class_mean", "class_std"}


def test_registry_measures_equal_their_analyses(es):
    names = ["rho", "pi_ratio", "R@1", "MAP@R"]
    got = compute_measures(es, names)
    assert list(got) == names
    assert got["rho"] == geometry(es, split="train")["rho"]
    assert got["R@1"] == evaluate(es, split="test", include=["R@1"], ks=(1,))["R@1"]
    for m in MEASURES.values():
        assert m.split in ("train", "test") and m.direction in ("higher", "lower", "none") and m.meaning
    with pytest.raises(EmbedscopeError, match="unknown measure"):
        compute_measures(es, ["nope"])


def test_combine_refuses_duplicate_names():
    r = Result("evaluate", {"R@1": 0.5}, model="m")
    with pytest.raises(EmbedscopeError, match="must differ"):
        combine([r, r])


def test_metrics_accept_torch_tensors_with_grad():
    import torch

    from embedscope.metrics import spectral_decay

    X = torch.randn(50, 6, requires_grad=True)
    assert spectral_decay(X * 1.0) == pytest.approx(spectral_decay(X.detach().numpy()), rel=1e-12)
    y = torch.arange(50) % 5
    r = retrieval_metrics(X * 1.0, y, include=["R@1"], ks=(1,))
    assert r["R@1"] == retrieval_metrics(X.detach().numpy(), y.numpy(), include=["R@1"], ks=(1,))["R@1"]


def test_names_module_is_the_one_list_of_choices():
    from embedscope import names
    from embedscope.models.backbones import ARCHS
    from embedscope.train.losses import LOSS_NAMES
    from embedscope.train.miners import MINER_NAMES
    from embedscope.train.samplers import SAMPLER_NAMES

    assert set(LOSS_NAMES) == set(names.LOSSES)  # the loss registry defines exactly the listed names
    assert MINER_NAMES is names.MINERS and SAMPLER_NAMES is names.SAMPLERS and ARCHS is names.ARCHS
