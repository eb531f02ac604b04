"""t-SNE's gradient descent, apart from any objective (the way openTSNE separates the two).

:func:`gradient_descent` moves one or several maps (a list of N x 2 arrays) downhill on an
objective passed in as a callable; it knows nothing of t-SNE's affinities, the yoke or progress
bars. Its state (momentum updates and per-coordinate gains) lives in a
:class:`GradientDescentState` that the caller keeps across phases (early exaggeration, then the
main phase), as openTSNE's ``gradient_descent`` object does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from embedscope.errors import EmbedscopeError

#: ``objective(Ys, eval_error) -> (error, grads)``: ``grads`` one array per map (same shapes as
#: ``Ys``); ``error`` anything describing the objective's value when ``eval_error`` (e.g. a dict
#: ``{"KL_a": ..., "KL_b": ...}``), else ``None``.
Objective = Callable[[Sequence[np.ndarray], bool], "tuple[Any, Sequence[np.ndarray]]"]

#: ``callback(iteration, error, Ys) -> bool | None``: called after every iteration (``iteration``
#: counts all iterations run with this state); ``error`` is the objective's report on the
#: iterations where it was evaluated, else ``None``. Returning ``True`` stops the descent.
Callback = Callable[[int, Any, Sequence[np.ndarray]], Any]


@dataclass
class GradientDescentState:
    """Momentum updates and gains of each map, and the number of iterations run so far."""

    updates: list = field(default_factory=list)
    gains: list = field(default_factory=list)
    iteration: int = 0

    @classmethod
    def start(cls, Ys: Sequence[np.ndarray]) -> "GradientDescentState":
        """Zero updates and unit gains for maps shaped like ``Ys``."""
        return cls([np.zeros_like(Y) for Y in Ys], [np.ones_like(Y) for Y in Ys], 0)


def gradient_descent(
    objective: Objective,
    Ys: list,
    n_iter: int,
    *,
    learning_rate: float,
    momentum: float = 0.8,
    gradient_scale: float = 1.0,
    max_step_norm: float | None = None,
    recentre: bool = True,
    state: GradientDescentState | None = None,
    callback: Callback | None = None,
    error_every: int = 50,
    implicit: Any = None,
) -> GradientDescentState:
    """Gradient descent with momentum and per-coordinate gains (Jacobs 1988; the t-SNE optimiser).

    For each map Y (updated in place) and its gradient G from ``objective``, every iteration::

        g      = gradient_scale · G
        gain   = gain + 0.2            where sign(update) ≠ sign(g), else 0.8 · gain + 0.01
        update = momentum · update − learning_rate · gain · g
        update_i clipped to length ≤ max_step_norm (per point)
        Y      = Y + update, then Y − mean(Y) (``recentre``)

    This is the update of van der Maaten's and openTSNE's t-SNE (openTSNE ``gradient_descent``,
    without its min_gain and gradient clipping; the same floating-point operations, so that one
    map on openTSNE's objective follows openTSNE's run bit for bit); openTSNE's learning-rate units
    apply to ∂KL/∂y / 4, i.e. ``gradient_scale=0.25`` for a true gradient.

    ``implicit`` (optional) is a term of the objective taken by an implicit (proximal) step instead
    of an explicit one, for a stiff term such as the yoke of :mod:`embedscope.tsne.yoked`: an
    object with ``gradient(Ys)`` (its gradient, added to G for the gains' sign test only) and
    ``prox(Ys, steps)`` (the points Y' with Y' = Y~ − steps · ∇term(Y'), ``Y~`` the explicit step
    above and ``steps`` = learning_rate · gain · gradient_scale per coordinate). The update kept
    for the momentum is then Y' − Y. A fixed point of this forward–backward step has a zero total
    gradient, and it is stable however stiff the term.

    Parameters
    ----------
    objective : callable
        ``objective(Ys, eval_error) -> (error, grads)``.
    Ys : list of arrays (N, 2)
        The maps, updated in place.
    n_iter : int
        Iterations to run.
    learning_rate, momentum, gradient_scale, max_step_norm, recentre
        As in the update above.
    state : GradientDescentState, optional
        Carried over from an earlier call (the next phase continues with its gains); new otherwise.
    callback : callable, optional
        ``callback(iteration, error, Ys)`` after each iteration; the objective is asked for its
        error every ``error_every`` iterations of this call (only when there is a callback).
        Returning ``True`` stops.

    Returns
    -------
    GradientDescentState
        The state after the last iteration (``state`` itself when given).
    """
    if state is None:
        state = GradientDescentState.start(Ys)
    if len(state.updates) != len(Ys):
        raise EmbedscopeError(f"the optimiser state holds {len(state.updates)} map(s), got {len(Ys)}")
    if error_every < 1:
        raise EmbedscopeError(f"error_every must be positive, got {error_every}")
    updates, gains = state.updates, state.gains
    for it in range(int(n_iter)):
        eval_error = callback is not None and (it + 1) % error_every == 0
        error, grads = objective(Ys, eval_error)
        extra = implicit.gradient(Ys) if implicit is not None else None
        old = [Y.copy() for Y in Ys] if implicit is not None else None
        for k in range(len(Ys)):
            g = grads[k] * gradient_scale
            G = g if extra is None else (grads[k] + extra[k]) * gradient_scale
            flipped = np.sign(updates[k]) != np.sign(G)
            gains[k][flipped] += 0.2
            gains[k][~flipped] = gains[k][~flipped] * 0.8 + 0.01
            updates[k] = momentum * updates[k] - learning_rate * gains[k] * g
            if max_step_norm is not None:  # openTSNE's operations: divide by the norm, then scale
                norms = np.linalg.norm(updates[k], axis=1, keepdims=True)
                big = norms[:, 0] > max_step_norm
                updates[k][big] /= norms[big]
                updates[k][big] *= max_step_norm
            Ys[k] += updates[k]
        if implicit is not None:
            new = implicit.prox(Ys, [learning_rate * gains[k] * gradient_scale for k in range(len(Ys))])
            for k in range(len(Ys)):
                Ys[k][...] = new[k]
                updates[k] = Ys[k] - old[k]
        if recentre:
            for k in range(len(Ys)):
                Ys[k] -= Ys[k].mean(0)
        state.iteration += 1
        if callback is not None and callback(state.iteration, error if eval_error else None, Ys) is True:
            break
    return state


__all__ = ["GradientDescentState", "gradient_descent", "Objective", "Callback"]
