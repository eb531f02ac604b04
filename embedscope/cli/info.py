"""embedscope info FILE.h5"""

from __future__ import annotations

from embedscope.text import SHOWN_NAME  # (names of the file longer than it shortened in the middle)


def add_parser(sub, parents):
    p = sub.add_parser("info", parents=parents, help="summarise an embedding or saliency-maps file",
                       description="Print N, D, classes, splits, properties and provenance of an HDF5 file. A file "
                       "whose embeddings hold NaN or inf rows (written by another tool; every analysis "
                       "refuses it) is summarised too, with a row counting those rows and naming the first. A "
                       "saliency-maps file ('embedscope saliency') is summarised as such: its images, map size "
                       "and the SmoothGrad settings. Datasets and attributes that a user or another tool added "
                       "to the file are listed (at most 12 of each, then their count).")
    p.add_argument("file", metavar="EMB.h5", help="embedding file (.h5), or a saliency-maps file")
    p.set_defaults(func=run)
    return p


#: a value read from the file (a path, a provenance attribute, a type) longer than this: shortened so
SHOWN_VALUE = 200
#: the longest value cell printed, whatever made it (12 names of SHOWN_NAME characters fit)
MOST_CELL = 1200


def _cut(text, most: int = SHOWN_VALUE) -> str:
    """``str(text)`` shortened in the middle to ``most`` characters (``head…tail``: a path keeps its file name;
    :func:`embedscope.analyses.result._short`)."""
    from embedscope.analyses.result import _short as middle

    return middle(str(text), most)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _nonfinite_row(es, stats) -> dict | None:
    """The row naming the embedding rows that hold NaN or inf (the first by index and path), or None
    (``stats``: the :class:`~embedscope.store.embeddings.RowStats` of ``es``'s rows)."""
    import numpy as np

    nan_rows, inf_rows = stats.nan, stats.inf
    bad = np.flatnonzero(nan_rows | inf_rows)
    if not bad.size:
        return None
    kinds = ", ".join(f"{int(m.sum())} with {w}" for m, w in ((nan_rows, "NaN"), (inf_rows, "inf")) if m.any())
    i = int(bad[0])
    return {"field": "non-finite rows", "value": f"{bad.size} of {es.n} ({kinds}); first: row {i}, path "
            f"{_cut(es.paths[i])}; every analysis refuses the file"}


#: the checkpoint config's keys the model row shows (those it sets): which network made the embeddings
MODEL_KEYS = ("arch", "embed_dim", "normalize", "loss", "p_switch", "seed", "dataset", "head", "head_seed",
              "backbone_seed", "weights", "weights_ema")


def _model_line(cfg) -> str:
    """The model row: the config's arch, embed_dim, normalize, loss, p_switch, seed and dataset, and what
    tells the network apart (``embed --arch`` baselines): ``head`` unless a trained ``linear`` one, ``head_seed``
    of a ``random`` head, ``backbone_seed`` of a randomly initialised backbone, the file name of the
    ``weights`` it started from; those it sets (an ``--arch`` baseline records ``dataset`` as null: no
    'dataset=None'). (``head=random`` and the seeds were left out: two different networks showed one line.)"""
    if not isinstance(cfg, dict):
        return ""
    shown = []
    for k in sorted(cfg):
        v = cfg[k]
        if k not in MODEL_KEYS or v is None or (isinstance(v, str) and v == ""):
            continue
        if (k == "head" and v == "linear") or (k == "head_seed" and cfg.get("head") != "random"):
            continue  # (a trained head: nothing to tell apart; a head seed draws only a random head)
        if k == "weights_ema" and v is not True:
            continue
        if k == "weights":  # the file, not its folder (the config keeps the whole path)
            from pathlib import PurePath

            v = PurePath(str(v)).name or v
        shown.append(f"{k}={_cut(v, SHOWN_NAME)}")
    return ", ".join(shown)


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


