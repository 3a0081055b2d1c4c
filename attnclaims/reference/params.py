"""Parameter containers of the reference, in the paper's layout (Vaswani et al. 2017).

Weights multiply on the right: ``Q = x @ w_q + b_q`` with ``w_q`` of shape
``(d_model, d_model)``; head ``i`` uses columns ``[i*d_k, (i+1)*d_k)``; the
multi-head output is ``concat(heads) @ w_o + b_o``. The FFN is
``act(x @ w1 + b1) @ w2 + b2`` with ``w1 (d_model, d_ff)``, ``w2 (d_ff, d_model)`` and ``act`` the ReLU
``max(0, ·)`` (the article's, the default) or one of :data:`FFN_ACTIVATIONS`.

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
    # modern components (grouped-query attention is MultiHeadParams.num_kv_heads)
    "RMSNormParams", "GatedFeedForwardParams", "RotaryParams", "DecoderBlockParams", "GATED_ACTIVATIONS",
    "FFN_ACTIVATIONS", "GATED_ACTIVATION_CHOICES", "ROPE_LAYOUTS", "init_rms_norm", "init_gated_feed_forward", "init_decoder_block",
]


def _as_matrix(name: str, a, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != shape:
        raise ValueError(f"{name}.shape={a.shape}, but should be {shape}")
    if not np.issubdtype(a.dtype, np.floating) and a.dtype.name != "bfloat16":  # ml_dtypes' bfloat16 is one too
        raise ValueError(f"{name}.dtype={a.dtype}, but should be a floating dtype")
    return a


@dataclass(frozen=True)
class MultiHeadParams:
    """Projections of multi-head attention (Vaswani §3.2.2).

    ``w_q, w_k, w_v, w_o``: (d_model, d_model); ``b_q, b_k, b_v, b_o``: (d_model,).
    ``num_heads`` must divide ``d_model``; ``d_k = d_v = d_model // num_heads``.

    Grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245; multi-query: Shazeer 2019,
    arXiv:1911.02150): ``num_kv_heads`` (default ``num_heads``: ordinary multi-head; 1: multi-query)
    key/value heads, which must divide ``num_heads``; then ``w_k, w_v`` are (d_model, num_kv_heads·d_k)
    and ``b_k, b_v`` (num_kv_heads·d_k,), and query head i uses key/value head
    ``i // (num_heads // num_kv_heads)`` (consecutive query heads share one, as ``repeat_interleave``
    of the K/V heads: :func:`attnclaims.reference.multihead.repeat_kv`).
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
    num_kv_heads: int | None = None

    def __post_init__(self):
        w_q = np.asarray(self.w_q)
        if w_q.ndim != 2 or w_q.shape[0] != w_q.shape[1]:
            raise ValueError(f"w_q.shape={w_q.shape}, but should be (d_model, d_model)")
        d = w_q.shape[0]
        if not isinstance(self.num_heads, (int, np.integer)) or isinstance(self.num_heads, bool) or self.num_heads < 1:
            raise ValueError(f"num_heads={self.num_heads!r}, but should be a positive integer")
        if d % self.num_heads:
            raise ValueError(f"d_model={d} is not divisible by num_heads={self.num_heads}")
        kv = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        if not isinstance(kv, (int, np.integer)) or isinstance(kv, bool) or kv < 1:
            raise ValueError(f"num_kv_heads={self.num_kv_heads!r}, but should be a positive integer or None")
        if self.num_heads % kv:
            raise ValueError(f"num_heads={self.num_heads} is not divisible by num_kv_heads={kv}")
        d_kv = int(kv) * (d // int(self.num_heads))  # a plain int, also for numpy integers (read in messages)
        for name in ("w_q", "w_o"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d, d)))
        for name in ("w_k", "w_v"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d, d_kv)))
        for name in ("b_q", "b_o"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d,)))
        for name in ("b_k", "b_v"):
            object.__setattr__(self, name, _as_matrix(name, getattr(self, name), (d_kv,)))
        object.__setattr__(self, "num_heads", int(self.num_heads))
        object.__setattr__(self, "num_kv_heads", int(kv))

    @property
    def d_model(self) -> int:
        return self.w_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.num_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head, num_heads / num_kv_heads (1: ordinary multi-head)."""
        return self.num_heads // self.num_kv_heads

    def kv_head_columns(self, g: int) -> slice:
        """Columns of ``w_k``/``w_v`` used by key/value head ``g`` (query heads g·r … g·r + r − 1, r = group_size)."""
        if not 0 <= g < self.num_kv_heads:
            raise ValueError(f"kv head index {g} is out of range for num_kv_heads={self.num_kv_heads}")
        return slice(g * self.d_k, (g + 1) * self.d_k)

    def head_columns(self, i: int) -> slice:
        """Columns of ``w_q``/``w_k``/``w_v`` (and rows of ``w_o``) used by head ``i``."""
        if not 0 <= i < self.num_heads:
            raise ValueError(f"head index {i} is out of range for num_heads={self.num_heads}")
        return slice(i * self.d_k, (i + 1) * self.d_k)


@dataclass(frozen=True)
class FeedForwardParams:
    """Position-wise FFN (Vaswani §3.3): ``w1 (d_model, d_ff), b1 (d_ff,), w2 (d_ff, d_model), b2 (d_model,)``,
    ``activation`` between the two projections, one of :data:`FFN_ACTIVATIONS` ("relu", the article's
    max(0, ·), by default; "gelu" exact, "gelu_tanh" GPT-2's approximation, "silu")."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    activation: str = "relu"

    def __post_init__(self):
        if self.activation not in FFN_ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}, but should be one of {FFN_ACTIVATIONS}")
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


