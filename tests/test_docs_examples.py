"""The code blocks of docs/*.md (but datasets.md and PERFORMANCE.md) run as written, in order, as
tests/test_readme.py runs the README's: shell blocks with bash in a scratch folder (the venv's
`embedscope` and `python` first on PATH, `.venv` linked there), Python blocks with the venv's python,
each statement as at the interactive prompt (an expression's value printed), so the values the
comments state can be compared. They run on the built-in digits or a small generated `shapes` set,
after creating what the page says must exist beforehand. Blocks that need a public data set, a
pretrained file, Chromium or a Dask cluster are checked without running: every command and flag
against its parser, every Python call against the signature of the function it names.

`test_every_block_is_covered` lists the blocks of each page: a block added, removed or changed in
kind fails it until this file says how the block is checked."""

import ast
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent  # the venv's bin: embedscope, python, dask

# page -> the language of each fenced block, in order ("" = unlabelled), and how this file checks it
BLOCKS = {
    "architecture.md": ["python"],            # run
    "checkpoint.md": ["python", "python"],    # a schema (keys checked); calls bound (slow: run on built files)
    "geometry.md": [""],                      # run
    "import.md": ["", "bash", "bash", "bash", "bash", "bash", "bash", "python"],  # the output block: compared
    "methods.md": [],
    "properties.md": ["bash", "bash", "bash", "bash"],   # run (shapes: small set, slow)
    "saliency.md": ["bash", "python"],        # slow: run
    "store.md": ["python"],                   # run
    "studies.md": ["bash", "yaml", "bash", "bash"],      # run (slow) / read / parsed (Chromium, Dask)
    "training.md": [""],                      # parsed; digits lines run (slow)
    "visualizations.md": ["", "", "", ""],    # run
}

# prints each top-level expression statement's value, as the interactive prompt does
REPL = r"""
import ast, sys
src = open(sys.argv[1], encoding="utf-8").read()
g = {"__name__": "__main__"}
for node in ast.parse(src).body:
    if isinstance(node, ast.Expr):
        value = eval(compile(ast.Expression(node.value), "<doc>", "eval"), g)
        print(">>> " + ast.get_source_segment(src, node).splitlines()[0])
        print(repr(value))
    else:
        exec(compile(ast.Module([node], []), "<doc>", "exec"), g)
"""


