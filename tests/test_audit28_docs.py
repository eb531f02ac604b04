"""The user docs read as a new user reads them (audit 28): statements that the existing docs checks
(tests/test_audit_docs.py, tests/test_docs_examples.py) do not cover, each against the code. All
cheap: parsers, signatures, the built-in digits' listing and small arrays."""

import importlib
import inspect
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli

from embedscope.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def parser():
    return build_parser()


def test_datasets_page_commands_and_flags_are_the_parsers(parser):
    """docs/datasets.md is left out of the other docs checks: its `embedscope …` lines parse with
    nothing left over, each flag spelled out, and every `--flag` of its text is an option of some
    command."""
    commands = parser.command_parsers
    text = _doc("docs/datasets.md")
    blocks = re.findall(r"^```\w*\n(.*?)^```", text, flags=re.S | re.M)
    lines = [m for block in blocks for m in re.findall(r"^embedscope (.+)$", block, flags=re.M)]
    assert len(lines) >= 8
    for line in lines:
        argv = shlex.split(line)
        options = {o for a in commands[argv[0]]._actions for o in a.option_strings}
        assert all(f.split("=")[0] in options for f in argv[1:] if f.startswith("-")), line
        _, extra = parser.parse_known_args(argv)
        assert not extra, line
    flags = {o for sub in commands.values() for a in sub._actions for o in a.option_strings}
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    assert named and named <= flags, named - flags


def test_datasets_page_digits_row_aliases_and_split_default(parser):
    """The table's digits row (images, classes, the two splits' sizes), the aliases it lists and the
    `--split` default it states are the loader's and the parser's."""
    from embedscope.data import ALIASES, get_dataset

    text = _doc("docs/datasets.md")
    row = re.search(r"^\| `digits` \| ([\d,]+) \| (\d+) \| classes 0–4 \(([\d,]+) images\) \| "
                    r"classes 5–9 \(([\d,]+) images\) \|$", text, flags=re.M)
    assert row, "docs/datasets.md: the digits row"
    n, classes, n_train, n_test = (int(g.replace(",", "")) for g in row.groups())
    ds = get_dataset("digits")
    assert (len(ds.paths), len(ds.class_names)) == (n, classes)
    assert ((ds.split == "train").sum(), (ds.split == "test").sum()) == (n_train, n_test)
    assert sorted(set(ds.labels[ds.split == "train"].tolist())) == [0, 1, 2, 3, 4]
    listed = {}
    for name, aliases in re.findall(r"^\| `(\w+)` \(([^)]*)\) \|", text, flags=re.M):
        for alias in re.findall(r"`([\w-]+)`", aliases):
            listed[alias] = name
    assert listed == ALIASES
    m = re.search(r"`--split train\|test\|all` \(default `(\w+)`\)", text)
    default = {a.dest: a.default for a in parser.command_parsers["embed"]._actions}["split"]
    assert m and m.group(1) == default


def test_store_page_split_values_are_the_stores():
    """docs/store.md said `/split` holds `train` or `test`; an imported file may hold every value of
    embedscope.store.SPLITS (val, query, gallery too), and the row names them all."""
    from embedscope.store import SPLITS

    row = re.search(r"^\| `/split` \|.*$", _doc("docs/store.md"), flags=re.M).group(0)
    assert set(re.findall(r"`(\w+)`", row)) >= set(SPLITS)


def test_architecture_table_arguments_are_the_functions_parameters():
    """docs/architecture.md's entry-point table writes each function with its arguments: every name
    it gives is a parameter of that function, those after `*` keyword-only and those before it not
    (tests/test_docs_commands.py checks only that the functions exist)."""
    text = _doc("docs/architecture.md").split("## Python entry points beyond the analyses", 1)[1]
    checked = 0
    for row in (ln for ln in text.splitlines() if ln.startswith("| `embedscope.")):
        cell = row.split("|")[1]
        module = re.match(r"\| `(embedscope[\w.]+)\.\w+\(", row).group(1)
        for mod, name, args in re.findall(r"`(?:(embedscope[\w.]+)\.)?(\w+)\(([^`]*)\)`", cell):
            params = inspect.signature(getattr(importlib.import_module(mod or module), name)).parameters
            before, _, after = args.partition("*")
            for arg in (a.strip() for a in before.split(",")):
                if arg and arg != "...":
                    assert arg in params and params[arg].kind != inspect.Parameter.KEYWORD_ONLY, (name, arg)
            for arg in (a.strip() for a in after.split(",")):
                if arg and arg != "...":
                    assert arg in params and params[arg].kind == inspect.Parameter.KEYWORD_ONLY, (name, arg)
            checked += 1
    assert checked >= 18


