"""The user docs (README.md, docs/*.md but datasets.md and PERFORMANCE.md) against the code: every
command line they show parses with the flags of its sub-command, every flag they name exists, the
defaults they and the --help texts state are the ones the parser and the trainer use, the names,
files and fields they cite exist."""

import argparse
import colorsys
import contextlib
import importlib
import importlib.util
import io
import math
import re
import shlex
from pathlib import Path

import pytest

from embedscope.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md")
                                     if p.name not in ("datasets.md", "PERFORMANCE.md"))
# flags the docs name of other programs: timm's train.py / validate.py, chromium, dask
FOREIGN_FLAGS = {"--use-ema", "--model-ema", "--print-to-pdf", "--port", "--nthreads", "--nworkers"}


@pytest.fixture(scope="module")
def parser():
    return build_parser()


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _command_lines(text: str, commands) -> list[tuple[int, str, bool]]:
    """(line, command line without 'embedscope', whole) of a doc: the lines of its code blocks that run
    embedscope (``embedscope``, ``$E``, ``.venv/bin/embedscope``; continued lines joined) and its
    inline spans `embedscope CMD ...` or `CMD --flag ...`; whole = a code block's line."""
    out, in_block, buf = [], False, ""
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block, buf = not in_block, ""
            continue
        if in_block:
            s = (buf + " " + line.strip()) if buf else line.strip()
            buf = ""
            if s.endswith("\\"):
                buf = s[:-1]
                continue
            m = re.match(r"^(?:\$E|\.venv/bin/embedscope|embedscope)\s+(.*)$", s)
            if m:
                out.append((i, m.group(1), True))
            continue
        for span in re.findall(r"`([^`]+)`", line):
            m = re.match(r"^(?:embedscope|\$E)\s+(.*)$", span.strip())
            words = span.split()
            if m:
                out.append((i, m.group(1), False))
            elif words and words[0] in commands and any(w.startswith("--") for w in words[1:]):
                out.append((i, span, False))
    return out


def _argv(line: str) -> list[str]:
    line = re.sub(r"\s#.*$", "", line)
    for placeholder in ("[", "]", "…", "..."):
        line = line.replace(placeholder, " ")
    return shlex.split(line)


def test_every_command_line_of_the_docs_uses_flags_of_its_command(parser):
    """Each `embedscope CMD --flag` of the docs: CMD is a sub-command and each flag one of its own
    options (no abbreviations: the docs spell them out). A code block's line that holds no placeholder
    parses completely, with nothing left over."""
    commands = parser.command_parsers
    seen, whole = 0, 0
    for doc in DOCS:
        for ln, line, block in _command_lines(doc.read_text(encoding="utf-8"), commands):
            argv = _argv(line)
            where = f"{doc.name}:{ln}: {line}"
            if argv[0] in ("--help", "--version"):  # `embedscope --help`
                continue
            assert argv[0] in commands, f"unknown command: {where}"
            options = {o for a in commands[argv[0]]._actions for o in a.option_strings}
            for token in argv[1:]:
                for flag in token.split("=")[0].split("/"):  # `--n-images/--paths-file`
                    if re.match(r"^--?[a-zA-Z]", flag):
                        assert flag in options, f"{flag} is not an option of '{argv[0]}': {where}"
            seen += 1
            if block and not re.search(r"[\[|…]|\.\.\.", line):
                err = io.StringIO()
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    try:
                        _, extra = parser.parse_known_args(argv)
                    except SystemExit:
                        pytest.fail(f"does not parse ({err.getvalue().strip()}): {where}")
                assert not extra, f"left over {extra}: {where}"
                whole += 1
    assert seen >= 120 and whole >= 50, (seen, whole)  # the extraction found the docs' commands


def test_every_flag_the_docs_name_is_an_option_of_some_command(parser):
    flags = {"--help", "-h", "--version", "--debug"}
    for sub in parser.command_parsers.values():
        flags |= {o for a in sub._actions for o in a.option_strings}
    script = _doc("scripts/screenshot_report.py")  # docs/studies.md shows its command line
    flags |= set(re.findall(r'add_argument\((?:"-\w", )?"(--[\w-]+)"', script))
    for doc in DOCS:
        for ln, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line):
                assert flag in flags | FOREIGN_FLAGS, f"{doc.name}:{ln}: {flag} is no option of any command"