def _fenced(page: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block of docs/<page>."""
    return re.findall(r"^```(\w*)\n(.*?)^```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S | re.M)


def _block(page: str, lang: str, i: int = 0) -> str:
    return [text for kind, text in _fenced(page) if kind == lang][i]


def _edit(text: str, *subs: tuple[str, str]) -> str:
    """``text`` with each (old, new) replaced; each old must occur (a changed block fails here, not later)."""
    for old, new in subs:
        assert old in text, f"the block no longer holds {old!r}: update tests/test_docs_examples.py"
        text = text.replace(old, new)
    return text


def _env() -> dict:
    # E: a page sets it in its first block (`E=.venv/bin/embedscope`) for the blocks after it
    return {**os.environ, "MPLBACKEND": "Agg", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "E": ".venv/bin/embedscope"}


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".venv").exists():
        (path / ".venv").symlink_to(Path(sys.prefix))  # the pages' `E=.venv/bin/embedscope`
    return path


def run_bash(script: str, cwd: Path, timeout: int = 900) -> str:
    """Run ``script``; first its embedscope lines are parsed with every flag spelled out (argparse
    would take an abbreviation such as `--table` for `--table-csv`; the docs spell flags out)."""
    for line in _commands(script):
        m = re.match(r"^(?:\$E|\.venv/bin/embedscope|embedscope)\s+(.*)$", line)
        if m:
            parses(shlex.split(m.group(1)))
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=_folder(cwd), env=_env(),
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{script}\n--- stdout\n{res.stdout[-2000:]}\n--- stderr\n{res.stderr[-3000:]}"
    return res.stdout


def run_python(src: str, cwd: Path, timeout: int = 600) -> str:
    (_folder(cwd) / "_doc_block.py").write_text(src, encoding="utf-8")
    res = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", REPL, "_doc_block.py"], cwd=cwd,
                         env=_env(), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{src}\n--- stdout\n{res.stdout[-2000:]}\n--- stderr\n{res.stderr[-3000:]}"
    return res.stdout


def shown(out: str, statement: str) -> str:
    """The value printed for the expression statement that starts with ``statement``."""
    m = re.search(rf"^>>> {re.escape(statement)}.*\n((?:(?!>>> ).*\n?)*)", out, flags=re.M)
    assert m, f"no value shown for {statement!r}:\n{out[-2000:]}"
    return m.group(1).strip()


def check_calls(src: str) -> int:
    """Bind every call of the block to the signature of what it names (the names its imports bring,
    and attributes of them): a renamed function or keyword fails. Returns how many were bound."""
    tree = ast.parse(src)
    ns: dict = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), "<doc>", "exec"), ns)

    def resolve(expr):
        if isinstance(expr, ast.Name):
            return ns.get(expr.id, KeyError)
        if isinstance(expr, ast.Attribute):
            base = resolve(expr.value)
            if base is KeyError:
                return KeyError
            assert hasattr(base, expr.attr), f"{ast.unparse(expr)}: no such name"
            return getattr(base, expr.attr)
        return KeyError

    bound = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = resolve(node.func)
            if fn is KeyError or not callable(fn):
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                continue
            try:
                sig.bind(*node.args, **{k.arg: None for k in node.keywords})
            except TypeError as e:
                pytest.fail(f"{ast.unparse(node)}: {e}")
            bound += 1
    return bound


def _commands(block: str) -> list[str]:
    """The block's command lines (continuations joined, comments and `[` `]` of optional parts removed)."""
    out, buf = [], ""
    for line in block.splitlines():
        s = (buf + " " + line.strip()) if buf else line.strip()
        buf = ""
        if s.endswith("\\"):
            buf = s[:-1]
            continue
        s = re.sub(r"\s+#.*$", "", s)
        if s and not s.startswith("#"):
            out.append(s.replace("[", " ").replace("]", " "))
    return out


def parses(argv: list[str]) -> None:
    """``embedscope ARGV`` parses completely (optional parts included)."""
    from embedscope.cli import build_parser

    parser = build_parser()
    options = {o for a in parser.command_parsers[argv[0]]._actions for o in a.option_strings}
    for flag in (a.split("=")[0] for a in argv[1:] if a.startswith("-")):
        assert flag in options, f"{flag} is not an option of '{argv[0]}' (spelled out, not abbreviated)"
    try:
        _, extra = parser.parse_known_args(argv)
    except SystemExit:
        pytest.fail(f"does not parse: embedscope {shlex.join(argv)}")
    assert not extra, f"left over {extra}: embedscope {shlex.join(argv)}"


# --------------------------------------------------------------------------- the inventory

def test_every_block_is_covered():
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name not in ("datasets.md", "PERFORMANCE.md"))
    assert pages == sorted(BLOCKS), "a page was added or removed: say in BLOCKS how its blocks are checked"
    for page, kinds in BLOCKS.items():
        assert [kind for kind, _ in _fenced(page)] == kinds, f"docs/{page}: its blocks changed"


# --------------------------------------------------------------------------- digits files

