"""A retrieval engineer's own model and photos (audit 28, helper I): a torchvision ResNet-18 state dict
(random weights) and a folder of their own images in class sub-folders, with the awkward cases of real
photo folders (grey, RGBA, CMYK, an EXIF rotation, upper-case endings, spaces and non-ASCII names, a
nested folder, a symbolic link, a non-image file, a class of one image), through ``embed`` as
docs/datasets.md and docs/checkpoint.md give it. The embeddings are compared with a plain
``torch.no_grad()`` forward of torchvision's own transforms (computed here independently)."""

import hashlib
import os

import h5py
import numpy as np
import pytest
import torch

from tests.cli_run import one_error_line, run_cli

SIZE = 32  # --image-size 32: Resize(round(32 * 256 / 224) = 37) + CenterCrop(32)


def _photo(rng, base, w=40, h=30):
    from PIL import Image

    a = (rng.integers(0, 80, (h, w, 3)) + np.asarray(base) * 0.6).clip(0, 255).astype(np.uint8)
    return Image.fromarray(a)


@pytest.fixture(scope="module")
def byo(tmp_path_factory):
    """(folder of photos, folder of model files)."""
    import torchvision
    from PIL import Image

    tmp = tmp_path_factory.mktemp("byo")
    root = tmp / "photos"
    rng = np.random.default_rng(0)
    colours = {"bird one": (50, 50, 200), "cat": (200, 50, 50), "dog": (50, 200, 50), "fish": (20, 200, 200),
               "solo": (100, 100, 100), "émeu": (200, 200, 50)}
    for name in colours:
        (root / name).mkdir(parents=True)
    for i in range(3):
        _photo(rng, colours["bird one"]).save(root / "bird one" / f"b{i}.JPEG")
        _photo(rng, colours["cat"]).save(root / "cat" / f"cat_{i}.jpg")
        _photo(rng, colours["dog"]).save(root / "dog" / f"dog {i}.PNG")
        _photo(rng, colours["fish"]).save(root / "fish" / f"f{i}.png")
        _photo(rng, colours["émeu"]).save(root / "émeu" / f"ému_{i}.png")
    _photo(rng, colours["solo"]).save(root / "solo" / "only.png")
    _photo(rng, colours["cat"]).convert("L").save(root / "cat" / "grey.png")
    rgba = _photo(rng, colours["cat"]).convert("RGBA")
    rgba.putalpha(128)
    rgba.save(root / "cat" / "rgba.png")
    _photo(rng, colours["dog"]).convert("CMYK").save(root / "dog" / "cmyk.jpg")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees to show upright
    _photo(rng, colours["dog"]).save(root / "dog" / "exif_rot.jpg", exif=exif)
    (root / "fish" / "nested" / "deeper").mkdir(parents=True)
    _photo(rng, colours["fish"]).save(root / "fish" / "nested" / "deeper" / "n.png")
    (root / "fish" / "notes.txt").write_text("not an image")
    os.symlink(root / "cat" / "cat_0.jpg", root / "fish" / "link.jpg")

    models = tmp / "models"
    models.mkdir()
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None)
    torch.save(net.state_dict(), models / "r18.pth")
    # a feature extractor as retrieval code builds it: its layers numbered, not named
    torch.save(torch.nn.Sequential(*list(net.children())[:-1]).state_dict(), models / "r18_seq.pth")
    net.fc = torch.nn.Linear(512, 16)  # the engineer's own embedding layer in place of the classifier
    torch.save(net.state_dict(), models / "r18_fc16.pth")
    torch.save({}, models / "identity.pth")
    return root, models


def _plain_forward(net, root, paths):
    """torchvision's evaluation preprocessing (Resize / CenterCrop / ToTensor / Normalize, images read as
    torchvision's ImageFolder reads them) and one no-grad forward, L2-normalised."""
    from PIL import Image
    from torchvision import transforms as T

    tf = T.Compose([T.Resize(round(SIZE * 256 / 224)), T.CenterCrop(SIZE), T.ToTensor(),
                    T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])

    def load(p):
        with open(root / p, "rb") as f:
            return Image.open(f).convert("RGB")

    x = torch.stack([tf(load(p)) for p in paths])
    net.eval()
    with torch.no_grad():
        return torch.nn.functional.normalize(net(x), dim=1).numpy()


def _read(path):
    with h5py.File(path, "r") as f:
        paths = [p.decode() if isinstance(p, bytes) else str(p) for p in f["paths"][:]]
        return f["embeddings"][:], paths, dict(f.attrs)


