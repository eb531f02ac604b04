"""Studies over many checkpoints (docs/methods.md §6): plan, run (cached, resumable, Dask), statistics, report.

``embedscope study SRC -o STUDY_DIR`` and ``embedscope report STUDY_DIR -o report.html``; see
``docs/studies.md``.
"""

from embedscope._lazy import module_getattr

__getattr__ = module_getattr(__name__)  # embedscope.study.run ... after a bare `import embedscope`