def _cli(*argv) -> None:
    from embedscope.cli import main

    assert main([str(a) for a in argv]) == 0, argv


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """An untrained 32-d digits checkpoint and its train + test embeddings (what `make demo` writes
    as demo-output/digits.h5, there trained for 10 epochs), with the demo's per-image properties
    (ink quartile, parity) in props.h5."""
    d = tmp_path_factory.mktemp("digits")
    _cli("train", "--dataset", "digits", "--epochs", "0", "--embed-dim", "32", "-o", d / "untrained.pt",
         "--no-progress")
    _cli("embed", d / "untrained.pt", "--dataset", "digits", "--split", "all", "-o", d / "digits.h5",
         "--no-progress")
    import numpy as np
    from sklearn.datasets import load_digits

    dg = load_digits()
    ink = dg.images.reshape(len(dg.images), -1).sum(1)
    q = np.searchsorted(np.quantile(ink, [0.25, 0.5, 0.75]), ink, side="right")
    rows = [f"digits/{i:04d},{q[i]},{dg.target[i] % 2}" for i in range(len(ink))]
    (d / "props.csv").write_text("path,ink,parity\n" + "\n".join(rows) + "\n")
    shutil.copy(d / "digits.h5", d / "props.h5")
    _cli("add-properties", d / "props.h5", d / "props.csv")
    return d


def _copy(src: Path, *dests: Path) -> None:
    for p in dests:
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, p)


# --------------------------------------------------------------------------- architecture.md, store.md

def test_architecture_front_doors(tmp_path):
    src = _block("architecture.md", "python")
    assert check_calls(src) == 0
    run_python(src + "import embedscope\nembedscope.load, embedscope.save, embedscope.EmbeddingSet\n", tmp_path)


def test_store_python(tmp_path, digits):
    _copy(digits / "digits.h5", tmp_path / "demo-output" / "digits.h5")
    src = _block("store.md", "python")
    assert check_calls(src) >= 4
    out = run_python(src, tmp_path)
    stated = re.search(r"^es +# (EmbeddingSet\(.*), \.\.\.\)$", src, flags=re.M).group(1)
    assert shown(out, "es").startswith(stated + ", ")
    assert shown(out, 'store.load("copy.h5") == es') == "True"
    assert 0 <= float(shown(out, "embedscope.analyses.evaluate(es)")) <= 1


# --------------------------------------------------------------------------- import.md

def test_import_page_runs_in_order(tmp_path):
    bash = [text for kind, text in _fenced("import.md") if kind == "bash"]
    out = run_bash("\n".join(bash), tmp_path)
    for f in ("mine.h5", "run.h5", "emb.h5", "x.h5", "e.h5", "t.h5", "c.h5", "c2.h5"):
        assert (tmp_path / f).stat().st_size > 0, f
    # the .csv block states what `embedscope import t.csv -o c.h5` prints
    csv = _block("import.md", "bash", 5)
    stated = re.search(r"-o c\.h5[^\n]*\n((?:# [^\n]*\n)+)", csv).group(1)
    expected = [ln[2:] for ln in stated.splitlines()]
    assert expected == ["embeddings: 4 columns d0, d1, d2, d3", "wrote c.h5"]
    lines = out.splitlines()
    i = lines.index(expected[0])
    assert lines[i + 1] == expected[1]
    assert "split-by-class 0.5: first 5 of 10 classes (sorted) train" in out  # `embedscope info mine.h5`
    src = _block("import.md", "python")
    assert check_calls(src) >= 3
    run_python(src, tmp_path)  # after the shell blocks, in the same folder (warnings are errors)


def test_import_prints_the_lines_the_page_shows(tmp_path):
    """The page's example lines of what formed the embedding, for the sources they describe: a table
    written by to_csv with its index and a text column; a .npz with `features` and `X`."""
    shown_lines = _fenced("import.md")[0][1].splitlines()
    assert len(shown_lines) == 2
    run_bash("""python -c "import numpy as np, pandas as pd
df = pd.DataFrame(np.random.randn(20, 4), columns=['d0', 'd1', 'd2', 'd3'])
df.insert(0, 'label', np.arange(20) % 4); df['notes'] = 'x'; df.to_csv('u.csv')
np.savez('two.npz', features=np.random.randn(60, 32), X=np.random.randn(60, 32), y=np.arange(60) % 6)"
""", tmp_path)
    out = run_bash("embedscope import u.csv -o u.h5\nembedscope import two.npz -o two.h5\n", tmp_path)
    assert out.splitlines() == [shown_lines[0], "wrote u.h5", shown_lines[1], "wrote two.h5"]


# --------------------------------------------------------------------------- geometry.md

