"""Gradients derived from the algorithm: reverse-mode differentiation of the expression graph.

``dt.grad(alg)`` returns ordinary dtriton algorithms (printable, schedulable by stage name,
explorable) that compute the vector-Jacobian product of ``alg``: given the forward inputs and one
upstream gradient per output, they produce the gradient of every requested input::

    bwd = dt.grad(softmax)              # a GradientAlgorithms
    print(bwd)                           # each backward algorithm, stage by stage
    dX, = bwd.reference(X, dY)           # eager torch oracle
    k = dt.compile(bwd["X"])             # the algorithm computing dX; heuristic schedule
    dX = k(X, dY)

The method is the reverse (adjoint) mode of algorithmic differentiation applied to the index-notation
graph (Griewank & Walther, "Evaluating Derivatives", 2nd ed., SIAM 2008, ch. 3-4; the index-notation
rules follow the usual tensor-calculus adjoints, e.g. Laue, Mitterreiter & Giesen, "Computing Higher
Order Derivatives of Matrix and Tensor Expressions", NeurIPS 2018):

- adjoints flow from the outputs to the inputs in reverse topological order; a node's adjoint is
  the sum of its parents' contributions;
- a contribution with axes the node lacks (the node was *broadcast*) is summed over those axes,
  and the adjoint of ``sum over R`` is broadcast back along ``R`` (implicit in index notation);
- ``max``/``min`` over ``R`` route the adjoint to the arg-extremum, split evenly among ties as
  ``torch.amax``/``torch.amin`` do: ``where(x == m, bar / count_ties, 0)``; ``maximum``/``minimum``
  give half to each side on ties, as ``torch.maximum``;
- a load ``T[e0, e1, ...]`` adds its adjoint to ``dT``: a bare axis index is renamed to the output
  axis, any other index (a gather such as ``X[i, labels[i]]``) becomes a one-hot comparison with
  the output axis, ``where(labels[i] == j, bar, 0)``, summed over the load's remaining axes (a
  scatter-add written in index notation).

The derived graph is simplified as it is built (hash-consing, constant folding, ``x*1``, ``x*0``,
``--x``, ``x * where(c, 1, 0) -> where(c, x, 0)``, factors free of a summed axis hoisted out of the
sum, contributions with the same summed axes merged into one reduction; the ``1/N`` of a mean's
adjoint folds into a mean of the adjoint's sum, or else into a division by a per-row ``count``
stage). Sums of broadcasts never arise: a contribution is summed only over axes it actually has.
One rule removes whole reductions: a ``max``/``min`` stage whose outputs are invariant under
shifting it (the stabilising max of softmax, log-sum-exp and attention: ``exp(x - m) / sum exp(x - m)``
does not depend on ``m``) has a zero adjoint exactly, so its tie-count and adjoint stages are not
built. Forward reductions the backward needs are recomputed (keeping their forward stage names, so a
schedule for them carries over) unless listed in ``save=`` (then they are inputs ``saved_<stage>``).
A stabilising max and its sum of exponentials can be saved as one log-sum-exp statistic
(``lse_<max>_<sum>``, what :func:`saved_statistics` picks for softmax, cross-entropy and attention):
the backward reads it for the max and 1 for the sum (:mod:`.logsumexp`).

Modules: :mod:`.graph` (the simplifying node builder), :mod:`.shift` (shift invariance of max/min
stages), :mod:`.logsumexp` (the log-sum-exp statistic), :mod:`.naming` (fresh names), :mod:`.derive` (the adjoint rules), :mod:`.finalize` (fresh algorithms from the derived
graph, grouping), :mod:`.api` (the functions below).
"""

from .api import (GradientAlgorithms, GradProvenance, augmented_forward, check_group, check_save, describe, grad,
                  saved_outputs,
                  saved_statistics, staged)
from .naming import grad_param_names
from .shift import shift_only

__all__ = ["grad", "GradientAlgorithms", "GradProvenance", "describe", "augmented_forward", "check_save", "check_group",
           "saved_outputs",
           "saved_statistics", "staged", "grad_param_names", "shift_only"]