def _maps_rows(sm, path) -> list[dict]:
    """The rows of a saliency-maps file (``sm``: its :class:`~embedscope.store.saliency.MapsSummary`, the
    maps checked a block of rows at a time, not held): what it holds, then its SmoothGrad settings and
    provenance."""
    import numpy as np

    a = sm.attrs
    what = (_count(sm.n, "pair", "pairs") + " (query + nearest retrieval)" if sm.kind == "pairs"
            else _count(sm.n, "image", "images"))
    rows = [
        {"field": "file", "value": str(path)},
        {"field": "kind", "value": f"saliency maps of {what}"},
        {"field": "map size", "value": " x ".join(map(str, sm.map_shape))},
        {"field": "classes", "value": str(len(np.unique(sm.labels)))},
        {"field": "images stored", "value": _images_stored(sm)},
    ]
    if sm.n_zero or sm.n_zero_retrieval:  # a collapsed model's maps (docs/saliency.md): the figures show bare images
        counts = (f"{sm.n_zero} of {sm.n}" if sm.n_zero_retrieval is None
                  else f"queries {sm.n_zero} of {sm.n}, retrievals {sm.n_zero_retrieval} of {sm.n}")
        rows.append({"field": "all-zero maps", "value": f"{counts} (zero gradients)"})
    for k in _MAPS_SHOWN:
        if k == "family":  # the family saliency-agreement and its --grid give the file (docs/saliency.md)
            from embedscope.families import family_of_maps, family_source

            source = family_source(a)
            rows.append({"field": k, "value": _cut(family_of_maps(a)) + _FAMILY_SOURCES[source]})
            continue
        if k in a and a[k] not in ("", None):
            v = a[k]
            if k == "train_classes" and str(v) == "0":  # (0 stands for no --train-classes: docs/saliency.md)
                v = "the data set's own split"
            rows.append({"field": k, "value": _cut(v)})
    model = _model_line(a.get("checkpoint_config"))
    if model:
        rows.append({"field": "model", "value": model})
    return rows


def _images_stored(sm) -> str:
    """yes / no; a pairs file holding the images of only its queries or only its retrievals says which
    (was "yes" for either)."""
    if sm.retrieval_has_images is None or sm.retrieval_has_images == sm.has_images:
        return "yes" if sm.has_images else "no"
    return "the queries' only" if sm.has_images else "the retrievals' only"


#: the attributes of an embedding file shown (in this order): where and how the rows were computed
#: (docs/store.md): the device, the precision and, on the CPU, the thread count, the batch size and torch's
#: version decide the last bits, so two files of one checkpoint can differ by ~1e-7
_PROVENANCE = ("dataset", "root", "transform", "device", "precision", "torch_threads", "batch_size", "torch_version",
               "checkpoint", "checkpoint_embedder", "checkpoint_format", "checkpoint_sha256", "split_selected",
               "split_source", "import_source", "import_format", "import_sha256", "import_embedding_key",
               "import_embedding_columns", "import_labels_file", "import_split_file", "import_paths_file",
               "import_class_names_file", "embedscope_version", "created", "format_version")
#: embedscope's own attributes of an embedding file not shown above (checkpoint_config: the model row)
_OWN_ATTRS = frozenset({*_PROVENANCE, "checkpoint_config", "imported", "source_file", "_source_stat", "_sha256"})
#: the datasets and groups of an embedding file (docs/store.md)
_SCHEMA = frozenset({"embeddings", "labels", "paths", "split", "class_names", "properties"})

#: the attributes of a saliency-maps file shown
_MAPS_SHOWN = ("name", "family", "distance", "n_samples", "noise", "order", "seed", "input_size", "transform",
               "dataset", "split", "train_classes", "root", "device", "precision", "checkpoint", "checkpoint_sha256",
               "embedscope_version", "created", "format_version")
#: where the family shown comes from when the file records none (embedscope.families.family_source)
_FAMILY_SOURCES = {"family": "", "checkpoint_config": " (from its checkpoint config; no family recorded)",
                   "loss": " (from its loss; no family recorded)", "": " (no family, checkpoint config or loss recorded)"}
#: every attribute embedscope writes into a maps file (embedscope.saliency.run, store.saliency.save_maps)
_MAPS_OWN_ATTRS = frozenset({*_MAPS_SHOWN, "format", "kind", "loss", "checkpoint_config", "distance_source",
                             "differentiated", "gradient_space", "noise_key", "selection", "amp", "seconds",
                             "n_zero_maps", "n_zero_retrieval_maps", "source_file"})
#: its datasets and groups (``retrieval`` holds those of the nearest retrievals of a pairs file)
_MAPS_SCHEMA = frozenset({"maps", "paths", "labels", "images", "class_names", "retrieval", "retrieval/maps",
                          "retrieval/paths", "retrieval/labels", "retrieval/images", "retrieval/distance"})

#: the most extra datasets and attributes listed (a file another tool filled with thousands: their count)
_MOST_EXTRAS = 12
#: the most objects walked to count them (a file of a million datasets: "more than ...")
_WALK_LIMIT = 100_000