def test_geometry_block(tmp_path, digits):
    _copy(digits / "digits.h5", tmp_path / "demo-output" / "digits.h5", tmp_path / "margin.h5",
          tmp_path / "r_margin.h5")
    out = run_bash(_block("geometry.md", ""), tmp_path)
    assert "wrote geometry.json" in out and "wrote spectrum.png, spectrum.pdf, spectrum.csv" in out
    assert (tmp_path / "spectrum.csv").read_text().splitlines()[0] == "model,kind,k,value"  # the stated layout


# --------------------------------------------------------------------------- properties.md

def test_properties_blocks(tmp_path, digits):
    _copy(digits / "props.h5", *(tmp_path / f for f in ("model.h5", "a.h5", "b.h5", "c.h5")))
    out = run_bash(_block("properties.md", "bash", 0), tmp_path)
    # "One `wrote …` line names the files written"
    assert [ln for ln in out.splitlines() if ln.startswith("wrote")] == [
        "wrote props.png, props.pdf, props.csv", "wrote props_1023.png, props_1023.pdf",
        "wrote props_models.png, props_models.pdf"]
    header = (tmp_path / "props.csv").read_text().splitlines()[0].split(",")
    assert {"z", "significant_2.576", "queries", "lone_values", "max_r", "capped"} <= set(header)
    # bring your own properties: a table with a `path` column and the two columns the block names
    import h5py

    with h5py.File(tmp_path / "model.h5", "r") as f:
        paths = [p.decode() for p in f["paths"][()]]
    (tmp_path / "my_annotations.csv").write_text(
        "path,lighting,viewpoint\n" + "".join(f"{p},{('dim', 'bright')[i % 2]},{i % 3}\n" for i, p in enumerate(paths)))
    out = run_bash(_block("properties.md", "bash", 3), tmp_path)
    assert "model.h5: added properties lighting, viewpoint" in out and (tmp_path / "mine.png").exists()


# --------------------------------------------------------------------------- visualizations.md

@pytest.fixture(scope="module")
def small_digits(digits, tmp_path_factory):
    """300 rows of the digits file (both splits), and four more files of the same images with the
    embeddings moved a little (stand-ins for epochs of one run; the slow test uses a real run)."""
    import numpy as np

    from embedscope import store

    d = tmp_path_factory.mktemp("small")
    es = store.load(digits / "digits.h5").sample(300, seed=0)
    store.save(d / "digits.h5", es)
    rng = np.random.default_rng(0)
    for name in ("model_b", "e000", "e001", "e002", "e004"):
        X = es.embeddings + 0.05 * rng.standard_normal(es.embeddings.shape).astype("float32")
        moved = store.EmbeddingSet.from_arrays(X, es.labels, split=es.split, paths=es.paths,
                                               class_names=es.class_names)
        store.save(d / f"{name}.h5", moved)
    shutil.copy(d / "digits.h5", d / "model_a.h5")
    return d


def _viz_script(*, with_options: bool) -> str:
    """The page's four blocks as one script: the optional parts (`[--alpha A]`) left out, or given."""
    script = "\n".join(text for kind, text in _fenced("visualizations.md") if kind == "")
    if not with_options:
        return re.sub(r" ?\[[^\]]*\]", "", script)
    return _edit(script.replace("[", "").replace("]", ""), ("--alpha A", "--alpha 0.0001"),
                 ("--inset-class NAME", "--inset-class 7"), ("--metric cosine|dot|euclidean", "--metric dot"))


def test_visualization_blocks(tmp_path, small_digits):
    for f in small_digits.glob("*.h5"):
        shutil.copy(f, tmp_path / f.name)
    out = run_bash(_viz_script(with_options=False), tmp_path)
    for stem in ("joint", "test", "yoked", "seq", "scatter"):  # "writes OUT.png, OUT.pdf, OUT.csv, OUT.json"
        assert f"wrote {stem}.png, {stem}.pdf, {stem}.csv, {stem}.json" in out, stem
    header = (tmp_path / "seq.csv").read_text().splitlines()[0].split(",")
    assert {"x_4", "y_4", "displacement_1_2", "displacement_3_4"} <= set(header)