def _stated_default(help_text: str):
    """The default a help text states: '(default: X', '(default X', 'X (default)'."""
    h = " ".join(help_text.split())
    m = re.search(r"\(default:? ([^;,)]+)", h) or re.search(r"\bdefault:? ([^;,)]+)", h)
    if m:
        return m.group(1).split(":")[0].split(" = ")[0].strip()
    m = re.search(r"(\S+) \(default\)", h)
    return m.group(1) if m else None


def _same(stated: str, value) -> bool:
    if isinstance(value, (list, tuple)):
        return stated.split() == [str(v) for v in value] or (len(value) == 1 and _same(stated, value[0]))
    try:
        return math.isclose(float(stated.replace(",", "")), float(value), rel_tol=1e-12)
    except (TypeError, ValueError):
        return stated.split(",")[0].split()[0] == str(value)


def test_help_defaults_are_the_parser_defaults(parser):
    """Where an option has a default in the parser, the default its --help states is that value
    (and an option with a default names it)."""
    checked = 0
    for name, sub in parser.command_parsers.items():
        for a in sub._actions:
            if a.dest in ("help", "debug") or a.default in (None, False, [], argparse.SUPPRESS):
                continue
            stated = _stated_default(a.help or "")
            assert stated is not None, f"{name} {a.option_strings}: the help states no default ({a.default!r})"
            assert _same(stated, a.default), f"{name} {a.option_strings}: help says {stated!r}, parser {a.default!r}"
            checked += 1
    assert checked >= 45  # (49 since t-SNE's --n-jobs defaults to the idle cores)


TRAINING_KEYS = {"--arch": "arch", "--loss": "loss", "--p-switch P": "p_switch",
                 "--sampler": "sampler", "--batch-size": "batch_size", "--epochs": "epochs",
                 "--embed-dim": "embed_dim", "--image-size N": "image_size", "--lr": "lr",
                 "--weight-decay": "weight_decay", "--optimizer": "optimizer", "--lr-schedule": "lr_schedule",
                 "--seed": "seed", "--eval-every N": "eval_every", "--device": "device", "--num-workers": "num_workers"}
DATASET_OF = {"digits": "digits", "shapes": "shapes", "photos": "cub200", "SOP": "sop"}


def _resolved():
    from embedscope.train.trainer import resolve_config

    return {k: resolve_config({"dataset": ds, "root": "/no/such/folder"}) for k, ds in DATASET_OF.items()}


def _per_dataset(cell: str) -> dict:
    """'40 (digits) / 64 (shapes) / 112' -> {digits: 40, shapes: 64, photos: 112}; '150 (SOP 100)' adds SOP."""
    out = {}
    for part in cell.split(" / "):
        m = re.fullmatch(r"(\S+)(?: \((\w+)(?: (\S+))?\))?", part.strip())
        assert m, cell
        value, label, extra = m.groups()
        if label == "SOP":
            out["photos"], out["SOP"] = value, extra
        else:
            out[label or "photos"] = value
    for k in DATASET_OF:  # a value not split by data set holds for all of them
        out.setdefault(k, out.get("photos"))
    return out


def test_training_options_table_states_the_trainers_defaults():
    resolved = _resolved()
    rows = {}
    for line in _doc("docs/training.md").splitlines():
        m = re.match(r"^\| `([^`]+)` \| ([^|]*) \|", line)
        if m and (m.group(1) in TRAINING_KEYS or m.group(1) == "--dataset"):
            rows[m.group(1)] = m.group(2).strip()
    assert set(rows) == set(TRAINING_KEYS) | {"--dataset"}
    assert rows.pop("--dataset") == resolved["digits"]["dataset"] == "digits"
    for flag, cell in rows.items():
        cell = cell.replace(" (off)", "")
        for label, stated in _per_dataset(cell).items():
            value = resolved[label][TRAINING_KEYS[flag]]
            assert _same(stated, value), f"docs/training.md {flag} for {label}: {stated!r}, trainer {value!r}"


