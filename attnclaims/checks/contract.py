"""The protocol's edges: calls an implementation must refuse, and what to tell its author when it does not.

A call outside the protocol (``docs/adapters.md``, "What must be rejected") has no meaning:

* a mask that does not broadcast to the scores, shape (…, n_q, n_k);
* queries and keys of different widths, q (…, n_q, d) and k (…, n_k, d') with d ≠ d' (q kᵀ is undefined);
* ``num_heads`` not dividing d_model (there are no h equal heads);
* ``num_kv_heads`` not dividing ``num_heads`` (there are no equal groups of query heads).

An implementation that computes something for such a call — a cropped or tiled mask, the common prefix of
two feature axes, truncated heads — answers a question nobody asked, and a caller's shape bug goes unseen.
numpy lets several of them through on some shapes only: broadcasting stretches an axis of length 1, so
``np.where(mask, scores, -np.inf)`` accepts a mask (n_q, 2) when n_k = 1, and an elementwise product summed
over the feature axis accepts keys of any width when d_k = 1.

Accepting one is a *contract finding* (evidence kind ``contract``): reported apart from the claims, with the
adapter-side fix, and never deciding a claim's verdict (:mod:`attnclaims.verdicts`). :func:`must_reject` is the
one check behind the claim suite's contract tests (``attnclaims/suite/test_contract.py``) and ``attnclaims smoke``.
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from attnclaims.guard import CheckFailure, NotApplicable

__all__ = ["FIX", "ContractFinding", "must_reject", "mask_why", "width_why", "heads_why", "axis_names", "unchecked"]

#: what the adapter must check, per kind of malformed call; each fix raises ``ValueError`` with the shapes
FIX = {
    "mask": "check the mask against the scores' shape (..., n_q, n_k), e.g. "
            "np.broadcast_shapes(mask.shape, scores.shape) == scores.shape, and raise ValueError",
    "width": "check q.shape[-1] == k.shape[-1] and raise ValueError",
    "heads": "check d_model % num_heads == 0 and raise ValueError",
    "kv_heads": "check num_heads % num_kv_heads == 0 and raise ValueError",
}


class ContractFinding(CheckFailure):
    """An implementation accepted a call outside the protocol. The message is one line: what was accepted,
    why numpy let it through (where it did) and the fix in the adapter."""


def unchecked(params, **changes):
    """``params`` with ``changes``, bypassing the dataclass' own validation (``__post_init__``), which
    would refuse the configuration before the implementation could be asked."""
    obj = object.__new__(type(params))
    for f in fields(params):
        object.__setattr__(obj, f.name, changes.get(f.name, getattr(params, f.name)))
    return obj


def axis_names(ndim: int) -> list[str]:
    """Names of the axes of scores (…, n_q, n_k) with ``ndim`` axes: batch axes, then n_q, n_k."""
    tail = ["n_q", "n_k"][-ndim:] if ndim else []
    return [f"batch axis {i}" for i in range(ndim - len(tail))] + tail


def mask_why(mask_shape: tuple[int, ...], scores_shape: tuple[int, ...]) -> str:
    """Why numpy lets a mask through, when it does: an axis of length 1 of the scores stretched to the mask's
    length, or axes the scores do not have (``np.broadcast_shapes`` succeeds but does not give the scores'
    shape). "" when numpy itself refuses the pair."""
    mask_shape, scores_shape = tuple(mask_shape), tuple(scores_shape)
    try:
        np.broadcast_shapes(mask_shape, scores_shape)
    except ValueError:
        return ""
    reasons = []
    names = axis_names(len(scores_shape))
    for i in range(1, min(len(mask_shape), len(scores_shape)) + 1):
        if scores_shape[-i] == 1 and mask_shape[-i] > 1:
            reasons.append(f"{names[-i]} = 1")
    if len(mask_shape) > len(scores_shape):
        reasons.append(f"the mask has {len(mask_shape) - len(scores_shape)} more axis(es) than the scores")
    if not reasons:
        return ""
    return ("broadcasting lets it through when " + " and ".join(reasons)
            + " (numpy's np.where(mask, scores, -inf) stretches the scores to the mask)")


def width_why(d_q: int, d_k: int) -> str:
    """Why numpy lets keys of another width through, when it does: one width is 1, and an elementwise product
    summed over the feature axis stretches it."""
    if 1 not in (d_q, d_k):
        return ""
    return ("broadcasting lets it through when a width is 1 (an elementwise product of q and k summed over "
            "the feature axis stretches it)")


def heads_why(d_model: int, num_heads: int) -> str:
    """What integer division does with heads that do not divide d_model."""
    return (f"d_model // num_heads = {d_model // num_heads} makes {num_heads} heads of {d_model // num_heads} "
            f"columns and leaves {d_model % num_heads} column(s) out")


def must_reject(g, capability: str, args: tuple, *, accepted: str, fix: str, why: str = "") -> str:
    """Call ``capability`` of the guarded implementation ``g`` on a call outside the protocol; it must raise.

    Returns how it refused (its exception, first line), for a note. Raising any exception counts, and so does
    declining (``NotImplementedError`` or ``NotApplicable`` from the method); a missing capability raises
    :class:`NotApplicable` (the check does not apply). Otherwise raises :class:`ContractFinding`, one line:
    ``<capability> accepts <accepted> (outside the protocol): <why>; it returned an output of shape … instead of
    raising. Fix in the adapter: <fix>``."""
    g.require(capability)
    try:
        out = g.call(capability, *args, finite=False)
    except NotApplicable as exc:  # the method declined the call: a refusal
        return f"declined: {str(exc).splitlines()[0][:200]}"
    except CheckFailure as exc:
        if exc.__cause__ is not None:  # the implementation raised: rejected, as it should be
            return f"rejected: {str(exc).splitlines()[0][:200]}"
        said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        said = said.split(f" · {capability}: ", 1)[-1]  # the guard's "claim · implementation · capability: " prefix
        outcome = f"then {said[:300]}"
    else:
        outcome = f"it returned an output of shape {tuple(np.shape(out))}"
    raise ContractFinding(f"{capability} accepts {accepted} instead of raising; {outcome}"
                          f"{'; ' + why if why else ''}. Fix in the adapter: {fix}", capability=capability)
