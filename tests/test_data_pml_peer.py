"""The CUB, CARS196 and SOP loaders against pytorch-metric-learning's own dataset classes.

pytorch-metric-learning (``pytorch_metric_learning.datasets``: ``CUB``, ``Cars196``,
``StanfordOnlineProducts``, read with ``download=False``) is an independent implementation of the
same zero-shot split, and its ``root`` is the folder a PML user already has on disk. Tiny folders in
the layouts it reads (real JPEG files) are loaded by both, and each split must hold the same
(image file, class) pairs in the same order; PML keeps the 1-based class ids, embedscope 0-based
labels plus names, so a class is compared by its id.

Deliberate differences (docs/datasets.md, "pytorch-metric-learning"), each pinned by a test here:

* CUB: PML pairs ``images.txt`` and ``image_class_labels.txt`` line by line and silently drops an
  image whose two lines do not carry the same id; embedscope joins them by image id.
* CUB: PML's boundary is fixed at class id 100 (CARS: 98); embedscope's is the first half of the
  classes listed (``classes.txt``; ``names.csv``): the same for the full files, another for a
  trimmed copy (``--train-classes`` puts it back).
* All: PML lists an image that is not on disk (it fails when the image is read); embedscope refuses
  the data set in one line naming it.
* SOP: embedscope's labels are the ranks of the class ids present (``class_id - 1`` for the full
  files, whose ids are 1..22,634); the id is in the class name (``bicycle_11319``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pml_datasets = pytest.importorskip("pytorch_metric_learning.datasets")

from embedscope.data import get_dataset  # noqa: E402
from embedscope.data.base import data_fingerprint  # noqa: E402
from embedscope.data.cars import load_cars196  # noqa: E402
from embedscope.data.cub import load_cub200  # noqa: E402
from embedscope.data.sop import load_sop  # noqa: E402
from embedscope.errors import EmbedscopeError  # noqa: E402

SPLITS = ("train", "test", "train+test")
# the folders here are tiny copies with the full class lists (CUB's 200, CARS' 196, SOP's ids): each load warns
# that the image counts are not the official ones (tests/test_audit21_data.py pins the warning)
pytestmark = pytest.mark.filterwarnings("ignore::embedscope.data.imagefolder.DatasetSizeWarning")


def write_image(path: Path, seed: int, size=(9, 7), fmt: str = "JPEG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path, fmt)


def pml_rows(cls, root: Path, split: str, rel_to: Path) -> list[tuple[str, int]]:
    """(path relative to ``rel_to``, 1-based class id) of PML's data set, in its order."""
    d = cls(root=str(root), split=split, download=False)
    return [(Path(os.path.relpath(p, rel_to)).as_posix(), int(c)) for p, c in zip(d.paths, d.labels)]


def es_rows(ds, split: str, class_id) -> list[tuple[str, int]]:
    """(path, class id) of embedscope's rows of one split (PML's split names), in its order."""
    keep = np.ones(len(ds), bool) if split == "train+test" else ds.split == split
    return [(str(p), class_id(ds, int(lab))) for p, lab in zip(ds.paths[keep], ds.labels[keep])]


def same_pixels(pml_dataset, ds, rows) -> None:
    """PML's item i and embedscope's image at the same path are the same picture."""
    index = {p: i for i, p in enumerate(ds.paths)}
    for i, (p, _) in enumerate(rows):
        img, _ = pml_dataset[i]
        np.testing.assert_array_equal(np.asarray(img.convert("RGB")), np.asarray(ds.load_image(index[p])))


# ---------------------------------------------------------------------------------------------- CUB

CUB_WITH_IMAGES = {1: 2, 99: 2, 100: 3, 101: 1, 102: 2, 200: 2}  # class id -> images; the other 194 have none


