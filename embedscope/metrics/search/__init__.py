"""The exact-rank engine shared by the retrieval measures (docs/methods.md §1, "Protocol").

- :func:`relevant_ranks` (:mod:`.ranks`): exact ranks of every query's relevant references, the
  one intermediate every retrieval measure reads (:class:`RelevantRanks`);
- :func:`knn_search` (:mod:`.knn`): exact k nearest references; :class:`KeySpace`, the float32
  copies and float64 error bounds behind every certified search;
- :func:`relevant_ranks_by_count` (:mod:`.counting`): the thresholded counting pass for the
  searches the filtered tile pass (:mod:`.rows`) does not take;
- :func:`search_threads` (:mod:`.threads`): the worker threads of the CPU searches started from
  the calling thread (a study's worker threads set 1).

Every result equals the ranking of a float64 distance matrix, ties broken by the lower reference
index, although the bulk GEMMs run in float32; memory stays bounded (no N × N matrix).
"""

from __future__ import annotations

from embedscope.metrics.search.counting import relevant_ranks_by_count
from embedscope.metrics.search.knn import KeySpace, check_metric, knn_search, pair_keys64, prepare
from embedscope.metrics.search.ranks import RelevantRanks, relevant_ranks
from embedscope.metrics.search.threads import n_search_threads, search_threads

__all__ = ["relevant_ranks", "RelevantRanks", "knn_search", "KeySpace", "pair_keys64", "prepare",
           "check_metric", "relevant_ranks_by_count", "search_threads", "n_search_threads"]
