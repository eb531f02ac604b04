"""Roth et al.'s toy example for ρ-regularisation (supp. G, Fig. 6; docs/methods.md §5).

Reference code: ``toy_experiments/toy_example_diagonal_lines.py``. Training data: 4 classes on the
diagonal y = x; test data: 4 classes on lines parallel to the axes. A two-layer MLP with a 2-D,
L2-normalised output is trained with a contrastive loss over all valid triplets of each batch:

    L = mean_(a,p,n) ‖φ_a − φ_p‖ + mean_(a,p,n) relu(0.1 − ‖φ_a − φ_n‖)

Three variants, with the same data, initialisation and batches per seed:

* ``baseline``: no regularisation;
* ``paper``: ρ-regularised as the paper describes it: with probability p_switch (0.001) a
  triplet's negative is replaced by its positive (a, p, n) → (a, p, p), attraction term kept;
* ``code``: as the reference code: the same switch, but turning regularisation on also drops
  the attraction term, so L = mean relu(0.1 − ‖φ_a − φ_n'‖).

ρ of the training embeddings uses all singular values (``exclude_top=0``): with a 2-D embedding,
dropping the top one would leave a single value and ρ = 0 (docs/methods.md §2, §5). Test R@1 is the
leave-one-out nearest-neighbour hit rate on the 60 test points (docs/methods.md §1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from embedscope.errors import EmbedscopeError

VARIANTS = ("baseline", "paper", "code")
#: How :func:`toy_figure` draws each variant's bars: black and white, told apart by fill and hatching,
#: because every colour of the figure is a class's (tab10's first four the training classes, the next
#: four the test classes): a coloured variant read as a class (the paper's bars were training class 1's
#: blue, the code's class 4's red, the baseline's grey test class 4's)
VARIANT_BARS = {"baseline": {"facecolor": "white", "edgecolor": "black"},
                "paper": {"facecolor": "white", "edgecolor": "black", "hatch": "////"},
                "code": {"facecolor": "black", "edgecolor": "black"}}
TRAIN_RANGES = ((0.1, 0.3), (0.35, 0.55), (0.6, 0.8), (0.85, 1.05))
MARGIN = 0.1


def toy_data(seed: int = 1, n_per_class: int = 15) -> dict[str, np.ndarray]:
    """The toy data set (docs/methods.md §5): 15 of 100 linspace points per class, drawn with ``seed``.

    Training: class k on y = x for t in TRAIN_RANGES[k]. Test: x = 0.2, y ∈ [0.2, 0.4];
    x = 0.2, y ∈ [0.55, 0.85]; y = 0.2, x ∈ [0.4, 0.6]; y = 0.2, x ∈ [0.7, 0.9].
    """
    rng = np.random.default_rng(seed)

    def pick(lo, hi):
        return np.sort(rng.choice(np.linspace(lo, hi, 100), n_per_class, replace=False))

    Xtr, ytr = [], []
    for k, (lo, hi) in enumerate(TRAIN_RANGES):
        t = pick(lo, hi)
        Xtr.append(np.stack([t, t], 1))
        ytr += [k] * n_per_class
    Xte, yte = [], []
    for k, (fixed_x, lo, hi) in enumerate([(True, 0.2, 0.4), (True, 0.55, 0.85), (False, 0.4, 0.6), (False, 0.7, 0.9)]):
        t = pick(lo, hi)
        c = np.full_like(t, 0.2)
        Xte.append(np.stack([c, t], 1) if fixed_x else np.stack([t, c], 1))
        yte += [k] * n_per_class
    return {"Xtr": np.concatenate(Xtr).astype(np.float32), "ytr": np.array(ytr),
            "Xte": np.concatenate(Xte).astype(np.float32), "yte": np.array(yte)}


def toy_network():
    """Linear(2,30)–ReLU–Linear(30,30)–ReLU–Linear(30,2)–L2-normalise (docs/methods.md §5)."""
    import torch
    from torch import nn

    class ToyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(2, 30), nn.ReLU(), nn.Linear(30, 30), nn.ReLU(), nn.Linear(30, 2))

        def forward(self, x):
            return torch.nn.functional.normalize(self.net(x), dim=1)

    return ToyNet()


def _r1(X: np.ndarray, y: np.ndarray) -> float:
    d = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return float((y[np.argmin(d, axis=1)] == y).mean())


def train_toy(variant: str, seed: int = 1, *, p_switch: float = 0.001, iterations: int = 200,
              batch_size: int = 24, lr: float = 0.03, data: dict | None = None) -> dict[str, Any]:
    """Train one variant of the toy example (Roth supp. G; docs/methods.md §5) and measure it.

    Returns a dict with the training and test embeddings, ``rho`` (ρ of the training embeddings
    over all singular values, docs/methods.md §2), ``singular_values``, ``r1_test``, ``r1_train``,
    ``switch_rate`` (switched / all triplets; 0 for the baseline) and the loss curve.
    """
    from embedscope.device import torch_threads

    if variant not in VARIANTS:
        raise EmbedscopeError(f"unknown toy variant '{variant}' (choose {', '.join(VARIANTS)})")
    with torch_threads(1):  # 24-point batches: threads cost more than they give
        return _train_toy(variant, seed, p_switch, iterations, batch_size, lr, data)


def _train_toy(variant, seed, p_switch, iterations, batch_size, lr, data):
    import torch

    from embedscope.metrics import spectral_decay

    p = 0.0 if variant == "baseline" else float(p_switch)
    data = data or toy_data(seed)
    g = torch.Generator().manual_seed(int(seed))
    torch.manual_seed(int(seed))  # network initialisation: the same for every variant of a seed
    net = toy_network()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    Xtr = torch.from_numpy(data["Xtr"])
    ytr = torch.from_numpy(data["ytr"])
    n_trip = n_sw = 0
    losses = []
    for _ in range(iterations):
        idx = torch.randperm(len(Xtr), generator=g)[:batch_size]
        y = ytr[idx]
        z = net(Xtr[idx])
        same = y[:, None] == y[None, :]
        pos = same & ~torch.eye(len(y), dtype=torch.bool)
        a, pp, n = torch.nonzero(pos[:, :, None] & ~same[:, None, :], as_tuple=True)
        sw = torch.rand(len(a), generator=g) < p
        n = torch.where(sw, pp, n)  # switched: the "negative" is the anchor's positive
        n_trip += len(a)
        n_sw += int(sw.sum())
        repel = torch.relu(MARGIN - (z[a] - z[n]).norm(dim=1)).mean()
        if variant == "code" and p > 0:
            loss = repel
        else:
            loss = (z[a] - z[pp]).norm(dim=1).mean() + repel
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        Etr = net(Xtr).numpy().astype(np.float64)
        Ete = net(torch.from_numpy(data["Xte"])).numpy().astype(np.float64)
    s = np.linalg.svd(Etr, compute_uv=False)
    return {
        "variant": variant, "seed": int(seed), "p_switch": p, "data": data,
        "emb_train": Etr, "emb_test": Ete, "singular_values": s,
        "rho": float(spectral_decay(Etr, exclude_top=0)),
        "r1_test": _r1(Ete, data["yte"]), "r1_train": _r1(Etr, data["ytr"]),
        "switch_rate": n_sw / max(n_trip, 1), "switched": n_sw, "triplets": n_trip, "losses": losses,
    }


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows per variant: mean ± std (ddof=1) over seeds of ρ (train) and R@1 (test, train); the std is
    None for one seed."""
    rows = []
    for v in VARIANTS:
        rs = [r for r in results if r["variant"] == v]
        if not rs:
            continue
        row: dict[str, Any] = {"variant": v, "p_switch": rs[0]["p_switch"], "seeds": len(rs)}
        for key, name in (("rho", "rho_train"), ("r1_test", "R@1_test"), ("r1_train", "R@1_train")):
            vals = np.array([r[key] for r in rs])
            row[f"{name}_mean"] = float(vals.mean())
            # one seed: no spread (the sample std is undefined; the terminal shows none): empty in the CSV, null
            # in the JSON, not a 0 that reads as "no variation over seeds"
            row[f"{name}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else None
        row["switch_rate"] = float(np.mean([r["switch_rate"] for r in rs]))
        rows.append(row)
    return rows


def _angles(E: np.ndarray) -> np.ndarray:
    """Angles (degrees) of 2-D embeddings, the circle cut in its largest empty arc: a class around
    ±180° is one cluster (170°, 190°), not two at the ends of the axis (170°, -170°). Unchanged when the
    largest gap already spans ±180°."""
    ang = np.degrees(np.arctan2(E[:, 1], E[:, 0]))
    if len(ang) < 2:
        return ang
    s = np.sort(ang)
    lo = s[(int(np.argmax(np.diff(np.r_[s, s[0] + 360.0]))) + 1) % len(s)]  # the first angle after the gap
    return (ang - lo) % 360.0 + lo


def toy_figure(results: list[dict[str, Any]], seed: int):
    """Fig. 6 of Roth et al. for one seed: data, embeddings of the three variants, their spectra."""
    import matplotlib.pyplot as plt

    from embedscope.viz.figures import PAPER_RC

    by_v = {r["variant"]: r for r in results if r["seed"] == seed}
    data = by_v["baseline"]["data"]
    colors = plt.get_cmap("tab10").colors
    with plt.rc_context(PAPER_RC):
        fig, axes = plt.subplots(2, 4, figsize=(10, 5.2))
        ax = axes[0, 0]
        for k in range(4):
            m = data["ytr"] == k
            ax.scatter(*data["Xtr"][m].T, s=12, color=colors[k], marker="o")
            m = data["yte"] == k
            ax.scatter(*data["Xte"][m].T, s=14, color=colors[k + 4], marker="x")
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], ls="", marker="o", color="black", label="train"),  # (black: no class's colour)
                   Line2D([], [], ls="", marker="x", color="black", label="test")]
        ax.legend(handles=handles, fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 0.24))
        ax.set(title="Data", xlabel="x₁", ylabel="x₂", aspect="equal", xlim=(0, 1.1), ylim=(0, 1.1))
        ax = axes[1, 0]
        width = 0.25
        for j, v in enumerate(VARIANTS):
            s = by_v[v]["singular_values"]
            ax.bar(np.arange(1, len(s) + 1) + (j - 1) * width, s / s.sum(), width,
                   label=f"{v} (ρ={by_v[v]['rho']:.3f})", linewidth=0.8, **VARIANT_BARS[v])
        ax.set(title="Spectra of training embeddings", xlabel="singular value index k",
               ylabel="sₖ / Σ s", xticks=[1, 2], ylim=(0, 1.45), yticks=[0, 0.25, 0.5, 0.75, 1.0])
        ax.legend(fontsize=7, loc="upper center", ncol=1, frameon=False)  # above the bars (they reach <= 1)
        # the switch probability the runs had (--p-switch; was 0.001 whatever it was); with p = 0 the
        # 'code' variant keeps its attraction term (_train_toy drops it only with the switch on)
        p = by_v["paper"]["p_switch"]
        titles = {"baseline": "baseline", "paper": f"paper: p={p:g}, attraction kept",
                  "code": f"code: p={p:g}, {'no attraction' if by_v['code']['p_switch'] > 0 else 'attraction kept'}"}
        for j, v in enumerate(VARIANTS):
            r = by_v[v]
            for row, (E, y, split, off) in enumerate([(r["emb_train"], data["ytr"], "train", 0),
                                                      (r["emb_test"], data["yte"], "test", 4)]):
                ax = axes[row, j + 1]
                ang = _angles(E)
                for k in range(4):
                    m = y == k
                    ax.scatter(ang[m], np.full(m.sum(), k + 1), s=14, color=colors[k + off],
                               marker="o" if split == "train" else "x", alpha=0.8)
                r1 = r["r1_train"] if split == "train" else r["r1_test"]
                ax.set(title=f"{titles[v]}\n{split} embeddings (R@1 {r1:.2f})", yticks=[1, 2, 3, 4],
                       ylim=(0.4, 4.6), xlabel="angle of φ(x) (degrees)",
                       ylabel=f"{split} class")
                ax.grid(axis="x", color="0.9", lw=0.6)
        fig.suptitle(f"Toy example of Roth et al. (supp. G, Fig. 6), seed {seed}: 2-D normalised embeddings as angles",
                     fontsize=9)
        fig.tight_layout()
    return fig