def make_cub(root: Path, classes_listed=range(1, 201), with_images=CUB_WITH_IMAGES) -> Path:
    """PML's CUB root: ``root/CUB_200_2011/`` with the full classes.txt and images for a few classes
    (image ids alternate between the classes, where the official files' run class by class: the order
    is then the files', not a sort by class). Returns the data-set folder."""
    base = root / "CUB_200_2011"
    (base / "images").mkdir(parents=True)
    (base / "classes.txt").write_text("".join(f"{c} {c:03d}.Bird_{c}\n" for c in classes_listed))
    items = [(c, k) for k in range(max(with_images.values())) for c in with_images if k < with_images[c]]
    img, lab = [], []
    for iid, (c, k) in enumerate(items, 1):
        rel = f"{c:03d}.Bird_{c}/Bird_{c}_{k:04d}_{iid}.jpg"
        write_image(base / "images" / rel, iid)
        img.append(f"{iid} {rel}\n")
        lab.append(f"{iid} {c}\n")
    (base / "images.txt").write_text("".join(img))
    (base / "image_class_labels.txt").write_text("".join(lab))
    return base


def cub_class_id(ds, label: int) -> int:
    """The class id of a label, from its name (``Bird_<id>``, independent of how labels are numbered)."""
    return int(ds.class_names[label].split("_")[1])


@pytest.mark.parametrize("root_form", ["parent", "folder"])
def test_cub_same_rows_as_pml(tmp_path, root_form):
    base = make_cub(tmp_path)
    root = tmp_path if root_form == "parent" else base  # PML's root is the parent: both forms must agree
    ds = load_cub200(root)
    assert len(ds.class_names) == 200  # every class of classes.txt, with or without images
    for split in SPLITS:
        want = pml_rows(pml_datasets.CUB, tmp_path, split, rel_to=root)
        assert es_rows(ds, split, cub_class_id) == want, split
    # the boundary straddles the tiny tree: 1, 99, 100 train; 101, 102, 200 test
    assert {c for _, c in es_rows(ds, "train", cub_class_id)} == {1, 99, 100}
    assert {c for _, c in es_rows(ds, "test", cub_class_id)} == {101, 102, 200}
    # class identity: label = class id - 1, the name is classes.txt's without the NNN. prefix
    assert all(ds.class_names[c - 1] == f"Bird_{c}" for c in range(1, 201))
    assert all(cub_class_id(ds, int(lab)) == lab + 1 for lab in ds.labels)
    rows = pml_rows(pml_datasets.CUB, tmp_path, "train+test", rel_to=root)
    same_pixels(pml_datasets.CUB(root=str(tmp_path), split="train+test", download=False), ds, rows)


def test_cub_joins_by_image_id_where_pml_drops_rows(tmp_path):
    """Deliberate difference: image_class_labels.txt in another line order than images.txt. PML pairs
    the files line by line and drops every image whose lines disagree on the id; embedscope joins by id."""
    base = make_cub(tmp_path)
    lines = (base / "image_class_labels.txt").read_text().splitlines(keepends=True)
    (base / "image_class_labels.txt").write_text("".join(lines[::-1]))
    n = len(lines)
    pml = pml_rows(pml_datasets.CUB, tmp_path, "train+test", rel_to=tmp_path)
    assert len(pml) < n  # PML lost images
    ds = load_cub200(tmp_path)
    assert len(ds) == n
    assert set(pml) <= set(es_rows(ds, "train+test", cub_class_id))
    for p, c in es_rows(ds, "train+test", cub_class_id):  # each image keeps the class its folder names
        assert p.split("/")[2].startswith(f"{c:03d}.")


def test_cub_trimmed_classes_txt_moves_the_boundary(tmp_path):
    """Deliberate difference: a classes.txt listing classes 1-150 only. PML's boundary stays at id 100;
    embedscope's default is the first half of the listed classes (75), and --train-classes 100 gives PML's."""
    make_cub(tmp_path, classes_listed=range(1, 151), with_images={1: 1, 80: 2, 100: 1, 101: 2, 150: 1})
    ds = load_cub200(tmp_path)
    assert {c for _, c in es_rows(ds, "train", cub_class_id)} == {1}  # 1..75
    assert {c for _, c in es_rows(ds, "test", cub_class_id)} == {80, 100, 101, 150}
    ds = load_cub200(tmp_path, train_classes=100)
    for split in ("train", "test"):
        assert es_rows(ds, split, cub_class_id) == pml_rows(pml_datasets.CUB, tmp_path, split, rel_to=tmp_path)