@pytest.mark.parametrize("command", ["train", "train-grid"])
def test_training_help_states_the_trainers_defaults(parser, command):
    """`train --help` states the defaults per data set (photos, digits, shapes) that the trainer uses."""
    resolved = _resolved()
    helps = {a.dest: " ".join((a.help or "").split()) for a in parser.command_parsers[command]._actions}
    for dest in ("arch", "sampler", "batch_size", "epochs", "lr", "image_size"):
        h = helps[dest]
        for label in ("digits", "shapes", "photos"):
            m = (re.search(rf"\b{label} (\S+?)[,;)]", h) or re.search(rf"(\S+) for {label}\b", h)
                 or (label == "photos" and re.search(r"\(default:? (\S+?)[,;)]", h)))
            assert m, f"{command} --{dest}: no default for {label} in {h!r}"
            assert _same(m.group(1), resolved[label][dest]), (command, dest, label, m.group(1))
        if dest == "epochs":
            assert "SOP 100" in h and resolved["SOP"]["epochs"] == 100
    for dest in ("embed_dim", "weight_decay", "optimizer", "lr_schedule", "eval_every", "device", "num_workers"):
        stated = _stated_default(helps[dest])
        assert _same(stated, resolved["photos"][dest]) and _same(stated, resolved["digits"][dest]), (dest, stated)


def test_log_columns_of_the_training_page_are_the_trainers():
    from embedscope.train.trainer import LOG_COLUMNS, LOG_CONFIG_COLUMNS

    text = " ".join(_doc("docs/training.md").split())
    m = re.search(r"`runs/x\.csv` — log: `([^`]+)` .*?then the run's configuration on every row: `([^`]+)` "
                  r"\(JSON\), `([^`]+)`", text)
    assert m, "the log paragraph of docs/training.md"
    named = [c.strip() for part in m.groups() for c in part.split(",")]
    assert named == LOG_COLUMNS + list(LOG_CONFIG_COLUMNS.values())


# (doc, text stated there, command, option dest): the value in the text is that option's parser default
STATED = [
    ("docs/geometry.md", r"`--exclude-top` values \(default (\d+)\)", "geometry", "exclude_top"),
    ("docs/geometry.md", r"N\(N−1\)/2 ≤ `--max-pairs` \(([\d,]+)\)", "geometry", "max_pairs"),
    ("docs/geometry.md", r"the first (\d+) values \(zero-padded", "spectrum", "n_values"),
    ("docs/saliency.md", r"over \*\*l = (\d+)\*\* noisy copies", "saliency", "n_samples"),
    ("docs/saliency.md", r"\*\*σ = ([\d.]+) × \(max − min\)\*\*", "saliency", "noise"),
    ("docs/saliency.md", r"`--order (\w+)` \(default;", "saliency", "order"),
    ("docs/saliency.md", r"`--jsd-unit (\w+)` gives the reference code", None, None),
    ("docs/methods.md", r"Lloyd k-means, (\d+) iterations", "evaluate", "niter"),
    ("docs/methods.md", r"seed \*\*(\d+)\*\* by default", "evaluate", "seed"),
    ("docs/methods.md", r"a bootstrap 95% interval \((\d+) resamples", "study", "bootstrap"),
    ("docs/methods.md", r"`default_rng\((\d+)\)`", "study", "seed"),
    ("docs/methods.md", r"`embedscope properties` uses the (\w+) split by default", "properties", "split"),
    ("docs/methods.md", r"\(`--epoch (\w+)`, the default;", "study", "epoch"),
    ("docs/visualizations.md", r"\(perplexity (\d+), PCA initialisation", "tsne", "perplexity"),
    ("docs/visualizations.md", r"early exaggeration 12, then (\d+)\)", "tsne", "n_iter"),
    ("docs/visualizations.md", r"\(([a-z]+) similarity by default\)", "scatter", "metric"),
    ("docs/properties.md", r"generates the default set \(([\d,]+) images", "make-shapes", "n_images"),
    ("docs/properties.md", r"generates the default set \([\d,]+ images, (\d+) px", "make-shapes", "size"),
    ("docs/properties.md", r"generates the default set \([\d,]+ images, \d+ px, seed (\d+)\)", "make-shapes", "seed"),
    ("docs/properties.md", r"Distance: ([A-Z]\w+) on the raw embeddings", "properties", "metric"),
    ("docs/studies.md", r"\(default `~/\.cache/embedscope/embeddings`", None, None),
    ("docs/store.md", r"`--split` that was embedded \(`train`, `test`, `all`\)", None, None),
]


