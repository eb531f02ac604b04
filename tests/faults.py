"""Faults the tests inject: files whose writes fail (a full disk, Ctrl-C in the middle of a write)."""

import builtins


class FailingWrites:
    """A file object that passes everything to ``fh`` but raises ``stop`` at write number ``after`` + 1
    (the sizes of every write tried, failed ones included, appended to ``writes``)."""

    def __init__(self, fh, stop, after: int = 0, writes: list | None = None):
        self.fh, self.stop, self.after = fh, stop, after
        self.writes = [] if writes is None else writes

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()

    def write(self, data):
        self.writes.append(len(data))
        if len(self.writes) > self.after:
            raise self.stop
        return self.fh.write(data)


def fail_writes(monkeypatch, module, stop, *, after: int = 0, mode: str = "r+b") -> list:
    """Make the files that ``module`` opens (its ``open``) in ``mode`` fail as :class:`FailingWrites`;
    returns the list of the sizes written."""
    writes: list = []

    def fake_open(path, m="r", *a, **k):
        fh = builtins.open(path, m, *a, **k)
        return FailingWrites(fh, stop, after, writes) if m == mode else fh

    monkeypatch.setattr(module, "open", fake_open, raising=False)
    return writes
