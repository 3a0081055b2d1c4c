"""Mutants of the kernel features (attnclaims/suite/test_ext_scores.py): the log-sum-exp a kernel returns,
logit soft-capping, ALiBi biases and softmax over a tuple of axes. Each overrides one small method of
:class:`~attnclaims.zoo.mutants.base.Composed` (``_lse``, ``_capped_scores``, ``_alibi_bias``,
``_biased_scores``, ``_masked_softmax``) and is correct everywhere else, plain attention included.

(The ``score_softcap`` mutant of :mod:`attnclaims.zoo.mutants.attention` is another bug: a cap where none is
declared, in plain attention.)
"""
from __future__ import annotations

import math

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)

LSE = ["softmax-distribution"]


# ---------------------------------------------------------------------------------------------
# The returned log-sum-exp
# ---------------------------------------------------------------------------------------------

@mutant("lse_base_two", "attention_lse", LSE,
        "the log-sum-exp returned in base 2 (log₂ Σ 2^(S·log₂e), the kernel's internal exp2 domain, never "
        "converted back): out is right, lse is 1.44× too large")
class _LseBaseTwo(Composed):
    def _lse(self, s, allowed):
        return super()._lse(s, allowed) / math.log(2.0)


@mutant("lse_max_not_added_back", "attention_lse", LSE,
        "the log-sum-exp returned as log Σ exp(S − m) without the running max m added back (right only when "
        "a row's largest score is 0)")
class _LseMaxNotAddedBack(Composed):
    def _lse(self, s, allowed):
        full = np.ones(s.shape, dtype=bool) if allowed is None else allowed
        m = np.max(s, axis=-1, keepdims=True, initial=-np.inf, where=full)
        return super()._lse(s, allowed) - np.where(np.isfinite(m), m, 0.0)[..., 0]


@mutant("lse_unscaled_scores", "attention_lse", LSE,
        "the log-sum-exp of the unscaled scores Q Kᵀ (the softmax scale applied to the weights' exponent only): "
        "right only for scale = 1")
class _LseUnscaledScores(Composed):
    def attention_lse(self, q, k, v, mask=None, scale=None):
        out, _ = super().attention_lse(q, k, v, mask=mask, scale=scale)
        return out, super().attention_lse(q, k, v, mask=mask, scale=1.0)[1]


@mutant("lse_mask_ignored", "attention_lse", LSE,
        "the log-sum-exp taken over every key, masked ones included (the mask applied to the weights only): "
        "right only without a mask")
class _LseMaskIgnored(Composed):
    def _lse(self, s, allowed):
        return super()._lse(s, None)


# ---------------------------------------------------------------------------------------------
# Logit soft-capping
# ---------------------------------------------------------------------------------------------

@mutant("softcap_before_scale", "softcap_attention", ["score-functions"],
        "soft-capping applied to the unscaled scores, the scale after: scale·c·tanh(Q Kᵀ/c) instead of "
        "c·tanh(scale·Q Kᵀ/c) (right only for scale = 1)")
class _SoftcapBeforeScale(Composed):
    def _capped_scores(self, q, k, scale, softcap):
        return self._softcap(self._scores(q, k, 1.0), softcap) * scale


@mutant("softcap_dropped", "softcap_attention", ["score-functions"],
        "the softcap argument is accepted and ignored: plain attention (right only where every score is far "
        "below the cap)")
class _SoftcapDropped(Composed):
    def _capped_scores(self, q, k, scale, softcap):
        return self._scores(q, k, scale)


# ---------------------------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------------------------

@mutant("alibi_slopes_reversed", "alibi_attention", ["positional-encoding"],
        "ALiBi slopes applied in reverse head order (head h gets m_(H−1−h)): right only for one head or equal "
        "slopes")
class _AlibiSlopesReversed(Composed):
    def _alibi_bias(self, n_q, n_k, slopes):
        return super()._alibi_bias(n_q, n_k, np.asarray(slopes)[::-1])


@mutant("alibi_bias_sign", "alibi_attention", ["positional-encoding"],
        "ALiBi bias with the wrong sign, +m_h(p_i − j): distant keys rewarded instead of penalised")
class _AlibiBiasSign(Composed):
    def _alibi_bias(self, n_q, n_k, slopes):
        return -super()._alibi_bias(n_q, n_k, slopes)


@mutant("alibi_bias_scaled", "alibi_attention", ["positional-encoding"],
        "ALiBi bias added before the softmax scale, scale·(Q Kᵀ + B) instead of scale·Q Kᵀ + B: the slopes "
        "shrink by 1/√d_k (right only for scale = 1)")
class _AlibiBiasScaled(Composed):
    def _biased_scores(self, q, k, scale, slopes):
        return (self._scores(q, k, 1.0) + self._alibi_bias(q.shape[-2], k.shape[-2], slopes)) * scale


# ---------------------------------------------------------------------------------------------
# Softmax over several axes
# ---------------------------------------------------------------------------------------------

@mutant("softmax_axes_one_after_another", "softmax", ["softmax-distribution"],
        "softmax over a tuple of axes taken as a softmax over each axis in turn: each slice then sums to the "
        "length of the first axis, not to 1")
class _SoftmaxAxesOneAfterAnother(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        if not isinstance(axis, (tuple, list)):
            return super()._masked_softmax(s, allowed, axis)
        for a in axis:
            s = super()._masked_softmax(s, allowed, a)
        return s


@mutant("softmax_axes_last_only", "softmax", ["softmax-distribution"],
        "softmax over a tuple of axes normalises only the last axis named (axis[-1])")
class _SoftmaxAxesLastOnly(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        if isinstance(axis, (tuple, list)):
            axis = axis[-1]
        return super()._masked_softmax(s, allowed, axis)


@mutant("softmax_axes_vjp_last_only", "softmax_vjp", ["softmax-distribution"],
        "softmax_vjp over a tuple of axes takes the Jacobian of a softmax over the last axis named only")
class _SoftmaxAxesVjpLastOnly(Composed):
    def softmax_vjp(self, x, d_out, axis=-1):
        return super().softmax_vjp(x, d_out, axis=axis[-1] if isinstance(axis, (tuple, list)) else axis)
