"""Session 37: small fixes found on the way (each test fails on the code before its fix)."""

from __future__ import annotations


def test_n_jobs_minus_one_takes_the_cores_of_the_affinity_mask(monkeypatch):
    import embedscope.device as device
    from embedscope.tsne.joint import auto_jobs

    monkeypatch.setattr(device, "available_cpus", lambda: 1)
    assert auto_jobs(-1, 50_000) == 1  # (was -1: openTSNE counted every core of the machine)
    assert auto_jobs(3, 50_000) == 3
