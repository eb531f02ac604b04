"""Audit of the data loaders, the eval transforms, the embed step and the t-SNE against independent
computations: tiny folders in each official layout (the test keeps its own record of what it
wrote), a hand-written PIL + numpy transform, a plain ``torch.no_grad()`` loop, openTSNE's own
``TSNE.fit`` and torch autograd of the yoked objective (docs/methods.md §5, §10)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from embedscope import store
from embedscope.data.cars import load_cars196
from embedscope.data.cub import load_cub200
from embedscope.data.imagefolder import DatasetSizeWarning
from embedscope.data.sop import load_sop

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _jpeg(path: Path, seed: int, size=(9, 7)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, "JPEG")


# ------------------------------------------------------------------------------------ loaders


def test_cub_labels_paths_split_names_from_the_official_files(tmp_path):
    """200 classes listed out of order in images.txt; train = classes 1-100 whatever
    train_test_split.txt says (it is written as the opposite split here)."""
    rng = np.random.default_rng(0)
    base = tmp_path / "CUB_200_2011"
    rows = []  # (image id, class id, relative path)
    iid = 0
    for c in range(1, 201):
        for k in range(1 + (c % 3 == 0)):
            iid += 1
            rows.append((iid, c, f"{c:03d}.Bird_name_{c}/Bird_Name_{k:04d}_{iid}.jpg"))
    order = rng.permutation(len(rows))
    for iid, _, rel in rows:
        _jpeg(base / "images" / rel, iid, size=(4, 3))
    (base / "images.txt").write_text("".join(f"{rows[i][0]} {rows[i][2]}\n" for i in order))
    (base / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, c, _ in rows[::-1]))
    (base / "classes.txt").write_text("".join(f"{c} {c:03d}.Bird_name_{c}\n" for c in range(1, 201)))
    (base / "train_test_split.txt").write_text("".join(f"{i} {int(c > 100)}\n" for i, c, _ in rows))
    for root, prefix in ((base, ""), (tmp_path, "CUB_200_2011/")):
        with pytest.warns(DatasetSizeWarning, match=r"cub200: images \d+ \(official 11,788\)"):  # 200 classes
            ds = load_cub200(root)
        expect = [rows[i] for i in order]  # the order of images.txt
        assert list(ds.paths) == [f"{prefix}images/{r[2]}" for r in expect]
        np.testing.assert_array_equal(ds.labels, [r[1] - 1 for r in expect])
        np.testing.assert_array_equal(ds.split, ["train" if r[1] <= 100 else "test" for r in expect])
        assert list(ds.class_names) == [f"Bird_name_{c}" for c in range(1, 201)]
        assert all((Path(ds.root) / p).is_file() for p in ds.paths)
        tr = set(ds.labels[ds.split == "train"].tolist())
        assert tr == set(range(100)) and set(ds.labels[ds.split == "test"].tolist()) == set(range(100, 200))


def _write_cars_annos(root: Path, classes: list[int], n_classes: int) -> list[str]:
    """cars_annos.mat as the official file stores it: a 1 x N struct with MATLAB char paths,
    uint16 boxes, uint8 class (1-based) and test flag, and a 1 x C cell of class names."""
    from scipy.io import savemat

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annos = np.zeros((1, len(classes)), dtype=[(f, "O") for f in fields])
    for i, c in enumerate(classes):
        rel = f"car_ims/{i + 1:06d}.jpg"
        _jpeg(root / rel, i, size=(12, 8))
        annos[0, i] = (rel, np.uint16([[2]]), np.uint16([[1]]), np.uint16([[10]]), np.uint16([[6]]),
                       np.uint8([[c]]), np.uint8([[1 - (i % 2)]]))
    names = [f"Make{c} Model {c} Sedan 20{c % 20:02d}" for c in range(1, n_classes + 1)]
    cell = np.empty((1, n_classes), dtype=object)
    cell[0, :] = names
    savemat(root / "cars_annos.mat", {"annotations": annos, "class_names": cell})
    return names


def test_cars_annos_mat_parsed_as_scipy_reads_it(tmp_path):
    rng = np.random.default_rng(1)
    classes = list(range(1, 197)) + rng.integers(1, 197, 20).tolist()
    rng.shuffle(classes)
    names = _write_cars_annos(tmp_path, classes, 196)
    # an independent read of the file: no squeeze, MATLAB shapes as stored
    from scipy.io import loadmat

    raw = loadmat(str(tmp_path / "cars_annos.mat"))
    a = raw["annotations"][0]
    ref_paths = [str(x["relative_im_path"][0]) for x in a]
    ref_class = np.array([int(x["class"][0, 0]) for x in a])
    ref_names = [str(x[0]) for x in raw["class_names"][0]]
    assert ref_names == names and ref_class.tolist() == classes
    with pytest.warns(DatasetSizeWarning, match=r"cars196: images \d+ \(official 16,185\)"):  # 196 classes
        ds = load_cars196(tmp_path)
    assert list(ds.paths) == ref_paths
    np.testing.assert_array_equal(ds.labels, ref_class - 1)  # class ids are 1-based
    assert list(ds.class_names) == ref_names and ds.class_names[ds.labels[classes.index(196)]] == names[195]
    np.testing.assert_array_equal(ds.split, np.where(ref_class <= 98, "train", "test"))  # not the test flag
    assert len(set(ds.labels[ds.split == "train"])) == 98 and len(set(ds.labels[ds.split == "test"])) == 98
    np.testing.assert_array_equal(ds.properties["year"], [2000 + c % 20 for c in classes])


def test_sop_split_and_classes_from_the_ebay_files(tmp_path):
    """Train classes 1..7, test classes 8..12 (as the official 1..11318 / 11319..22634)."""
    root = tmp_path / "Stanford_Online_Products"
    cats = ["bicycle", "cabinet", "chair"]
    written = {}
    for fname, cids in (("Ebay_train.txt", range(1, 8)), ("Ebay_test.txt", range(8, 13))):
        lines = ["image_id class_id super_class_id path"]
        for cid in cids:
            sup = cid % 3 + 1
            for k in range(1 + cid % 2):
                rel = f"{cats[sup - 1]}_final/{400000 + cid}_{k}.JPG"
                _jpeg(root / rel, cid * 10 + k, size=(5, 4))
                lines.append(f"{len(lines)} {cid} {sup} {rel}")
                written[rel] = (cid, sup, "train" if fname == "Ebay_train.txt" else "test")
        (root / fname).write_text("\n".join(lines) + "\n")
    ds = load_sop(tmp_path)
    assert [p.split("/", 1)[1] for p in ds.paths] == list(written)
    assert all(p.startswith("Stanford_Online_Products/") for p in ds.paths)
    w = list(written.values())
    np.testing.assert_array_equal(ds.labels, [cid - 1 for cid, _, _ in w])
    np.testing.assert_array_equal(ds.split, [s for _, _, s in w])
    np.testing.assert_array_equal(ds.properties["super_class"], [sup for _, sup, _ in w])
    assert list(ds.class_names) == [f"{cats[c % 3]}_{c}" for c in range(1, 13)]
    assert len(set(ds.labels[ds.split == "train"])) == 7 and len(set(ds.labels[ds.split == "test"])) == 5


# --------------------------------------------------------------------------------- transforms


def _hand_eval(im: Image.Image, resize: int, crop: int) -> np.ndarray:
    """Resize the short side to ``resize`` (long side int(resize * long / short)), PIL bilinear
    (antialiased), centre crop (offsets round((size - crop) / 2)), [0, 1], ImageNet mean/std."""
    w, h = im.size
    nw, nh = (resize, int(resize * h / w)) if w <= h else (int(resize * w / h), resize)
    r = im.convert("RGB").resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
    a = np.asarray(r.crop((left, top, left + crop, top + crop)), dtype=np.float32) / np.float32(255)
    return ((a - MEAN) / STD).transpose(2, 0, 1)


@pytest.mark.parametrize("size, mode", [((411, 300), "RGB"), ((300, 457), "RGB"), ((343, 256), "L"),
                                        ((260, 333), "P")])
def test_eval_transform_equals_hand_written_pil_numpy(size, mode):
    from embedscope.data import image_transform

    rng = np.random.default_rng(sum(size))
    im = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).convert(mode)
    x = image_transform("image", train=False, image_size=224)(im.convert("RGB")).numpy()
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    np.testing.assert_allclose(x, _hand_eval(im, 256, 224), rtol=0, atol=1e-6)


def test_bninception_input_is_bgr_255_minus_mean_at_227():
    from embedscope.data.base import ImageDataset
    from embedscope.embed import checkpoint_input
    from embedscope.models import default_config
    from embedscope.models.backbones import InputConvention

    cfg = default_config("bninception")
    ds = ImageDataset("x", None, ["a"], [0], ["c"], ["test"])
    tf, size, text = checkpoint_input(ds, cfg)
    assert size == 227 and text.startswith("Resize(256) + CenterCrop(227)")
    rng = np.random.default_rng(3)
    im = Image.fromarray(rng.integers(0, 256, (300, 401, 3), dtype=np.uint8))
    y = InputConvention(cfg["input_space"])(tf(im)[None])[0].numpy().astype(np.float64)
    w, h = im.size
    nw = int(256 * w / h)
    r = im.resize((nw, 256), Image.BILINEAR)
    top, left = int(round((256 - 227) / 2.0)), int(round((nw - 227) / 2.0))
    a = np.asarray(r.crop((left, top, left + 227, top + 227)), dtype=np.float64)
    ref = (a[:, :, ::-1] - np.array([104.0, 117.0, 128.0])).transpose(2, 0, 1)
    # float32 through ImageNet normalisation and back: <= 1 ulp at 128, i.e. 1e-7 of the 255 range
    np.testing.assert_allclose(y / 255, ref / 255, rtol=0, atol=1e-6)


# -------------------------------------------------------------------------------------- embed


@pytest.fixture(scope="module")
def cub_folder(tmp_path_factory):
    """4 CUB classes x 3 images of different sizes, and a resnet18 checkpoint (32 px, 8-d)."""
    from embedscope.models import build_model, default_config, save_checkpoint

    tmp = tmp_path_factory.mktemp("cub")
    base = tmp / "CUB_200_2011"
    img, lab, rows = [], [], []
    for c in range(1, 5):
        for k in range(3):
            iid = len(rows) + 1
            rel = f"{c:03d}.B_{c}/B_{c}_{k}.jpg"
            _jpeg(base / "images" / rel, iid, size=(40 + 3 * iid, 36 + iid))
            img.append(f"{iid} {rel}")
            lab.append(f"{iid} {c}")
            rows.append((f"images/{rel}", c - 1))
    (base / "images.txt").write_text("\n".join(img) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(lab) + "\n")
    (base / "classes.txt").write_text("".join(f"{c} {c:03d}.B_{c}\n" for c in range(1, 5)))
    ckpts = {}
    for norm in (True, False):
        torch.manual_seed(0)
        cfg = default_config("resnet18", embed_dim=8, image_size=32, normalize=norm)
        model = build_model(cfg)
        ckpts[norm] = (tmp / f"r18_{norm}.pt", model.eval())
        save_checkpoint(ckpts[norm][0], model, cfg)
    return base, rows, ckpts


def _plain_loop(model, base: Path, paths, batch: int) -> np.ndarray:
    from torchvision import transforms as T

    tf = T.Compose([T.Resize(37), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN.tolist(), STD.tolist())])
    xs = torch.stack([tf(Image.open(base / p).convert("RGB")) for p in paths])
    with torch.no_grad():
        return torch.cat([model(xs[i:i + batch]) for i in range(0, len(xs), batch)]).numpy()


def test_embed_equals_a_plain_no_grad_loop_in_row_order(cub_folder, tmp_path):
    from embedscope.embed import embed_to_file

    base, rows, ckpts = cub_folder
    out = {}
    for bs in (1, 5, 64):
        embed_to_file(ckpts[True][0], "cub200", tmp_path / f"e{bs}.h5", root=base, batch_size=bs, device="cpu",
                      progress=False)
        out[bs] = store.load(tmp_path / f"e{bs}.h5")
        es = out[bs]
        assert list(es.paths) == [p for p, _ in rows]
        np.testing.assert_array_equal(es.labels, [lab for _, lab in rows])
        np.testing.assert_array_equal(es.split, ["train"] * 6 + ["test"] * 6)
        # bit for bit the model on the same batches: each split on its own (docs/store.md)
        want = np.empty_like(es.embeddings)
        for split in ("train", "test"):
            rows_of = es.split == split
            want[rows_of] = _plain_loop(ckpts[True][1], base, es.paths[rows_of], bs)
        np.testing.assert_array_equal(es.embeddings, want)
    for bs in (1, 5):  # batch size changes values by float rounding only
        np.testing.assert_allclose(out[bs].embeddings, out[64].embeddings, rtol=0, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(out[64].embeddings.astype(np.float64), axis=1), 1.0, atol=1e-6)


def test_embed_split_rows_normalisation_and_hdf5_fields(cub_folder, tmp_path):
    from embedscope.embed import embed_to_file

    base, rows, ckpts = cub_folder
    full = None
    for split, sel in (("all", slice(None)), ("train", slice(0, 6)), ("test", slice(6, 12))):
        path = embed_to_file(ckpts[False][0], "cub", tmp_path / f"{split}.h5", root=base, split=split,
                             device="cpu", progress=False, batch_size=4)
        es = store.load(path)
        full = es if split == "all" else full
        assert list(es.paths) == [p for p, _ in rows[sel]]
        np.testing.assert_array_equal(es.split, (["train"] * 6 + ["test"] * 6)[sel])
        assert list(es.class_names) == [f"B_{c}" for c in range(1, 5)]
        assert es.attrs["split_selected"] == split and es.attrs["dataset"] == "cub200"
        assert es.attrs["checkpoint_config"]["normalize"] is False
        ref = _plain_loop(ckpts[False][1], base, es.paths, 4)
        np.testing.assert_array_equal(es.embeddings, ref)
        np.testing.assert_allclose(es.embeddings, full.embeddings[sel], rtol=0, atol=2e-6)
    norms = np.linalg.norm(full.embeddings, axis=1)
    assert norms.min() > 0 and np.abs(norms - 1).max() > 1e-2  # normalize=False: not unit rows
    # a round trip of every field, properties included
    es2 = store.EmbeddingSet(embeddings=full.embeddings, labels=full.labels, paths=full.paths, split=full.split,
                             class_names=full.class_names,
                             properties={"p_int": np.arange(12), "p_str": np.array(list("abcabcabcabc"), object)},
                             attrs={"dataset": "cub200"})
    store.save(tmp_path / "rt.h5", es2)
    back = store.load(tmp_path / "rt.h5")
    np.testing.assert_array_equal(back.embeddings, full.embeddings)
    for f in ("labels", "paths", "split", "class_names"):
        assert list(getattr(back, f)) == list(getattr(full, f))
    np.testing.assert_array_equal(back.properties["p_int"], np.arange(12))
    assert list(back.properties["p_str"]) == list("abcabcabcabc")


# -------------------------------------------------------------------------------------- t-SNE


def _clusters(n=90, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[: n // 3] += 4
    X[n // 3: 2 * n // 3] -= 4
    Xb = np.tanh(X @ rng.normal(size=(d, 5)) / 3)
    return X, Xb, np.repeat(np.arange(3), n // 3)


def _autograd_C(Y_a, Y_b, P_a, P_b, alpha):
    """C = KL(P^a||Q^a) + KL(P^b||Q^b) + alpha sum_i |y_i^a - y_i^b|^2 and its gradient, by torch."""
    ya = torch.tensor(Y_a, dtype=torch.float64, requires_grad=True)
    yb = torch.tensor(Y_b, dtype=torch.float64, requires_grad=True)
    C = 0
    for y, P in ((ya, P_a), (yb, P_b)):
        P = torch.tensor(P.toarray())
        W = 1 / (1 + torch.cdist(y, y) ** 2)
        W = W * (1 - torch.eye(len(y), dtype=torch.float64))
        Q = W / W.sum()
        m = P > 0
        C = C + (P[m] * torch.log(P[m] / Q[m])).sum()
    C = C + alpha * ((ya - yb) ** 2).sum()
    C.backward()
    return C.item(), ya.grad.numpy(), yb.grad.numpy()


def test_gradients_used_by_the_run_equal_autograd_of_the_objective():
    from openTSNE.affinity import PerplexityBasedNN

    from embedscope.tsne import YokedObjective, yoked_tsne_exact_objective_and_grad
    from embedscope.tsne.yoked import _Yoke

    X, Xb, _ = _clusters(n=30)
    P_a = PerplexityBasedNN(X, perplexity=5, random_state=0).P.tocsr()
    P_b = PerplexityBasedNN(Xb, perplexity=5, random_state=0).P.tocsr()
    rng = np.random.default_rng(1)
    Y_a, Y_b = rng.normal(size=(30, 2)) * 3, rng.normal(size=(30, 2)) * 3
    alpha = 0.37
    C, ga, gb = _autograd_C(Y_a, Y_b, P_a, P_b, alpha)
    C1, ea, eb = yoked_tsne_exact_objective_and_grad(Y_a, Y_b, P_a, P_b, alpha)
    assert C1 == pytest.approx(C, rel=1e-12)
    np.testing.assert_allclose(ea, ga, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(eb, gb, rtol=1e-9, atol=1e-12)
    yoke = _Yoke(alpha)
    for method, kw in (("exact", {}), ("bh", {"theta": 0.0})):  # Barnes-Hut with theta 0 is exact
        err, (ka, kb) = YokedObjective(P_a, P_b, 0.0, method=method, **kw)([Y_a, Y_b], True)
        ya, yb = yoke.gradient([Y_a, Y_b])
        np.testing.assert_allclose(ka + ya, ga, rtol=1e-9, atol=1e-12)  # what yoked_tsne descends
        np.testing.assert_allclose(kb + yb, gb, rtol=1e-9, atol=1e-12)
        full = YokedObjective(P_a, P_b, alpha, method=method, **kw)([Y_a, Y_b], False)[1]
        np.testing.assert_allclose(full[0], ga, rtol=1e-9, atol=1e-12)
    # the implicit step solves y' = y~ - s * dyoke/dy(y') exactly
    Yt_a, Yt_b = Y_a + 0.1, Y_b - 0.2
    s_a, s_b = rng.uniform(0.5, 3, size=(30, 2)), rng.uniform(0.5, 3, size=(30, 2))
    na, nb = yoke.prox([Yt_a, Yt_b], [s_a, s_b])
    ya, yb = yoke.gradient([na, nb])
    np.testing.assert_allclose(na, Yt_a - s_a * ya, rtol=0, atol=1e-12)
    np.testing.assert_allclose(nb, Yt_b - s_b * yb, rtol=0, atol=1e-12)


SHORT = dict(perplexity=10, early_exaggeration_iter=50, n_iter=60)


def test_alpha_zero_is_opentsne_bit_for_bit_and_independent_of_b():
    """alpha = 0: map a is openTSNE's TSNE.fit of X_a with the same settings (it differed by 6e-12
    after 110 iterations and by 1.55 of a 36-wide map after the default 750), and it does not depend
    on X_b at all."""
    from openTSNE import TSNE

    from embedscope.tsne import yoked_tsne

    X, Xb, _ = _clusters()
    Y_a, Y_b = yoked_tsne(X, Xb, alpha=0.0, seed=0, **SHORT)
    ref = np.asarray(TSNE(random_state=0, **SHORT).fit(X))
    np.testing.assert_array_equal(Y_a, ref)
    Y_a2, _ = yoked_tsne(X, np.random.default_rng(5).normal(size=(90, 3)), alpha=0.0, seed=0, **SHORT)
    np.testing.assert_array_equal(Y_a2, Y_a)


def test_alpha_does_not_stall_the_maps_when_the_yoke_is_zero():
    """X_b = X_a: both maps start at the same place, the yoke and its gradient stay 0 and C is the
    same for every alpha, so the maps must not depend on alpha. The learning rate used to be
    capped at 1/alpha: alpha*N = 100 gave KL 0.359 instead of 0.295 and maps half as wide."""
    from embedscope.tsne import yoked_tsne

    X, _, _ = _clusters()
    n = len(X)
    base = yoked_tsne(X, X.copy(), alpha=0.0, seed=0, return_info=True, **SHORT)[2]
    for aN in (10.0, 100.0):
        Y_a, Y_b, info = yoked_tsne(X, X.copy(), alpha=aN / n, seed=0, return_info=True, **SHORT)
        assert info["kl_a"] == pytest.approx(base["kl_a"], rel=0.02), aN
        assert np.abs(Y_a - Y_b).max() < 1e-9


def test_large_alpha_makes_the_maps_coincide_without_collapsing_them():
    from embedscope.tsne import yoked_tsne

    X, Xb, _ = _clusters()
    n = len(X)
    Y0a, Y0b, i0 = yoked_tsne(X, Xb, alpha=0.0, seed=0, return_info=True, **SHORT)
    Ya, Yb, i1 = yoked_tsne(X, Xb, alpha=1000.0 / n, seed=0, return_info=True, **SHORT)
    spread = np.linalg.norm(Ya - Ya.mean(0), axis=1).mean()
    assert i1["mean_displacement"] < 1e-3 * spread
    assert i0["mean_displacement"] > 0.1 * np.linalg.norm(Y0a - Y0a.mean(0), axis=1).mean()
    # still a t-SNE of the shared structure: not stuck near the initialisation (was 0.04 of the
    # alpha = 0 width, KL 1.7 per map against 0.29)
    assert spread > 0.3 * np.linalg.norm(Y0a - Y0a.mean(0), axis=1).mean()
    assert i1["kl_a"] < 2 * i0["kl_a"] and i1["kl_b"] < 2 * i0["kl_b"]


def test_seeds_give_identical_bits_and_joint_is_one_opentsne_run():
    from openTSNE import TSNE

    from embedscope.tsne import joint_tsne, yoked_tsne

    X, Xb, _ = _clusters()
    r1 = yoked_tsne(X, Xb, alpha=0.01 / 90, seed=3, **SHORT)
    r2 = yoked_tsne(X, Xb, alpha=0.01 / 90, seed=3, **SHORT)
    for a, b in zip(r1, r2):
        np.testing.assert_array_equal(a, b)
    X = _clusters(n=120)[0]
    tr, te = X[::2], X[1::2]
    j1 = joint_tsne(tr, te, seed=4, return_info=True, early_exaggeration_iter=50, n_iter=60)
    j2 = joint_tsne(tr, te, seed=4, early_exaggeration_iter=50, n_iter=60)
    ref = np.asarray(TSNE(random_state=4, early_exaggeration_iter=50, n_iter=60).fit(np.vstack([tr, te])))
    np.testing.assert_array_equal(np.vstack(j1[:2]), ref)
    np.testing.assert_array_equal(np.vstack(j2), ref)
    info = j1[2]
    assert info["perplexity"] == 30.0 and info["initialization"] == "pca" and info["seed"] == 4
    assert (info["n_train"], info["n_test"]) == (60, 60)


def _colours_by_point(ax):
    """{(x, y): RGBA} of every scatter point of an axes."""
    out = {}
    for coll in ax.collections:
        for xy, c in zip(coll.get_offsets(), coll.get_facecolors()):
            out[(float(xy[0]), float(xy[1]))] = tuple(np.round(c, 6))
    return out


def test_a_class_keeps_its_colour_across_figures():
    import matplotlib.pyplot as plt

    from embedscope.viz.style import ClassPalette
    from embedscope.viz.tsne import plot_joint_tsne, plot_tsne, plot_yoked_tsne

    rng = np.random.default_rng(0)
    names = [f"class_{c}" for c in range(8)]
    pal = ClassPalette(names)
    want = {c: tuple(np.round(pal[names[c]], 6)) for c in range(8)}
    lt, le = np.array([0, 1, 2, 3] * 5), np.array([4, 5, 6, 7, 2] * 4)
    Yt, Ye = rng.normal(size=(20, 2)), rng.normal(size=(20, 2))
    fig = plot_joint_tsne(Yt, Ye, lt, le, class_names=names, info={"perplexity": 30.0})
    axes = [ax for ax in fig.axes if ax.collections]
    assert len(axes) == 3  # train by class, test by class, both by split
    for ax, Y, lab in ((axes[0], Yt, lt), (axes[1], Ye, le)):
        got = _colours_by_point(ax)
        for y, c in zip(Y, lab):
            assert got[(float(y[0]), float(y[1]))][:3] == want[c][:3]
    plt.close(fig)
    sub = np.array([2, 7, 7, 2, 5, 2])  # a subset of the classes: the same colours
    Ys = rng.normal(size=(6, 2))
    for fig in (plot_tsne(Ys, sub, class_names=names),
                plot_yoked_tsne(Ys, Ys + 0.1, sub, class_names=names)):
        ax = [a for a in fig.axes if a.collections][0]
        got = _colours_by_point(ax)
        for y, c in zip(Ys, sub):
            assert got[(float(y[0]), float(y[1]))][:3] == want[c][:3]
        plt.close(fig)


def test_embed_records_its_precision_and_passes_amp(cub_folder, tmp_path, monkeypatch, capsys):
    """bfloat16 autocast moves unit rows by up to ~7e-3 (ResNet-50, 128-d): the file says which
    precision made it; float32 is the default on CUDA too, `embed --amp bf16` asks for bfloat16."""
    import embedscope.device
    import embedscope.embed
    from embedscope.cli import main

    base, rows, ckpts = cub_folder
    es = store.load(embedscope.embed.embed_to_file(ckpts[True][0], "cub200", tmp_path / "cpu.h5", root=base,
                                                   device="cpu", progress=False))
    assert (es.attrs["device"], es.attrs["precision"]) == ("cpu", "float32")
    seen = []

    def fake_embed_images(model, ds, **kw):  # no GPU here: record what a CUDA run would be asked
        seen.append(kw["amp"])
        return np.eye(len(ds), model.embed_dim, dtype=np.float32)

    monkeypatch.setattr(embedscope.device, "resolve_device", lambda d="auto": torch.device("cuda"))
    monkeypatch.setattr(embedscope.embed, "embed_images", fake_embed_images)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # PyTorch's default: recorded as such
    f32 = "float32 (TF32 convolutions)"
    for flag, amp, text in ((["--amp", "none"], False, f32), ([], False, f32),
                            (["--amp", "bf16"], True, "bfloat16 autocast")):
        out = tmp_path / f"cuda{len(seen)}.h5"
        assert main(["embed", str(ckpts[True][0]), "--dataset", "cub200", "--root", str(base), "-o", str(out),
                     "--no-progress", *flag]) == 0
        assert seen[-1] is amp
        es = store.load(out)
        assert (es.attrs["device"], es.attrs["precision"]) == ("cuda", text)
    capsys.readouterr()
