"""embedscope evaluate EMB.h5: retrieval and clustering metrics (METHODS.md §1)."""

from __future__ import annotations

from embedscope.cli.common import add_device, add_force, add_outputs, positive_int

KEY_CHOICES = ("R@k", "P@1", "R-Precision", "MAP@R", "mAP@C", "mAP@1000", "NMI", "F1")


def add_parser(sub, parents):
    p = sub.add_parser(
        "evaluate", parents=parents, help="retrieval and clustering metrics (R@k, MAP@R, NMI, ...)",
        description="R@k, P@1, R-Precision, MAP@R, mAP@C, mAP@1000 (exact, one blocked kNN pass) and "
        "k-means NMI / F1 of one split (each query excluded from its own neighbours), or of query "
        "rows against a separate reference split. Definitions: METHODS.md §1.")
    p.add_argument("file", help="embedding file (.h5)")
    p.add_argument("--split", default="test", choices=["train", "test", "all"],
                   help="rows that are both queries and references (default: test)")
    p.add_argument("--query-split", choices=["train", "test", "all"],
                   help="query rows (default: --split); with --reference-split: separate sets")
    p.add_argument("--reference-split", choices=["train", "test", "all"],
                   help="reference rows searched by the queries (nothing excluded when it differs from the query split)")
    p.add_argument("--metric", default="cosine", choices=["cosine", "euclidean"],
                   help="ranking distance (default: cosine, rows L2-normalised)")
    p.add_argument("--k", nargs="+", type=positive_int, default=[1, 2, 4, 8], metavar="K",
                   help="the k of R@k (default: 1 2 4 8)")
    p.add_argument("--include", nargs="+", metavar="KEY",
                   help="compute only these (R@k for every --k, P@1, R-Precision, MAP@R, mAP@C, mAP@1000, "
                   "NMI, F1; default: all)")
    p.add_argument("--seed", type=int, default=0, help="k-means seed (default: 0)")
    p.add_argument("--niter", type=positive_int, default=20, help="k-means iterations (default: 20)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_device(p)
    add_outputs(p)
    add_force(p)
    p.set_defaults(func=run)
    return p


def _include(args) -> list[str] | None:
    from embedscope.errors import UsageError

    if not args.include:
        return None
    out: list[str] = []
    for key in args.include:
        if key == "R@k":
            out += [f"R@{k}" for k in args.k]
        elif key.startswith("R@") and key[2:].isdigit():
            if int(key[2:]) not in args.k:
                raise UsageError(f"--include {key}: {key[2:]} is not among --k {' '.join(map(str, args.k))}")
            out.append(key)
        elif key in KEY_CHOICES:
            out.append(key)
        else:
            raise UsageError(f"--include: unknown metric '{key}' (choose from {', '.join(KEY_CHOICES)})")
    return list(dict.fromkeys(out))


def run(args) -> int:
    import time

    import numpy as np

    from embedscope import store
    from embedscope.errors import EmbedscopeError
    from embedscope.fileio import check_writable, sha256_file
    from embedscope.metrics import retrieval_metrics
    from embedscope.tables import format_table, write_csv, write_json

    include = _include(args)
    for out in (args.json, args.csv):
        if out:
            check_writable(out, force=args.force)  # refuse before the work, not after
    if args.json and args.csv and args.json == args.csv:
        raise EmbedscopeError("--json and --csv name the same file")

    es = store.load(args.file)
    q_split = args.query_split or args.split
    r_split = args.reference_split or q_split
    separate = r_split != q_split
    if separate and "all" in (q_split, r_split):
        raise EmbedscopeError("'all' overlaps the other split: use train and test as separate query/reference sets")
    q = es.subset(q_split)
    kw = {}
    if separate:
        r = es.subset(r_split)
        kw = {"X_ref": r.embeddings, "y_ref": r.labels}
    t0 = time.perf_counter()
    res = retrieval_metrics(q.embeddings, q.labels, ks=tuple(args.k), metric=args.metric, include=include,
                            device=args.device, seed=args.seed, niter=args.niter, progress=not args.no_progress,
                            **kw)
    seconds = time.perf_counter() - t0
    counts = {k: res.pop(k) for k in ("n_queries", "n_lone", "n_evaluated", "depth")}
    metrics = {k: float(v) for k, v in res.items()}

    prov = {
        "file": str(args.file),
        "sha256": sha256_file(args.file),
        "query_split": q_split,
        "reference_split": r_split,
        "protocol": "separate query and reference sets" if separate else "same set, query excluded",
        "metric": args.metric,
        "N_queries": int(q.n),
        "N_references": int(kw["X_ref"].shape[0]) if separate else int(q.n),
        "D": int(q.dim),
        "classes": int(len(np.unique(q.labels))),
        "n_lone": int(counts["n_lone"]),
        "n_evaluated": int(counts["n_evaluated"]),
        "depth": int(counts["depth"]),
        "kmeans": {"seed": args.seed, "niter": args.niter} if ("NMI" in metrics or "F1" in metrics) else None,
        "seconds": round(seconds, 3),
    }
    for k in ("dataset", "checkpoint", "checkpoint_sha256"):
        if es.attrs.get(k) not in (None, ""):
            prov[k] = es.attrs[k]

    rows = [{"measure": k, "value": v} for k, v in metrics.items()]
    title = (f"{args.file}: {q_split} queries ({q.n}, {prov['classes']} classes) vs "
             f"{r_split + ' references' if separate else 'themselves'}, {args.metric}; "
             f"{prov['n_lone']} lone queries left out")
    print(format_table(rows, ["measure", "value"], title=title))
    if args.json:
        write_json(args.json, {"provenance": prov, "metrics": metrics}, force=args.force)
        print(f"wrote {args.json}")
    if args.csv:
        flat = {k: (v if not isinstance(v, dict) else (";".join(f"{a}={b}" for a, b in v.items())))
                for k, v in prov.items()}
        csv_rows = [{**flat, "measure": k, "value": v} for k, v in metrics.items()]
        write_csv(args.csv, csv_rows, ["measure", "value"] + list(flat), force=args.force)
        print(f"wrote {args.csv}")
    return 0