@pytest.mark.parametrize("doc,pattern,command,dest", STATED, ids=[f"{s[0]}:{s[3]}" for s in STATED])
def test_defaults_stated_in_the_docs_are_the_parsers(parser, doc, pattern, command, dest):
    text = " ".join(_doc(doc).split())
    m = re.search(pattern, text)
    assert m, f"{doc} no longer says {pattern!r}"
    if command is None:
        return
    default = {a.dest: a.default for a in parser.command_parsers[command]._actions}[dest]
    if (command, dest) == ("spectrum", "n_values"):  # None: only with --by-class, then this constant
        from embedscope.cli.spectrum import DEFAULT_N_VALUES

        default = DEFAULT_N_VALUES
    stated = next(g for g in m.groups() if g is not None)
    assert _same(stated.lower(), default), f"{doc}: {stated!r}, but {command} --{dest} defaults to {default!r}"


def test_saliency_images_default_is_the_documented_hundred(parser):
    """docs/methods.md §8 and docs/saliency.md: 100 test images by default (the parser's None)."""
    assert "explains 100 images of the test split by default" in " ".join(_doc("docs/methods.md").split())
    h = {a.dest: a.help for a in parser.command_parsers["saliency"]._actions}["n_images"]
    assert "default: 100" in h
    from embedscope.saliency.run import DEFAULT_N_IMAGES

    assert DEFAULT_N_IMAGES == 100


def test_import_default_keys_are_the_importers():
    from embedscope import importers

    rows = {}
    for line in _doc("docs/import.md").splitlines():
        m = re.match(r"^\| `(--[\w-]+)[^`]*` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    for flag, keys in (("--embeddings", importers.EMBEDDING_KEYS), ("--labels", importers.LABEL_KEYS),
                       ("--paths", importers.PATH_KEYS)):
        listed = re.search(r"[Dd]efault(?: key/column)?:? ((?:`[^`]+`(?:, )?)+)", rows[flag])
        assert listed, flag
        assert re.findall(r"`([^`]+)`", listed.group(1)) == list(keys), flag


