"""The mutant zoo: correct implementations with exactly one realistic bug each.

Every mutant is a small subclass of :class:`Composed`, which is the reference
(:class:`attnclaims.reference.impl.Reference`) rebuilt so that each capability
calls the lower ones *of the same object*: the encoder layer calls
``self.multi_head_attention``, ``self.layer_norm`` and ``self.feed_forward``,
multi-head attention calls ``self.attention``, attention calls the masked
softmax of ``self``. A bug planted in one place therefore travels upwards the
way it does in a real code base, and each mutant overrides one small method
and changes one thing in it.

``MUTANTS`` maps a name to a :class:`Mutant`: its one-line description, the
capability that holds the bug, the claim ids whose tests should catch it, and
its factory. Each mutant is also a module attribute under its name, so the
harness resolves it as ``attnclaims.zoo.mutants:<name>``.
``python -m attnclaims mutants`` (see :mod:`attnclaims.mutants`) runs the
property tests against each one and prints the kill matrix.

The bugs are meant to be found the hard way: most are invisible on the easy
inputs (one head, one batch element, short sequences, square masks, γ = 1 and
β = 0, scores of moderate size) and show only on the edge cases the
strategies are supposed to draw.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from attnclaims.reference.attention import softmax as reference_softmax
from attnclaims.reference.impl import Reference
from attnclaims.reference.layers import layer_norm as reference_layer_norm
from attnclaims.reference.masks import causal_mask, combine_masks
from attnclaims.reference.multihead import merge_heads, split_heads
from attnclaims.reference.positional import sinusoidal_encoding
from attnclaims.reference.wiring import residual_sublayer
from attnclaims.zoo.modern_composed import ModernComposition

__all__ = ["Mutant", "MUTANTS", "Composed", "composed"]


# ---------------------------------------------------------------------------------------------
# The correct base: the reference, composed through self
# ---------------------------------------------------------------------------------------------

class Composed(ModernComposition, Reference):
    """The reference's mathematics, every capability built from the lower ones of ``self``.

    The modern components (RMSNorm, gated FFNs, RoPE, causal alignment, decoder-only blocks, KV-cache
    decoding) come composed the same way from :class:`~attnclaims.zoo.modern_composed.ModernComposition`.

    It is itself a correct implementation (the zoo test checks that it passes every
    implementation test), so whatever a mutant fails is due to its one change.
    """

    name = "composed-reference"

    # -- attention: scale, scores, mask, softmax, weighted sum ----------------------------------
    def _default_scale(self, q, k, v) -> float:
        """1/√d_k (Vaswani §3.2.1), d_k = q.shape[-1]."""
        return 1.0 / np.sqrt(q.shape[-1])

    def _scores(self, q, k, scale: float) -> np.ndarray:
        """S = Q Kᵀ · scale. q (..., n_q, d_k), k (..., n_k, d_k) -> (..., n_q, n_k)."""
        return (q @ np.swapaxes(k, -1, -2)) * scale

    def _allowed(self, mask, target: tuple[int, ...]) -> np.ndarray | None:
        """The bool mask broadcast to the scores' shape (True = may attend), or None."""
        return None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), target)

    def _masked_softmax(self, s: np.ndarray, allowed: np.ndarray | None, axis: int = -1) -> np.ndarray:
        """Row-wise softmax with masked entries exactly 0 (the reference's, max subtracted)."""
        return reference_softmax(s, axis=axis, mask=allowed)

    def _weights(self, s: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
        """A = softmax over the keys (the last axis). s (..., n_q, n_k) -> (..., n_q, n_k)."""
        return self._masked_softmax(s, allowed, axis=-1)

    def _weighted_sum(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Σ_{j : a_ij > 0} a_ij v_j; zero-weight terms are dropped so masked NaN rows cannot leak."""
        if np.isfinite(v).all():
            return a @ v  # (..., n_q, n_k) @ (..., n_k, d_v) -> (..., n_q, d_v)
        with np.errstate(invalid="ignore"):
            terms = np.where(a[..., :, :, None] > 0, a[..., :, :, None] * v[..., None, :, :], 0.0)
        return terms.sum(axis=-2)  # (..., n_q, n_k, d_v) -> (..., n_q, d_v)

    def softmax(self, x, axis=-1):
        return self._masked_softmax(np.asarray(x, dtype=np.float64), None, axis=axis)

    def attention(self, q, k, v, mask=None, scale=None):
        """softmax(Q Kᵀ · scale) V with masked weights exactly 0 (article §3.1 ①–④)."""
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        if scale is None:
            scale = self._default_scale(q, k, v)
        s = self._scores(q, k, float(scale))  # (..., n_q, n_k)
        target = np.broadcast_shapes(s.shape, v.shape[:-2] + (1, 1))
        s = np.broadcast_to(s, target)
        a = self._weights(s, self._allowed(mask, target))  # (..., n_q, n_k)
        return self._weighted_sum(a, v)

    # -- multi-head attention ---------------------------------------------------------------------
    def _project(self, x, w, b) -> np.ndarray:
        return x @ w + b  # (..., n, d_model) @ (d_model, d_model)

    def _split(self, x, h: int) -> np.ndarray:
        return split_heads(x, h)  # (..., n, d_model) -> (..., h, n, d_k)

    def _merge(self, heads) -> np.ndarray:
        return merge_heads(heads)  # (..., h, n, d_k) -> (..., n, d_model)

    def _repeat_kv(self, x, group_size: int) -> np.ndarray:
        """Grouped-query attention: each K/V head repeated for its group of consecutive query heads,
        (..., h_kv, n, d_k) -> (..., h_kv·r, n, d_k) (repeat_interleave; identity for r = 1)."""
        return x if group_size == 1 else np.repeat(x, group_size, axis=-3)

    def _qkv(self, x_q, x_kv, p):
        """Per-head Q, K, V: (..., h, n_q, d_k), (..., h, n_k, d_k), (..., h, n_k, d_k); K and V are formed in
        the num_kv_heads K/V heads and repeated for their groups (grouped-query attention)."""
        q = self._split(self._project(x_q, p.w_q, p.b_q), p.num_heads)
        k = self._split(self._project(x_kv, p.w_k, p.b_k), p.num_kv_heads)
        v = self._split(self._project(x_kv, p.w_v, p.b_v), p.num_kv_heads)
        return q, self._repeat_kv(k, p.group_size), self._repeat_kv(v, p.group_size)

    def _head_mask(self, mask, x_q, x_kv):
        """(..., n_q, n_k) mask -> (..., 1, n_q, n_k): one mask shared by every head."""
        if mask is None:
            return None
        target = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2]) + (x_q.shape[-2], x_kv.shape[-2])
        return np.broadcast_to(np.asarray(mask, dtype=bool), target)[..., None, :, :]

    def _output(self, concat, p) -> np.ndarray:
        return self._project(concat, p.w_o, p.b_o)  # Concat(heads) W_O + b_O

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """Concat(head_1 … head_h) W_O + b_O, head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i) (§6.1)."""
        x_q, x_kv = np.asarray(x_q, dtype=np.float64), np.asarray(x_kv, dtype=np.float64)
        q, k, v = self._qkv(x_q, x_kv, params)
        heads = self.attention(q, k, v, mask=self._head_mask(mask, x_q, x_kv))  # (..., h, n_q, d_k)
        return self._output(self._merge(heads), params)

    # -- positional encoding, layer norm, FFN -----------------------------------------------------
    def positional_encoding(self, n_positions, d_model):
        return sinusoidal_encoding(n_positions, d_model)

    def layer_norm(self, x, gamma, beta, eps):
        return reference_layer_norm(x, gamma, beta, eps)

    def _activation(self, h):
        return np.maximum(0.0, h)

    def feed_forward(self, x, params):
        """max(0, x W_1 + b_1) W_2 + b_2 at every position (§6.4)."""
        x = np.asarray(x, dtype=np.float64)
        return self._activation(x @ params.w1 + params.b1) @ params.w2 + params.b2

    # -- layers -----------------------------------------------------------------------------------
    def _ln(self, x, norm, eps):
        return self.layer_norm(x, norm.gamma, norm.beta, eps)

    def _sublayer(self, x, f, norm, eps, norm_first: bool):
        """Post-LN: LN(x + f(x)); Pre-LN: x + f(LN(x)) (§6.3; Xiong et al. 2020), the reference's wiring."""
        return residual_sublayer(x, f, lambda z: self._ln(z, norm, eps), norm_first)

    def encoder_layer(self, x, params, mask=None):
        """Self-attention then FFN, each wrapped in residual + LN (§7)."""
        p = params
        x = np.asarray(x, dtype=np.float64)
        x = self._sublayer(x, lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                           p.norm_first)
        return self._sublayer(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)

    def _causal(self, n_t: int) -> np.ndarray:
        return causal_mask(n_t)  # (n_t, n_t), lower triangle with the diagonal

    def _decoder_self_mask(self, n_t: int, self_mask):
        return combine_masks(self._causal(n_t), None if self_mask is None else np.asarray(self_mask))

    def _cross_source(self, y, memory):
        """Keys and values of the cross-attention: the encoder output."""
        return memory

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        """Masked self-attention, cross-attention to memory, FFN; each with residual + LN (§7)."""
        p = params
        y, memory = np.asarray(y, dtype=np.float64), np.asarray(memory, dtype=np.float64)
        batch = np.broadcast_shapes(y.shape[:-2], memory.shape[:-2])
        y = np.broadcast_to(y, batch + y.shape[-2:])  # (..., n_t, d_model)
        smask = self._decoder_self_mask(y.shape[-2], self_mask)
        y = self._sublayer(y, lambda h: self.multi_head_attention(h, h, p.self_attn, smask), p.norm1, p.eps,
                           p.norm_first)
        y = self._sublayer(
            y, lambda h: self.multi_head_attention(h, self._cross_source(h, memory), p.cross_attn, memory_mask),
            p.norm2, p.eps, p.norm_first)
        return self._sublayer(y, lambda h: self.feed_forward(h, p.ffn), p.norm3, p.eps, p.norm_first)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: The correct composed base as an instance (``mutants:composed``), a control for the zoo.
composed = Composed()


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``factory()`` returns the buggy implementation."""

    name: str
    description: str
    capability: str
    claims: tuple[str, ...]
    factory: Callable[[], object]

    @property
    def spec(self) -> str:
        """What ``--attn-impl`` takes to run the tests against this mutant."""
        return f"{__name__}:{self.name}"


MUTANTS: dict[str, Mutant] = {}


def mutant(name: str, capability: str, claims: tuple[str, ...] | list[str], description: str,
           dtype: str | None = None):
    """Register the decorated class as the mutant ``name`` (and expose it as a module attribute).

    With ``dtype`` ("bfloat16", "float16") the mutant is a 16-bit implementation: the class's float64
    mathematics with every output rounded once to that dtype (:class:`attnclaims.zoo.reduced_precision.
    RoundedEinsum` around an instance of the class, the correct 16-bit style), judged by the 16-bit bounds;
    its one bug is the 16-bit step the class plants (an accumulation in the reduced dtype)."""

    def register(cls):
        if name in MUTANTS:
            raise ValueError(f"mutant {name!r} is registered twice")
        cls.name = f"mutant:{name}"
        cls.__doc__ = description
        factory = cls if dtype is None else _rounded_factory(cls, dtype, f"mutant:{name}")
        MUTANTS[name] = Mutant(name, description, capability, tuple(claims), factory)
        globals()[name] = factory
        return cls

    return register


def _rounded_factory(cls, dtype: str, name: str) -> Callable[[], object]:
    """A factory of ``cls()`` with its outputs rounded to ``dtype`` (ml_dtypes' bfloat16, numpy's float16)."""

    def factory():
        from attnclaims.zoo.reduced_precision import RoundedEinsum

        if dtype == "bfloat16":
            import ml_dtypes

            return RoundedEinsum(ml_dtypes.bfloat16, name, base=cls())
        return RoundedEinsum(np.dtype(dtype), name, base=cls())

    factory.__name__ = factory.__qualname__ = cls.__name__.lstrip("_")
    factory.__doc__ = cls.__doc__
    return factory


# ---------------------------------------------------------------------------------------------
# Scaling
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


@mutant("mha_scale_d_model", "multi_head_attention", ["multihead-structure"],
        "multi-head scores scaled by 1/√d_model instead of 1/√d_k per head (identical with one head)")
class _MhaScaleDModel(Composed):
    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        x_q, x_kv = np.asarray(x_q, dtype=np.float64), np.asarray(x_kv, dtype=np.float64)
        q, k, v = self._qkv(x_q, x_kv, params)
        heads = self.attention(q, k, v, mask=self._head_mask(mask, x_q, x_kv), scale=1 / np.sqrt(params.d_model))
        return self._output(self._merge(heads), params)


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


@mutant("softmax_bfloat16_denominator", "softmax", ["softmax-distribution"],
        "bfloat16 softmax whose row sum Σ exp(s − max) is accumulated in bfloat16, rounded after every add "
        "(torch.sum of a bfloat16 tensor without a float32 accumulator): long rows no longer sum to 1",
        dtype="bfloat16")
class _SoftmaxBfloat16Denominator(Composed):
    def _masked_softmax(self, s, allowed, axis=-1):
        import ml_dtypes

        if allowed is None:
            allowed = np.ones(s.shape, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.max(s, axis=axis, keepdims=True, initial=-np.inf, where=allowed)
            e = np.where(allowed, np.exp(np.where(allowed, s - m, 0.0)), 0.0)
        terms = np.moveaxis(e, axis, -1).astype(ml_dtypes.bfloat16)  # the bfloat16 tensor that is summed
        acc = np.zeros(terms.shape[:-1], dtype=ml_dtypes.bfloat16)
        for j in range(terms.shape[-1]):  # the accumulator stays bfloat16: one rounding per add
            acc = (acc.astype(np.float64) + terms[..., j].astype(np.float64)).astype(ml_dtypes.bfloat16)
        denom = np.expand_dims(acc.astype(np.float64), axis)
        return np.divide(e, denom, out=np.zeros_like(e), where=denom > 0)


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


@mutant("local_window", "attention", ["constant-path-length"],
        "a sliding window left on: query i sees only keys with |i − j| < 8 (wrong only when n_k > 8)")
class _LocalWindow(Composed):
    _WINDOW = 8

    def _allowed(self, mask, target):
        n_q, n_k = target[-2:]
        near = np.abs(np.arange(n_q)[:, None] - np.arange(n_k)[None, :]) < self._WINDOW  # (n_q, n_k)
        allowed = super()._allowed(mask, target)
        return np.broadcast_to(near, target) if allowed is None else allowed & near


@mutant("mha_mask_dropped", "multi_head_attention", ["decoder-masking"],
        "multi-head attention forgets to pass its mask to the heads")
class _MhaMaskDropped(Composed):
    def _head_mask(self, mask, x_q, x_kv):
        return None


# ---------------------------------------------------------------------------------------------
# Multi-head
# ---------------------------------------------------------------------------------------------

@mutant("heads_split_strided", "multi_head_attention", ["multihead-structure"],
        "heads split as reshape(n, d_k, h): head i gets columns i, i+h, … instead of a contiguous block")
class _HeadsSplitStrided(Composed):
    def _split(self, x, h):
        *lead, n, d = x.shape
        x = x.reshape(*lead, n, d // h, h)  # (..., n, d_k, h): the wrong order
        return np.moveaxis(x, -1, -3)  # (..., h, n, d_k)


@mutant("heads_merged_without_transpose", "multi_head_attention", ["multihead-structure", "permutation-equivariance"],
        "heads merged with reshape(n, d_model) without moving the head axis back (mixes positions)")
class _HeadsMergedWithoutTranspose(Composed):
    def _merge(self, heads):
        *lead, h, n, d_k = heads.shape
        return heads.reshape(*lead, n, h * d_k)  # (..., h, n, d_k) read as (..., n, h·d_k)


@mutant("output_projection_missing", "multi_head_attention", ["multihead-structure"],
        "no output projection: Concat(heads) + b_O")
class _OutputProjectionMissing(Composed):
    def _output(self, concat, p):
        return concat + p.b_o


@mutant("output_projection_transposed", "multi_head_attention", ["multihead-structure"],
        "output projection applied as Concat(heads) W_Oᵀ (torch Linear's layout)")
class _OutputProjectionTransposed(Composed):
    def _output(self, concat, p):
        return concat @ p.w_o.T + p.b_o


@mutant("shared_kv_weight", "multi_head_attention", ["multihead-structure", "self-attention"],
        "values projected with W_K (copy-paste): V = X W_K + b_V")
class _SharedKvWeight(Composed):
    def _qkv(self, x_q, x_kv, p):
        q, k, _ = super()._qkv(x_q, x_kv, p)
        return q, k, self._split(self._project(x_kv, p.w_k, p.b_v), p.num_heads)


@mutant("query_bias_ignored", "multi_head_attention", ["multihead-structure", "self-attention"],
        "the query projection drops its bias: Q = X W_Q")
class _QueryBiasIgnored(Composed):
    def _qkv(self, x_q, x_kv, p):
        _, k, v = super()._qkv(x_q, x_kv, p)
        return self._split(x_q @ p.w_q, p.num_heads), k, v


@mutant("keys_from_queries", "multi_head_attention", ["self-attention", "cross-attention"],
        "keys and values projected from x_q instead of x_kv: only self-attention works")
class _KeysFromQueries(Composed):
    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        return super().multi_head_attention(x_q, x_q, params, mask)


# ---------------------------------------------------------------------------------------------
# Positional encoding
# ---------------------------------------------------------------------------------------------

def _pe(n_positions, d_model, *, base=10000.0, exponent=None, first=np.sin, second=np.cos, start=0):
    """The sinusoidal table with one knob turned (each mutant turns one)."""
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    omega = base ** (-(two_i if exponent is None else exponent(two_i)) / d_model)
    angles = np.arange(start, start + n_positions, dtype=np.float64)[:, None] * omega[None, :]
    pe = np.empty((n_positions, d_model))
    pe[:, 0::2] = first(angles)
    pe[:, 1::2] = second(angles[:, : d_model // 2])
    return pe


@mutant("pe_sin_cos_swapped", "positional_encoding", ["positional-encoding"],
        "cos on the even columns and sin on the odd ones")
class _PeSwapped(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, first=np.cos, second=np.sin)


@mutant("pe_wrong_exponent", "positional_encoding", ["positional-encoding"],
        "frequency exponent uses the column index: ω = 10000^(−2·(2i)/d) instead of 10000^(−2i/d)")
class _PeWrongExponent(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, exponent=lambda two_i: 2 * two_i)


@mutant("pe_wrong_base", "positional_encoding", ["positional-encoding"],
        "base 1000 instead of 10000")
class _PeWrongBase(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, base=1000.0)


@mutant("pe_positions_from_one", "positional_encoding", ["positional-encoding"],
        "positions counted from 1 (PE of pos 0 is missing)")
class _PeFromOne(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, start=1)


@mutant("pe_halves_layout", "positional_encoding", ["positional-encoding"],
        "sines in the first half of the columns and cosines in the second (tensor2tensor's layout)")
class _PeHalves(Composed):
    def positional_encoding(self, n_positions, d_model):
        pe = _pe(n_positions, d_model)
        return np.concatenate([pe[:, 0::2], pe[:, 1::2]], axis=1)


# ---------------------------------------------------------------------------------------------
# Layer norm
# ---------------------------------------------------------------------------------------------

def _ln(x, gamma, beta, eps, *, ddof=0, eps_inside=True, axis=-1, affine=True, naive=False):
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=axis, keepdims=True)
    var = (x * x).mean(axis=axis, keepdims=True) - mu * mu if naive else x.var(axis=axis, ddof=ddof, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        xhat = (x - mu) / (np.sqrt(var + eps) if eps_inside else np.sqrt(var) + eps)
    return gamma * xhat + beta if affine else xhat


@mutant("ln_unbiased_variance", "layer_norm", ["layer-norm"],
        "variance with Bessel's correction (1/(d−1), numpy ddof=1 / torch.var's default)")
class _LnUnbiased(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, ddof=1)


@mutant("ln_eps_outside_sqrt", "layer_norm", ["layer-norm"],
        "ε added to the standard deviation: (x − μ)/(σ + ε)")
class _LnEpsOutside(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, eps_inside=False)


@mutant("ln_wrong_axis", "layer_norm", ["layer-norm"],
        "statistics over the sequence axis (−2) instead of the features (batch-norm style)")
class _LnWrongAxis(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        x = np.asarray(x, dtype=np.float64)
        return _ln(x, gamma, beta, eps, axis=-2 if x.ndim >= 2 else -1)


@mutant("ln_no_affine", "layer_norm", ["layer-norm"],
        "γ and β are ignored (elementwise_affine=False)")
class _LnNoAffine(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, affine=False)


@mutant("ln_naive_variance", "layer_norm", ["layer-norm"],
        "one-pass variance E[x²] − μ²: cancels catastrophically when the mean is large")
class _LnNaive(Composed):
    def layer_norm(self, x, gamma, beta, eps):
        return _ln(x, gamma, beta, eps, naive=True)


# ---------------------------------------------------------------------------------------------
# Residual connections and norm placement
# ---------------------------------------------------------------------------------------------

@mutant("encoder_adds_positions", "encoder_layer", ["no-recurrence", "permutation-equivariance"],
        "every encoder layer adds the sinusoidal encoding to its input (instead of once, to the embeddings)")
class _EncoderAddsPositions(Composed):
    def encoder_layer(self, x, params, mask=None):
        x = np.asarray(x, dtype=np.float64)
        return super().encoder_layer(x + self.positional_encoding(x.shape[-2], x.shape[-1]), params, mask)


@mutant("residual_missing", "encoder_layer", ["encoder-structure"],
        "the attention sub-layer has no residual: LN(SelfAttn(x))")
class _ResidualMissing(Composed):
    def encoder_layer(self, x, params, mask=None):
        p = params
        x = np.asarray(x, dtype=np.float64)
        if p.norm_first:
            h = self._ln(x, p.norm1, p.eps)
            x = self.multi_head_attention(h, h, p.self_attn, mask)
        else:
            x = self._ln(self.multi_head_attention(x, x, p.self_attn, mask), p.norm1, p.eps)
        return self._sublayer(x, lambda h: self.feed_forward(h, p.ffn), p.norm2, p.eps, p.norm_first)


@mutant("pre_ln_always", "encoder_layer", ["encoder-structure"],
        "Pre-LN used even when norm_first=False asks for the article's Post-LN")
class _PreLnAlways(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, replace(params, norm_first=True), mask)


@mutant("norm1_reused", "encoder_layer", ["encoder-structure"],
        "the FFN sub-layer is normalised with norm1's γ, β (copy-paste); invisible while γ = 1, β = 0")
class _Norm1Reused(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, replace(params, norm2=params.norm1), mask)


@mutant("residual_from_layer_input", "encoder_layer", ["encoder-structure"],
        "the FFN's residual adds the layer's input x instead of the attention sub-layer's output")
class _ResidualFromInput(Composed):
    def encoder_layer(self, x, params, mask=None):
        p = params
        x0 = np.asarray(x, dtype=np.float64)
        x1 = self._sublayer(x0, lambda h: self.multi_head_attention(h, h, p.self_attn, mask), p.norm1, p.eps,
                            p.norm_first)
        if p.norm_first:
            return x0 + self.feed_forward(self._ln(x1, p.norm2, p.eps), p.ffn)
        return self._ln(x0 + self.feed_forward(x1, p.ffn), p.norm2, p.eps)


@mutant("encoder_mask_ignored", "encoder_layer", ["encoder-structure"],
        "the encoder layer does not pass its (padding) mask to the self-attention")
class _EncoderMaskIgnored(Composed):
    def encoder_layer(self, x, params, mask=None):
        return super().encoder_layer(x, params, None)


# ---------------------------------------------------------------------------------------------
# Position-wise FFN
# ---------------------------------------------------------------------------------------------

@mutant("ffn_mixes_positions", "feed_forward", ["position-wise-ffn"],
        "channels-first via reshape(d, n) instead of a transpose, as for a kernel-1 conv1d (mixes positions)")
class _FfnMixesPositions(Composed):
    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        *lead, n, d = x.shape
        xc = x.reshape(*lead, d, n)  # meant as (..., d_model, n): should have been swapaxes
        hidden = np.maximum(0.0, np.swapaxes(params.w1, 0, 1) @ xc + params.b1[:, None])  # (..., d_ff, n)
        out = np.swapaxes(params.w2, 0, 1) @ hidden + params.b2[:, None]  # (..., d_model, n)
        return out.reshape(x.shape)


@mutant("ffn_no_activation", "feed_forward", ["position-wise-ffn"],
        "the ReLU is missing: the FFN is affine")
class _FfnNoActivation(Composed):
    def _activation(self, h):
        return h


@mutant("ffn_relu_after_output", "feed_forward", ["position-wise-ffn"],
        "ReLU applied after the second linear layer instead of between the two")
class _FfnReluAfterOutput(Composed):
    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        return np.maximum(0.0, (x @ params.w1 + params.b1) @ params.w2 + params.b2)


# ---------------------------------------------------------------------------------------------
# Decoder
# ---------------------------------------------------------------------------------------------

@mutant("decoder_not_causal", "decoder_layer", ["decoder-masking", "parallel-training"],
        "the decoder's self-attention is not causally masked (only self_mask is applied)")
class _DecoderNotCausal(Composed):
    def _causal(self, n_t):
        return np.ones((n_t, n_t), dtype=bool)


@mutant("decoder_causal_off_by_one", "decoder_layer", ["decoder-masking", "parallel-training"],
        "causal mask np.tril(ones, k=1): each position also sees the next one")
class _DecoderCausalOffByOne(Composed):
    def _causal(self, n_t):
        return np.tril(np.ones((n_t, n_t), dtype=bool), k=1)


@mutant("decoder_self_mask_replaces_causal", "decoder_layer", ["decoder-masking"],
        "a given self_mask (padding) replaces the causal mask instead of restricting it")
class _DecoderSelfMaskReplaces(Composed):
    def _decoder_self_mask(self, n_t, self_mask):
        return self._causal(n_t) if self_mask is None else np.asarray(self_mask)


@mutant("decoder_cross_on_self", "decoder_layer", ["cross-attention"],
        "the cross-attention attends to the decoder's own states instead of the encoder output")
class _DecoderCrossOnSelf(Composed):
    def _cross_source(self, y, memory):
        return y


@mutant("decoder_memory_mask_ignored", "decoder_layer", ["cross-attention"],
        "the decoder drops memory_mask (source padding) in the cross-attention")
class _DecoderMemoryMaskIgnored(Composed):
    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        return super().decoder_layer(y, memory, params, self_mask=self_mask, memory_mask=None)


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


# The modern components' mutants register themselves into MUTANTS (and as attributes of this module).
from attnclaims.zoo import modern_mutants  # noqa: E402,F401  (imported for its registrations)
from attnclaims.zoo import precision_mutants  # noqa: E402,F401  (the 16-bit accuracy mutants register here)


# ---------------------------------------------------------------------------------------------
# Backward passes: the mutants of attnclaims/zoo/backward_mutants.py register here when it is imported
# ---------------------------------------------------------------------------------------------

from attnclaims.zoo import backward_mutants  # noqa: E402,F401  (registers the backward mutants in MUTANTS)


# ---------------------------------------------------------------------------------------------
# The protocol's edges: configurations outside it accepted and silently reinterpreted
# (caught only by attnclaims/suite/test_contract.py's rejection checks; on valid calls each is exact)
# ---------------------------------------------------------------------------------------------

@mutant("heads_truncated", "multi_head_attention", ["multihead-structure"],
        "num_heads not dividing d_model accepted: heads of ⌊d_model/h⌋ columns, the rest dropped")
class _HeadsTruncated(Composed):
    def _split(self, x, h):
        d_k = x.shape[-1] // h
        return super()._split(x[..., : h * d_k], h)

    def _output(self, concat, p):
        return concat @ p.w_o[: concat.shape[-1]] + p.b_o


@mutant("kv_groups_rounded", "multi_head_attention", ["multihead-structure"],
        "num_kv_heads not dividing num_heads accepted: groups of ⌈h/h_kv⌉ query heads, the last one short")
class _KvGroupsRounded(Composed):
    def _qkv(self, x_q, x_kv, p):
        h, kv = p.num_heads, p.num_kv_heads
        r = -(-h // kv)  # ceil
        q = self._split(self._project(x_q, p.w_q, p.b_q), h)
        k = self._split(self._project(x_kv, p.w_k, p.b_k), kv)
        v = self._split(self._project(x_kv, p.w_v, p.b_v), kv)
        return q, np.repeat(k, r, axis=-3)[..., :h, :, :], np.repeat(v, r, axis=-3)[..., :h, :, :]


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
