"""embedscope info FILE.h5"""

from __future__ import annotations


def add_parser(sub, parents):
    p = sub.add_parser("info", parents=parents, help="summarise an embedding or saliency-maps file",
                       description="Print N, D, classes, splits, properties and provenance of an HDF5 file. A file "
                       "whose embeddings hold NaN or inf rows (written by another tool; every analysis "
                       "refuses it) is summarised too, with a row counting those rows and naming the first. A "
                       "saliency-maps file ('embedscope saliency') is summarised as such: its images, map size "
                       "and the SmoothGrad settings.")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5), or a saliency-maps file")
    p.set_defaults(func=run)
    return p


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _nonfinite_row(es) -> dict | None:
    """The row naming the embedding rows that hold NaN or inf (the first by index and path), or None."""
    import numpy as np

    X = es.embeddings
    nan_rows = np.isnan(X).any(axis=1)
    inf_rows = np.isinf(X).any(axis=1)
    bad = np.flatnonzero(nan_rows | inf_rows)
    if not bad.size:
        return None
    kinds = ", ".join(f"{int(m.sum())} with {w}" for m, w in ((nan_rows, "NaN"), (inf_rows, "inf")) if m.any())
    i = int(bad[0])
    return {"field": "non-finite rows", "value": f"{bad.size} of {es.n} ({kinds}); first: row {i}, path "
            f"{es.paths[i]}; every analysis refuses the file"}


def _model_line(cfg) -> str:
    """The model row: the config's arch, embed_dim, normalize, loss, p_switch, seed and dataset, those it
    sets (an ``--arch`` baseline records ``dataset`` as null: no 'dataset=None')."""
    if not isinstance(cfg, dict):
        return ""
    return ", ".join(f"{k}={cfg[k]}" for k in sorted(cfg) if k in (
        "arch", "embed_dim", "normalize", "loss", "p_switch", "seed", "dataset") and cfg[k] not in (None, ""))


def _check_not_other_kind(path) -> None:
    """One line naming what a study folder, a train-grid folder or a checkpoint given to info is and the
    command that reads it (was "is a directory" / "not a readable HDF5 file: no HDF5 signature")."""
    from pathlib import Path

    from embedscope.errors import EmbedscopeError

    p = Path(path)
    if p.is_dir():
        if (p / "study.json").is_file():
            raise EmbedscopeError(f"{path} is a study folder ('embedscope study'), not an embedding file: its "
                                  f"summary is 'embedscope report {path} -o page.html'")
        if (p / "grid.csv").is_file():
            raise EmbedscopeError(f"{path} is a train-grid folder, not an embedding file: 'embedscope study {path}' "
                                  "measures its runs, 'embedscope embed CHECKPOINT' embeds one")
        return  # (store.load: "is a directory")
    try:
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError:
        return  # (store.load says why)
    if head.startswith(b"\x89HDF"):
        return
    # torch.save writes a zip (PK..) or, before torch 1.6, a pickle (0x80 then the protocol); safetensors
    # and Roth et al.'s checkpoint*.pth.tar are named so
    if head[:4] == b"PK\x03\x04" or head[:1] == b"\x80" or p.name.endswith(
            (".pt", ".pth", ".pth.tar", ".ckpt", ".safetensors")):
        raise EmbedscopeError(f"{path} looks like a model checkpoint, not an embedding file: embed a data set "
                              f"with it first ('embedscope embed {path} --dataset ... -o EMB.h5'), then run info "
                              "on EMB.h5")


def _is_maps_file(path) -> bool:
    """Whether ``path`` is a saliency-maps file (its ``format`` attribute; anything else: False)."""
    from embedscope.store.saliency import FORMAT

    try:
        import h5py

        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
    except Exception:  # noqa: BLE001 - store.load says what is wrong with the file
        return False
    return (fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else fmt) == FORMAT


def _maps_rows(path) -> list[dict]:
    """The rows of a saliency-maps file: what it holds, then its SmoothGrad settings and provenance."""
    import numpy as np

    from embedscope.store.saliency import load_maps

    sm = load_maps(path)
    a = sm.attrs
    what = (_count(sm.n, "pair", "pairs") + " (query + nearest retrieval)" if sm.kind == "pairs"
            else _count(sm.n, "image", "images"))
    rows = [
        {"field": "file", "value": str(path)},
        {"field": "kind", "value": f"saliency maps of {what}"},
        {"field": "map size", "value": " x ".join(map(str, sm.maps.shape[1:]))},
        {"field": "classes", "value": str(len(np.unique(sm.labels)))},
        {"field": "images stored", "value": "yes" if sm.images is not None else "no"},
    ]
    for k in ("name", "family", "distance", "n_samples", "noise", "order", "seed", "input_size", "transform",
              "dataset", "split", "train_classes", "root", "device", "precision", "checkpoint", "checkpoint_sha256",
              "embedscope_version", "created", "format_version"):
        if k in a and a[k] not in ("", None):
            rows.append({"field": k, "value": str(a[k])})
    model = _model_line(a.get("checkpoint_config"))
    if model:
        rows.append({"field": "model", "value": model})
    return rows


