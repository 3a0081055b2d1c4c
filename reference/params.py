"""Parameter containers of the reference, in the paper's layout (Vaswani et al. 2017).

Weights multiply on the right: ``Q = x @ w_q + b_q`` with ``w_q`` of shape
``(d_model, d_model)``; head ``i`` uses columns ``[i*d_k, (i+1)*d_k)``; the
multi-head output is ``concat(heads) @ w_o + b_o``. The FFN is
``max(0, x @ w1 + b1) @ w2 + b2`` with ``w1 (d_model, d_ff)``, ``w2 (d_ff, d_model)``.

All containers are frozen dataclasses that validate their shapes on
construction and raise ``ValueError`` saying what was expected and what came.
Initialisation is seeded Xavier/Glorot uniform: ``U(-a, a)`` with
``a = sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "MultiHeadParams", "FeedForwardParams", "LayerNormParams",
    "EncoderLayerParams", "DecoderLayerParams",
    "xavier_uniform", "init_multi_head", "init_feed_forward", "init_layer_norm",
    "init_encoder_layer", "init_decoder_layer",
]


def _as_matrix(name: str, a, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != shape:
        raise ValueError(f"{name}.shape={a.shape}, but should be {shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{name}.dtype={a.dtype}, but should be a floating dtype")
    return a


@dataclass(frozen=True)
class MultiHeadParams:
    """Projections of multi-head attention (Vaswani §3.2.2).

    ``w_q, w_k, w_v, w_o``: (d_model, d_model); ``b_q, b_k, b_v, b_o``: (d_model,).
    ``num_heads`` must divide ``d_model``; ``d_k = d_v = d_model // num_heads``.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    b_q: np.ndarray
    b_k: np.ndarray
    b_v: np.ndarray
    b_o: np.ndarray
    num_heads: int

    def __post_init__(self):
        w_q = np.asarray(self.w_q)
        if w_q.ndim != 2 or w_q.shape[0] != w_q.shape[1]:
            raise ValueError(f"w_q.shape={w_q.shape}, but should be (d_model, d_model)")
        d = w_q.shape[0]
        if not isinstance(self.num_heads, (int, np.integer)) or isinstance(self.num_heads, bool) or self.num_heads < 1:
            raise ValueError(f"num_heads={self.num_heads!r}, but should be a positive integer")
        if d % self.num_heads:
            raise ValueError(f"d_model={d} is not divisible by num_heads={self.num_heads}")
        for name in ("w_q", "w_k", "w_v", "w_o"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d, d)))
        for name in ("b_q", "b_k", "b_v", "b_o"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d,)))
        object.__setattr__(self, "num_heads", int(self.num_heads))

    @property
    def d_model(self) -> int:
        return self.w_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads

    def head_columns(self, i: int) -> slice:
        """Columns of ``w_q``/``w_k``/``w_v`` (and rows of ``w_o``) used by head ``i``."""
        if not 0 <= i < self.num_heads:
            raise ValueError(f"head index {i} is out of range for num_heads={self.num_heads}")
        return slice(i * self.d_k, (i + 1) * self.d_k)