# --------------------------------------------------------------------------- checkpoint.md, training.md,
# studies.md: what needs public data, pretrained files, Chromium or a cluster is parsed, not run

def test_checkpoint_blocks_name_what_exists():
    schema = _block("checkpoint.md", "python", 0)
    assert '"format": "embedscope-checkpoint", "format_version": 1' in schema
    for key in ("arch", "embed_dim", "normalize", "frozen_bn", "image_size", "dataset", "head", "head_seed",
                "head_layers", "input_space", "resize", "transform_input", "pool"):
        assert f'"{key}"' in schema, key
    assert check_calls(_block("checkpoint.md", "python", 1)) == 3


def test_checkpoint_files_hold_the_schema(digits):
    import torch

    ck = torch.load(digits / "untrained.pt", weights_only=True)
    assert (ck["format"], ck["format_version"]) == ("embedscope-checkpoint", 1)
    assert set(ck) == {"format", "format_version", "state_dict", "config", "extra"}
    assert all(k.startswith(("backbone.", "head.")) for k in ck["state_dict"])
    assert {"arch", "embed_dim", "normalize", "frozen_bn", "image_size", "dataset"} <= set(ck["config"])


def test_training_block_parses_with_its_optional_parts():
    lines = _commands(_block("training.md", ""))
    assert len(lines) == 7 and all(ln.startswith("embedscope ") for ln in lines)
    for line in lines:
        parses(shlex.split(line)[1:])


def test_studies_blocks_that_need_a_browser_or_a_cluster(tmp_path):
    # the report's screenshots: the script's own options (it stops after parsing: no Chromium on PATH)
    (line,) = _commands(_block("studies.md", "bash", 1))
    argv = shlex.split(line)
    assert argv[:2] == [".venv/bin/python", "scripts/screenshot_report.py"]
    (tmp_path / "study.html").write_text("<html></html>")
    res = subprocess.run([sys.executable, str(ROOT / argv[1]), *argv[2:]], cwd=tmp_path, capture_output=True,
                         text=True, env={**_env(), "PATH": str(BIN)}, timeout=60)
    assert res.returncode == 1 and "no chromium found" in res.stderr, res.stderr
    # the Dask cluster: dask's own flags, and the study's line
    cluster = _commands(_block("studies.md", "bash", 2))
    assert len(cluster) == 3
    for line in cluster[:2]:
        argv = shlex.split(line)
        argv = [a for a in argv if "=" not in a or a.startswith("-")]  # CUDA_VISIBLE_DEVICES=0
        sub = argv[argv.index("dask") + 1]
        help_text = subprocess.run([str(BIN / "dask"), sub, "--help"], capture_output=True, text=True,
                                   timeout=120).stdout
        for flag in (a for a in argv if a.startswith("--")):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text), f"dask {sub} has no {flag}"
    assert cluster[2].startswith("$E study ")
    parses(shlex.split(cluster[2])[1:])


def test_study_yaml_is_read_as_the_page_says(tmp_path):
    from embedscope.study.plan import _sources

    (tmp_path / "study.yaml").write_text(_block("studies.md", "yaml"))
    (first, _, tags1), (second, _, tags2) = _sources(tmp_path / "study.yaml")
    assert first == tmp_path / "runs/cub_margin_s0.pt" and tags1 == {"loss": "margin", "seed": 0}
    assert second == Path("/models/cub_ms_s1.pt") and tags2 == {"loss": "multisimilarity", "objective": "MS"}


# --------------------------------------------------------------------------- slow: the longer blocks, run