def test_torchvision_state_dict_embeds_as_a_plain_forward(byo, tmp_path):
    import torchvision

    root, models = byo
    out = tmp_path / "a.h5"
    rc, _, err = run_cli(["embed", "--dataset", "imagefolder", "--root", root, "--arch", "resnet18", "--weights",
                          models / "r18.pth", "--image-size", SIZE, "-o", out, "--no-progress"])
    assert rc == 0 and err == "", err  # an ImageNet-sized classifier (1000) is dropped without a word
    X, paths, attrs = _read(out)
    # every image file of the folder, the non-image file left out, nested and linked files in
    assert len(paths) == 22 and "fish/notes.txt" not in paths
    assert {"fish/link.jpg", "fish/nested/deeper/n.png", "dog/cmyk.jpg", "émeu/ému_0.png"} <= set(paths)
    net = torchvision.models.resnet18(weights=None)
    net.load_state_dict(torch.load(models / "r18.pth"))
    net.fc = torch.nn.Identity()
    np.testing.assert_allclose(X, _plain_forward(net, root, paths), atol=1e-5, rtol=0)
    # what a rerun needs: the weights file, its digest, the format read and the transform
    assert attrs["checkpoint"] == str((models / "r18.pth").resolve())
    assert attrs["checkpoint_sha256"] == hashlib.sha256((models / "r18.pth").read_bytes()).hexdigest()
    assert attrs["checkpoint_format"] == "backbone weights from a torchvision state dict"
    assert attrs["transform"] == "Resize(37) + CenterCrop(32) + ImageNet normalise"


def test_exif_orientation_is_not_applied(byo):
    """docs/datasets.md: as torchvision's loader, the image as stored (40 x 30), not turned upright."""
    from PIL import Image

    from embedscope.data import get_dataset

    root, _ = byo
    ds = get_dataset("imagefolder", root)
    i = list(ds.paths).index("dog/exif_rot.jpg")
    img = ds.load_image(i)
    with Image.open(root / "dog" / "exif_rot.jpg") as raw:
        assert raw.getexif().get(0x0112) == 6
        assert img.size == (40, 30) and np.array_equal(np.asarray(img), np.asarray(raw.convert("RGB")))


def test_weights_with_an_own_last_layer_warn_and_embed_as_trunk(byo, tmp_path):
    """A state dict whose fc is the engineer's embedding layer (512 -> 16): --weights drops it as it drops an
    ImageNet classifier, which was silent; now one warning line names it and the way to keep it, and that
    way (--trunk with an empty --embedder) embeds through it."""
    import torchvision

    root, models = byo
    common = ["--dataset", "imagefolder", "--root", root, "--image-size", SIZE, "--no-progress"]
    rc, _, err = run_cli(["embed", "--arch", "resnet18", "--weights", models / "r18_fc16.pth",
                          "-o", tmp_path / "w.h5", *common])
    lines = err.strip().splitlines()
    assert rc == 0 and len(lines) == 1, err
    assert lines[0].startswith(f"embedscope embed: warning: {models / 'r18_fc16.pth'}: its fc layer (512 -> 16, "
                               "not an ImageNet classifier's size) is not loaded"), err
    assert f"--trunk {models / 'r18_fc16.pth'} with an empty --embedder" in lines[0]
    assert _read(tmp_path / "w.h5")[0].shape == (22, 512)
    # the way the warning gives: the layer kept
    rc, _, err = run_cli(["embed", "--trunk", models / "r18_fc16.pth", "--embedder", models / "identity.pth",
                          "-o", tmp_path / "t.h5", *common])
    assert rc == 0, err
    X, paths, _ = _read(tmp_path / "t.h5")
    net = torchvision.models.resnet18(weights=None)
    net.fc = torch.nn.Linear(512, 16)
    net.load_state_dict(torch.load(models / "r18_fc16.pth"))
    np.testing.assert_allclose(X, _plain_forward(net, root, paths), atol=1e-5, rtol=0)
    # given as the checkpoint: the one error line says the same, not only --weights (which drops the layer)
    rc, _, err = run_cli(["embed", models / "r18_fc16.pth", "-o", tmp_path / "c.h5", *common])
    line = one_error_line(err, "embed")
    assert rc == 1 and "whose fc layer (512 -> 16) is not an ImageNet classifier's size" in line
    assert f"--trunk {models / 'r18_fc16.pth'} with an empty --embedder" in line
    assert not (tmp_path / "c.h5").exists()