def _short(value, most: int = 60) -> str:
    """An attribute's value on one short line (the table escapes it): text cut to ``most`` characters, an
    array of more than a few values as its shape and type."""
    import numpy as np

    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        value = f"array {_shape(value.shape)} {value.dtype}" if value.size > 8 else value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def _shape(shape) -> str:
    if shape is None:  # a null dataspace (h5py.Empty): no value at all
        return "empty (null dataspace)"
    return " x ".join(map(str, shape)) if shape else "scalar"


def _dtype(ds) -> str:
    import h5py

    try:
        text = h5py.check_string_dtype(ds.dtype)
    except Exception:  # noqa: BLE001 - a type h5py cannot describe: named as it prints
        text = None
    # (a compound type names its fields: another tool's may be long)
    return f"{text.encoding} text" if text is not None else _cut(ds.dtype)


def _extra_rows(f, schema: frozenset, own_attrs: frozenset, attrs: dict) -> list[dict]:
    """Rows for what another tool (or a user, with h5py) added to the file: its datasets and groups outside
    ``schema`` (name, shape, type; links named with their target, never followed: an external link would
    open another file), then the root attributes ``attrs`` outside ``own_attrs`` and any attribute of a
    dataset or group (embedscope writes none), each ``name: short value``. At most :data:`_MOST_EXTRAS`
    of each, then how many there are in all."""
    import h5py

    objects: list[str] = []
    object_attrs: list[str] = []
    count = 0

    def walk(g, prefix: str) -> None:
        nonlocal count
        for name in g:
            if count >= _WALK_LIMIT:
                return
            path = f"{prefix}{name}"
            link = g.get(name, getlink=True)
            own = path in schema or (prefix == "properties/" and "properties" in schema)
            if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
                count += 1
                target = (link.path if isinstance(link, h5py.SoftLink)
                          else f"{link.filename}:{link.path}")
                objects.append(f"{_cut('/' + path)}: a link to {_cut(target)}")
                continue
            try:
                obj = g[name]
            except Exception:  # noqa: BLE001 - an object HDF5 cannot open here: named, not described
                count += 1
                objects.append(f"{_cut('/' + path)}: cannot be read")
                continue
            object_attrs.extend(f"{_cut(k, SHOWN_NAME)} (of {_cut('/' + path)}): {_short(_attr(obj, k))}"
                                for k in obj.attrs)
            if isinstance(obj, h5py.Group):
                if not own and not len(obj):
                    count += 1
                    objects.append(f"{_cut('/' + path)}: an empty group")
                walk(obj, path + "/")
            elif isinstance(obj, h5py.Datatype):  # a named (committed) type: no shape (was an AttributeError)
                count += 1
                objects.append(f"{_cut('/' + path)}: a named datatype {_dtype(obj)}")
            elif not own:
                count += 1
                objects.append(f"{_cut('/' + path)}: {_shape(obj.shape)} {_dtype(obj)}")

    walk(f, "")
    root = [f"{_cut(k, SHOWN_NAME)}: {_short(v)}" for k, v in attrs.items() if k not in own_attrs]
    rows = []
    for field, items, n in (("other dataset", objects, count), ("other attribute", root + object_attrs, None)):
        n = len(items) if n is None else n
        rows += [{"field": field, "value": v} for v in items[:_MOST_EXTRAS]]
        if n > _MOST_EXTRAS:  # (the walk stopped at _WALK_LIMIT: "over" that many)
            total = f"over {n}" if n >= _WALK_LIMIT else str(n)
            rows.append({"field": field, "value": f"... and {n - _MOST_EXTRAS} more ({total} in all)"})
    return rows


def _attr(obj, key):
    """An attribute of ``obj``, or what stopped it being read (a type h5py cannot convert)."""
    try:
        return obj.attrs[key]
    except Exception as e:  # noqa: BLE001 - shown as unreadable, the rest of the summary stands
        return f"(cannot be read: {e.__class__.__name__})"


def _names(names, most: int = 12) -> str:
    """Property names for one row: all up to ``most``, else the first few, ..., the last and the count;
    a name longer than :data:`SHOWN_NAME` shortened in the middle (two names never shown alike)."""
    from embedscope.analyses.result import _short_unique

    names = [str(n) for n in names]
    if len(names) > most:  # (only those shown: ..., and the last)
        shown = _short_unique([*names[:most - 2], names[-1]], SHOWN_NAME)
        return ", ".join([*shown[:-1], "...", shown[-1]]) + f" ({len(names)} properties)"
    names = _short_unique(names, SHOWN_NAME)
    return ", ".join(names)