def run_toy(out_dir: str | os.PathLike, *, seeds: int = 5, first_seed: int = 1, p_switch: float = 0.001,
            force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the three variants over ``seeds`` seeds (first_seed, first_seed+1, …); write
    ``fig6.png``/``fig6.pdf`` (the first seed), ``toy_table.csv`` and ``toy_table.json``."""
    from embedscope.fileio import check_writable
    from embedscope.progress import progress_bar
    from embedscope.tables import write_csv, write_json
    from embedscope.viz.figures import figure_paths, save_figure

    if seeds < 1:
        raise EmbedscopeError(f"--seeds must be at least 1, got {seeds}")
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():  # (passed the checks below, then, after the training: "bl/fig6.png:
        # cannot be written (No such file or directory)", not saying bl is a link; make-shapes' words)
        raise EmbedscopeError(f"{out}: a symbolic link to {os.readlink(out)}, which does not exist: create the "
                              "folder it names, or give another folder")
    if out.exists() and not out.is_dir():
        raise EmbedscopeError(f"{out} is a file, expected an output folder")
    files = [*figure_paths(out / "fig6"), out / "toy_table.csv", out / "toy_table.json"]
    for f in files:
        check_writable(f, force=force)
    results = []
    jobs = [(s, v) for s in range(first_seed, first_seed + seeds) for v in VARIANTS]
    for s, v in progress_bar(jobs, desc="toy", unit="run", enabled=progress):
        results.append(train_toy(v, s, p_switch=p_switch))
    rows = summarize(results)
    fig = toy_figure(results, first_seed)
    save_figure(fig, out / "fig6", force=force)
    import matplotlib.pyplot as plt

    plt.close(fig)
    per_run = [{k: r[k] for k in ("variant", "seed", "p_switch", "rho", "r1_test", "r1_train", "switch_rate")}
               for r in results]
    write_csv(out / "toy_table.csv", rows, force=force)
    write_json(out / "toy_table.json", {"summary": rows, "runs": per_run}, force=force)
    return {"rows": rows, "runs": per_run, "files": [str(f) for f in files]}
