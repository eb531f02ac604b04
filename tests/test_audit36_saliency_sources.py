"""Audit 36 (a helper playing a new user): `saliency` of a torchvision backbone file ended with embed's
hint "--arch resnet18 --weights FILE --head none|random, or --trunk with --embedder", options saliency
did not have (exit 2), and it had no --image-size (every foreign model explained at 224 px). It now takes
the model as `embed` does (load_model: a checkpoint, --trunk/--embedder, or --arch with --weights /
--head) and the evaluation transform's --image-size / --resize."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_run import run_cli

from embedscope.saliency import load_maps


def test_saliency_of_an_arch_baseline_without_a_checkpoint(tmp_path):
    out = tmp_path / "m.h5"
    rc, stdout, err = run_cli(["saliency", "--arch", "digits_cnn", "--head", "random", "--embed-dim", "8",
                               "--dataset", "digits", "--n-images", "3", "--n-samples", "2", "-o", str(out),
                               "--no-progress", "--device", "cpu"])
    assert rc == 0, err
    assert "(untrained network)" in stdout and "family untrained" in stdout
    m = load_maps(out)
    assert m.maps.shape == (3, 8, 8) and m.attrs["name"] == "digits_cnn-random" and m.attrs["checkpoint"] == ""


def test_saliency_needs_a_model_and_digits_take_no_image_size(tmp_path):
    rc, _, err = run_cli(["saliency", "--dataset", "digits", "-o", str(tmp_path / "m.h5")])
    assert rc == 2 and "name the model" in err
    rc, _, err = run_cli(["saliency", "--arch", "digits_cnn", "--head", "random", "--dataset", "digits",
                          "--image-size", "16", "-o", str(tmp_path / "m.h5"), "--no-progress", "--device", "cpu"])
    assert rc == 2 and "--image-size" in err
    assert not (tmp_path / "m.h5").exists()


@pytest.mark.parametrize("size", [32, 48])
def test_saliency_of_weights_at_an_image_size(tmp_path, size):
    from PIL import Image
    from torchvision.models import resnet18

    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        for split in ("train", "test"):
            d = tmp_path / "data" / split / c
            d.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 255, (40, 52, 3), dtype=np.uint8)).save(d / f"{i}.png")
    torch.manual_seed(0)
    torch.save(resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    out = tmp_path / "m.h5"
    rc, stdout, err = run_cli(["saliency", "--arch", "resnet18", "--weights", str(tmp_path / "r18.pth"),
                               "--dataset", "imagefolder", "--root", str(tmp_path / "data"), "--n-images", "2",
                               "--n-samples", "1", "--image-size", str(size), "-o", str(out), "--no-progress",
                               "--device", "cpu"])
    assert rc == 0, err
    m = load_maps(out)
    assert m.maps.shape == (2, size, size) and m.attrs["name"] == "r18"
    assert m.attrs["checkpoint"].endswith("r18.pth")


def test_a_vision_transformer_takes_its_own_input_size_only():
    from torchvision.models import VisionTransformer

    from embedscope.embed import check_fixed_input
    from embedscope.errors import UsageError

    vit = VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=1, hidden_dim=8, mlp_dim=8)
    check_fixed_input(torch.nn.Sequential(vit), 32)
    with pytest.raises(UsageError, match="takes 32x32 inputs only"):
        check_fixed_input(torch.nn.Sequential(vit), 48)  # (its forward: "AssertionError: Wrong image height!")
