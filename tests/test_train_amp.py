"""`train --amp` (docs/training.md): bfloat16 autocast of the forward passes on CUDA (auto, bf16) or
float32 (none); the CPU trains in float32 whatever it says, and the checkpoint records the precision."""

import pytest
import torch

from embedscope.cli import main
from embedscope.errors import UsageError
from embedscope.train.grid import settings_diff
from embedscope.train.trainer import autocast_dtype, resolve_config, train

QUICK = {"dataset": "digits", "embed_dim": 8, "eval_every": 0, "epochs": 1}


def quiet(said=None):
    return {"progress": False, "echo": (said.append if said is not None else (lambda s: None))}


def test_autocast_dtype_per_device_and_setting():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert autocast_dtype("auto", cuda) is torch.bfloat16 and autocast_dtype(None, cuda) is torch.bfloat16
    assert autocast_dtype("bf16", cuda) is torch.bfloat16
    assert autocast_dtype("none", cuda) is None
    assert all(autocast_dtype(a, cpu) is None for a in ("auto", "bf16", "none"))


def test_resolve_config_checks_amp():
    assert resolve_config({"dataset": "digits"})["amp"] == "auto"
    assert resolve_config({"dataset": "digits", "amp": "none"})["amp"] == "none"
    with pytest.raises(UsageError, match=r"unknown --amp 'fp8' \(choose auto, bf16, none\)"):
        resolve_config({"dataset": "digits", "amp": "fp8"})


def test_bf16_on_the_cpu_trains_in_float32_and_says_so(tmp_path):
    said = []
    a = train({**QUICK, "amp": "bf16"}, tmp_path / "a.pt", **quiet(said))
    b = train({**QUICK, "amp": "none"}, tmp_path / "b.pt", **quiet())
    assert any("--amp bf16 is CUDA's bfloat16 autocast; on cpu this run trains in float32" in s for s in said)
    sa = torch.load(tmp_path / "a.pt", weights_only=True)
    sb = torch.load(tmp_path / "b.pt", weights_only=True)
    assert sa["extra"]["compute"][-1]["precision"] == "float32"
    assert all(torch.equal(sa["state_dict"][k], sb["state_dict"][k]) for k in sa["state_dict"])
    assert a["config"]["amp"] == "bf16" and b["config"]["amp"] == "none"


def test_amp_may_change_on_resume_and_does_not_make_another_grid_run(tmp_path):
    out = tmp_path / "r.pt"
    train({**QUICK, "epochs": 1}, out, **quiet())  # a finished run continues with more epochs
    said = []
    train({**QUICK, "epochs": 2, "amp": "none"}, out, resume=True, **quiet(said))
    assert any("--amp none (was auto)" in s for s in said)
    saved = torch.load(out, weights_only=True)
    assert saved["config"]["amp"] == "none"
    # a stored run trained with another precision (or before the option existed) has the same settings
    stored = dict(saved["config"])
    assert settings_diff(stored, {**stored, "amp": "bf16"}) == []
    del stored["amp"]
    assert settings_diff(stored, {**stored, "amp": "auto"}) == []


def test_cli_amp_choices(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "-o", str(tmp_path / "m.pt"), "--amp", "fp16"])
    assert e.value.code == 2 and "--amp" in capsys.readouterr().err
    rc = main(["train", "-o", str(tmp_path / "m.pt"), "--epochs", "0", "--embed-dim", "8", "--amp", "none"])
    assert rc == 0 and torch.load(tmp_path / "m.pt", weights_only=True)["config"]["amp"] == "none"


def test_embed_amp_bf16_on_the_cpu_says_float32(tmp_path, capsys):
    rc = main(["train", "-o", str(tmp_path / "m.pt"), "--epochs", "0", "--embed-dim", "8", "--no-progress"])
    assert rc == 0
    capsys.readouterr()
    rc = main(["embed", str(tmp_path / "m.pt"), "--dataset", "digits", "-o", str(tmp_path / "e.h5"), "--amp", "bf16",
               "--no-progress", "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "note: --amp bf16 is CUDA's bfloat16 autocast; on cpu the embeddings are computed in float32" in out
    import h5py

    with h5py.File(tmp_path / "e.h5") as f:
        assert f.attrs["precision"] == "float32"
