"""A forty-second reading of a study's reuse of its finished rows (their checkpoint's fingerprint, then its
sha256) and of its record of the checkpoint configs it read (checkpoint_configs.json)."""

import json
import os
import shutil

import pytest
from conftest import save_digits_checkpoint


def _study(src, out, cache, **kw):
    from embedscope.study.run import run_study

    return run_study(str(src), out, workers=0, cache_dir=cache, n_boot=0, measures=["R@1", "rho"], figures=False,
                     progress=False, echo=lambda s: None, **kw)


def _row(out, eid):
    return json.loads((out / "rows" / f"{eid}.json").read_text())


def test_another_checkpoint_of_the_same_size_and_modification_time_is_measured_again(tmp_path, monkeypatch):
    """A retrained run copied in with its times kept (``cp -p``, ``touch -r``): same size and modification
    time as the file measured, other bytes. Its row was reused (was: [size, mtime_ns] compared only)."""
    import embedscope.fileio as fileio
    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0)  # (files just written: their fingerprints recorded all the same)
    d = tmp_path / "ck"
    d.mkdir()
    ck = save_digits_checkpoint(d / "net.pt", seed=1)
    other = save_digits_checkpoint(tmp_path / "other.pt", seed=2)
    assert ck.stat().st_size == other.stat().st_size
    out, cache = tmp_path / "st", tmp_path / "cache"
    first = _study(d / "*.pt", out, cache)
    assert len(first["computed"]) == 2  # (the checkpoint and its untrained network)
    measured = _row(out, "net_given")
    assert measured["_checkpoint_stat"] == plan.file_fingerprint(ck)
    # nothing changed: reused on its fingerprint alone, no byte of the checkpoint read
    real = fileio.sha256_file
    monkeypatch.setattr(fileio, "sha256_file", lambda p, *a: pytest.fail(f"{p} hashed"))
    assert _study(d / "*.pt", out, cache)["computed"] == []
    monkeypatch.setattr(fileio, "sha256_file", real)
    st = ck.stat()
    shutil.copy2(other, ck)  # cp -p: the other network's bytes, the same size
    os.utime(ck, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: the same modification time
    assert fileio.file_stat(ck) == measured["_checkpoint_stat"][:2]
    again = _study(d / "*.pt", out, cache)
    assert [r["id"] for r in again["computed"]] == ["net_given"]
    assert _row(out, "net_given")["sha256"] == real(other) != measured["sha256"]


@pytest.mark.parametrize("recorded", ["earlier version", "another machine"])
def test_a_row_whose_fingerprint_differs_with_the_same_bytes_is_reused_and_takes_the_fingerprint_now(
        tmp_path, monkeypatch, recorded):
    """A row of an earlier version ([size, mtime_ns]) or measured by a Dask worker elsewhere (another device,
    inode, change time): the same bytes (sha256) keep the row; its fingerprint is then the file's here, so
    that the next run hashes nothing."""
    import embedscope.fileio as fileio
    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0)
    d = tmp_path / "ck"
    d.mkdir()
    ck = save_digits_checkpoint(d / "net.pt", seed=1)
    out, cache = tmp_path / "st", tmp_path / "cache"
    _study(d / "*.pt", out, cache)
    row = _row(out, "net_given")
    fp = plan.file_fingerprint(ck)
    row["_checkpoint_stat"] = fp[:2] if recorded == "earlier version" else [*fp[:2], fp[2] - 7, fp[3] + 1, fp[4] + 1]
    (out / "rows" / "net_given.json").write_text(json.dumps(row))
    assert _study(d / "*.pt", out, cache)["computed"] == []
    assert _row(out, "net_given")["_checkpoint_stat"] == fp  # (was: kept as it was, hashed at every run)
    monkeypatch.setattr(fileio, "sha256_file", lambda p, *a: pytest.fail(f"{p} hashed"))
    assert _study(d / "*.pt", out, cache)["computed"] == []