@dataclass(frozen=True)
class FeedForwardParams:
    """Position-wise FFN (Vaswani §3.3): ``w1 (d_model, d_ff), b1 (d_ff,), w2 (d_ff, d_model), b2 (d_model,)``."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def __post_init__(self):
        w1 = np.asarray(self.w1)
        if w1.ndim != 2:
            raise ValueError(f"w1.shape={w1.shape}, but should be (d_model, d_ff)")
        d_model, d_ff = w1.shape
        object.__setattr__(self, "w1", _as_matrix("w1", w1, (d_model, d_ff)))
        object.__setattr__(self, "b1", _as_matrix("b1", self.b1, (d_ff,)))
        object.__setattr__(self, "w2", _as_matrix("w2", self.w2, (d_ff, d_model)))
        object.__setattr__(self, "b2", _as_matrix("b2", self.b2, (d_model,)))

    @property
    def d_model(self) -> int:
        return self.w1.shape[0]

    @property
    def d_ff(self) -> int:
        return self.w1.shape[1]


@dataclass(frozen=True)
class LayerNormParams:
    """Affine part of layer normalisation: ``gamma (d,), beta (d,)``."""

    gamma: np.ndarray
    beta: np.ndarray

    def __post_init__(self):
        gamma = np.asarray(self.gamma)
        if gamma.ndim != 1:
            raise ValueError(f"gamma.shape={gamma.shape}, but should be (d_model,)")
        object.__setattr__(self, "gamma", _as_matrix("gamma", gamma, gamma.shape))
        object.__setattr__(self, "beta", _as_matrix("beta", self.beta, gamma.shape))

    @property
    def d_model(self) -> int:
        return self.gamma.shape[0]


def _check_eps(eps) -> float:
    if not (isinstance(eps, (int, float, np.floating)) and np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r}, but should be a finite number >= 0")
    return float(eps)


def _check_widths(owner: str, d_model: int, **parts) -> None:
    for name, part in parts.items():
        if part.d_model != d_model:
            raise ValueError(f"{owner}.{name}.d_model={part.d_model} != self_attn.d_model={d_model}")


@dataclass(frozen=True)
class EncoderLayerParams:
    """One encoder layer (Vaswani §3.1): self-attention and FFN sub-layers, each with residual + LN.

    ``norm_first=False`` is Post-LN, the article's placement: ``LN(x + Sublayer(x))``;
    ``norm_first=True`` is Pre-LN: ``x + Sublayer(LN(x))``.
    """

    self_attn: MultiHeadParams
    ffn: FeedForwardParams
    norm1: LayerNormParams
    norm2: LayerNormParams
    norm_first: bool = False
    eps: float = 1e-5

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_eps(self.eps))
        _check_widths("EncoderLayerParams", self.d_model, ffn=self.ffn, norm1=self.norm1, norm2=self.norm2)

    @property
    def d_model(self) -> int:
        return self.self_attn.d_model


@dataclass(frozen=True)
class DecoderLayerParams:
    """One decoder layer (Vaswani §3.1): masked self-attention, cross-attention, FFN; each with residual + LN."""

    self_attn: MultiHeadParams
    cross_attn: MultiHeadParams
    ffn: FeedForwardParams
    norm1: LayerNormParams
    norm2: LayerNormParams
    norm3: LayerNormParams
    norm_first: bool = False
    eps: float = 1e-5

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_eps(self.eps))
        _check_widths("DecoderLayerParams", self.d_model, cross_attn=self.cross_attn, ffn=self.ffn,
                      norm1=self.norm1, norm2=self.norm2, norm3=self.norm3)

    @property
    def d_model(self) -> int:
        return self.self_attn.d_model


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def xavier_uniform(rng, fan_in: int, fan_out: int, dtype=np.float64) -> np.ndarray:
    """Glorot uniform ``U(-a, a)``, ``a = sqrt(6 / (fan_in + fan_out))``; shape (fan_in, fan_out)."""
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return _rng(rng).uniform(-a, a, size=(fan_in, fan_out)).astype(dtype)


def init_multi_head(rng, d_model: int, num_heads: int, *, bias_scale: float = 0.1, dtype=np.float64) -> MultiHeadParams:
    """Seeded Xavier weights; biases ``U(-bias_scale, bias_scale)`` so that bugs that drop a bias show."""
    if num_heads < 1 or d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    rng = _rng(rng)
    w = {n: xavier_uniform(rng, d_model, d_model, dtype) for n in ("w_q", "w_k", "w_v", "w_o")}
    b = {n: rng.uniform(-bias_scale, bias_scale, size=d_model).astype(dtype) for n in ("b_q", "b_k", "b_v", "b_o")}
    return MultiHeadParams(**w, **b, num_heads=num_heads)


def init_feed_forward(rng, d_model: int, d_ff: int, *, bias_scale: float = 0.1, dtype=np.float64) -> FeedForwardParams:
    rng = _rng(rng)
    return FeedForwardParams(
        w1=xavier_uniform(rng, d_model, d_ff, dtype), b1=rng.uniform(-bias_scale, bias_scale, d_ff).astype(dtype),
        w2=xavier_uniform(rng, d_ff, d_model, dtype), b2=rng.uniform(-bias_scale, bias_scale, d_model).astype(dtype),
    )


def init_layer_norm(d_model: int, rng=None, *, spread: float = 0.0, dtype=np.float64) -> LayerNormParams:
    """``gamma = 1, beta = 0`` (the usual init); with ``spread > 0`` both are perturbed by ``U(-spread, spread)``
    so that tests can tell gamma from beta."""
    gamma = np.ones(d_model, dtype=dtype)
    beta = np.zeros(d_model, dtype=dtype)
    if spread:
        rng = _rng(rng)
        gamma = gamma + rng.uniform(-spread, spread, d_model).astype(dtype)
        beta = beta + rng.uniform(-spread, spread, d_model).astype(dtype)
    return LayerNormParams(gamma=gamma, beta=beta)


def init_encoder_layer(rng, d_model: int, num_heads: int, d_ff: int, *, norm_first: bool = False,
                       eps: float = 1e-5, norm_spread: float = 0.0, dtype=np.float64) -> EncoderLayerParams:
    rng = _rng(rng)
    return EncoderLayerParams(
        self_attn=init_multi_head(rng, d_model, num_heads, dtype=dtype),
        ffn=init_feed_forward(rng, d_model, d_ff, dtype=dtype),
        norm1=init_layer_norm(d_model, rng, spread=norm_spread, dtype=dtype),
        norm2=init_layer_norm(d_model, rng, spread=norm_spread, dtype=dtype),
        norm_first=norm_first, eps=eps,
    )


def init_decoder_layer(rng, d_model: int, num_heads: int, d_ff: int, *, norm_first: bool = False,
                       eps: float = 1e-5, norm_spread: float = 0.0, dtype=np.float64) -> DecoderLayerParams:
    rng = _rng(rng)
    return DecoderLayerParams(
        self_attn=init_multi_head(rng, d_model, num_heads, dtype=dtype),
        cross_attn=init_multi_head(rng, d_model, num_heads, dtype=dtype),
        ffn=init_feed_forward(rng, d_model, d_ff, dtype=dtype),
        norm1=init_layer_norm(d_model, rng, spread=norm_spread, dtype=dtype),
        norm2=init_layer_norm(d_model, rng, spread=norm_spread, dtype=dtype),
        norm3=init_layer_norm(d_model, rng, spread=norm_spread, dtype=dtype),
        norm_first=norm_first, eps=eps,
    )