def run(args) -> int:
    import numpy as np

    from embedscope import store
    from embedscope.errors import UsageError
    from embedscope.tables import format_number, format_table

    if args.file == "":  # (was ". is a directory": Path("") is the current folder)
        raise UsageError("the file name is empty (an unset shell variable?)")
    _check_not_other_kind(args.file)
    if _is_maps_file(args.file):
        print(format_table(_maps_rows(args.file), ["field", "value"]))  # (every cell escaped)
        return 0
    es = store.load(args.file, finite=False)  # NaN / inf rows (a foreign writer): info is how a user finds them
    nonfinite = _nonfinite_row(es)
    s = es.summary()
    norm = format_number(float(s["mean_norm"]), nan="–")  # – : a file of no rows; 1e-30 not as 0.0000
    if nonfinite is not None:  # the mean norm of the finite rows (the others' norm is NaN or inf)
        ok = np.all(np.isfinite(es.embeddings), axis=1)
        norms = np.linalg.norm(es.embeddings[ok].astype(np.float64), axis=1)
        norm = (f"{format_number(float(norms.mean()))} (over the {int(ok.sum())} finite rows)" if ok.any()
                else "– (no finite row)")
    rows = [
        {"field": "file", "value": args.file},
        {"field": "N x D", "value": f"{s['N']} x {s['D']}"},
        {"field": "dtype", "value": str(es.embeddings.dtype)},
        *([nonfinite] if nonfinite is not None else []),
        # classes with at least one row; the file may name more (a data set's unused classes)
        {"field": "classes", "value": str(s["classes"]) + (
            f" ({len(es.class_names)} named)" if len(es.class_names) != s["classes"] else "")},
        # one row per split the file holds (train, test, val, query, gallery)
        *({"field": k[:-2], "value": _count(s[k], "image", "images") + ", "
           + _count(s[k[:-2] + "_classes"], "class", "classes")} for k in s if k.endswith("_N") and k != "N"),
        {"field": "mean embedding norm", "value": norm},
        {"field": "properties", "value": ", ".join(map(str, s["properties"])) or "-"},
    ]
    uniq, counts = np.unique(es.paths, return_counts=True)
    if (counts > 1).any():  # files are matched by path (yoke, add-properties, query vs gallery): say so
        rows.append({"field": "repeated paths", "value": f"{int((counts > 1).sum())} path(s) name "
                     f"{int(counts[counts > 1].sum())} rows (e.g. {uniq[counts > 1][0]})"})
    # where and how the rows were computed (docs/store.md): the device, the precision and, on the CPU, the
    # thread count, the batch size and torch's version decide the last bits, so two files of one checkpoint can
    # differ by ~1e-7
    for k in ("dataset", "root", "transform", "device", "precision", "torch_threads", "batch_size", "torch_version",
              "checkpoint", "checkpoint_embedder", "checkpoint_format", "checkpoint_sha256", "split_selected", "split_source",
              "import_source", "import_format", "import_sha256", "import_embedding_key", "import_embedding_columns",
              "import_labels_file", "import_split_file", "import_paths_file", "import_class_names_file",
              "embedscope_version", "created", "format_version"):
        if k in es.attrs and es.attrs[k] != "":
            v = es.attrs[k]
            if isinstance(v, (list, tuple)):  # the table columns an import took as the embedding
                v = ", ".join(map(str, v)) if len(v) <= 8 else ", ".join(map(str, v[:4])) + f", ..., {v[-1]} ({len(v)})"
            rows.append({"field": k, "value": str(v)})
    model = _model_line(es.attrs.get("checkpoint_config"))  # which run of a grid
    if model:
        rows.append({"field": "model", "value": model})
    # strings from the file are shown with control characters escaped (no terminal escapes): format_table
    # escapes every cell (escaped here too, a path's backslash was shown doubled twice)
    print(format_table(rows, ["field", "value"]))
    return 0