@pytest.mark.slow
def test_checkpoint_python_runs_on_files_of_those_layouts(tmp_path):
    """docs/checkpoint.md's loading block on local files of the layouts it names (random weights:
    a torchvision ResNet-50 state dict, a pytorch-metric-learning trunk/embedder pair, a checkpoint
    of Roth et al.'s code with its pickled options and logger objects)."""
    run_python("""
import argparse, sys, types
import torch, torch.nn as nn
from torchvision.models import resnet18, resnet50
torch.save(resnet50(weights=None).state_dict(), "resnet50-11ad3fa6.pth")
trunk = resnet18(weights=None); trunk.fc = nn.Identity()
torch.save(trunk.state_dict(), "trunk_best12.pth"); torch.save(nn.Linear(512, 64).state_dict(), "embedder_best12.pth")
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = resnet50(weights=None); self.model.last_linear = nn.Linear(2048, 128); del self.model.fc
        self.layer_blocks = nn.ModuleList([self.model.layer1, self.model.layer2, self.model.layer3, self.model.layer4])
logger = types.ModuleType("utilities.logger")
class Progress_Saver: pass
Progress_Saver.__module__ = "utilities.logger"; logger.Progress_Saver = Progress_Saver
sys.modules["utilities"] = types.ModuleType("utilities"); sys.modules["utilities.logger"] = logger
opt = argparse.Namespace(arch="resnet50_frozen_normalize", embed_dim=128, dataset="cub200", loss="margin",
                         batch_mining="distance")
torch.save({"state_dict": Net().state_dict(), "opt": opt, "progress": {"Train": Progress_Saver()}, "aux": None},
           "checkpoint.pth.tar")
""", tmp_path)
    out = run_python(_block("checkpoint.md", "python", 1), tmp_path)
    assert "'Roth et al. 2020 checkpoint')" in shown(out, 'info["sha256"], info["format"]')


@pytest.mark.slow
def test_training_block_digits_lines_and_toy(tmp_path):
    lines = {ln.split("#")[0].strip(): ln for ln in _block("training.md", "").splitlines()}
    digits_lines = ["embedscope train --dataset digits -o ckpt.pt", "embedscope train -o ckpt.pt --resume",
                    "embedscope train --dataset digits --epochs 0 -o untrained.pt", "embedscope toy -o toy/"]
    for ln in digits_lines[:3]:
        assert ln in lines, ln
    assert any(k.startswith(digits_lines[3] + " [") for k in lines)
    out = run_bash("\n".join(digits_lines), tmp_path, timeout=1200)
    assert "epoch 15/15" in out  # "digits_cnn, margin loss, 15 epochs"
    assert "ckpt.pt: already trained for 15 epochs (nothing to do)" in out
    import torch

    cfg = torch.load(tmp_path / "ckpt.pt", weights_only=True)["config"]
    assert (cfg["arch"], cfg["loss"], cfg["epochs"]) == ("digits_cnn", "margin", 15)
    # the toy table: the code variant's numbers, the same on both machines the page names
    row = re.search(r"^\| code \(attraction dropped\) \| 0\.001 \| ([\d.]+) ± ([\d.]+) \| ([\d.]+) ± ([\d.]+) \|",
                    (DOCS / "training.md").read_text(), flags=re.M)
    m = re.search(r"^code +0\.001 +([\d.]+) ± ([\d.]+) +([\d.]+) ± ([\d.]+)", out, flags=re.M)
    assert row and m and m.groups() == row.groups(), (row, m)


@pytest.mark.slow
def test_saliency_blocks(tmp_path):
    run_bash("""E=.venv/bin/embedscope
$E train --dataset digits --embed-dim 32 --epochs 1 -o margin.pt --no-progress
$E train --dataset digits --embed-dim 32 --epochs 1 --loss arcface -o arcface.pt --no-progress
$E train --dataset digits --embed-dim 32 --epochs 0 -o untrained.pt --no-progress
""", tmp_path)
    out = run_bash(_block("saliency.md", "bash"), tmp_path)
    assert "wrote agreement.png, agreement.pdf, grid.png, grid.pdf, agreement.json, pairs.csv, images.csv" in out
    assert (tmp_path / "pairs.png").exists()
    src = _block("saliency.md", "python")
    assert check_calls(src) >= 8
    out = run_python(src, tmp_path)
    stated = re.search(r'^load_maps\("margin_maps.h5"\)\.maps\.shape +# (\([\d, ]+\))', src, flags=re.M).group(1)
    assert shown(out, 'load_maps("margin_maps.h5").maps.shape') == stated
    keys = re.search(r"^map_agreement\(maps, other_maps\) +# \{(.*), \.\.\.\}", src, flags=re.M).group(1)
    value = shown(out, "map_agreement(maps, other_maps)")
    for key in re.findall(r'"([^"]+)"', keys):
        assert f"'{key}':" in value, key