def test_cub_listed_image_not_on_disk(tmp_path):
    """Deliberate difference: PML lists an image that is not on disk; embedscope names it in one line."""
    base = make_cub(tmp_path)
    gone = base / "images" / (base / "images.txt").read_text().split("\n")[3].split()[1]
    gone.unlink()
    assert len(pml_rows(pml_datasets.CUB, tmp_path, "train+test", rel_to=tmp_path)) == 12
    with pytest.raises(EmbedscopeError, match=r"image .*Bird_.* is missing \(1 of 12 listed images are absent\)"):
        load_cub200(tmp_path)


# ---------------------------------------------------------------------------------------------- SOP

SOP_TRAIN = [(1, 1, "bicycle_final"), (1, 1, "bicycle_final"), (2, 3, "chair_final"), (11318, 12, "toaster_final")]
SOP_TEST = [(11319, 1, "bicycle_final"), (11320, 3, "chair_final"), (11320, 3, "chair_final"),
            (22634, 12, "toaster_final")]


def make_sop(root: Path) -> Path:
    """PML's SOP root: ``root/Stanford_Online_Products/Ebay_{train,test}.txt`` + images."""
    base = root / "Stanford_Online_Products"
    iid = 0
    for name, rows in (("Ebay_train.txt", SOP_TRAIN), ("Ebay_test.txt", SOP_TEST)):
        lines = ["image_id class_id super_class_id path\n"]
        for cid, sup, folder in rows:
            iid += 1
            rel = f"{folder}/{100000 + cid}_{iid}.JPG"
            write_image(base / rel, iid)
            lines.append(f"{iid} {cid} {sup} {rel}\n")
        (base / name).write_text("".join(lines))
    return base


def sop_class_id(ds, label: int) -> int:
    return int(ds.class_names[label].rsplit("_", 1)[1])


@pytest.mark.parametrize("root_form", ["parent", "folder"])
def test_sop_same_rows_as_pml(tmp_path, root_form):
    base = make_sop(tmp_path)
    root = tmp_path if root_form == "parent" else base
    ds = load_sop(root)
    for split in SPLITS:
        want = pml_rows(pml_datasets.StanfordOnlineProducts, tmp_path, split, rel_to=root)
        assert es_rows(ds, split, sop_class_id) == want, split
    # labels are the ranks of the class ids present; the category and id are in the name
    assert list(ds.class_names) == ["bicycle_1", "chair_2", "toaster_11318", "bicycle_11319", "chair_11320",
                                    "toaster_22634"]
    np.testing.assert_array_equal(ds.properties["super_class"], [r[1] for r in SOP_TRAIN + SOP_TEST])
    rows = pml_rows(pml_datasets.StanfordOnlineProducts, tmp_path, "train+test", rel_to=root)
    same_pixels(pml_datasets.StanfordOnlineProducts(root=str(tmp_path), split="train+test", download=False),
                ds, rows)


def test_sop_listed_image_not_on_disk(tmp_path):
    base = make_sop(tmp_path)
    next((base / "chair_final").iterdir()).unlink()
    assert len(pml_rows(pml_datasets.StanfordOnlineProducts, tmp_path, "train+test", rel_to=tmp_path)) == 8
    with pytest.raises(EmbedscopeError, match=r"image .*chair_final.* is missing \(1 of 8 listed"):
        load_sop(tmp_path)


# --------------------------------------------------------------------------------- CARS, Kaggle layout

CARS_NAMES = [f"Maker{c % 7} Model {c} Sedan 20{c % 13:02d}" for c in range(1, 197)]
CARS_NAMES[97] = "Ram C/V Cargo Van Minivan 2012"  # class 98, the last training class: '/' -> '-' on disk
CARS_NAMES[0] = "AM General Hummer SUV 2000"
# (file, x1, y1, x2, y2, class); both csv files count their files from 00001.jpg, as Kaggle's do
CARS_TRAIN = [("00001.jpg", 2, 1, 20, 12, 1), ("00002.jpg", 0, 0, 29, 19, 98), ("00003.jpg", 5, 3, 9, 18, 99),
              ("00004.jpg", 1, 1, 10, 10, 196), ("00005.jpg", 3, 4, 25, 15, 98)]
CARS_TEST = [("00001.jpg", 4, 2, 14, 17, 98), ("00002.jpg", 0, 5, 29, 9, 99), ("00003.jpg", 6, 6, 16, 16, 1)]