def _open(path: str):
    """The file opened once (h5py, read); a folder, a checkpoint or another file that is no HDF5 file:
    the line naming what it is and the command that reads it, else the store's line saying why not."""
    from pathlib import Path

    from embedscope.errors import EmbedscopeError
    from embedscope.store.embeddings import open_hdf5

    p = Path(path)
    if not p.exists():
        raise EmbedscopeError(f"{p}: no such file")
    try:
        return open_hdf5(p, "an embedding file (.h5)")
    except EmbedscopeError:
        if p.is_file() or p.is_dir():  # (a named pipe is not read: that waited for a writer, for ever)
            _check_not_other_kind(path)  # (read only then: a file HDF5 opens is none of these)
        raise


def run(args) -> int:
    from pathlib import Path

    from embedscope.store.embeddings import readable, scan_open
    from embedscope.store.saliency import FORMAT as MAPS_FORMAT
    from embedscope.store.saliency import scan_maps_open
    from embedscope.tables import format_table

    path = Path(args.file)
    with _open(args.file) as f, readable(path):  # one opening: the kind of file, its contents and what else
        fmt = f.attrs.get("format")  # it holds (h5py's errors of a file damaged inside: one line naming it)
        if (fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else fmt) == MAPS_FORMAT:
            # every check of load_maps, the maps read a block of rows at a time and the images not at all
            # (5,000 maps of 224 x 224 and their images: about 1 GB was read to print this summary)
            sm = scan_maps_open(f, path)
            rows = _maps_rows(sm, args.file) + _extra_rows(f, _MAPS_SCHEMA, _MAPS_OWN_ATTRS, sm.attrs)
        else:
            # NaN / inf rows (a foreign writer): info is how a user finds them. The embeddings are read a
            # block of rows at a time (memory bounded whatever N x D) and only measured: the set holds a
            # stand-in for them
            es, stats = scan_open(f, path, finite=False)
            rows = _embedding_rows(es, stats, args.file) + _extra_rows(f, _SCHEMA, _OWN_ATTRS, es.attrs)
    # strings from the file are shown with control characters escaped (no terminal escapes): format_table
    # escapes every cell (escaped here too, a path's backslash was shown doubled twice)
    # (each long name and value was shortened where it was put in; no cell wider than MOST_CELL whatever made it)
    print(format_table([{**r, "value": _cut(r["value"], MOST_CELL)} for r in rows], ["field", "value"]))
    return 0


def _embedding_rows(es, stats, name: str) -> list[dict]:
    """The rows of an embedding file: N x D, classes, splits, properties, then its provenance (``es``, read
    by :func:`~embedscope.store.embeddings.scan_open`: its embeddings' type and shape, their rows'
    ``stats``)."""
    import numpy as np

    from embedscope.tables import format_number

    nonfinite = _nonfinite_row(es, stats)
    s = es.summary(norms=stats.norms)
    norm = format_number(float(s["mean_norm"]), nan="–")  # – : a file of no rows; 1e-30 not as 0.0000
    if nonfinite is not None:  # the mean norm of the finite rows (the others' norm is NaN or inf)
        ok = stats.finite
        norms = stats.norms[ok]
        norm = (f"{format_number(float(norms.mean()))} (over the {int(ok.sum())} finite rows)" if ok.any()
                else "– (no finite row)")
    rows = [
        {"field": "file", "value": name},
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
        # (a table of 3000 measurements: not every name on one line)
        {"field": "properties", "value": _names(s["properties"]) or "-"},
    ]
    uniq, counts = np.unique(es.paths, return_counts=True)
    if (counts > 1).any():  # files are matched by path (yoke, add-properties, query vs gallery): say so
        rows.append({"field": "repeated paths", "value": f"{int((counts > 1).sum())} path(s) name "
                     f"{int(counts[counts > 1].sum())} rows (e.g. {_cut(uniq[counts > 1][0])})"})
    for k in _PROVENANCE:
        if k in es.attrs and es.attrs[k] != "":
            v = es.attrs[k]
            if isinstance(v, (list, tuple)):  # the table columns an import took as the embedding
                from embedscope.analyses.result import _short_unique

                # (each column name shortened, two never shown alike; the row is not cut again)
                cols = _short_unique(v if len(v) <= 8 else [*v[:4], v[-1]], SHOWN_NAME)
                v = ", ".join(cols) if len(v) <= 8 else ", ".join(cols[:4]) + f", ..., {cols[-1]} ({len(v)})"
            else:
                v = _cut(v)
            rows.append({"field": k, "value": v})
    model = _model_line(es.attrs.get("checkpoint_config"))  # which run of a grid
    if model:
        rows.append({"field": "model", "value": model})
    return rows
