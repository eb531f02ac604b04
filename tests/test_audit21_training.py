"""Audit 21 of ``train`` / ``train-grid`` options: --tensorboard (missing package, its folder), timm
names, --ema from a grid and a YAML file, --keep-epochs on runs that kept none, the YAML file's
type errors, and ``train-grid --workers`` with data loader workers (--num-workers)."""

import sys
import tomllib
import types
from pathlib import Path

import pytest
import torch

from embedscope.cli import main
from embedscope.errors import UsageError
from embedscope.train.trainer import resolve_config, run_paths, train

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0}
ROOT = Path(__file__).resolve().parents[1]


def quiet(**kw):
    return {"progress": False, "echo": lambda s: None, **kw}


def files_under(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


def _snapshot(folder):
    return {p: p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


# --------------------------------------------------------------------------- --tensorboard


def test_tensorboard_extra_and_missing_package_refused_before_any_message(tmp_path, monkeypatch, capsys):
    """`pip install 'embedscope[tensorboard]'` (the error's advice) names an extra of pyproject.toml, as
    `[timm]` does; without the package a --resume is refused in one line (exit 1) before any other
    line (the resume's note on changed options came first) and before anything is written."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("tensorboard") for d in extras["tensorboard"])
    assert any(d.startswith("timm") for d in extras["timm"])
    out = tmp_path / "r.pt"
    assert main(["train", "--dataset", "digits", "--embed-dim", "8", "--epochs", "0", "--eval-every", "0",
                 "--no-progress", "-o", str(out)]) == 0
    before = _snapshot(tmp_path)
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    rc = main(["train", "--dataset", "digits", "--epochs", "1", "--no-progress", "--resume", "--tensorboard",
               str(tmp_path / "tb"), "-o", str(out)])
    cap = capsys.readouterr()
    assert rc == 1 and cap.out == "", cap.out
    assert cap.err.strip() == ("embedscope train: error: --tensorboard needs the tensorboard package: "
                               "pip install 'embedscope[tensorboard]'")
    assert _snapshot(tmp_path) == before


@pytest.fixture
def fake_writer(monkeypatch):
    """A stand-in SummaryWriter (tensorboard is an optional extra): records the folder and the scalars."""
    made, purges = [], []

    class Writer:
        def __init__(self, log_dir, **kw):
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            (Path(log_dir) / f"events.out.tfevents.{len(made)}").write_bytes(b"")
            made.append(log_dir)
            purges.append(kw.get("purge_step"))

        def add_scalar(self, tag, value, step):
            pass

        def add_text(self, tag, text):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    return types.SimpleNamespace(made=made, purges=purges)


@pytest.mark.parametrize("where", ["m.pt", "m.csv", "m.pt.train/last.pt", "m.pt.train/best.pt",
                                   "m.pt.train/epoch-003.pt"])
def test_tensorboard_folder_that_is_a_file_of_the_run_is_refused_before_training(tmp_path, fake_writer, where):
    """--tensorboard naming -o, its log or a checkpoint of the run folder made that file a folder of
    event files: the whole run trained, then failed at its end ('m.pt is a directory'). Refused now,
    exit 2, before anything is read or written."""
    with pytest.raises(UsageError, match=r"is a file of the run .*give the event files a folder of their own") as e:
        train({**QUICK, "epochs": 1}, tmp_path / "m.pt", tensorboard=tmp_path / where, **quiet())
    assert "\n" not in str(e.value)
    assert files_under(tmp_path) == [] and fake_writer.made == []


def test_tensorboard_folder_under_a_file_and_in_the_run_folder(tmp_path, fake_writer, capsys):
    """A folder whose parent is a file: one line naming the option (it was 'NotADirectoryError: ...'
    after the data were read); a folder of its own inside the run folder is fine."""
    (tmp_path / "notes.txt").write_text("mine")
    rc = main(["train", "--dataset", "digits", "--epochs", "1", "--no-progress", "--tensorboard",
               str(tmp_path / "notes.txt" / "tb"), "-o", str(tmp_path / "m.pt")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (f"embedscope train: error: --tensorboard {tmp_path / 'notes.txt' / 'tb'}: "
                               f"{tmp_path / 'notes.txt'} is a file, not a folder")
    assert files_under(tmp_path) == ["notes.txt"]
    train({**QUICK, "epochs": 0}, tmp_path / "m.pt", tensorboard=tmp_path / "m.pt.train" / "tb", **quiet())
    assert fake_writer.made == [str(tmp_path / "m.pt.train" / "tb")] and (tmp_path / "m.pt").is_file()


def test_tensorboard_hides_what_a_force_or_a_resume_replaces(tmp_path, fake_writer):
    """TensorBoard reads all event files of a folder as one run: a `--force` rerun into the folder of an
    earlier run drew both runs through each other (checked with tensorboard 2.21's EventAccumulator:
    steps 0 1 2 0 1), and a resume after a stop between logging and saving an epoch drew that epoch
    twice. purge_step hides them (the files stay): 0 for a new run into a folder with event files
    (one line says so), the epoch after the checkpoint for a resume, none for a new folder."""
    tb = tmp_path / "tb"
    said = []
    train({**QUICK, "epochs": 0}, tmp_path / "m.pt", tensorboard=tb, progress=False, echo=said.append)
    train({**QUICK, "epochs": 0, "seed": 3}, tmp_path / "m.pt", tensorboard=tb, force=True, progress=False,
          echo=said.append)
    train({**QUICK, "epochs": 1, "seed": 3}, tmp_path / "m.pt", tensorboard=tb, resume=True, progress=False,
          echo=said.append)
    assert fake_writer.purges == [None, 0, 1]
    notes = [s for s in said if "holds event files already" in s]
    assert notes == [f"note: --tensorboard {tb} holds event files already: TensorBoard shows this run in place of "
                     "theirs (the files stay; give each run a folder of its own to compare them)"]
    assert len(list(tb.iterdir())) == 3  # nothing removed


# --------------------------------------------------------------------------- timm:NAME


@pytest.fixture
def fake_timm(monkeypatch):
    """A stand-in timm (an optional extra) that knows the model 'tiny' (with pretrained tags)."""
    fake = types.ModuleType("timm")
    fake.__version__ = "9.9"
    fake.is_model = lambda name: name.split(".")[0] == "tiny"

    def create_model(name, pretrained, num_classes):  # pragma: no cover - the check comes first
        raise RuntimeError(f"Unknown model ({name})")

    fake.create_model = create_model
    monkeypatch.setitem(sys.modules, "timm", fake)
    return fake


def test_unknown_timm_name_is_a_usage_error_before_the_data(tmp_path, fake_timm, capsys):
    """`--arch timm:NAME` with a name timm does not know: a usage error (exit 2) from the options, as an
    unknown torchvision name, not the build's 'timm cannot create' (exit 1) after the data were read;
    a grid refuses it before any run trains."""
    from embedscope.train.grid import train_grid

    with pytest.raises(UsageError, match=r"unknown --arch 'timm:resnet_typo': timm 9\.9 has no model 'resnet_typo'"):
        resolve_config({"dataset": "shapes", "root": "x", "arch": "timm:resnet_typo"})
    with pytest.raises(UsageError, match="has no model ''"):
        resolve_config({"dataset": "shapes", "root": "x", "arch": "timm:"})
    for ok in ("timm:tiny", "timm:tiny.a1_in1k", "timm:hf-hub:org/tiny"):  # a source prefix is timm's to read
        assert resolve_config({"dataset": "shapes", "root": "x", "arch": ok})["arch"] == ok
    rc = main(["train", "--dataset", "shapes", "--root", str(tmp_path / "nowhere"), "--arch", "timm:resnet_typo",
               "-o", str(tmp_path / "m.pt")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "timm 9.9 has no model 'resnet_typo'" in err
    with pytest.raises(UsageError, match="has no model 'resnet_typo'"):
        train_grid("shapes", ["margin"], [0.0], [0], tmp_path / "runs",
                   options={"root": str(tmp_path / "nowhere"), "arch": "timm:resnet_typo"}, echo=lambda s: None)
    assert files_under(tmp_path) == []
    del fake_timm.is_model  # a timm without is_model: the name is left to the build
    assert resolve_config({"dataset": "shapes", "root": "x", "arch": "timm:resnet_typo"})["arch"] == "timm:resnet_typo"


def test_timm_not_installed_is_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "timm", None)
    rc = main(["train", "--dataset", "shapes", "--root", str(tmp_path), "--arch", "timm:resnet18",
               "-o", str(tmp_path / "m.pt")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.endswith("--arch timm:NAME needs timm (pip install 'embedscope[timm]')")


# --------------------------------------------------------------------------- --ema in a grid and a YAML file


def _digits_weights_with_ema(path):
    """A weights file with a state_dict and a different EMA copy (timm's train.py keys)."""
    from embedscope.models import build_model, default_config

    cfg = default_config("digits_cnn", embed_dim=8)
    torch.manual_seed(11)
    plain, ema = build_model(cfg), build_model(cfg)
    torch.save({"state_dict": plain.state_dict(), "state_dict_ema": ema.state_dict()}, path)
    return ({k: v for k, v in m.state_dict().items() if k.startswith("backbone.")} for m in (plain, ema))


def test_ema_from_a_grid_and_a_yaml_file(tmp_path, capsys):
    """`train-grid --weights F --ema` and YAML `weights_ema: true` start from F's EMA tensors (their
    untrained checkpoint, --epochs 0, holds them bit for bit, not the state_dict's); the grid's row
    counts --ema as a setting (a later call without it is refused, naming weights_ema)."""
    from embedscope.models import read_checkpoint

    f = tmp_path / "w.pt"
    plain, ema = _digits_weights_with_ema(f)
    assert any(not torch.equal(plain[k], ema[k]) for k in ema)
    grid = ["train-grid", "--dataset", "digits", "--losses", "margin", "--embed-dim", "8", "--epochs", "0",
            "--weights", str(f), "--no-progress", "-o", str(tmp_path / "runs")]
    assert main([*grid, "--ema"]) == 0
    (tmp_path / "run.yaml").write_text(f"dataset: digits\nembed-dim: 8\nepochs: 0\nweights: {f}\n"
                                       f"weights_ema: true\noutput: {tmp_path / 'y.pt'}\n")
    assert main(["train", "--config", str(tmp_path / "run.yaml"), "--no-progress"]) == 0
    for ck in (tmp_path / "runs" / "digits_margin_p0_s0.pt", tmp_path / "y.pt"):
        got = read_checkpoint(ck)
        assert got["config"]["weights_ema"] is True
        assert all(torch.equal(got["state_dict"][k], v) for k, v in ema.items()), ck
    capsys.readouterr()
    assert main(grid) == 1
    assert "weights_ema: True -> False" in capsys.readouterr().err


# --------------------------------------------------------------------------- --keep-epochs on runs that kept none


def test_keep_epochs_on_runs_that_kept_none_says_so(tmp_path, capsys):
    """--keep-epochs asked of a finished grid run trained without it skipped it silently (no
    epoch-NNN.pt for `study --epoch all`); a --resume with it kept the later epochs only, silently.
    Both now say what is and is not kept; a run kept from its start says nothing of the kind."""
    grid = ["train-grid", "--dataset", "digits", "--losses", "margin", "--embed-dim", "8", "--epochs", "0",
            "--eval-every", "0", "--no-progress", "-o", str(tmp_path / "runs")]
    assert main(grid) == 0
    capsys.readouterr()
    assert main([*grid, "--keep-epochs"]) == 0
    out = capsys.readouterr().out
    assert ("digits_margin_p0_s0: finished already, skipped (same settings); it was trained without --keep-epochs "
            "and has no epoch-NNN.pt (--force retrains it with them)") in out
    assert not list((tmp_path / "runs").rglob("epoch-*.pt"))
    said = []
    train({**QUICK, "epochs": 1}, tmp_path / "runs" / "digits_margin_p0_s0.pt", resume=True, keep_epochs=True,
          progress=False, echo=said.append)
    assert any("--keep-epochs keeps epoch-NNN.pt from epoch 0 on; the epochs before were not kept" in s for s in said)
    assert sorted(p.name for p in (tmp_path / "runs" / "digits_margin_p0_s0.pt.train").glob("epoch-*.pt")) == \
        ["epoch-000.pt", "epoch-001.pt"]
    said.clear()
    train({**QUICK, "epochs": 0}, tmp_path / "k.pt", keep_epochs=True, progress=False, echo=said.append)
    train({**QUICK, "epochs": 0}, tmp_path / "k.pt", resume=True, keep_epochs=True, progress=False, echo=said.append)
    assert said and not any("were not kept" in s for s in said)
    assert main([*grid, "--keep-epochs", "-o", str(tmp_path / "kept")]) == 0
    capsys.readouterr()
    assert main([*grid, "--keep-epochs", "-o", str(tmp_path / "kept")]) == 0
    assert "without --keep-epochs" not in capsys.readouterr().out


# --------------------------------------------------------------------------- the YAML file's option errors


@pytest.mark.parametrize("text, match", [
    ("keep_epochs: maybe\n", "keep_epochs must be true or false, got 'maybe'"),
    ("resume: 1\n", "resume must be true or false, got 1"),
    ("tensorboard: 3\n", "tensorboard must be a file name, got 3"),
    ("output: [a, b]\n", "output must be a file name"),
    ("learning_rate: 3\n", "unknown option 'learning_rate'"),
    ("- dataset\n", "expected a mapping of option: value"),
])
def test_yaml_option_errors_are_usage_errors(tmp_path, capsys, text, match):
    """docs/training.md: a wrong type in the YAML file (`keep_epochs: maybe`) is a one-line usage error,
    exit 2, as `embed-dim: abc` was; the file-only options' types and unknown keys were exit 1."""
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc = main(["train", "--config", str(f), "-o", str(tmp_path / "x.pt")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and len(err.splitlines()) == 1, err
    assert files_under(tmp_path) == ["c.yaml"]


# --------------------------------------------------------------------------- train-grid messages


def test_grid_lines_escape_control_characters(tmp_path, capsys):
    """train-grid printed the trainer's lines as they were (an output folder named with an escape
    character reached the terminal raw); they are escaped like train's."""
    out = tmp_path / "runs\x1b[31m"
    grid = ["train-grid", "--dataset", "digits", "--losses", "margin", "--embed-dim", "8", "--epochs", "1",
            "--eval-every", "0", "--no-progress", "-o", str(out)]
    assert main(grid) == 0
    (out / "digits_margin_p0_s0.pt").unlink()  # the finished run's last.pt stays: resumed, nothing to train
    capsys.readouterr()
    assert main(grid) == 0
    printed = capsys.readouterr().out
    assert "already trained for 1 epochs" in printed and "runs\\x1b[31m" in printed
    assert "\x1b" not in printed


# --------------------------------------------------------------------------- train-grid --workers with --num-workers


@pytest.mark.slow
def test_grid_workers_with_data_loader_workers_equal_serial(tmp_path):
    """`train-grid --workers 2 --num-workers 1` failed: a spawned run's data loader started its workers
    with 'spawn' too, which pickles the data set's transforms ("Can't pickle local object
    'image_transform.<locals>.to_tensor'"). Now each run's weights equal a serial run's with the same
    thread count and --num-workers, bit for bit."""
    from embedscope.device import available_cpus, torch_threads
    from embedscope.metrics.search import search_threads
    from embedscope.models import read_checkpoint
    from embedscope.train.grid import train_grid

    opts = {"epochs": 1, "eval_every": 0, "embed_dim": 8, "num_workers": 1}
    par = train_grid("digits", ["margin", "softmax"], [0.0], [0], tmp_path / "par", options=opts, progress=False,
                     workers=2, echo=lambda s: None)
    assert [r["status"] for r in par] == ["trained", "trained"]
    with torch_threads(max(1, available_cpus() // 2)), search_threads(max(1, available_cpus() // 2)):
        train({**opts, "dataset": "digits", "loss": "margin"}, tmp_path / "serial.pt", **quiet())
    a = read_checkpoint(tmp_path / "par" / "digits_margin_p0_s0.pt")["state_dict"]
    b = read_checkpoint(tmp_path / "serial.pt")["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert run_paths(tmp_path / "par" / "digits_softmax_p0_s0.pt")["last"].is_file()
