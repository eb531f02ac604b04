"""A second reading of a study's record of the checkpoint configs it read (checkpoint_configs.json):
a record edited by hand is read again from the file, never used (nor a crash of the study)."""

import json

import pytest


def _save(path, *, extra, seed=0):
    import torch

    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(seed)
    cfg = default_config("digits_cnn", embed_dim=8)
    save_checkpoint(path, build_model(cfg), cfg, extra=extra)
    return path


@pytest.mark.parametrize("edit", [
    {"epoch": "two"},
    {"epoch": 3, "metrics": {"best": {"epoch": "x"}}},
    {"epoch": 3, "metrics": {"best": 5}},
    {"epoch": 3, "metrics": [1]},
    {"epoch": [3]},
    {"epoch": 3, "metrics": {"best": {"epoch": 1}, "last": {"epoch": 3}}},  # (not what the study keeps)
])
def test_a_record_edited_by_hand_is_not_used_the_file_is_read_again(tmp_path, edit, monkeypatch):
    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0, raising=False)  # (a file just written recorded)

    ck = _save(tmp_path / "net.pt", extra={"epoch": 3, "metrics": {"best": {"epoch": 2}}})
    src, out, udir = str(ck), tmp_path / "study", tmp_path / "untrained"
    known: dict = {}
    first = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    assert known[str(ck)]["extra"] == {"epoch": 3, "metrics": {"best": {"epoch": 2}}}
    known = json.loads(json.dumps(known))
    known[str(ck)]["extra"] = edit
    # (was: ValueError / AttributeError out of the plan, the study stopped until the file was removed;
    # or, for a record of another form, its epochs taken)
    again = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    assert again == first
    assert known[str(ck)]["extra"] == {"epoch": 3, "metrics": {"best": {"epoch": 2}}}  # (recorded again)


@pytest.mark.parametrize("extra", [{"epoch": "two"}, {"epoch": [3]}, {"epoch": float("inf")}, "numpy"])
def test_a_checkpoint_whose_recorded_epoch_is_no_integer_is_an_error_row_not_a_stopped_study(tmp_path, extra):
    import numpy as np

    import embedscope.study.plan as plan

    if extra == "numpy":  # a script's numpy epoch: read back inertly, no int
        extra = {"epoch": np.int64(3)}
    d = tmp_path / "ck"
    d.mkdir()
    _save(d / "bad.pt", extra=extra)
    _save(d / "good.pt", extra={"epoch": 3}, seed=1)
    # (was: TypeError / ValueError out of the plan: no study at all)
    entries = {e.run: e for e in plan.plan_study(str(d / "*.pt"), tmp_path / "study", untrained_dir=tmp_path / "u")}
    assert "the epoch it records is not an integer" in entries["bad"].error
    assert str(d / "bad.pt") in entries["bad"].error
    assert not entries["good"].error and entries["good"].epoch == 3


def test_an_untrained_network_built_again_from_a_recorded_config_is_the_same_file(two_checkpoints, tmp_path,
                                                                                    monkeypatch):
    import hashlib

    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0, raising=False)  # (a file just written recorded)
    from embedscope.study.run import run_study

    cache = tmp_path / "cache"

    def study():
        return run_study(str(two_checkpoints / "*.pt"), tmp_path / "st", workers=0, cache_dir=cache, n_boot=0,
                         measures=["R@1", "rho"], figures=False, progress=False, echo=lambda s: None)

    def sha(p):
        return hashlib.sha256(p.read_bytes()).hexdigest()

    first = study()
    (ref,) = cache.glob("untrained/*.pt")
    before = sha(ref)
    ref.unlink()  # (a cache cleaned, another study's --cache-dir): built again from the recorded config
    again = study()
    # (was: the record held the config's keys sorted, the network was pickled with them in that order: other
    # bytes, another sha256, its embedding not found in the cache and its row measured again)
    assert sha(ref) == before
    assert again["computed"] == [] and len(again["rows"]) == len(first["rows"]) == 3
    recorded = json.loads((tmp_path / "st" / "checkpoint_configs.json").read_text())["files"]
    import torch

    ck = str(two_checkpoints / "net1.pt")
    assert list(recorded[ck]["config"]) == list(torch.load(ck, weights_only=True)["config"])  # (its key order)


def test_a_config_holding_an_ordered_dict_builds_the_same_untrained_network_when_planned_again(tmp_path,
                                                                                                 monkeypatch):
    import collections
    import hashlib

    import torch

    import embedscope.study.plan as plan
    from embedscope.models import build_model, default_config, save_checkpoint

    torch.manual_seed(0)
    cfg = {**default_config("digits_cnn", embed_dim=8), "augment": collections.OrderedDict(flip=0.5, crop=8)}
    save_checkpoint(tmp_path / "net.pt", build_model(cfg), cfg, extra={"epoch": 1})
    assert type(torch.load(tmp_path / "net.pt", weights_only=True)["config"]["augment"]) is collections.OrderedDict
    monkeypatch.setattr(plan, "RACY_NS", 0, raising=False)  # (a file just written recorded, were it JSON as it is)
    src, out, udir = str(tmp_path / "net.pt"), tmp_path / "study", tmp_path / "u"
    known: dict = {}
    first = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    (ref,) = udir.glob("*.pt")
    before = hashlib.sha256(ref.read_bytes()).hexdigest()
    ref.unlink()
    (tmp_path / "k.json").write_text(plan.known_text(known))  # (as the study folder keeps it)
    known = plan.read_known(tmp_path / "k.json")
    again = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    # (was: the config recorded as JSON, equal to the OrderedDict but a dict: the network built again from it
    # was pickled with other bytes, another sha256 than the same network built from the checkpoint)
    assert hashlib.sha256(ref.read_bytes()).hexdigest() == before
    assert again == first


