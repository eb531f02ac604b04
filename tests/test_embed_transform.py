"""`embed --image-size N --resize R`: the evaluation transform Resize(R) + CenterCrop(N) instead of the
checkpoint's, checked against the same network run on torchvision's own transform; recorded in the file."""

import numpy as np
import pytest
import torch
from PIL import Image

from embedscope import store
from embedscope.cli import main


@pytest.fixture(scope="module")
def photos_and_checkpoint(tmp_path_factory):
    from embedscope.models import build_model, default_config, save_checkpoint

    d = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (d / "imgs" / c).mkdir(parents=True)
        for i in range(3):  # mixed sizes and aspect ratios: the resize and the crop both matter
            h, w = (50 + 7 * i, 40 + 11 * i) if c == "a" else (45, 70 + 5 * i)
            Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(d / "imgs" / c / f"{i}.png")
    torch.manual_seed(0)
    cfg = default_config("resnet18", embed_dim=8, image_size=32)
    model = build_model(cfg).eval()
    save_checkpoint(d / "r18.pt", model, cfg)
    return d, model


def _direct(model, folder, size, resize):
    from torchvision import transforms as T

    from embedscope.data.base import IMAGENET_MEAN, IMAGENET_STD

    tf = T.Compose([T.Resize(resize), T.CenterCrop(size), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    files = sorted(folder.glob("*/*.png"))
    x = torch.stack([tf(Image.open(f).convert("RGB")) for f in files])
    with torch.no_grad():
        return {f"{f.parent.name}/{f.name}": row for f, row in zip(files, model(x).numpy())}


@pytest.mark.parametrize("more, size, resize", [([], 32, 37), (["--image-size", "24", "--resize", "40"], 24, 40),
                                                (["--image-size", "24"], 24, 27), (["--resize", "48"], 32, 48)])
def test_embed_transform_options(photos_and_checkpoint, tmp_path, capsys, more, size, resize):
    d, model = photos_and_checkpoint
    out = tmp_path / "e.h5"
    rc = main(["embed", str(d / "r18.pt"), "--dataset", "imagefolder", "--root", str(d / "imgs"), "-o", str(out),
               "--no-progress", "--device", "cpu", *more])
    assert rc == 0, capsys.readouterr().err
    es = store.load(out)
    assert es.attrs["transform"].startswith(f"Resize({resize}) + CenterCrop({size})")
    want = _direct(model, d / "imgs", size, resize)
    got = {str(p).split("imgs/")[-1] if "imgs/" in str(p) else str(p): row for p, row in zip(es.paths, es.embeddings)}
    assert len(got) == 6
    for key, row in want.items():
        match = [v for k, v in got.items() if k.endswith(key)]
        assert len(match) == 1
        np.testing.assert_allclose(match[0], row, atol=2e-6)


@pytest.mark.parametrize("more, needle", [(["--image-size", "40", "--resize", "32"], "smaller than the crop"),
                                          (["--resize", "20"], "smaller than the crop"),
                                          (["--image-size", "0"], "positive integer")])
def test_embed_transform_usage_errors(photos_and_checkpoint, tmp_path, capsys, more, needle):
    d, _ = photos_and_checkpoint
    try:
        rc = main(["embed", str(d / "r18.pt"), "--dataset", "imagefolder", "--root", str(d / "imgs"),
                   "-o", str(tmp_path / "e.h5"), "--no-progress", *more])
    except SystemExit as e:  # argparse's own usage errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err
    assert not (tmp_path / "e.h5").exists()


def test_digits_take_no_transform_options(tmp_path, capsys):
    from conftest import save_digits_checkpoint

    ck = save_digits_checkpoint(tmp_path / "d.pt")
    rc = main(["embed", str(ck), "--dataset", "digits", "-o", str(tmp_path / "e.h5"), "--image-size", "16"])
    assert rc == 2 and "for photos" in capsys.readouterr().err


def test_a_digits_embed_does_not_import_torchvision(tmp_path):
    # torchvision's import (~1 s, all of its models and ops) is not needed to embed the digits with
    # digits_cnn: the eval transform is x/16 and the network is ours. A fresh process, as the CLI runs.
    import subprocess
    import sys

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("digits_cnn", embed_dim=4)
    save_checkpoint(tmp_path / "d.pt", build_model(cfg).eval(), cfg)
    code = ("import sys\nfrom embedscope.cli import main\n"
            f"rc = main(['embed', {str(tmp_path / 'd.pt')!r}, '--dataset', 'digits', '--split', 'test', "
            f"'-o', {str(tmp_path / 'd.h5')!r}, '--no-progress'])\n"
            "print(rc, 'torchvision' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["0", "False"]
    assert store.load(tmp_path / "d.h5").embeddings.shape[1] == 4