def make_cars_kaggle(root: Path, names=CARS_NAMES, train=CARS_TRAIN, test=CARS_TEST) -> Path:
    """The Kaggle "stanford-car-dataset-by-classes-folder" layout that PML's Cars196 reads."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "names.csv").write_text("".join(n + "\n" for n in names))
    seed = 0
    for split, rows in (("train", train), ("test", test)):
        for f, *_, c in rows:
            seed += 1
            write_image(root / "car_data" / "car_data" / split / names[c - 1].replace("/", "-") / f, seed,
                        size=(30, 20))
        (root / f"anno_{split}.csv").write_text("".join(",".join(map(str, r)) + "\n" for r in rows))
    return root


def test_cars_kaggle_same_rows_as_pml(tmp_path):
    root = make_cars_kaggle(tmp_path / "cars")
    ds = load_cars196(root)
    assert ds.name == "cars196" and len(ds.class_names) == 196
    for split in SPLITS:
        want = pml_rows(pml_datasets.Cars196, root, split, rel_to=root)
        assert es_rows(ds, split, lambda d, lab: lab + 1) == want, split
    # PML's boundary (ids 1-98 train, 99-196 test) is embedscope's default, the first half of 196
    assert {c for _, c in es_rows(ds, "train", lambda d, lab: lab + 1)} == {1, 98}
    assert {c for _, c in es_rows(ds, "test", lambda d, lab: lab + 1)} == {99, 196}
    assert list(ds.class_names) == CARS_NAMES  # names.csv as written ('/' kept; only the folder has '-')
    assert ds.paths[1] == "car_data/car_data/train/Ram C-V Cargo Van Minivan 2012/00002.jpg"
    rows = pml_rows(pml_datasets.Cars196, root, "train+test", rel_to=root)
    same_pixels(pml_datasets.Cars196(root=str(root), split="train+test", download=False), ds, rows)


def test_cars_kaggle_properties_from_names_and_boxes(tmp_path):
    """make / body type / year from the names; the csv's x1, y1, x2, y2 give the box (inclusive pixels)."""
    from embedscope.data.properties import bbox_properties

    root = make_cars_kaggle(tmp_path / "cars")
    ds = load_cars196(root)
    rows = CARS_TRAIN + CARS_TEST
    assert list(ds.properties["make"][:3]) == ["AM General", "Ram", "Maker1"]
    assert list(ds.properties["body_type"][:3]) == ["suv", "minivan", "sedan"]
    assert list(ds.properties["year"][:3]) == [2000, 2012, 2008]
    # independent: the box's width and height from the rows, over the 30 x 20 images
    w = np.array([r[3] - r[1] + 1 for r in rows], float)
    h = np.array([r[4] - r[2] + 1 for r in rows], float)
    area, aspect = w * h / 600.0, w / h
    want = bbox_properties(np.stack([w, h], 1), np.full((len(rows), 2), [30.0, 20.0]))
    np.testing.assert_array_equal(ds.properties["bbox_area"], want["bbox_area"])
    np.testing.assert_array_equal(ds.properties["bbox_aspect"], want["bbox_aspect"])
    # the bins order the images as the raw values do
    assert (np.diff(ds.properties["bbox_area"][np.argsort(area, kind="stable")]) >= 0).all()
    assert (np.diff(ds.properties["bbox_aspect"][np.argsort(aspect, kind="stable")]) >= 0).all()
    assert ds.properties["bbox_area"].max() == 4 and ds.properties["bbox_area"].min() == 0