@pytest.mark.slow
def test_shapes_blocks(tmp_path):
    """The shapes blocks on a small set (240 scenes at 32 px instead of 4,800 at 64, one epoch)."""
    small = ("--n-images 4800 --size 64", "--n-images 240 --size 32")
    out = run_bash(_edit(_block("properties.md", "bash", 1), small,
                         ("$E train ... --dataset shapes --root shapes_set ...",
                          "$E train --dataset shapes --root shapes_set --epochs 1 -o model.pt")), tmp_path / "a")
    assert "wrote shapes_props.png, shapes_props.pdf" in out
    recipe = _edit(_block("properties.md", "bash", 2), small, ("--epochs 12 --eval-every 4", "--epochs 1 --eval-every 1"))
    out = run_bash(recipe, tmp_path / "b")
    assert "wrote shapes_properties.png, shapes_properties.pdf, props.csv" in out
    assert re.search(r"^R@1 +[\d.]+ +[\d.]+$", out, flags=re.M)  # evaluate: trained and untrained columns


@pytest.mark.slow
def test_studies_blocks(tmp_path):
    """The study walk-through with fewer runs (2 seeds, 1 epoch), then the YAML listing of two of them."""
    script = _edit(_block("studies.md", "bash", 0), ("--seeds 0 1 2", "--seeds 0 1"), ("--epochs 8", "--epochs 1"))
    out = run_bash(script, tmp_path, timeout=1200)
    assert "8 runs, 4 objectives" in out and (tmp_path / "study.html").stat().st_size > 0
    yaml = _edit(_block("studies.md", "yaml"), ("runs/cub_margin_s0.pt", "runs/digits_margin_p0_s0.pt"),
                 ("/models/cub_ms_s1.pt", str(tmp_path / "runs/digits_multisimilarity_p0_s1.pt")))
    (tmp_path / "study.yaml").write_text(yaml)
    run_bash("$E study study.yaml -o ystudy/ --workers 0 --bootstrap 0 --no-figures", tmp_path)
    import pandas as pd

    runs = pd.read_csv(tmp_path / "ystudy" / "runs.csv").set_index("run")
    assert runs.loc["digits_margin_p0_s0", "tag:loss"].iloc[0] == "margin"
    assert set(runs.loc["digits_multisimilarity_p0_s1", "objective"]) == {"MS"}


@pytest.mark.slow
def test_yoke_sequence_of_kept_epochs(tmp_path):
    """visualizations.md's sequence, on the epochs a real `train --keep-epochs` run kept."""
    run_bash("""E=.venv/bin/embedscope
$E train --dataset digits --embed-dim 32 --epochs 4 --keep-epochs -o run.pt --no-progress
for e in 000 001 002 004; do $E embed run.pt.train/epoch-$e.pt --dataset digits --split test -o e$e.h5; done
""", tmp_path)
    seq = _block("visualizations.md", "", 2)
    out = run_bash(seq, tmp_path)
    assert "wrote seq.png, seq.pdf, seq.csv, seq.json" in out


@pytest.mark.slow
def test_visualization_blocks_with_their_optional_parts(tmp_path, small_digits):
    for f in small_digits.glob("*.h5"):
        shutil.copy(f, tmp_path / f.name)
    out = run_bash(_viz_script(with_options=True), tmp_path)
    assert "wrote yoked.png, yoked.pdf, yoked.csv, yoked.json" in out
