"""A study's local Dask cluster prints none of Dask's own log lines, also while it closes.

LocalCluster silences the ``distributed`` logger's stream handlers only while it is open: its close
puts their levels back before its event loop stops, and once in several studies run from Python a
worker's stream still sending then printed "distributed.batched - INFO - Batched Comm Closed" with a
CommClosedError traceback. Such a late line is simulated here: logged from the cluster's close, after
Dask's own close has run."""

import io
import logging

import pytest

from embedscope.study.run import run_study

MEASURED = ["R@1", "rho"]


@pytest.fixture
def dask_stderr(monkeypatch):
    """Dask's own stderr handler on the ``distributed`` logger, as a script gets it (under pytest, whose
    root handlers exist, Dask adds none), writing to a buffer."""
    import distributed  # noqa: F401 - its logger levels set

    buf = io.StringIO()
    h = logging.StreamHandler(buf)
    log = logging.getLogger("distributed")
    monkeypatch.setattr(log, "handlers", [h])
    monkeypatch.setattr(log, "propagate", False)
    assert log.getEffectiveLevel() <= logging.INFO
    buf.handler = h
    return buf


def test_dask_stays_quiet_until_its_cluster_is_closed(two_checkpoints, tmp_path, monkeypatch, dask_stderr):
    from distributed.deploy.spec import SpecCluster

    h = dask_stderr.handler
    assert h.level == logging.NOTSET
    seen = []
    close = SpecCluster.close

    def late_close(self, *a, **k):
        out = close(self, *a, **k)
        seen.append(h.level)
        logging.getLogger("distributed.batched").info("Batched Comm Closed <late line of the test>")
        return out

    monkeypatch.setattr(SpecCluster, "close", late_close)
    res = run_study(str(two_checkpoints / "*.pt"), tmp_path / "s", workers=2, cache_dir=tmp_path / "c",
                    epoch="last", n_boot=10, figures=False, measures=MEASURED, progress=False, echo=lambda s: None)
    assert not res["errors"] and len(res["rows"]) == 3  # (+ the untrained reference)
    assert seen == [logging.ERROR]
    assert dask_stderr.getvalue() == ""
    # Dask's levels given back after the study
    assert h.level == logging.NOTSET
    logging.getLogger("distributed.batched").info("Batched Comm Closed <after the study>")
    assert "after the study" in dask_stderr.getvalue()


def test_a_cluster_that_does_not_start_gives_the_levels_back(monkeypatch, dask_stderr, tmp_path, two_checkpoints):
    import distributed

    def refuse(*a, **k):
        raise OSError("no ports left")

    monkeypatch.setattr(distributed, "LocalCluster", refuse)
    monkeypatch.setattr("dask.distributed.LocalCluster", refuse)
    with pytest.raises(Exception):
        run_study(str(two_checkpoints / "*.pt"), tmp_path / "s", workers=2, cache_dir=tmp_path / "c",
                  epoch="last", n_boot=10, figures=False, measures=MEASURED, progress=False, echo=lambda s: None)
    assert dask_stderr.handler.level == logging.NOTSET


def test_a_users_scheduler_keeps_dask_warnings(dask_stderr):
    """With ``--scheduler`` (a user's cluster) Dask's INFO lines are held back during the study, its
    warnings not (a lost worker, memory pressure: the user's to see); the levels come back after."""
    from embedscope.study.run import _quiet_dask_logs

    loud = _quiet_dask_logs(logging.WARNING)
    log = logging.getLogger("distributed.batched")
    log.info("an info line")
    log.warning("a warning line")
    loud()
    assert "a warning line" in dask_stderr.getvalue() and "an info line" not in dask_stderr.getvalue()
    assert dask_stderr.handler.level == logging.NOTSET