def test_cars_kaggle_and_official_give_the_same_data_set(tmp_path):
    """The same images in both layouts: the same classes, names, split, labels and properties per
    image (rows in another order, and paths that do not pair)."""
    from scipy.io import savemat

    kag = make_cars_kaggle(tmp_path / "kaggle")
    off = tmp_path / "official"
    rows = [("train", r) for r in CARS_TRAIN] + [("test", r) for r in CARS_TEST]
    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    annos = np.zeros((1, len(rows)), dtype=[(f, "O") for f in fields])
    order = np.random.default_rng(1).permutation(len(rows))  # cars_annos.mat lists them in another order
    (off / "car_ims").mkdir(parents=True)
    for j, k in enumerate(order):
        split, (f, x1, y1, x2, y2, c) = rows[k]
        rel = f"car_ims/{j + 1:06d}.jpg"
        folder = kag / "car_data" / "car_data" / split / CARS_NAMES[c - 1].replace("/", "-")
        (off / rel).write_bytes((folder / f).read_bytes())
        annos[0, j] = (np.array([rel]), *(np.array([[v]], np.uint16) for v in (x1, y1, x2, y2, c)),
                       np.array([[split == "test"]], np.uint8))
    cell = np.empty((1, 196), dtype=object)
    cell[0, :] = [np.array([n]) for n in CARS_NAMES]
    savemat(off / "cars_annos.mat", {"annotations": annos, "class_names": cell})

    a, b = load_cars196(kag), load_cars196(off)
    assert list(a.class_names) == list(b.class_names)
    np.testing.assert_array_equal(a.labels[order], b.labels)
    np.testing.assert_array_equal(a.split[order], b.split)
    for k in ("make", "body_type", "year", "bbox_area", "bbox_aspect"):
        np.testing.assert_array_equal(a.properties[k][order], b.properties[k], err_msg=k)
    for j, k in enumerate(order):
        assert a.load_image(int(k)).tobytes() == b.load_image(j).tobytes()
    assert not set(a.paths) & set(b.paths)
    assert data_fingerprint(a) != data_fingerprint(b)


def test_cars_kaggle_root_forms_and_fingerprint(tmp_path):
    """--root is the folder of names.csv (PML's root); get_dataset and the alias read it; the fingerprint
    sees an image replaced."""
    root = make_cars_kaggle(tmp_path / "cars")
    ds = get_dataset("cars", str(root))
    assert len(ds) == 8 and ds.root == str(root)
    fp = data_fingerprint(ds)
    assert fp == data_fingerprint(load_cars196(root))
    img = root / "car_data/car_data/test/AM General Hummer SUV 2000/00003.jpg"
    write_image(img, 99, size=(31, 20))
    assert data_fingerprint(load_cars196(root)) != fp
    # the folder that holds it is not a CARS root: one line saying which folder is
    with pytest.raises(EmbedscopeError, match=r"cars_annos\.mat is missing \(found .*/cars/names\.csv: pass --root "
                                              r".*/cars\)$"):
        load_cars196(tmp_path)
    # a folder with neither layout anywhere near: one line naming both layouts
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmbedscopeError, match=r"cars_annos\.mat is missing \(not the official cars196 layout; "
                                              r"nor the Kaggle layout, which has names\.csv"):
        load_cars196(tmp_path / "empty")


def _expect(root: Path, pattern: str) -> None:
    with pytest.raises(EmbedscopeError, match=pattern) as e:
        load_cars196(root)
    assert "\n" not in str(e.value)