def test_readme_demo_outputs_are_what_the_demo_writes():
    """README.md lists what `make demo` leaves in demo-output/: each file is an output of
    scripts/demo.sh (a figure's PDF beside its PNG), and the Make-targets row names its steps."""
    readme = " ".join(_doc("README.md").split())
    script = _doc("scripts/demo.sh")
    listed = readme.split("Everything lands in `demo-output/`:", 1)[1].split("small grid of models", 1)[0]
    files = []
    for token in re.findall(r"`([\w.]+(?:/\w+)?)`", listed):
        stem, _, exts = token.rpartition(".")
        files += [f"{stem}.{ext}" for ext in exts.split("/")]
    assert len(files) >= 15
    for f in files:
        written = f[:-4] + ".png" if f.endswith(".pdf") else f
        assert f'"$D/{written}"' in script, f
    row = re.search(r"\| `make demo` \| ([^|]+) \|", readme).group(1)
    for command, step in (("evaluate", "evaluate"), ("properties", "properties"), ("geometry", "geometry"),
                          ("spectrum", "spectrum"), ("tsne", "t-SNE"), ("yoke", "yoke"), ("scatter", "scatter"),
                          ("saliency", "saliency"), ("train-grid", "grid")):
        assert f"$ES {command} " in script and step in row, (command, step)


def test_class_spectra_hold_at_most_d_values():
    """docs/geometry.md: the class-conditioned spectra keep the first 35 values, at most D (a 32-d
    model has 32), zero-padded for classes of fewer rows."""
    from embedscope.metrics import class_conditioned_spectra

    text = " ".join(_doc("docs/geometry.md").split())
    assert "the first 35 values (zero-padded for small classes; `--n-values` sets the count, at most D" in text
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((60, 4)), np.repeat([0, 1, 2], 20)
    per_class, mean = class_conditioned_spectra(X, y)
    assert per_class.shape == (3, 4) and mean.shape == (4,)
    per_class, mean = class_conditioned_spectra(rng.standard_normal((6, 8)), np.repeat([0, 1], 3))
    assert mean.shape == (8,) and np.all(per_class[:, 3:] == 0) and np.all(per_class[:, :3] > 0)  # 3 rows a class


def test_training_page_log_and_output_suffix_refusals(tmp_path):
    """docs/training.md's --log row: `-o run.csv` and `--log run.pt` are usage errors (another format's
    suffix), before any work."""
    text = " ".join(_doc("docs/training.md").split())
    assert "a name that ends in another format's suffix is refused (`--log run.pt`, and `-o run.csv`" in text
    for extra, said in ((["-o", tmp_path / "run.csv"], "-o writes PyTorch, not CSV"),
                        (["-o", tmp_path / "run.pt", "--log", tmp_path / "run.pt"], "--log writes CSV, not PyTorch")):
        rc, _, err = run_cli(["train", "--dataset", "digits", "--epochs", "0", *extra])
        assert rc == 2 and said in err, err
    assert not list(tmp_path.iterdir())


def test_checkpoint_schema_names_every_architecture_and_the_bn_affine_key():
    """docs/checkpoint.md's schema: its `arch` line lists every named architecture (shapes_cnn was
    missing), and it names `freeze_bn_affine`, which the configuration `train` saves always records."""
    from embedscope import names
    from embedscope.train.trainer import resolve_config

    schema = re.search(r"^```python\n(.*?)^```", _doc("docs/checkpoint.md"), flags=re.S | re.M).group(1)
    arch_line = next(ln for ln in schema.splitlines() if '"arch":' in ln)
    assert set(re.findall(r'"(\w+)"', arch_line.split(":", 1)[1])) == set(names.ARCHS)
    assert '"freeze_bn_affine": false' in schema
    for dataset in ("digits", "cub200"):
        assert resolve_config({"dataset": dataset, "root": "/no/such/folder"})["freeze_bn_affine"] is False


def test_datasets_page_python_block_runs_on_the_digits():
    """docs/datasets.md's Python block (not run by tests/test_docs_examples.py, which leaves the page
    out), with the digits in place of CUB: every name it uses exists and gives what the comments say."""
    block = re.search(r"^```python\n(.*?)^```", _doc("docs/datasets.md"), flags=re.S | re.M).group(1)
    call = 'get_dataset("cub200", "data/CUB_200_2011")'
    assert call in block
    ns: dict = {}
    exec(compile(block.replace(call, 'get_dataset("digits")'), "<docs/datasets.md>", "exec"), ns)
    ds, test = ns["ds"], ns["test"]
    assert set(test.split.tolist()) == {"test"} and len(test.paths) == int((ds.split == "test").sum())
    assert ns["img"].size == (8, 8) and ds.class_names[ds.labels[0]] == "0"


def test_datasets_page_names_and_files_exist():
    """The Python names and test files docs/datasets.md cites exist (the other docs checks leave the
    page out): `embedscope.data.ImageDataset`, the `DatasetSizeWarning` of `embedscope.data.imagefolder`,
    the tests it says compare with torchvision and pytorch-metric-learning."""
    text = _doc("docs/datasets.md")
    assert "`DatasetSizeWarning` (`embedscope.data.imagefolder`)" in text
    assert issubclass(importlib.import_module("embedscope.data.imagefolder").DatasetSizeWarning, Warning)
    from test_audit_docs import resolve_dotted

    for dotted in sorted(set(re.findall(r"(?<![\w/.])(embedscope(?:\.[A-Za-z_]\w*)+)", text))):
        resolve_dotted(dotted)
    files = re.findall(r"`(tests/\w+\.py)`", text)
    assert files and all((ROOT / f).is_file() for f in files), files
