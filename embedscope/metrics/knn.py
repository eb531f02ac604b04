"""Temporary alias: the exact kNN search moved to :mod:`embedscope.metrics.search.knn`.

Kept only because ``embedscope/metrics/clustering.py`` still imports ``check_metric`` and
``prepare`` from here; delete this file once that import reads
``from embedscope.metrics.search.knn import check_metric, prepare``.
"""

from embedscope.metrics.search.knn import KeySpace, check_metric, knn_search, prepare  # noqa: F401