def test_cars_kaggle_layout_errors(tmp_path):
    def fresh(name, **kw) -> Path:
        return make_cars_kaggle(tmp_path / name, **kw)

    r = fresh("no_test_csv")
    (r / "anno_test.csv").unlink()
    _expect(r, r"no_test_csv/anno_test\.csv is missing \(the Kaggle layout of names\.csv needs")
    r = fresh("no_images")
    import shutil

    shutil.rmtree(r / "car_data" / "car_data")
    _expect(r, r"no_images/car_data/car_data is missing")
    r = fresh("absent")
    (r / "car_data/car_data/test/Ram C-V Cargo Van Minivan 2012/00001.jpg").unlink()
    (r / "car_data/car_data/train/AM General Hummer SUV 2000/00001.jpg").unlink()
    _expect(r, r"image .*/train/AM General Hummer SUV 2000/00001\.jpg is missing \(2 of 8 listed images are absent\)")
    r = fresh("malformed")
    (r / "anno_test.csv").write_text("00001.jpg,4,2,14,17,98\n00002.jpg,0,5,29,99\n")
    _expect(r, r"malformed/anno_test\.csv:2: malformed line '00002\.jpg,0,5,29,99' "
               r"\(expected '<file>,<x1>,<y1>,<x2>,<y2>,<class>'\)")
    r = fresh("header")
    (r / "anno_train.csv").write_text("fname,x1,y1,x2,y2,class\n" + (r / "anno_train.csv").read_text())
    _expect(r, r"header/anno_train\.csv:1: malformed line")
    r = fresh("range")
    (r / "anno_train.csv").write_text("00001.jpg,2,1,20,12,1\n\n00002.jpg,0,0,29,19,197\n")
    _expect(r, r"range/anno_train\.csv:3: image '00002\.jpg' has class 197, outside 1\.\.196")
    r = fresh("zero")
    (r / "anno_test.csv").write_text("00001.jpg,4,2,14,17,0\n")
    _expect(r, r"zero/anno_test\.csv:1: image '00001\.jpg' has class 0, outside 1\.\.196")
    r = fresh("twice")
    (r / "anno_test.csv").write_text("00001.jpg,4,2,14,17,98\n00001.jpg,4,2,14,17,98\n")
    _expect(r, r"twice/anno_test\.csv:2: image '00001\.jpg' is listed twice \(first on line 1\)")
    r = fresh("empty_name")
    (r / "names.csv").write_text("A 2000\n\nC 2001\n")
    _expect(r, r"empty_name/names\.csv:2: empty class name")
    r = fresh("no_rows")
    (r / "anno_test.csv").write_text("\n")
    _expect(r, r"no_rows/anno_test\.csv lists no images")
    r = fresh("no_names")
    (r / "names.csv").write_text("\n\n")
    _expect(r, r"no_names/names\.csv lists no classes")


def test_cars_kaggle_tolerates_what_pml_does(tmp_path):
    """Windows line ends, a trailing blank line in names.csv and spaces around fields read as PML reads
    them; a byte-order mark is dropped."""
    root = make_cars_kaggle(tmp_path / "cars")
    (root / "names.csv").write_bytes(("\r\n".join(CARS_NAMES) + "\r\n\r\n").encode())
    text = (root / "anno_train.csv").read_text()
    (root / "anno_train.csv").write_bytes(text.replace(",", ", ").replace("\n", "\r\n").encode())
    ds = load_cars196(root)
    assert list(ds.class_names) == CARS_NAMES
    for split in SPLITS:
        assert es_rows(ds, split, lambda d, lab: lab + 1) == pml_rows(pml_datasets.Cars196, root, split, rel_to=root)
    # a byte-order mark (a file saved by a Windows editor) is not part of the first name (PML keeps it)
    (root / "names.csv").write_bytes(("\ufeff" + "\n".join(CARS_NAMES)).encode())
    assert list(load_cars196(root).class_names) == CARS_NAMES


def test_cars_kaggle_embed_on_the_command_line(tmp_path, capsys):
    """`embedscope embed --dataset cars196 --root KAGGLE_DIR` writes the data set PML reads; a broken
    layout is one line and exit 1."""
    import torch

    from embedscope import store
    from embedscope.cli import main
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = default_config("shapes_cnn", embed_dim=8, image_size=16)
    ckpt = tmp_path / "ck.pt"
    save_checkpoint(ckpt, build_model(cfg), cfg)
    root = make_cars_kaggle(tmp_path / "cars")
    out = tmp_path / "cars.h5"
    args = ["embed", str(ckpt), "--dataset", "cars196", "--root", str(root), "-o", str(out), "--device", "cpu",
            "--no-progress"]
    assert main(args) == 0
    es = store.load(out)
    ds = load_cars196(root)
    assert list(es.paths) == list(ds.paths)
    np.testing.assert_array_equal(es.labels, ds.labels)
    np.testing.assert_array_equal(es.split, ds.split)
    assert list(es.class_names) == CARS_NAMES
    want = pml_rows(pml_datasets.Cars196, root, "test", rel_to=root)
    assert [(p, int(lab) + 1) for p, lab, s in zip(es.paths, es.labels, es.split) if s == "test"] == want
    capsys.readouterr()
    (root / "anno_train.csv").write_text("00001.jpg,2,1,20,12,x\n")
    args[args.index("-o") + 1] = str(tmp_path / "b.h5")
    assert main(args) == 1 and not (tmp_path / "b.h5").exists()
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "anno_train.csv:1: malformed line" in err and "Traceback" not in err