def resolve_dotted(dotted: str) -> None:
    """``embedscope.a.b.c`` resolved: the longest importable module, then attributes (an assertion names
    the first missing one)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for p in parts[i:]:
            assert hasattr(obj, p), f"{dotted}: no {p!r}"
            obj = getattr(obj, p)
        break


def test_python_names_the_docs_cite_exist():
    """Every `embedscope.a.b` the docs name resolves (a module, then attributes)."""
    names = set()
    for doc in DOCS:
        names |= set(re.findall(r"(?<![\w/.])(embedscope(?:\.[A-Za-z_]\w*)+)", doc.read_text(encoding="utf-8")))
    assert len(names) >= 40
    for dotted in sorted(names):
        resolve_dotted(dotted)


def test_files_the_docs_cite_exist():
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"(?<![\w/.])((?:embedscope|tests|scripts|notebooks|docs|benchmarks)/[\w./-]*\w)", text):
            path, _, test = m.group(1).partition("::")
            assert (ROOT / path).exists(), f"{doc.name}: {path}"
        for path, test in re.findall(r"`(tests/\w+\.py)::(\w+)`", text):
            assert f"def {test}(" in (ROOT / path).read_text(), f"{doc.name}: {path}::{test}"


@pytest.mark.parametrize("command", ["train", "embed", "saliency"])
def test_arch_help_names_every_architecture(parser, command):
    from embedscope import names

    h = " ".join({a.dest: a.help for a in parser.command_parsers[command]._actions}["arch"].split())
    for arch in names.ARCHS:
        assert re.search(rf"\b{arch}\b", h), (command, arch)
    assert "torchvision" in h and "timm:NAME" in h


def test_study_device_is_checked_when_parsed(parser, capsys):
    """`embedscope study SRC -o DIR --device gpu` measured nothing, wrote a study folder of error rows
    and exited 1 (every other command refuses an unknown device as a usage error before any work)."""
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["study", "runs/", "-o", "study/", "--device", "gpu"])
    assert e.value.code == 2 and "unknown device 'gpu'" in capsys.readouterr().err
    assert parser.parse_args(["study", "runs/", "-o", "study/", "--device", "cuda:1"]).device == "cuda:1"


def test_properties_csv_help_names_the_columns_it_writes(parser):
    from embedscope.analyses.image_properties import PERM_FIELDS, ROW_FIELDS
    from embedscope.cli.properties import COLUMNS

    h = " ".join({a.dest: a.help for a in parser.command_parsers["properties"]._actions}["csv"].split())
    named = set(re.findall(r"[\w.@-]+", h.split("(", 1)[1]))
    assert set(ROW_FIELDS) - set(COLUMNS) <= named and set(PERM_FIELDS) <= named
    text = " ".join(_doc("docs/architecture.md").split())
    assert "`properties` one row per model and property" in text


def test_the_spectrum_page_names_the_colour_of_the_left_out_band():
    """docs/geometry.md once said "the grey band" of a pale orange band; the band is now a pale
    grey (the orange was near the second model's curve colour), and the page says so."""
    from matplotlib.colors import to_rgb

    from embedscope.viz.spectrum import LEFT_OUT_COLOR

    h, lightness, s = colorsys.rgb_to_hls(*to_rgb(LEFT_OUT_COLOR))
    assert lightness > 0.85 and s < 0.05  # pale grey
    text = " ".join(_doc("docs/geometry.md").split())
    assert "pale grey band" in text and "orange band" not in text


def test_store_page_names_what_embed_writes(tmp_path):
    """The datasets and root attributes of docs/store.md are in a file `embed` wrote, and the fields
    of a saliency maps file (docs/saliency.md) in one `saliency` wrote."""
    import h5py
    from cli_run import cli_output

    ckpt, emb, maps = tmp_path / "u.pt", tmp_path / "u.h5", tmp_path / "m.h5"
    cli_output(["train", "--dataset", "digits", "--epochs", "0", "--embed-dim", "8", "-o", str(ckpt), "--no-progress"])
    cli_output(["embed", str(ckpt), "--dataset", "digits", "-o", str(emb), "--no-progress"])
    text = _doc("docs/store.md")
    table = text.split("Attributes of the root group:", 1)[1].split("\n\n", 2)[1]
    attrs = [a for row in table.splitlines()[2:] for a in re.findall(r"`(\w+)`", row.split("|")[1])]
    datasets = re.findall(r"^\| `/(\w+)` \|", text, flags=re.M)
    assert len(attrs) >= 12 and datasets == ["embeddings", "labels", "paths", "split", "class_names"]
    with h5py.File(emb, "r") as f:
        assert set(attrs) <= set(f.attrs), set(attrs) - set(f.attrs)
        assert set(datasets) <= set(f)
    cli_output(["saliency", str(ckpt), "--dataset", "digits", "--n-images", "3", "-o", str(maps), "--no-progress"])
    fields = re.search(r"One HDF5 file per model: (.*?) and attributes:", " ".join(_doc("docs/saliency.md").split()))
    named = re.findall(r"`(\w+)`", fields.group(1))
    assert named == ["maps", "paths", "labels", "class_names", "images"]
    with h5py.File(maps, "r") as f:
        assert set(named) <= set(f) and f["maps"].dtype == "float16"


def test_saliency_paths_file_comments_are_whole_lines(tmp_path):
    """docs/saliency.md said "`#` starts a comment"; only a line that starts with `#` is one (a path
    may hold `#`), and blank lines are skipped."""
    from types import SimpleNamespace

    import numpy as np

    from embedscope.saliency.run import select_images

    assert "a line that starts with `#` is a comment" in " ".join(_doc("docs/saliency.md").split())
    f = tmp_path / "paths.txt"
    f.write_text("# the images\n\nimg/a.png\n  img/b#2.png  \n")
    ds = SimpleNamespace(paths=np.array(["img/a.png", "img/b#2.png", "img/c.png"]))
    assert sorted(select_images(ds, paths_file=f).tolist()) == [0, 1]


def test_extras_the_docs_name_exist():
    import tomllib

    extras = set(tomllib.loads(_doc("pyproject.toml"))["project"]["optional-dependencies"])
    named = set()
    for doc in DOCS:
        named |= set(re.findall(r"(?:embedscope|\.)\[(\w+)\]", doc.read_text(encoding="utf-8")))
    assert named and named <= extras, named - extras


def test_untrained_digits_r1_the_docs_state(tmp_path):
    """The untrained digits CNN's test R@1 (seed 0) that README.md, docs/training.md and docs/studies.md
    state: docs/studies.md said 0.81-0.91 "at D = 8-32", where D = 8 gives 0.61."""
    import pandas as pd
    from cli_run import cli_output

    studies = " ".join(_doc("docs/studies.md").split())
    m = re.search(r"\(seed 0: ([\d.]+) at D = 16, ([\d.]+) at D = 32, ([\d.]+) at D = 128; only at D = 8 is it "
                  r"lower, ([\d.]+)\)", studies)
    assert m, "docs/studies.md: the digits caveat"
    stated = dict(zip((16, 32, 128, 8), map(float, m.groups())))
    assert "untrained test R@1 0.614" in " ".join(_doc("docs/training.md").split())
    assert "the untrained network: 0.905" in " ".join(_doc("README.md").split())
    for dim in (8, 16, 32, 128):
        out = tmp_path / f"u{dim}.pt"
        cli_output(["train", "--dataset", "digits", "--epochs", "0", "--embed-dim", str(dim), "--seed", "0",
                    "-o", str(out), "--no-progress"])
        r1 = float(pd.read_csv(out.with_suffix(".csv"))["R@1"].iloc[0])
        assert abs(r1 - stated[dim]) <= 0.006, (dim, r1, stated[dim])
        if dim == 8:
            assert abs(r1 - 0.614) <= 0.0006
        if dim == 32:
            assert abs(r1 - 0.905) <= 0.0006


def test_figure_rules_of_the_visualizations_page_are_the_code_constants():
    from embedscope.viz import spectrum, style

    text = " ".join(_doc("docs/visualizations.md").split())
    assert f"A class legend lists up to {style.MAX_LEGEND_ENTRIES} classes" in text
    assert "says `N classes: too many for a legend` in its note line" in text
    assert style.legend_note(41).startswith("41 classes: too many for a legend") and style.legend_note(40) == ""
    assert (f"{style.LEGEND_CHARS} characters in legends and most tick labels, {style.TITLE_CHARS} in panel titles"
            in text) and style.TICK_CHARS == style.LEGEND_CHARS
    assert f"inside the panel up to {spectrum.MAX_INSIDE_LEGEND} models" in text
    assert f"`OUT.png` ({style.PAPER_RC['savefig.dpi']} dpi)" in text


def test_import_records_what_the_import_page_says(tmp_path, monkeypatch):
    """docs/import.md: the output records imported, import_source, import_format, import_sha256, and
    `embedscope info` shows the last three with split_source (it said "shows them": not `imported`)."""
    import h5py
    import numpy as np
    from cli_run import cli_output

    text = " ".join(_doc("docs/import.md").split())
    m = re.search(r"The output records `(\w+) = true`, `(\w+)` \(absolute path\), `(\w+)` and `(\w+)` \(of the "
                  r"source file\); `embedscope info` shows the last three with `(\w+)`", text)
    assert m, "docs/import.md: the paragraph on what the output records"
    monkeypatch.chdir(tmp_path)
    np.save("X.npy", np.random.default_rng(0).standard_normal((20, 4)).astype("float32"))
    Path("y.txt").write_text("\n".join(str(i % 4) for i in range(20)))
    cli_output(["import", "X.npy", "--labels", "y.txt", "--split-by-class", "0.5", "-o", "mine.h5"])
    with h5py.File("mine.h5", "r") as f:
        assert bool(f.attrs[m.group(1)]) is True and set(m.groups()[1:]) <= set(f.attrs)
    shown = {ln.split()[0] for ln in cli_output(["info", "mine.h5"]).splitlines() if ln.strip()}
    assert set(m.groups()[1:]) <= shown


def test_losses_table_of_the_training_page_is_the_loss_registry():
    """docs/training.md's Losses table: every loss of --loss, its family, its default miner
    ("miner distance") and its unnormalised output are the registry's."""
    from embedscope.train.losses import LOSSES

    text = _doc("docs/training.md").split("## Losses", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0] in LOSSES:
            rows[cells[0]] = cells
    assert set(rows) == set(LOSSES)
    for name, (_, family, _pml, defaults) in rows.items():
        spec = LOSSES[name]
        assert family == spec.family, name
        assert ("miner distance" in defaults) == (spec.default_miner == "distance"), name
        assert ("unnormalised" in defaults) == (not spec.normalize), name


def test_named_architectures_of_the_checkpoint_page_and_their_feature_sizes():
    """docs/checkpoint.md lists every named architecture with its feature size (shapes_cnn was missing)."""
    import torch

    from embedscope import names
    from embedscope.models.backbones import build_model

    text = " ".join(_doc("docs/checkpoint.md").split())
    listed = dict(re.findall(r"`(\w+)` \((\d+)", text.split("**Named**:", 1)[1].split("- **Any", 1)[0]))
    assert set(listed) == set(names.ARCHS)
    for arch, dim in listed.items():
        if arch in ("resnet50", "googlenet", "bninception"):  # large: their sizes are torchvision's / Cadene's
            continue
        size, channels = (8, 1) if arch == "digits_cnn" else (64, 3)
        model = build_model({"arch": arch, "embed_dim": 8, "head": "none", "image_size": size}).eval()
        with torch.no_grad():
            assert model(torch.zeros(1, channels, size, size)).shape[1] == int(dim), arch


def test_study_folder_holds_what_the_outputs_table_names(tmp_path):
    """docs/studies.md's outputs table: the files of a study folder, the keys of study.json and the
    columns of runs.csv it names (figures left out: --no-figures)."""
    import json

    import pandas as pd
    from cli_run import cli_output

    ckpt, out = tmp_path / "u.pt", tmp_path / "study"
    cli_output(["train", "--dataset", "digits", "--epochs", "0", "--embed-dim", "8", "-o", str(ckpt), "--no-progress"])
    cli_output(["study", str(ckpt), "-o", str(out), "--workers", "0", "--no-figures", "--bootstrap", "0",
                "--cache-dir", str(tmp_path / "cache"), "--no-progress"])
    table = _doc("docs/studies.md").split("## Outputs (the study folder)", 1)[1].split("\n\n", 2)[1]
    rows = {re.findall(r"`([^`]+)`", ln.split("|")[1])[0]: ln.split("|")[2] for ln in table.splitlines()[2:]}
    for name in rows:
        if not name.startswith("figures/"):
            assert (out / name.replace("<id>.json", "")).exists(), name
    assert (out / "runs.parquet").exists() and list((out / "rows").glob("*.json"))
    study = json.loads((out / "study.json").read_text())
    named = set(re.findall(r"`(\w+)`", rows["study.json"]))
    assert named - {"seed"} <= set(study) and "seed" in study["settings"], named - set(study)
    runs = pd.read_csv(out / "runs.csv")
    cols = re.search(r"every row: (.*?), config columns", rows["runs.csv"])
    assert cols and {c.strip() for c in cols.group(1).split(",")} <= set(runs.columns)
    assert {"sha256", "excluded"} <= set(runs.columns)


def test_from_imports_the_docs_show_resolve():
    """Every `from embedscope... import a, b` of the docs (code blocks and inline) names what exists."""
    seen = 0
    for doc in DOCS:
        for mod, what in re.findall(r"from (embedscope[\w.]*) import ([\w, …]+)", doc.read_text(encoding="utf-8")):
            module = importlib.import_module(mod)
            for name in (n.strip() for n in what.split(",")):
                if name and name != "…":
                    assert hasattr(module, name) or importlib.util.find_spec(f"{mod}.{name}"), \
                        f"{doc.name}: from {mod} import {name}"
                    seen += 1
    assert seen >= 25