def init_multi_head(rng, d_model: int, num_heads: int, *, bias_scale: float = 0.1, dtype=np.float64,
                    num_kv_heads: int | None = None) -> MultiHeadParams:
    """Seeded Xavier weights; biases ``U(-bias_scale, bias_scale)`` so that bugs that drop a bias show.
    ``num_kv_heads`` (grouped-query attention) narrows ``w_k, w_v, b_k, b_v`` to num_kv_heads·d_k columns;
    without it the draws are those of ordinary multi-head attention, unchanged."""
    if num_heads < 1 or d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    if num_kv_heads is not None and (num_kv_heads < 1 or num_heads % num_kv_heads):
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    rng = _rng(rng)
    d_kv = d_model if num_kv_heads is None else num_kv_heads * (d_model // num_heads)
    width = {"w_q": d_model, "w_k": d_kv, "w_v": d_kv, "w_o": d_model}
    w = {n: xavier_uniform(rng, d_model, width[n], dtype) for n in ("w_q", "w_k", "w_v", "w_o")}
    size = {"b_q": d_model, "b_k": d_kv, "b_v": d_kv, "b_o": d_model}
    b = {n: rng.uniform(-bias_scale, bias_scale, size=size[n]).astype(dtype) for n in ("b_q", "b_k", "b_v", "b_o")}
    return MultiHeadParams(**w, **b, num_heads=num_heads, num_kv_heads=num_kv_heads)


def init_feed_forward(rng, d_model: int, d_ff: int, *, bias_scale: float = 0.1, activation: str = "relu",
                      dtype=np.float64) -> FeedForwardParams:
    rng = _rng(rng)
    return FeedForwardParams(
        w1=xavier_uniform(rng, d_model, d_ff, dtype), b1=rng.uniform(-bias_scale, bias_scale, d_ff).astype(dtype),
        w2=xavier_uniform(rng, d_ff, d_model, dtype), b2=rng.uniform(-bias_scale, bias_scale, d_model).astype(dtype),
        activation=activation,
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


# ---------------------------------------------------------------------------------------------
# Modern components: RMSNorm, gated FFNs, rotary embeddings, decoder-only blocks
# ---------------------------------------------------------------------------------------------

#: Activations of the gated FFN (Shazeer 2020, arXiv:2002.05202) every gated implementation is handed unless
#: it declares otherwise: "silu" (SwiGLU, Swish_1 = x·σ(x)), "gelu" (GeGLU, the exact x·Φ(x) with the normal
#: CDF Φ).
GATED_ACTIVATIONS = ("silu", "gelu")

#: Every activation a gated FFN may carry: :data:`GATED_ACTIVATIONS` and "gelu_tanh", the tanh approximation
#: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) (GPT-2's ``gelu_new``, torch's ``approximate="tanh"``), which an
#: implementation opts into (variants ``block_ffn``, docs/adapters.md "Variants for code as shipped").
GATED_ACTIVATION_CHOICES = ("silu", "gelu", "gelu_tanh")

#: Activations of the non-gated FFN act(x W₁ + b₁) W₂ + b₂: "relu" (the article's), "gelu" (exact x·Φ(x):
#: BERT, nanoGPT's nn.GELU()), "gelu_tanh" (GPT-2's gelu_new, picoGPT), "silu" (x·σ(x)).
FFN_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")

#: Pair layouts of rotary embeddings: "interleaved" rotates features (2i, 2i+1) (Su et al. 2021, GPT-J,
#: Mesh-TF); "half" rotates (i, i + d/2) (``rotate_half``: GPT-NeoX, Llama, HF transformers).
ROPE_LAYOUTS = ("interleaved", "half")


@dataclass(frozen=True)
class RMSNormParams:
    """Gain of RMS normalisation (Zhang & Sennrich 2019): ``gamma (d,)``; there is no bias."""

    gamma: np.ndarray

    def __post_init__(self):
        gamma = np.asarray(self.gamma)
        if gamma.ndim != 1:
            raise ValueError(f"gamma.shape={gamma.shape}, but should be (d_model,)")
        object.__setattr__(self, "gamma", _as_matrix("gamma", gamma, gamma.shape))

    @property
    def d_model(self) -> int:
        return self.gamma.shape[0]


@dataclass(frozen=True)
class GatedFeedForwardParams:
    """Gated FFN (Shazeer 2020): ``FFN(x) = (act(x W_gate + b_gate) ⊙ (x W_up + b_up)) W_down + b_down``.

    ``w_gate, w_up (d_model, d_ff)``, ``b_gate, b_up (d_ff,)``, ``w_down (d_ff, d_model)``,
    ``b_down (d_model,)``; ``activation`` one of :data:`GATED_ACTIVATION_CHOICES` ("silu": SwiGLU, as in
    Llama's MLP with gate_proj/up_proj/down_proj; "gelu": GeGLU; "gelu_tanh": GeGLU with the tanh GELU).
    """

    w_gate: np.ndarray
    b_gate: np.ndarray
    w_up: np.ndarray
    b_up: np.ndarray
    w_down: np.ndarray
    b_down: np.ndarray
    activation: str = "silu"

    def __post_init__(self):
        w_gate = np.asarray(self.w_gate)
        if w_gate.ndim != 2:
            raise ValueError(f"w_gate.shape={w_gate.shape}, but should be (d_model, d_ff)")
        if self.activation not in GATED_ACTIVATION_CHOICES:
            raise ValueError(f"activation={self.activation!r}, but should be one of {GATED_ACTIVATION_CHOICES}")
        d_model, d_ff = w_gate.shape
        object.__setattr__(self, "w_gate", _as_matrix("w_gate", w_gate, (d_model, d_ff)))
        object.__setattr__(self, "b_gate", _as_matrix("b_gate", self.b_gate, (d_ff,)))
        object.__setattr__(self, "w_up", _as_matrix("w_up", self.w_up, (d_model, d_ff)))
        object.__setattr__(self, "b_up", _as_matrix("b_up", self.b_up, (d_ff,)))
        object.__setattr__(self, "w_down", _as_matrix("w_down", self.w_down, (d_ff, d_model)))
        object.__setattr__(self, "b_down", _as_matrix("b_down", self.b_down, (d_model,)))

    @property
    def d_model(self) -> int:
        return self.w_gate.shape[0]

    @property
    def d_ff(self) -> int:
        return self.w_gate.shape[1]


@dataclass(frozen=True)
class RotaryParams:
    """Rotary position embeddings applied to every head's queries and keys (Su et al. 2021,
    arXiv:2104.09864): frequencies ω_i = base^(−2i/d_k), pairs in ``layout`` (:data:`ROPE_LAYOUTS`)."""

    base: float = 10000.0
    layout: str = "half"

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float, np.floating, np.integer)) \
                or not (np.isfinite(self.base) and self.base > 1):
            raise ValueError(f"base={self.base!r}, but should be a finite number > 1")
        if self.layout not in ROPE_LAYOUTS:
            raise ValueError(f"layout={self.layout!r}, but should be one of {ROPE_LAYOUTS}")
        object.__setattr__(self, "base", float(self.base))


