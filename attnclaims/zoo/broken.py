"""Broken implementations that serve as negative controls of single claim tests.

Each class changes one thing of the zoo's correct :class:`~attnclaims.zoo.mutants.base.Composed` base
(so a bug in attention travels up into multi-head attention and the layers). Unlike the mutants of
:mod:`attnclaims.zoo.mutants` they are not planted bugs people ship but the smallest change that
a particular property test must reject (a softmax that is a distribution but not shift invariant, a
position bias nobody asked for, ...); the ``CONTROLS`` table of each claim-suite module
(:mod:`attnclaims.checks.controls`) pairs each with the tests it must fail.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference.masks import causal_mask
from attnclaims.reference.positional import sinusoidal_encoding
from attnclaims.zoo.mutants.base import Composed



class SoftmaxMeanTemperature(Composed):
    """softmax(x / (1 + |mean x|)): a distribution, order preserving, but not shift invariant."""

    def softmax(self, x, axis=-1):
        x = np.asarray(x, dtype=np.float64)
        return super().softmax(x / (1.0 + np.abs(x.mean(axis=axis, keepdims=True))), axis=axis)


class SoftmaxReversed(Composed):
    """softmax(−x): a distribution that reverses the order of the scores."""

    def softmax(self, x, axis=-1):
        return super().softmax(-np.asarray(x, dtype=np.float64), axis=axis)


class SoftmaxHalfTemperature(Composed):
    """softmax(x/2): a valid distribution whose Jacobian is ½(diag p − ppᵀ) of another p."""

    def softmax(self, x, axis=-1):
        return super().softmax(np.asarray(x, dtype=np.float64) / 2, axis=axis)


class DividesByKeyCount(Composed):
    """Σ_j exp(s_j − m) v_j / n_k: normalises by the number of keys instead of Σ exp."""

    def _weights(self, s, allowed):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        if allowed is not None:
            e = np.where(allowed, e, 0.0)
        return e / s.shape[-1]


class ReluValues(Composed):
    """softmax(S) relu(V): not linear in V."""

    def _weighted_sum(self, a, v):
        return super()._weighted_sum(a, np.maximum(v, 0.0))


class PositionBias(Composed):
    """Scores get a distance bias −0.5·|i − j| (ALiBi-like) without being asked: position-aware."""

    def _scores(self, q, k, scale):
        s = super()._scores(q, k, scale)
        i, j = np.arange(s.shape[-2])[:, None], np.arange(s.shape[-1])[None, :]
        return s - 0.5 * np.abs(i - j)


class PeConstant(Composed):
    """Every position gets PE(0): the encoding forgets the position."""

    def positional_encoding(self, n_positions, d_model):
        return np.repeat(sinusoidal_encoding(1, d_model), n_positions, axis=0)


class PeSinTwice(Composed):
    """sin on both columns of each pair: norm ≠ d_model/2."""

    def positional_encoding(self, n_positions, d_model):
        pe = sinusoidal_encoding(n_positions, d_model)
        pe[:, 1::2] = pe[:, 0::2][:, : d_model // 2]
        return pe


class MhaIgnoresInput(Composed):
    """Multi-head attention returns b_O whatever the input (so it is trivially equivariant)."""

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        return np.broadcast_to(np.asarray(params.b_o, dtype=np.float64), np.shape(x_q)).copy()


class LnNotCentred(Composed):
    """x / √(σ² + ε): the mean is not subtracted."""

    def layer_norm(self, x, gamma, beta, eps):
        x = np.asarray(x, dtype=np.float64)
        return gamma * x / np.sqrt(x.var(axis=-1, keepdims=True) + eps) + beta


class FfnScaledByPosition(Composed):
    """Position i's output is scaled by (1 + i/n): the same weights are not used at every position."""

    def feed_forward(self, x, params):
        out = super().feed_forward(x, params)
        n = out.shape[-2]
        return out * (1.0 + np.arange(n) / n)[:, None]


class FfnMixesNeighbours(Composed):
    """A kernel-3 smoothing over positions before the FFN (a convolution mistaken for position-wise)."""

    def feed_forward(self, x, params):
        x = np.asarray(x, dtype=np.float64)
        padded = np.concatenate([x[..., :1, :], x, x[..., -1:, :]], axis=-2)
        return super().feed_forward((padded[..., :-2, :] + 2 * x + padded[..., 2:, :]) / 4, params)


class CrossAttentionCausal(Composed):
    """The decoder applies the causal mask to the cross-attention too (memory positions become ordered)."""

    def _cross_source(self, y, memory):
        return memory

    def decoder_layer(self, y, memory, params, self_mask=None, memory_mask=None):
        n_t, n_s = np.shape(y)[-2], np.shape(memory)[-2]
        causal = causal_mask(n_t, n_s)
        mm = causal if memory_mask is None else np.asarray(memory_mask) & causal
        return super().decoder_layer(y, memory, params, self_mask, np.where(causal.any(-1, keepdims=True), mm, True))


class MaskDroppedWhenShared(Composed):
    """A mask with fewer axes than the scores (shared by the batch) is silently skipped."""

    def _allowed(self, mask, target):
        if mask is not None and np.ndim(mask) < len(target):
            return None
        return super()._allowed(mask, target)


class PeRelativeToLength(Composed):
    """Positions divided by the sequence length (pos/n·1000): a position's encoding depends on n."""

    def positional_encoding(self, n_positions, d_model):
        two_i = np.arange(0, d_model, 2, dtype=np.float64)
        angles = (np.arange(n_positions)[:, None] * 1000.0 / n_positions) * 10000.0 ** (-two_i / d_model)
        pe = np.empty((n_positions, d_model))
        pe[:, 0::2] = np.sin(angles)
        pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
        return pe


class NondeterministicOnce(Composed):
    """The second attention call of the process is off in the last bit, every other call is exact: a
    failure that does not replay, which hypothesis reports as FlakyFailure (an exception group)."""

    def _weighted_sum(self, a, v):
        self.calls = getattr(self, "calls", 0) + 1
        out = super()._weighted_sum(a, v)
        return np.nextafter(out, np.inf) if self.calls == 2 else out


class RejectsStridedViews(Composed):
    """attention refuses inputs that are not C-contiguous, as a ``view`` on a strided tensor does (GPT-2's
    Conv1D in transformers fails the same way)."""

    def attention(self, q, k, v, mask=None, scale=None):
        for name, a in (("q", q), ("k", k), ("v", v)):
            if not np.asarray(a).flags.c_contiguous:
                raise RuntimeError(f"view size is not compatible with {name}'s size and stride")
        return super().attention(q, k, v, mask, scale)