def test_imagefolder_root_messages(byo, tmp_path):
    from embedscope.data import get_dataset
    from embedscope.errors import EmbedscopeError

    root, _ = byo
    # no --root: an image folder has no "official download"
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("imagefolder", None)
    assert str(e.value) == "imagefolder needs --root DIR (the folder of class sub-folders, ROOT/<class>/<image>)"
    # one class's folder given as --root: the folder above it named
    rc, _, err = run_cli(["embed", "--dataset", "imagefolder", "--root", root / "cat", "--arch", "resnet18",
                          "-o", tmp_path / "x.h5", "--no-progress"])
    assert rc == 1 and one_error_line(err, "embed").endswith(
        f"{root / 'cat'} holds 5 image files itself: a class's folder? --root names the folder of the class "
        f"folders (--root {root}?))")
    # a folder with neither class folders nor images: no such hint
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmbedscopeError, match=r"holds no class sub-folders \(expected ROOT/<class>/<image>\)$"):
        get_dataset("imagefolder", tmp_path / "empty")
    # a class folder of phone photos in a format not read (HEIC): its files named, not only the endings read
    heic = tmp_path / "heic"
    (heic / "a").mkdir(parents=True)
    (heic / "a" / "x.png").write_bytes(b"")
    (heic / "b" / "more").mkdir(parents=True)
    for name in ("b/IMG_0002.HEIC", "b/more/IMG_0001.HEIC", "b/.DS_Store"):
        (heic / name).write_bytes(b"")
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("imagefolder", heic)
    assert str(e.value).endswith(".webp, .gif; it holds 2 other files, e.g. IMG_0002.HEIC)"), e.value
    for name in ("b/IMG_0002.HEIC", "b/more/IMG_0001.HEIC", "b/.DS_Store"):  # only an empty folder left in b
        (heic / name).unlink()
    with pytest.raises(EmbedscopeError) as e:
        get_dataset("imagefolder", heic)
    assert str(e.value).endswith(".tiff, .webp, .gif)") and str(heic / "b") in str(e.value), e.value


def test_figure_name_error_names_the_option(byo, tmp_path):
    from embedscope.errors import UsageError
    from embedscope.viz.figures import figure_paths, save_figure

    with pytest.raises(UsageError) as e:
        figure_paths("grid.jpg", option="--grid")
    assert str(e.value) == "--grid grid.jpg: a figure name must end in .png or .pdf (both are written)"
    with pytest.raises(UsageError, match=r"^--figure .*: is a folder, expected a figure file name"):
        figure_paths(tmp_path, option="--figure")
    with pytest.raises(UsageError, match=r"^-o fig\.jpg: a figure name"):
        save_figure(None, "fig.jpg", option="-o")
    # without it, as before
    with pytest.raises(UsageError, match=r"^figure name x\.jpg must end in \.png or \.pdf"):
        figure_paths("x.jpg")
    # neighbours names its -o, before the file is read
    rc, _, err = run_cli(["neighbours", tmp_path / "absent.h5", "-o", tmp_path / "nb.jpg"])
    assert rc == 2 and one_error_line(err, "neighbours") == (
        f"embedscope neighbours: error: -o {tmp_path / 'nb.jpg'}: a figure name must end in .png or .pdf "
        "(both are written)")


def test_sequential_of_children_state_dict(byo, tmp_path):
    """``nn.Sequential(*list(resnet.children())[:-1]).state_dict()`` (keys 0.weight, 4.0.conv1.weight, ...):
    was refused by --weights (missing / unexpected keys) and --trunk (architecture unknown); now read as the
    ResNet's own layers, the embeddings those of a plain forward of that Sequential."""
    import torchvision

    root, models = byo
    seq_file = models / "r18_seq.pth"
    common = ["--dataset", "imagefolder", "--root", root, "--image-size", SIZE, "--no-progress"]
    rc, _, err = run_cli(["embed", "--arch", "resnet18", "--weights", seq_file, "-o", tmp_path / "w.h5", *common])
    assert rc == 0 and err == "", err
    X, paths, attrs = _read(tmp_path / "w.h5")
    assert attrs["checkpoint_format"] == ("backbone weights from a torchvision state dict (numbered as an "
                                          "nn.Sequential of the model's children)")
    seq = torch.nn.Sequential(*list(torchvision.models.resnet18(weights=None).children())[:-1])
    seq.load_state_dict(torch.load(seq_file))
    np.testing.assert_allclose(X, _plain_forward(torch.nn.Sequential(seq, torch.nn.Flatten()), root, paths),
                               atol=1e-5, rtol=0)
    # as a trunk, its architecture recognised from the numbered keys
    rc, _, err = run_cli(["embed", "--trunk", seq_file, "--embedder", models / "identity.pth",
                          "-o", tmp_path / "t.h5", *common])
    assert rc == 0, err
    np.testing.assert_array_equal(_read(tmp_path / "t.h5")[0], X)
    # as the checkpoint: the one error line gives the command that reads it
    rc, _, err = run_cli(["embed", seq_file, "-o", tmp_path / "c.h5", *common])
    assert rc == 1 and one_error_line(err, "embed").endswith(
        f"embed it with no checkpoint as --arch resnet18 --weights {seq_file} --head none (or --head random for a "
        "seeded random linear head on the features), or as --trunk with --embedder")