@dataclass(frozen=True)
class DecoderBlockParams:
    """A decoder-only block (GPT, Llama): causal self-attention and an FFN, each with residual + norm.

    ``self_attn`` (its ``num_kv_heads`` gives grouped-query attention), ``ffn`` a
    :class:`FeedForwardParams` (ReLU or another of :data:`FFN_ACTIVATIONS`) or :class:`GatedFeedForwardParams`, ``norm1``/``norm2`` both
    :class:`LayerNormParams` or both :class:`RMSNormParams`, ``norm_first`` (True, the default: Pre-LN
    as in GPT-2 and Llama; False: Post-LN), ``eps`` of both norms, ``rope`` (None: no position
    information inside the block; a :class:`RotaryParams`: rotary embeddings on q and k).
    """

    self_attn: MultiHeadParams
    ffn: FeedForwardParams | GatedFeedForwardParams
    norm1: LayerNormParams | RMSNormParams
    norm2: LayerNormParams | RMSNormParams
    norm_first: bool = True
    eps: float = 1e-5
    rope: RotaryParams | None = None

    def __post_init__(self):
        object.__setattr__(self, "eps", _check_eps(self.eps))
        if not isinstance(self.self_attn, MultiHeadParams):
            raise ValueError(f"self_attn is {type(self.self_attn).__name__}, but should be MultiHeadParams")
        if not isinstance(self.ffn, (FeedForwardParams, GatedFeedForwardParams)):
            raise ValueError(f"ffn is {type(self.ffn).__name__}, but should be FeedForwardParams or "
                             "GatedFeedForwardParams")
        kinds = {type(self.norm1), type(self.norm2)}
        if not (kinds <= {LayerNormParams} or kinds <= {RMSNormParams}):
            raise ValueError(f"norm1 is {type(self.norm1).__name__}, norm2 is {type(self.norm2).__name__}, "
                             "but should both be LayerNormParams or both RMSNormParams")
        if self.rope is not None:
            if not isinstance(self.rope, RotaryParams):
                raise ValueError(f"rope is {type(self.rope).__name__}, but should be RotaryParams or None")
            if self.self_attn.d_k % 2:
                raise ValueError(f"rotary embeddings need an even head dimension, but d_k={self.self_attn.d_k}")
        _check_widths("DecoderBlockParams", self.d_model, ffn=self.ffn, norm1=self.norm1, norm2=self.norm2)

    @property
    def d_model(self) -> int:
        return self.self_attn.d_model

    @property
    def norm(self) -> str:
        """"layer" (LayerNorm) or "rms" (RMSNorm)."""
        return "rms" if isinstance(self.norm1, RMSNormParams) else "layer"


