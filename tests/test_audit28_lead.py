"""Twenty-eighth session, the lead's fixes: notes of `embed` said only once the data are read; a
train config read from /dev/null or a shell pipe."""

import os
import threading

from cli_run import run_cli


def test_embed_on_a_wrong_root_is_one_error_line_without_notes(tmp_path):
    """A train checkpoint of the digits embedded on cub200 with a wrong --root: the layout error alone,
    no transfer note about images that are not there before it (the note came first)."""
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=4, image_size=16, dataset="shapes")
    ckpt = tmp_path / "run.pt"
    save_checkpoint(ckpt, build_model(cfg), {**cfg, "loss": "margin"})
    (tmp_path / "wrong").mkdir()
    rc, out, err = run_cli(["embed", ckpt, "--dataset", "cub200", "--root", tmp_path / "wrong",
                            "-o", tmp_path / "e.h5", "--no-progress"])
    assert rc == 1
    assert out == ""  # before: "note: the checkpoint was trained on shapes; ... (a transfer ...)"
    assert err.count("\n") == 1 and "images.txt is missing" in err, err
    assert not (tmp_path / "e.h5").exists()


def test_train_config_from_dev_null_and_from_a_pipe():
    """`--config /dev/null` is an empty config, as an empty file is (it was "no such config file"),
    and a shell's `<(...)` pipe is read as it is."""
    from embedscope.cli.train import read_yaml_options

    assert read_yaml_options(os.devnull) == {}
    r, w = os.pipe()
    path = f"/dev/fd/{r}"

    def write():
        with os.fdopen(w, "w") as f:
            f.write("embed-dim: 8\nepochs: 0\n")

    t = threading.Thread(target=write)
    t.start()
    try:
        assert read_yaml_options(path) == {"embed_dim": 8, "epochs": 0}
    finally:
        t.join()
        os.close(r)


def test_train_config_missing_is_still_refused(tmp_path):
    rc, out, err = run_cli(["train", "--config", tmp_path / "none.yaml", "-o", tmp_path / "x.pt"])
    assert rc == 1 and err.strip().endswith("none.yaml: no such config file"), err


def test_modules_of_study_and_data_load_as_attributes():
    """After a bare `import embedscope`, embedscope.study.run and embedscope.data.shapes load on first use
    (they were AttributeErrors until imported by name); embedscope.cli never loads so."""
    import subprocess
    import sys

    code = ("import embedscope, sys\n"
            "assert 'embedscope.study.run' not in sys.modules\n"
            "print(embedscope.study.run.__name__, embedscope.data.shapes.__name__, embedscope.study.stats.__name__)\n"
            "try:\n    embedscope.data.nosuch\nexcept AttributeError as e:\n    print('AttributeError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["embedscope.study.run embedscope.data.shapes embedscope.study.stats",
                                       "AttributeError module 'embedscope.data' has no attribute 'nosuch'"]


def test_api_argument_mistakes_are_one_clear_error(tmp_path):
    import numpy as np
    import pytest

    from embedscope.data import get_dataset
    from embedscope.errors import EmbedscopeError
    from embedscope.metrics import retrieval_metrics
    from embedscope.store import EmbeddingSet, save

    X = np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32)
    y = np.repeat(np.arange(5), 4)
    with pytest.raises(EmbedscopeError, match="include must be a metric name or a list of them, got int"):
        retrieval_metrics(X, y, include=5)  # was "'int' object is not iterable"
    es = EmbeddingSet.from_arrays(X, y)
    with pytest.raises(EmbedscopeError, match=r"takes the path first: save\(path, es\)"):
        save(es, tmp_path / "x.h5")  # was "needs an EmbeddingSet ..., got str"
    assert not (tmp_path / "x.h5").exists()
    with pytest.raises(EmbedscopeError, match="data set name must be a string"):
        get_dataset(3)  # was "'int' object has no attribute 'lower'"


def test_evaluate_of_one_file_shows_an_undefined_value_as_a_dash(tmp_path, monkeypatch):
    """One file's table printed 'nan' where several files' (and geometry's) print '–'."""
    import numpy as np

    import embedscope.metrics.clustering as clustering
    from embedscope.store import EmbeddingSet, save

    X = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    y = np.repeat(np.arange(8), 5)
    save(tmp_path / "e.h5", EmbeddingSet.from_arrays(X, y))
    monkeypatch.setattr(clustering, "kmeans_nmi_f1", lambda *a, **k: {"NMI": float("nan"), "F1": 0.5})
    rc, out, err = run_cli(["evaluate", tmp_path / "e.h5", "--split", "all", "--include", "R@1", "NMI", "F1",
                            "--no-progress"])
    assert rc == 0, err
    nmi = [ln for ln in out.splitlines() if ln.startswith("NMI")]
    assert len(nmi) == 1 and nmi[0].split()[1] == "–", out


