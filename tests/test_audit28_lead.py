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