def test_a_checkpoint_changed_just_before_it_was_measured_records_no_fingerprint(tmp_path, monkeypatch):
    """A checkpoint whose change time is within plan.RACY_NS of its reading: a write in place in the same tick
    of a coarse clock would keep its fingerprint; its row records none, and is checked by its sha256."""
    import embedscope.fileio as fileio
    import embedscope.study.plan as plan

    d = tmp_path / "ck"
    d.mkdir()
    save_digits_checkpoint(d / "net.pt", seed=1)
    out, cache = tmp_path / "st", tmp_path / "cache"
    _study(d / "*.pt", out, cache)  # (plan.RACY_NS as it is: the file was just written)
    assert _row(out, "net_given")["_checkpoint_stat"] is None
    hashed = []
    real = fileio.sha256_file
    monkeypatch.setattr(fileio, "sha256_file", lambda p, *a: hashed.append(p) or real(p, *a))
    monkeypatch.setattr(plan, "RACY_NS", 0)  # (long enough after its change now: its fingerprint taken)
    assert _study(d / "*.pt", out, cache)["computed"] == []
    assert str(d / "net.pt") in map(str, hashed)
    assert _row(out, "net_given")["_checkpoint_stat"] == plan.file_fingerprint(d / "net.pt")


def test_a_checkpoint_written_over_while_it_is_measured_is_an_error_row(tmp_path, monkeypatch):
    """Its sha256 (taken after the load) and its measures may be of two files: the row is an error, tried
    again by the next run (was: kept, the sha256 of the one with the measures of the other)."""
    import embedscope.study.run as run_mod

    d = tmp_path / "ck"
    d.mkdir()
    ck = save_digits_checkpoint(d / "net.pt", seed=1)
    other = save_digits_checkpoint(tmp_path / "other.pt", seed=2)
    real = run_mod.embed_cached

    def embed_then_written_over(path, **kw):
        out = real(path, **kw)
        if os.path.samefile(path, ck):
            shutil.copy(other, ck)
        return out

    monkeypatch.setattr(run_mod, "embed_cached", embed_then_written_over)
    res = _study(d / "*.pt", tmp_path / "st", tmp_path / "cache")
    row = _row(tmp_path / "st", "net_given")
    assert row["status"] == "error" and "changed while it was measured" in row["error"], row.get("error")
    assert len(res["rows"]) == 2


def test_a_checkpoint_written_over_between_its_load_and_its_sha256_leaves_no_embedding_in_the_cache(tmp_path,
                                                                                                   monkeypatch):
    """embed_cached keys the cache by the sha256 read after the load: a file written over in between gave
    the embedding of the one network under the other's key, taken by every study of the other."""
    import embedscope.models as models
    from embedscope.errors import EmbedscopeError
    from embedscope.study.run import embed_cached

    ck = save_digits_checkpoint(tmp_path / "net.pt", seed=1)
    other = save_digits_checkpoint(tmp_path / "other.pt", seed=2)
    real = models.load_checkpoint

    def load_then_written_over(path, *a, **k):
        model, config, _ = real(path, *a, **k)
        shutil.copy(other, path)
        return model, config, real(path, *a, **k)[2]  # (the sha256 of the file now)

    monkeypatch.setattr(models, "load_checkpoint", load_then_written_over)
    with pytest.raises(EmbedscopeError, match="changed while it was (read|embedded)"):  # (after the load or the embedding)
        embed_cached(ck, cache_dir=tmp_path / "cache", device="cpu")
    assert list((tmp_path / "cache").glob("*.h5")) == []


def test_a_config_record_of_a_newer_version_is_left_as_it_is_one_of_an_earlier_version_replaced(tmp_path,
                                                                                                 monkeypatch):
    """checkpoint_configs.json of a newer embedscope (a higher version) is read as no record and left alone
    (was: written over with this version's records: the newer one read every checkpoint again); one of an
    earlier version is replaced."""
    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0)
    d = tmp_path / "ck"
    d.mkdir()
    save_digits_checkpoint(d / "net.pt", seed=1)
    out, cache = tmp_path / "st", tmp_path / "cache"
    _study(d / "*.pt", out, cache)
    path = out / plan.CONFIGS_FILE
    assert len(plan.read_known(path)) == 2
    newer = json.dumps({"v": plan.CONFIGS_VERSION + 1, "files": {"x": {"a new form": 1}}}) + "\n"
    path.write_text(newer)
    assert plan.newer_known(path) and plan.read_known(path) == {}
    assert _study(d / "*.pt", out, cache)["computed"] == []
    assert path.read_text() == newer
    _study(d / "*.pt", out, cache, force=True)
    assert path.read_text() == newer
    for older in ({"v": plan.CONFIGS_VERSION - 1, "files": {}}, {"v": str(plan.CONFIGS_VERSION + 1)}, [1], "x"):
        path.write_text(json.dumps(older))
        assert not plan.newer_known(path)
        assert _study(d / "*.pt", out, cache)["computed"] == []
        assert json.loads(path.read_text())["v"] == plan.CONFIGS_VERSION and len(plan.read_known(path)) == 2