def test_a_wrong_figure_name_names_its_option(tmp_path):
    """'figure name x.jpg must end in .png or .pdf' did not say which output: now '-o x.jpg: ...'."""
    import numpy as np

    from embedscope.store import EmbeddingSet, save

    X = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    save(tmp_path / "e.h5", EmbeddingSet.from_arrays(X, np.repeat(np.arange(8), 5)))
    for cmd in (["tsne"], ["spectrum"], ["scatter"]):
        rc, out, err = run_cli([*cmd, tmp_path / "e.h5", "--split", "all", "-o", tmp_path / "x.jpg", "--no-progress"])
        assert rc == 2, (cmd, err)
        assert f"-o {tmp_path / 'x.jpg'}: a figure name must end in .png or .pdf" in err, (cmd, err)


def test_embed_records_its_batch_size(tmp_path):
    """The batch's size changes the last bits of a convolution on the CPU (the digits: 37% of the values
    by up to 3e-7 at 7 vs 256): the file records it, as it records the thread count."""
    import h5py
    from conftest import save_digits_checkpoint

    ck = save_digits_checkpoint(tmp_path / "m.pt")
    for b in (7, 300):
        rc, out, err = run_cli(["embed", ck, "--dataset", "digits", "--split", "test", "--batch-size", b,
                                "-o", tmp_path / f"b{b}.h5", "--no-progress"])
        assert rc == 0, err
        with h5py.File(tmp_path / f"b{b}.h5") as f:
            assert int(f.attrs["batch_size"]) == b


def test_boolean_options_of_the_analyses_refuse_strings():
    """spectrum(center="no") centred the classes ("no" is truthy); every yes/no option of an analysis
    takes True/False (numpy's, 0 and 1 too) and refuses anything else in one line."""
    import numpy as np
    import pytest

    from embedscope.analyses import evaluate, properties, spectrum, tsne
    from embedscope.errors import EmbedscopeError
    from embedscope.store import EmbeddingSet
    from embedscope.validation import check_bool

    X = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    es = EmbeddingSet.from_arrays(X, np.repeat(np.arange(8), 5))
    es.properties["p"] = np.arange(40) % 3
    for call, name in ((lambda: spectrum([es], split="all", center="no"), "center"),
                       (lambda: spectrum([es], split="all", by_class="yes"), "by_class"),
                       (lambda: evaluate(es, split="all", per_class="no"), "per_class"),
                       (lambda: properties([es], split="all", with_class="no"), "with_class"),
                       (lambda: properties([es], split="all", normalize="false"), "normalize"),
                       (lambda: tsne(es, joint="no"), "joint")):
        with pytest.raises(EmbedscopeError, match=f"^{name} must be True or False, got '"):
            call()
    assert [check_bool(v, "x") for v in (True, False, np.True_, np.False_, 1, 0, np.int64(1))] == \
        [True, False, True, False, True, False, True]
    with pytest.raises(EmbedscopeError):
        check_bool(2, "x")
    with pytest.raises(EmbedscopeError):
        check_bool(None, "x")


def test_import_labels_beyond_int64_stay_text_and_head_none_records_no_seed():
    """A 30-digit label was a bare 'OverflowError: Python int too large to convert to C long'; a baseline
    with --head none recorded head_seed 0 for a head it never drew."""
    import numpy as np

    from embedscope.importers import ints_if_exact
    from embedscope.models.adapters import build_pretrained

    big = np.array(["123456789012345678901234567890", "7"], dtype=object)
    assert list(ints_if_exact(big)) == ["123456789012345678901234567890", "7"]
    assert ints_if_exact(np.array(["9223372036854775807", "-9223372036854775808"], dtype=object)).dtype == np.int64
    _, cfg, _ = build_pretrained("digits_cnn", head="none")
    assert "head_seed" not in cfg
    _, cfg, _ = build_pretrained("digits_cnn", head="random", embed_dim=4)
    assert cfg["head_seed"] == 0
