"""Mutants of scaled dot-product attention and the softmax: scaling, scores, the softmax, masks, the
contract (inputs, determinism, shapes that only some inputs have), causal alignment and sliding windows, and
the protocol's edges (configurations outside it accepted; caught only by attnclaims/suite/test_contract.py's
rejection checks, on valid calls each is exact).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)


# ---------------------------------------------------------------------------------------------
# Scaling and scores
# ---------------------------------------------------------------------------------------------

@mutant("scale_missing", "attention", ["softmax-saturation"],
        "scores are not scaled: softmax(Q Kᵀ) V (the 1/√d_k was forgotten)")
class _ScaleMissing(Composed):
    def _default_scale(self, q, k, v):
        return 1.0


@mutant("scale_one_over_dk", "attention", ["softmax-saturation"],
        "scale 1/d_k instead of 1/√d_k (identical when d_k = 1)")
class _ScaleOneOverDk(Composed):
    def _default_scale(self, q, k, v):
        return 1.0 / q.shape[-1]


@mutant("scale_multiplied", "attention", ["softmax-saturation"],
        "scores multiplied by √d_k instead of divided (identical when d_k = 1)")
class _ScaleMultiplied(Composed):
    def _default_scale(self, q, k, v):
        return np.sqrt(q.shape[-1])


@mutant("scale_uses_d_v", "attention", ["softmax-saturation"],
        "default scale 1/√d_v taken from v.shape[-1] (identical when d_v = d_k)")
class _ScaleUsesDv(Composed):
    def _default_scale(self, q, k, v):
        return 1.0 / np.sqrt(v.shape[-1])


@mutant("scale_argument_ignored", "attention", ["softmax-distribution", "convex-combination"],
        "an explicit scale= is ignored; 1/√d_k is always used")
class _ScaleArgumentIgnored(Composed):
    def attention(self, q, k, v, mask=None, scale=None):
        return super().attention(q, k, v, mask=mask, scale=None)


@mutant("score_softcap", "attention", ["score-functions", "softmax-distribution"],
        "scores soft-capped as 50·tanh(S/50) (Gemma 2's logit capping left on): only large scores change")
class _ScoreSoftcap(Composed):
    def _scores(self, q, k, scale):
        return 50.0 * np.tanh(super()._scores(q, k, scale) / 50.0)


@mutant("score_clamp", "attention", ["seq2seq-bottleneck", "alignment-example"],
        "scores clipped to [−5, 5] 'for stability': no key can win by more than e^10, however aligned")
class _ScoreClamp(Composed):
    def _scores(self, q, k, scale):
        return np.clip(super()._scores(q, k, scale), -5.0, 5.0)


@mutant("topk_attention", "attention", ["interpretability", "softmax-distribution"],
        "top-k sparse attention left on: only the 4 largest scores of a query are kept (wrong only when n_k > 4)")
class _TopkAttention(Composed):
    _K = 4

    def _weights(self, s, allowed):
        if s.shape[-1] > self._K:
            kth = np.sort(s, axis=-1)[..., -self._K][..., None]  # the 4th largest score of each row
            top = s >= kth
            allowed = top if allowed is None else allowed & top
        return super()._weights(s, allowed)


# ---------------------------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------------------------

@mutant("softmax_over_queries", "attention", ["softmax-distribution"],
        "attention weights normalised over the query axis (softmax(axis=-2)) instead of over the keys")
class _SoftmaxOverQueries(Composed):
    def _weights(self, s, allowed):
        return self._masked_softmax(s, allowed, axis=-2)


@mutant("softmax_ignores_axis", "softmax", ["softmax-distribution"],
        "softmax(x, axis) always normalises the last axis, whatever axis is asked")
class _SoftmaxIgnoresAxis(Composed):
    def softmax(self, x, axis=-1):
        return super().softmax(x, axis=-1)


@mutant("softmax_no_max_subtraction", "softmax", ["softmax-distribution"],
        "softmax as exp(x) / Σ exp(x) without subtracting the row maximum: overflows for large scores")
class _SoftmaxNoMax(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(s)
            if allowed is not None:
                e = np.where(allowed, e, 0.0)
            return e / e.sum(axis=axis, keepdims=True)


@mutant("softmax_eps_denominator", "softmax", ["softmax-distribution"],
        "softmax divides by Σ exp + 1e-10 'for safety', so no row sums to exactly 1")
class _SoftmaxEps(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        if allowed is None:
            allowed = np.ones(s.shape, dtype=bool)
        m = np.max(s, axis=axis, keepdims=True, initial=-np.inf, where=allowed)
        e = np.where(allowed, np.exp(np.where(allowed, s - m, 0.0)), 0.0)
        return e / (e.sum(axis=axis, keepdims=True) + 1e-10)


@mutant("softmax_float32", "softmax", ["softmax-distribution"],
        "softmax computed in float32 and cast back to float64 (half the digits are noise)")
class _SoftmaxFloat32(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        s = np.asarray(s, dtype=np.float32)  # "softmax is fine in single precision"
        if allowed is None:
            allowed = np.ones(s.shape, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.max(s, axis=axis, keepdims=True, initial=-np.inf, where=allowed)
            e = np.where(allowed, np.exp(np.where(allowed, s - m, np.float32(0))), np.float32(0))
            denom = e.sum(axis=axis, keepdims=True)
            out = np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)
        return out.astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------

@mutant("mask_inverted", "attention", ["softmax-distribution", "decoder-masking"],
        "mask read with PyTorch nn.MultiheadAttention's meaning (True = masked out)")
class _MaskInverted(Composed):
    def _allowed(self, mask, target):
        return None if mask is None else ~super()._allowed(mask, target)


@mutant("mask_after_softmax", "attention", ["softmax-distribution"],
        "masked weights zeroed after the softmax, without renormalising the row")
class _MaskAfterSoftmax(Composed):
    def _weights(self, s, allowed):
        a = self._masked_softmax(s, None)
        return a if allowed is None else np.where(allowed, a, 0.0)


@mutant("mask_additive_minus_1e4", "attention", ["softmax-distribution"],
        "mask added as a -1e4 bias (the fp16 habit): masked keys keep weight when scores are large")
class _MaskAdditive(Composed):
    def _weights(self, s, allowed):
        if allowed is not None:
            s = s + np.where(allowed, 0.0, -1e4)
        return self._masked_softmax(s, None)


@mutant("mask_first_batch_only", "attention", ["softmax-distribution"],
        "mask[0] used for every batch element (drops the batch axis of a per-sequence mask)")
class _MaskFirstBatch(Composed):
    def _allowed(self, mask, target):
        if mask is None:
            return None
        mask = np.asarray(mask, dtype=bool)
        if mask.ndim > 2:
            mask = mask[(0,) * (mask.ndim - 2)]  # meant to squeeze a leading 1
        return np.broadcast_to(mask, target)


@mutant("mask_ignored_single_query", "attention", ["softmax-distribution"],
        "decoding fast path: the mask is ignored when n_q == 1")
class _MaskIgnoredSingleQuery(Composed):
    def _allowed(self, mask, target):
        return None if target[-2] == 1 else super()._allowed(mask, target)


@mutant("causal_dropped_with_padding", "attention", ["decoder-masking", "parallel-training"],
        "a causal ∧ key-padding mask is run as its key padding alone (its last query row: a padding fast path "
        "with is_causal left off): the causal mask is dropped only when a padding mask comes with it")
class _CausalDroppedWithPadding(Composed):
    def _allowed(self, mask, target):
        allowed = super()._allowed(mask, target)
        if allowed is None or target[-2] < 2:
            return allowed
        keys = allowed[..., -1:, :]  # the last query of a top-left causal mask sees every unpadded key
        causal = np.arange(target[-1])[None, :] <= np.arange(target[-2])[:, None]
        if not keys.all() and np.array_equal(allowed, causal & keys):
            return np.broadcast_to(keys, target)
        return allowed


@mutant("local_window", "attention", ["constant-path-length"],
        "a sliding window left on: query i sees only keys with |i − j| < 8 (wrong only when n_k > 8)")
class _LocalWindow(Composed):
    _WINDOW = 8

    def _allowed(self, mask, target):
        n_q, n_k = target[-2:]
        near = np.abs(np.arange(n_q)[:, None] - np.arange(n_k)[None, :]) < self._WINDOW  # (n_q, n_k)
        allowed = super()._allowed(mask, target)
        return np.broadcast_to(near, target) if allowed is None else allowed & near


# ---------------------------------------------------------------------------------------------
# The contract: inputs, determinism, shapes that only some inputs have
# ---------------------------------------------------------------------------------------------

@mutant("mutates_input", "attention", ["softmax-distribution"],
        "q is scaled in place (q *= scale), changing the caller's array")
class _MutatesInput(Composed):
    def attention(self, q, k, v, mask=None, scale=None):
        if isinstance(q, np.ndarray) and q.dtype == np.float64 and q.flags.writeable:
            q *= 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
            return super().attention(q, k, v, mask=mask, scale=1.0)
        return super().attention(q, k, v, mask=mask, scale=scale)


@mutant("nondeterministic", "attention", ["softmax-distribution"],
        "values summed in a random key order on every call (like GPU atomics): results differ in the last bits")
class _Nondeterministic(Composed):
    _order = np.random.default_rng()  # unseeded on purpose: that is the bug

    def _weighted_sum(self, a, v):
        order = self._order.permutation(a.shape[-1])
        terms = a[..., :, order, None] * v[..., None, order, :]  # (..., n_q, n_k, d_v)
        out = np.zeros(terms.shape[:-2] + terms.shape[-1:])
        for j in range(terms.shape[-2]):
            out = out + terms[..., j, :]
        return out


@mutant("long_sequences_truncated", "attention", ["softmax-distribution", "convex-combination"],
        "a fixed 64-key buffer: keys beyond the 64th are silently dropped (wrong only when n_k > 64)")
class _LongSequencesTruncated(Composed):
    _BUFFER = 64

    def _weights(self, s, allowed):
        n_k = s.shape[-1]
        if n_k <= self._BUFFER:
            return super()._weights(s, allowed)
        keep = np.arange(n_k) < self._BUFFER
        allowed = keep if allowed is None else allowed & keep
        return super()._weights(s, np.broadcast_to(allowed, s.shape))


@mutant("batch_uses_first_values", "attention", ["softmax-distribution", "convex-combination"],
        "batched attention loops over the batch but reads v[0] for every element: wrong only when batch > 1")
class _BatchUsesFirstValues(Composed):
    def _weighted_sum(self, a, v):
        if a.ndim <= 2:
            return super()._weighted_sum(a, v)
        v = np.broadcast_to(v, a.shape[:-2] + v.shape[-2:])  # (..., n_k, d_v)
        a_flat = a.reshape(-1, *a.shape[-2:])  # (B, n_q, n_k)
        v_flat = v.reshape(-1, *v.shape[-2:])  # (B, n_k, d_v)
        out = np.stack([super(_BatchUsesFirstValues, self)._weighted_sum(a_flat[b], v_flat[0])  # typo: v_flat[b]
                        for b in range(a_flat.shape[0])])
        return out.reshape(a.shape[:-1] + v.shape[-1:])


@mutant("values_from_keys", "attention", ["convex-combination"],
        "typo a @ k instead of a @ v: right whenever the caller passes the same array as k and v")
class _ValuesFromKeys(Composed):
    def attention(self, q, k, v, mask=None, scale=None):
        return super().attention(q, k, k, mask=mask, scale=scale)


# ---------------------------------------------------------------------------------------------
# Causal alignment and sliding windows
# ---------------------------------------------------------------------------------------------

@mutant("causal_bottom_right_as_top_left", "causal_attention", ["decoder-masking"],
        "bottom-right alignment requested, top-left applied (the offset n_k − n_q dropped): right when n_q = n_k")
class _CausalBottomRightAsTopLeft(Composed):
    def _causal_offset(self, n_q, n_k, alignment):
        return 0


@mutant("sliding_window_off_by_one", "causal_attention", ["decoder-masking"],
        "a window of w keeps w + 1 keys (p − j <= w instead of p − j < w)")
class _SlidingWindowOffByOne(Composed):
    def _window_keeps(self, offset_from_query, window):
        return super()._window_keeps(offset_from_query, None if window is None else window + 1)


# ---------------------------------------------------------------------------------------------
# The protocol's edges
# ---------------------------------------------------------------------------------------------

@mutant("features_truncated", "attention", ["softmax-distribution"],
        "q and k of different widths accepted: scores from their common leading features")
class _FeaturesTruncated(Composed):
    def _scores(self, q, k, scale):
        d = min(q.shape[-1], k.shape[-1])
        return super()._scores(q[..., :d], k[..., :d], scale)


@mutant("mask_cropped", "attention", ["softmax-distribution"],
        "a mask that does not broadcast accepted: cropped to the scores, missing keys/queries allowed")
class _MaskCropped(Composed):
    def _allowed(self, mask, target):
        if mask is None:
            return None
        m = np.asarray(mask, dtype=bool)
        n_q, n_k = target[-2:]
        m = m[..., :n_q, :n_k]  # too many queries/keys: cropped
        if 2 < m.ndim <= len(target):  # a batch axis too large: cropped
            m = m[tuple(slice(0, t) for t in target[len(target) - m.ndim : -2])]
        pad = [(0, 0)] * (m.ndim - 2) + [(0, want - have if have not in (1, want) else 0)
                                         for have, want in zip(m.shape[-2:], (n_q, n_k))]
        return np.broadcast_to(np.pad(m, pad, constant_values=True), target)  # too few: padded as allowed