def test_an_untrained_network_damaged_under_an_unchanged_fingerprint_is_built_again_when_measured(tmp_path,
                                                                                                   monkeypatch):
    """Bit rot in <cache>/untrained/: its fingerprint as recorded, other bytes. Its row to be measured again
    (here: removed), the study measured the damaged network (was: nothing but --force rebuilt it, and only
    when it no longer loaded); now its sha256, recorded when it was built, tells, and it is built again.
    A row that is reused does not hash it."""
    import hashlib

    import embedscope.fileio as fileio
    import embedscope.study.plan as plan

    monkeypatch.setattr(plan, "RACY_NS", 0)
    d = tmp_path / "ck"
    d.mkdir()
    save_digits_checkpoint(d / "net.pt", seed=1)
    out, cache = tmp_path / "st", tmp_path / "cache"
    lines: list[str] = []
    first = _study(d / "*.pt", out, cache)
    (ref,) = cache.glob("untrained/*.pt")
    (ref_row,) = [r for r in first["rows"] if r["selection"] == "untrained"]
    good = ref.read_bytes()
    assert hashlib.sha256(good).hexdigest() == ref_row["sha256"]
    known = plan.read_known(out / plan.CONFIGS_FILE)
    assert known[str(ref)]["sha256"] == ref_row["sha256"]
    # nothing to measure: the reference is not hashed
    real = fileio.sha256_file
    monkeypatch.setattr(fileio, "sha256_file", lambda p, *a: pytest.fail(f"{p} hashed"))
    assert _study(d / "*.pt", out, cache)["computed"] == []
    monkeypatch.setattr(fileio, "sha256_file", real)
    # bit rot: one bit of a weight flipped, the fingerprint as recorded (a disk changes no time)
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x10
    ref.write_bytes(bytes(bad))
    known[str(ref)]["stat"] = plan.file_fingerprint(ref)
    (out / plan.CONFIGS_FILE).write_text(plan.known_text(known))
    (out / "rows" / f"{ref_row['id']}.json").unlink()  # (its row to be measured again)
    from embedscope.study.run import run_study

    again = run_study(str(d / "*.pt"), out, workers=0, cache_dir=cache, n_boot=0, measures=["R@1", "rho"],
                      figures=False, progress=False, echo=lines.append)
    assert [r["id"] for r in again["computed"]] == [ref_row["id"]]
    assert ref.read_bytes() == good
    assert _row(out, ref_row["id"])["sha256"] == ref_row["sha256"] and _row(out, ref_row["id"])["status"] == "ok"
    assert any("no longer holds the bytes it was built with" in s for s in lines), lines
    assert plan.read_known(out / plan.CONFIGS_FILE)[str(ref)] == {"stat": plan.file_fingerprint(ref),
                                                                  "untrained": True, "sha256": ref_row["sha256"]}


def test_an_untrained_record_of_an_earlier_version_takes_its_sha256_once(tmp_path, monkeypatch):
    """A record of an untrained network without sha256 (written by an earlier version) is hashed once by the
    plan and keeps it; an intact network whose row is to be measured is hashed, found the same, not built."""
    import embedscope.study.plan as plan
    from embedscope.fileio import sha256_file

    monkeypatch.setattr(plan, "RACY_NS", 0)
    ck = save_digits_checkpoint(tmp_path / "net.pt", seed=1)
    known: dict = {}
    entries = plan.plan_study(str(ck), tmp_path / "st", untrained_dir=tmp_path / "u", known=known)
    (ref,) = [e for e in entries if e.selection == "untrained"]
    key = os.path.abspath(ref.checkpoint)
    assert known[key]["sha256"] == sha256_file(ref.checkpoint)
    del known[key]["sha256"]  # (as an earlier version recorded it)
    plan.plan_study(str(ck), tmp_path / "st", untrained_dir=tmp_path / "u", known=known)
    assert known[key]["sha256"] == sha256_file(ref.checkpoint)
    assert plan.damaged_untrained(entries, {ref.id}, known) == []
    import embedscope.models as models

    monkeypatch.setattr(models, "build_model", lambda *a: pytest.fail("built again"))
    again = plan.plan_study(str(ck), tmp_path / "st", untrained_dir=tmp_path / "u", known=known, verify={ref.id})
    assert [e.to_dict() for e in again] == [e.to_dict() for e in entries]
