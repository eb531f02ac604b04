"""Session 37: small fixes found on the way (each test fails on the code before its fix)."""

from __future__ import annotations


def test_n_jobs_minus_one_takes_the_cores_of_the_affinity_mask(monkeypatch):
    import embedscope.device as device
    from embedscope.tsne.joint import auto_jobs

    monkeypatch.setattr(device, "available_cpus", lambda: 1)
    assert auto_jobs(-1, 50_000) == 1  # (was -1: openTSNE counted every core of the machine)
    assert auto_jobs(3, 50_000) == 3


def test_arch_without_weights_builds_the_same_network_each_run(tmp_path):
    """`embed` / `saliency --arch X` without --weights: the backbone came from torch's unseeded global
    generator, so one command gave other embeddings (and maps) each run. Now drawn from --head-seed."""
    import torch

    from embedscope.models.adapters import load_model

    torch.manual_seed(123)
    a, cfg, _ = load_model(arch="digits_cnn", head="random", embed_dim=4)
    torch.manual_seed(456)  # another global state: the same network
    b, _, _ = load_model(arch="digits_cnn", head="random", embed_dim=4)
    c, _, _ = load_model(arch="digits_cnn", head="random", embed_dim=4, head_seed=1)
    assert cfg["backbone_seed"] == 0
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(next(a.backbone.parameters()), next(c.backbone.parameters()))
    # torch's global generator is left as it was
    torch.manual_seed(7)
    want = torch.rand(3)
    torch.manual_seed(7)
    load_model(arch="digits_cnn", head="none")
    assert torch.equal(torch.rand(3), want)


def test_saliency_arch_without_weights_says_so(tmp_path):
    from cli_run import run_cli

    rc, out, err = run_cli(["saliency", "--arch", "digits_cnn", "--head", "random", "--dataset", "digits",
                               "--n-images", "2", "--n-samples", "2", "-o", str(tmp_path / "m.h5"), "--no-progress"])
    assert rc == 0, err
    assert "note: --arch digits_cnn without --weights: the backbone keeps its random initialisation, drawn from seed 0" in out


def _csv(path, header, rows):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_import_properties_keep_cells_as_written_as_add_properties_does(tmp_path):
    """`import --properties` read 0001 as the number 1 (it merged with 1); add-properties kept '0001'."""
    import numpy as np
    from cli_run import run_cli

    from embedscope.store import EmbeddingSet

    vals = ["0001", "1", "2"] * 4
    rows = [f"p{i},0.{i % 7}1,0.{i % 5}2,{i % 2},{vals[i]},{1.5 if i % 2 else 2},{'NA' if i == 3 else 'x'}"
            for i in range(12)]
    src = _csv(tmp_path / "t.csv", "path,e0,e1,y,v,f,t", rows)
    rc, _, err = run_cli(["import", str(src), "--labels", "y", "--paths", "path", "--embeddings", "e*",
                             "--properties", "v", "f", "t", "-o", str(tmp_path / "t.h5")])
    assert rc == 0, err
    _csv(tmp_path / "p.csv", "path,w,g", [f"p{i},{vals[i]},{1.5 if i % 2 else 2}" for i in range(12)])
    rc, _, err = run_cli(["add-properties", str(tmp_path / "t.h5"), str(tmp_path / "p.csv")])
    assert rc == 0, err
    es = EmbeddingSet.load(tmp_path / "t.h5")
    assert es.properties["v"].tolist() == vals == es.properties["w"].tolist()
    assert es.properties["f"].dtype.kind == "f" and es.properties["f"].tolist() == es.properties["g"].tolist()
    assert es.properties["t"][3] == "NA" and len(np.unique(es.properties["t"])) == 2


def test_tsne_subsample_keys_classes_by_name_not_by_label():
    """The same images, the same class name per image, the class list in another order: --max-points
    kept other rows (each class's permutation was drawn in label order from one generator)."""
    import numpy as np

    from embedscope.analyses.maps import subsample
    from embedscope.store import EmbeddingSet

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    names = [f"c{k}" for k in range(12)]
    y = np.repeat(names, 10)
    paths = [f"img{i}.png" for i in range(120)]
    a = EmbeddingSet.from_arrays(X, y, paths=paths, class_names=names)
    b = EmbeddingSet.from_arrays(X, y, paths=paths, class_names=names[::-1])
    assert not np.array_equal(a.labels, b.labels)
    for by_split in (False, True):
        pa = subsample(a, 60, 0, by_split=by_split).paths.tolist()
        pb = subsample(b, 60, 0, by_split=by_split).paths.tolist()
        assert pa == pb
    assert a.sample(30, seed=3).paths.tolist() == b.sample(30, seed=3).paths.tolist()