def test_a_checkpoint_written_over_in_the_clock_tick_it_was_read_in_is_read_again(tmp_path, monkeypatch):
    import time

    import embedscope.study.plan as plan

    ck = _save(tmp_path / "net.pt", extra={"epoch": 3})
    # a file system whose clock did not tick between the study's read and a write in place just after it
    # (1-2 s times: FAT, HFS+, ext4 of small inodes; a few ms on others): the file's times stay as they were
    tick = time.time_ns()
    real = plan.file_fingerprint

    def coarse(p):
        fp = real(p)
        return None if fp is None else [fp[0], tick, tick, fp[3], fp[4]]

    monkeypatch.setattr(plan, "file_fingerprint", coarse)
    monkeypatch.setattr(plan, "_now_ns", lambda: tick + 300_000_000, raising=False)  # (read 0.3 s into that tick)
    known: dict = {}

    def epoch():
        (e,) = [e for e in plan.plan_study(str(ck), tmp_path / "study", untrained_dir=tmp_path / "u", known=known)
                if e.run == "net"]
        return e.epoch

    assert epoch() == 3
    new = _save(tmp_path / "other.pt", extra={"epoch": 4}).read_bytes()
    assert len(new) == ck.stat().st_size
    with open(ck, "r+b") as f:  # a script saving its next epoch in place (torch.save(obj, path))
        f.write(new)
    # (was: recorded as read, its fingerprint unchanged: epoch 3 for this file ever after)
    assert epoch() == 4
    # one that changed long enough before it was read is recorded (and taken from the record)
    monkeypatch.setattr(plan, "_now_ns", lambda: tick + plan.RACY_NS)
    assert epoch() == 4 and known[str(ck)]["extra"] == {"epoch": 4}
    monkeypatch.setattr(plan, "_read_config", lambda p: pytest.fail(f"{p} read again"))
    assert epoch() == 4


def test_an_untrained_network_built_again_from_a_recorded_config_holding_one_text_twice_is_the_same_file(
        tmp_path, monkeypatch):
    import hashlib

    import torch

    import embedscope.study.plan as plan
    from embedscope.models import build_model, default_config, save_checkpoint

    monkeypatch.setattr(plan, "RACY_NS", 0, raising=False)  # (a file just written recorded)
    torch.manual_seed(0)
    # (as the trainer's config: device and amp 'auto', one object, which the checkpoint's pickle holds once)
    cfg = {**default_config("digits_cnn", embed_dim=8), "device": "auto", "amp": "auto"}
    save_checkpoint(tmp_path / "net.pt", build_model(cfg), cfg, extra={"epoch": 1})
    src, out, udir = str(tmp_path / "net.pt"), tmp_path / "study", tmp_path / "u"
    known: dict = {}
    first = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    assert str(tmp_path / "net.pt") in known
    (ref,) = udir.glob("*.pt")
    before = hashlib.sha256(ref.read_bytes()).hexdigest()
    ref.unlink()  # (a cache cleaned)
    known = json.loads(json.dumps(known))  # (as the study folder keeps it)
    again = [e.to_dict() for e in plan.plan_study(src, out, untrained_dir=udir, known=known)]
    # (was: built from the record's config, whose two 'auto' are two objects: pickled twice, other bytes, another
    # sha256: its embedding not found in the cache, its row measured again, runs.csv's sha256 another)
    assert hashlib.sha256(ref.read_bytes()).hexdigest() == before
    assert again == first


def test_after_a_signal_the_command_line_drops_asyncio_lines_of_a_loop_cut_short(monkeypatch):
    """A Ctrl-C while a Dask cluster closed after a finished study printed asyncio's "Future exception was
    never retrieved ... TimeoutError: Timeout" after the results (asyncio logs it: the unraisable hook never
    sees it). The command line's filter of the asyncio logger lets its lines through until a signal arrives,
    then drops them; main() of the command line's own process installs it."""
    import logging
    import signal

    import embedscope.cli as cli
    from embedscope import progress

    monkeypatch.setattr(cli, "_STOPPED", False)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("asyncio-under-test")
    log.propagate = False
    log.addHandler(Keep())
    log.addFilter(cli._logged_before_a_stop)
    log.error("Future exception was never retrieved (before)")
    progress.note_signal(signal.SIGINT)
    try:
        log.error("Future exception was never retrieved (after)")
    finally:
        progress.clear_signals()
    monkeypatch.setattr(cli, "_STOPPED", True)  # (a command that ended as its signal: 130)
    log.error("Future exception was never retrieved (after the command)")
    assert seen == ["Future exception was never retrieved (before)"]
    code = ("import logging, sys\nsys.argv = ['embedscope', '--version']\nimport embedscope.cli as c\n"
            "try:\n    c.main()\nexcept SystemExit:\n    pass\n"
            "print(c._logged_before_a_stop in logging.getLogger('asyncio').filters)\n")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "True"
