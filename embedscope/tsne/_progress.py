"""Progress reporting for the t-SNE runs: the numerics call a callback; only this adapter draws a bar.

A progress argument is ``False``/``None`` (silent), ``True`` (a tqdm bar on stderr) or a callable
``progress(done, total, values)`` called as iterations finish, with ``values`` a (possibly empty)
mapping of the numbers known at that point (e.g. ``{"KL": 1.23}``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

ProgressFn = Callable[[int, int, Mapping[str, float]], Any]


def progress_reporter(progress: bool | ProgressFn | None, total: int,
                      desc: str) -> tuple[ProgressFn | None, Callable[[], None]]:
    """``(report, close)``: ``report(done, total, values)`` or None when silent, and a closer."""
    if progress is None or progress is False:
        return None, lambda: None
    if callable(progress):
        return progress, lambda: None
    from embedscope.progress import progress_bar

    bar = progress_bar(total=total, desc=desc, unit="it")

    def report(done: int, total: int, values: Mapping[str, float]) -> None:  # noqa: ARG001 - same signature
        bar.update(max(0, min(done, bar.total) - bar.n))
        if values:
            bar.set_postfix(**{str(k): f"{v:.3f}" for k, v in values.items()})

    return report, bar.close