def init_rms_norm(d_model: int, rng=None, *, spread: float = 0.0, dtype=np.float64) -> RMSNormParams:
    """``gamma = 1`` (the usual init); with ``spread > 0`` perturbed by ``U(-spread, spread)``."""
    gamma = np.ones(d_model, dtype=dtype)
    if spread:
        gamma = gamma + _rng(rng).uniform(-spread, spread, d_model).astype(dtype)
    return RMSNormParams(gamma=gamma)


def init_gated_feed_forward(rng, d_model: int, d_ff: int, *, activation: str = "silu", bias_scale: float = 0.1,
                            dtype=np.float64) -> GatedFeedForwardParams:
    rng = _rng(rng)
    return GatedFeedForwardParams(
        w_gate=xavier_uniform(rng, d_model, d_ff, dtype),
        b_gate=rng.uniform(-bias_scale, bias_scale, d_ff).astype(dtype),
        w_up=xavier_uniform(rng, d_model, d_ff, dtype),
        b_up=rng.uniform(-bias_scale, bias_scale, d_ff).astype(dtype),
        w_down=xavier_uniform(rng, d_ff, d_model, dtype),
        b_down=rng.uniform(-bias_scale, bias_scale, d_model).astype(dtype),
        activation=activation,
    )


def init_decoder_block(rng, d_model: int, num_heads: int, d_ff: int, *, num_kv_heads: int | None = None,
                       ffn: str = "relu", norm: str = "layer", norm_first: bool = True, eps: float = 1e-5,
                       rope: RotaryParams | None = None, norm_spread: float = 0.0, activation: str = "relu",
                       dtype=np.float64) -> DecoderBlockParams:
    """A seeded decoder-only block: ``ffn`` "relu" (a ReLU FFN), "mlp" (a non-gated FFN with ``activation``,
    one of :data:`FFN_ACTIVATIONS`) or one of :data:`GATED_ACTIVATION_CHOICES` (a gated FFN), ``norm``
    "layer" or "rms"."""
    rng = _rng(rng)
    if ffn in ("relu", "mlp"):
        ffn_params = init_feed_forward(rng, d_model, d_ff, activation="relu" if ffn == "relu" else activation,
                                       dtype=dtype)
    else:
        ffn_params = init_gated_feed_forward(rng, d_model, d_ff, activation=ffn, dtype=dtype)
    if norm not in ("layer", "rms"):
        raise ValueError(f"norm={norm!r}, but should be 'layer' or 'rms'")
    make = init_layer_norm if norm == "layer" else init_rms_norm
    return DecoderBlockParams(
        self_attn=init_multi_head(rng, d_model, num_heads, num_kv_heads=num_kv_heads, dtype=dtype),
        ffn=ffn_params,
        norm1=make(d_model, rng, spread=norm_spread, dtype=dtype),
        norm2=make(d_model, rng, spread=norm_spread, dtype=dtype),
        norm_first=norm_first, eps=eps, rope=rope,
    )
