"""t-SNE computations (docs/methods.md §10): openTSNE runs, the yoked objective and its optimiser.

Plain functions on arrays, nothing drawn here (the figures are in :mod:`embedscope.viz.tsne`):

* :mod:`embedscope.tsne.joint` -- :func:`single_tsne`, :func:`joint_tsne` (openTSNE runs),
  :func:`effective_perplexity` (and :func:`perplexity_cap`, its note), :data:`TSNE_DEFAULTS`, :func:`prepare_tsne_input`;
* :mod:`embedscope.tsne.yoked` -- :func:`yoked_tsne`, :func:`yoked_tsne_maps` (K maps, yoked
  by points or class centroids), :func:`yoke_penalty`, the objective and its gradient
  (:func:`yoked_tsne_exact_objective_and_grad`, :func:`yoked_tsne_objective_and_grad`,
  :class:`YokedObjective`), :func:`default_alpha`;
* :mod:`embedscope.tsne.optimizer` -- :func:`gradient_descent` (takes the objective as a
  parameter) and its :class:`GradientDescentState`;
* :mod:`embedscope.tsne.sampling` -- :func:`stratified_subsample` (nested in ``n``) and its
  :func:`stratum_quotas`;
* here: :data:`DEFAULT_MAX_POINTS`, the commands' default ``--max-points``, and
  :data:`MIN_PERPLEXITY` and :data:`MIN_POINTS`.

Imports are lazy: ``from embedscope.tsne import stratified_subsample`` does not load openTSNE.
"""

from __future__ import annotations

from embedscope._lazy import lazy_exports

#: ``embedscope tsne`` / ``yoke`` map at most this many points unless ``--max-points`` says otherwise
#: (one openTSNE map of 50,000 64-d points took 204 s on one thread of a shared 2-core machine,
#: docs/PERFORMANCE.md); the Python functions map every row unless ``max_points`` is given. Here, not
#: in :mod:`embedscope.tsne.sampling`: the commands' ``--help`` reads it without importing numpy.
DEFAULT_MAX_POINTS = 50_000

#: the smallest perplexity a map can have: 2 to the entropy of a point's neighbour distribution, 1
#: when all of it is on one neighbour. openTSNE does not refuse less: below 1/3 its neighbour search
#: failed (3·perplexity < 1 neighbour), and from 1/3 to 1 every value gave the affinities of its
#: one or two neighbours, one map recorded under different perplexities. Here too (no numpy: --help).
MIN_PERPLEXITY = 1.0

#: the fewest points a map is made of, by the commands, the analyses and the functions here alike
#: (:func:`effective_perplexity` said 5 where the analyses said 6: one rule, one message)
MIN_POINTS = 6

_EXPORTS = {
    # openTSNE runs
    "joint_tsne": "embedscope.tsne.joint",
    "single_tsne": "embedscope.tsne.joint",
    "effective_perplexity": "embedscope.tsne.joint",
    "perplexity_cap": "embedscope.tsne.joint",
    "prepare_tsne_input": "embedscope.tsne.joint",
    "TSNE_DEFAULTS": "embedscope.tsne.joint",
    # yoked t-SNE: objective, gradients, run
    "yoked_tsne": "embedscope.tsne.yoked",
    "yoked_tsne_maps": "embedscope.tsne.yoked",
    "yoke_penalty": "embedscope.tsne.yoked",
    "yoked_tsne_exact_objective_and_grad": "embedscope.tsne.yoked",
    "yoked_tsne_objective_and_grad": "embedscope.tsne.yoked",
    "YokedObjective": "embedscope.tsne.yoked",
    "default_alpha": "embedscope.tsne.yoked",
    # the optimiser, apart from any objective
    "gradient_descent": "embedscope.tsne.optimizer",
    "GradientDescentState": "embedscope.tsne.optimizer",
    # sub-sampling
    "stratified_subsample": "embedscope.tsne.sampling",
    "stratum_quotas": "embedscope.tsne.sampling",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
