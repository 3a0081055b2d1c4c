"""Strategies of attention itself: masks (every query keeps at least one key), explicit scales, the
inputs of ``attention`` (:func:`attention_cases`) and of softmax, the probe that makes attention return
its weights, the edge cases the tests add with ``@example`` (:data:`EDGE`: one key, one query, d_k = 1,
a single allowed key, huge and tiny score scales, a long sequence), and the inputs of causal attention
with its alignments and sliding windows (:func:`causal_cases`, drawn among the followed
implementation's ``causal_alignment`` and ``sliding_window``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnclaims.checks.strategies.common import (
    reused,
    ELEMENTWISE_LIMIT, _cast_fields, _dtype, _not_applicable, _shape_menu, arrays, batch_shapes, dims, finfo, require_variant,
    scales, seeds, seq_lengths, tile_crossing, tile_decision, tile_lengths, tile_sizes, variants,
)
from attnclaims.profiles import limits
from attnclaims.reference.attention import additive_scores

__all__ = [
    "EXPLICIT_SCALES", "explicit_scales", "masks", "mask_forms", "causal_masks", "single_key_masks", "padding_masks",
    "AttentionCase", "attention_cases", "weights_probe", "softmax_inputs", "EDGE", "edge_attention_case",
    "alignments", "windows", "CausalCase", "causal_cases", "KERNEL_EDGE", "KernelEdge", "kernel_edge_case",
    "causal_weights_probe", "reachable_weights", "with_causal_mask", "causal_padded_cases",
]

#: The explicit ``scale`` arguments the attention tests pass (docs/adapters.md): the default 1/√d_k's
#: neighbours, 0 (uniform weights), −1 (reversed preferences), 10⁶, and the huge and tiny 10³⁰⁰ and
#: 10⁻³⁰⁰ (clamped to the dtype's range by :meth:`AttentionCase.cast`).
EXPLICIT_SCALES = (1.0, 0.5, 0.125, 2.0, -1.0, 0.0, 1e6, 1e300, 1e-300)


def explicit_scales() -> st.SearchStrategy[float]:
    """One of :data:`EXPLICIT_SCALES`; only the positive ones for an implementation that declares
    ``scale='positive'``; not applicable for one that declares ``scale='none'`` (called with scale=None only)."""
    if variants()["scale"] == "none":
        raise _not_applicable("scale", 1.0)
    values = EXPLICIT_SCALES if variants()["scale"] == "any" else tuple(s for s in EXPLICIT_SCALES if s > 0)
    return st.sampled_from(values)


# ---------------------------------------------------------------------------------------------
# Masks (bool, True = may attend; every query keeps at least one key)
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def masks(draw, shape) -> np.ndarray:
    """Random masks of ``shape`` (…, n_q, n_k) with at least one allowed key in every row. Up to
    4·ELEMENTWISE_LIMIT (1024) entries drawn entry by entry by hypothesis, so a failing mask shrinks to
    the fewest masked entries; larger ones from a drawn seed with density 0.1, 0.5 or 0.9 (a bool
    takes far less of hypothesis' buffer than a float, hence a larger limit than for arrays), the key that
    each query keeps in any case from the same seed."""
    shape = tuple(shape)
    size = math.prod(shape)
    if size <= 4 * ELEMENTWISE_LIMIT:
        m = draw(hnp.arrays(np.bool_, shape))
        keep = draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(0, shape[-1] - 1)))
    else:  # the key each query keeps from the same seed: hundreds of rows drawn one by one would cost more
        rng = np.random.default_rng(draw(seeds()))
        m = rng.random(shape) < draw(st.sampled_from([0.1, 0.5, 0.9]))
        keep = rng.integers(0, shape[-1], size=shape[:-1])
    rows = ~m.any(axis=-1)
    m = m.copy()
    np.put_along_axis(m, keep[..., None], np.take_along_axis(m, keep[..., None], axis=-1) | rows[..., None], axis=-1)
    return m


@reused
@st.composite
def mask_forms(draw, batch: tuple[int, ...], n_q: int, n_k: int) -> np.ndarray:
    """A mask in one of the broadcastable forms the protocol allows: (n_q, n_k), (1, …, n_q, n_k),
    the full (batch…, n_q, n_k), or a per-sequence key mask (batch…, 1, n_k)."""
    forms = [(n_q, n_k), batch + (n_q, n_k), batch + (1, n_k)]
    if batch:
        forms.append((1,) * len(batch) + (n_q, n_k))
    shape = draw(st.sampled_from(forms))
    return draw(masks(shape))


@st.composite
def tile_padding(draw, m: np.ndarray) -> np.ndarray:
    """``m`` with its leading and/or trailing keys masked, each padding none or longer than the smallest tile
    T (T or T + 1 keys: whole key blocks hidden), for every row or every other row (a block hidden from some
    queries and not from others); a row left empty keeps its first unpadded key."""
    n_k, t = m.shape[-1], min(tile_sizes())
    lead = draw(st.sampled_from((0, t, t + 1)))
    trail = draw(st.sampled_from((0, t + 1)))
    if lead + trail >= n_k:
        lead, trail = 0, 0
    rows = np.arange(m.shape[-2]) % draw(st.sampled_from((1, 2))) == 0
    m = m.copy()
    m[..., rows, :lead] = False
    m[..., rows, n_k - trail:] = False
    m[..., lead] |= ~m.any(axis=-1)
    return m


def causal_masks(n_q: int, n_k: int | None = None) -> np.ndarray:
    """M_ij = (j ≤ i), top-left aligned (query i sees keys 0 … i); every row keeps key 0."""
    n_k = n_q if n_k is None else n_k
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]


@reused
@st.composite
def single_key_masks(draw, shape) -> np.ndarray:
    """Exactly one allowed key per query (the one-hot case of convex-combination)."""
    shape = tuple(shape)
    keep = draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(0, shape[-1] - 1)))
    return np.arange(shape[-1]) == keep[..., None]


@reused
@st.composite
def padding_masks(draw, batch: int, n_k: int) -> np.ndarray:
    """Key-padding masks (batch, 1, n_k): sequence b has lengths[b] ≥ 1 real keys, then padding."""
    lengths = np.asarray(draw(st.lists(st.integers(1, n_k), min_size=batch, max_size=batch)))
    return (np.arange(n_k)[None, :] < lengths[:, None])[:, None, :]



# ---------------------------------------------------------------------------------------------
# Cases: dimensions, arrays and masks bundled
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionCase:
    """q (…, n_q, d_k), k (…, n_k, d_k), v (…, n_k, d_v), an optional mask, an optional explicit scale."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray | None = None
    scale: float | None = None
    label: str = ""

    def cast(self, dtype) -> "AttentionCase":
        """Arrays in ``dtype``; an explicit scale clamped to what ``dtype`` can hold (the huge-scores edge
        case asks for 1e300, which float32 turns into inf: it gets max/(16·d_k) instead, still huge; the
        tiny-scores one 1e-300, which float32 turns into 0: it gets 2^30 times the smallest normal)."""
        case = _cast_fields(self, dtype)
        s = self.scale
        if s:
            info = finfo(dtype)
            top = float(info.max) / (16.0 * max(1, self.q.shape[-1]))
            # 2^30 above the smallest normal keeps tiny scores normal; float16/bfloat16 have too few
            # exponent bits (float16: 2^30·6e-5 > max) and get 1/eps (2^10, 2^7) instead.
            lift = 2.0**30 if np.dtype(dtype).itemsize >= 4 else 1.0 / float(info.eps)
            s = math.copysign(min(max(abs(s), float(info.smallest_normal) * lift), top), s)
            case = replace(case, scale=s)
        return case

    @property
    def batch(self) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(self.q.shape[:-2], self.k.shape[:-2], self.v.shape[:-2]))

    @property
    def n_q(self) -> int:
        return self.q.shape[-2]

    @property
    def n_k(self) -> int:
        return self.k.shape[-2]

    @property
    def d_k(self) -> int:
        return self.q.shape[-1]

    def describe(self) -> str:
        mask = "none" if self.mask is None else f"{self.mask.shape}"
        return (f"attention(q{self.q.shape}, k{self.k.shape}, v{self.v.shape}, mask={mask}, scale={self.scale})"
                + (f" [{self.label}]" if self.label else ""))


@reused
@st.composite
def attention_cases(draw, *, mask: bool | None = None, explicit_scale: bool | None = False, square: bool = False,
                    score_scale=None, min_seq: int = 1, max_seq: int | None = None, batch_ndim=(0, 2),
                    max_dim: int | None = None) -> AttentionCase:
    """q, k, v (and a mask when ``mask`` is True, maybe when None) of drawn dims.

    The score scale is controlled: q and k entries are U[−1, 1]·2^e with e drawn so that scores range
    from tiny to large (|S| up to ~d_k·4); ``explicit_scale`` draws a scale argument as well
    (True: always; None: sometimes; False: never) — :data:`EXPLICIT_SCALES`: 1, 0.5, 0.125, 2, −1, 0 (uniform
    weights), 10⁶, and the huge and tiny 10³⁰⁰ and 10⁻³⁰⁰, the positive ones only for an implementation
    that declares ``scale='positive'`` — and ``score_scale`` fixes the q, k factor. A mask likewise (True:
    always; None: sometimes; False: never), in one of the forms of :func:`mask_forms`."""
    d = draw(dims(min_seq=min_seq, max_seq=max_seq, square=square, batch_ndim=batch_ndim, max_dim=max_dim))
    tiles = draw(tile_crossing()) if max_seq is None and max_dim is None else None
    if tiles is not None:
        n_q, n_k, d_k = tiles
        d = replace(d, batch=(1,) if d.batch else (), n_q=max(n_k if square else n_q, min_seq),
                    n_k=max(n_k, min_seq), d_k=d_k, d_v=d_k if variants()["value_width"] == "d_k" else d.d_v)
    qk = draw(scales(-4, 1)) if score_scale is None else score_scale
    q = draw(arrays(d.batch + (d.n_q, d.d_k), scale=qk))
    kb = draw(st.sampled_from([d.batch, d.batch[1:], ()])) if d.batch else ()
    k = draw(arrays(kb + (d.n_k, d.d_k), scale=qk))
    v = draw(arrays(d.batch + (d.n_k, d.d_v), scale=draw(scales(-2, 2))))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        m = draw(mask_forms(d.batch, d.n_q, d.n_k))
        if tiles is not None:
            m = draw(tile_padding(m))
    s = None
    if explicit_scale or (explicit_scale is None and variants()["scale"] != "none" and draw(st.booleans())):
        s = draw(explicit_scales())
    case = AttentionCase(q, k, v, m, s)
    note(case.describe())
    return case


def weights_probe(q, k, scale=None):
    """Inputs that make ``attention`` return its weights: V = I (Σ_j a_ij I_jc = a_ic).

    V is [I_{n_k} | 0] with width D = max(d_k, n_k), so that d_v = d_k whenever n_k ≤ d_k (as
    ``jax.nn.dot_product_attention`` needs) and the default scale is exercised as is. When n_k > d_k,
    q and k get D − d_k zero columns (the scores do not change) and the scale is made explicit
    (1/√d_k of the unpadded d_k). Returns (q', k', v', scale'); the weights are out[..., :n_k].
    """
    q, k = np.asarray(q), np.asarray(k)
    d_k, n_k = q.shape[-1], k.shape[-2]
    width = max(d_k, n_k)
    eye = np.zeros((n_k, width), dtype=q.dtype)
    eye[:, :n_k] = np.eye(n_k)
    if width == d_k:
        return q, k, eye, scale
    pad = lambda a: np.concatenate([a, np.zeros(a.shape[:-1] + (width - d_k,), a.dtype)], axis=-1)
    return pad(q), pad(k), eye, 1.0 / math.sqrt(d_k) if scale is None else scale


@reused
@st.composite
def softmax_inputs(draw, *, huge: bool = False, max_len: int | None = None, low: int = -4, high: int = 6,
                   min_len: int = 1):
    """(x, axis): x of 1–3 axes, entries U[−1, 1]·2^e (e in [low, high]) or, when ``huge``, ±(0.5…1)·M with
    M = 1e300 (float64; for float32 the largest power of ten below max/16), and an axis that is often not
    the last one. The softmax axis has :func:`seq_lengths` entries, or uniformly min_len … max_len of them
    when ``min_len`` > 1 (long rows, whatever the profile)."""
    batch = list(draw(batch_shapes(0, 2)))
    n = draw(seq_lengths(1, max_len) if min_len <= 1 else st.integers(min_len, max(min_len, max_len or 0)))
    if draw(tile_decision()):  # a row that crosses tiles, within min_len … max_len, in one batch axis at most
        top = max_len if max_len is not None else max(tile_lengths())
        lengths = tuple(x for x in tile_lengths() if min_len <= x <= top)
        if lengths:
            n, batch = draw(st.sampled_from(lengths)), batch[:1]
            note(f"softmax row crossing tiles: n={n}")
    pos = draw(st.integers(0, len(batch)))  # where the normalised axis sits
    shape = tuple(batch[:pos] + [n] + batch[pos:])
    axis = pos if draw(st.booleans()) else pos - len(shape)
    if huge:
        top = 1e300 if _dtype().itemsize >= 8 else 10.0 ** math.floor(math.log10(float(finfo(_dtype()).max) / 16))
        x = draw(arrays(shape, scale=top))
    else:
        x = draw(arrays(shape, scale=draw(scales(low, high))))
    note(f"softmax x.shape={x.shape}, axis={axis}, max|x|={float(np.max(np.abs(x))) if x.size else 0:.3g}")
    return x, axis


# ---------------------------------------------------------------------------------------------
# Edge cases for @example (float64; tests cast them to the implementation's dtype)
# ---------------------------------------------------------------------------------------------

def edge_attention_case(name: str) -> AttentionCase:
    """The named edge case: ``one-key``, ``one-query``, ``d_k=1``, ``single-allowed-key``, ``huge-scores``,
    ``tiny-scores``, ``long-sequence`` (n_k = the profile's ``long_seq``: 128 in ci, 512 in thorough),
    ``one-query-masked``, ``batched-masks``.

    In each, the sizes n_q, n_k, d_k, d_v that the name does not set to 1 are pairwise different, so
    an implementation that confuses two axes (Q Kᵀ for K Qᵀ, d_v for d_k) gets a wrong shape or a
    wrong broadcast rather than a lucky match. docs/adapters.md lists every case exactly (shapes,
    mask, scale, the bug it is for); tests/spec/test_documented_inputs.py keeps that table and this code
    in agreement."""
    rng = np.random.default_rng(sum(map(ord, name)))
    u = lambda *shape: rng.uniform(-1.0, 1.0, size=shape)
    if name == "one-key":
        return AttentionCase(u(3, 4), u(1, 4), u(1, 5), label=name)
    if name == "one-query":
        return AttentionCase(u(2, 1, 3), u(2, 6, 3), u(2, 6, 2), label=name)
    if name == "d_k=1":
        return AttentionCase(u(4, 1), u(5, 1), u(5, 3), label=name)
    if name == "single-allowed-key":
        mask = np.zeros((4, 6), dtype=bool)
        mask[np.arange(4), [5, 0, 3, 3]] = True
        return AttentionCase(u(4, 3), u(6, 3), u(6, 2), mask=mask, label=name)
    if name == "huge-scores":  # |S| ~ 1e300: no overflow allowed
        return AttentionCase(u(3, 2), u(4, 2), u(4, 5), mask=np.array([[True, False, True, True]] * 3), scale=1e300,
                             label=name)
    if name == "tiny-scores":  # |S| ~ 1e-300: weights uniform to the last bit
        return AttentionCase(u(3, 2), u(4, 2), u(4, 5), scale=1e-300, label=name)
    if name == "long-sequence":
        n = limits().long_seq
        return AttentionCase(u(2, 3), u(n, 3), u(n, 4), label=name)
    if name == "one-query-masked":
        return AttentionCase(u(1, 2), u(5, 2), u(5, 3), mask=np.array([[False, True, False, False, True]]),
                             label=name)
    if name == "batched-masks":  # a different mask per batch element
        mask = np.ones((3, 2, 4), dtype=bool)
        mask[0, :, 0] = False
        mask[1, :, 1:] = False
        mask[2, 1, 2] = False
        return AttentionCase(u(3, 2, 5), u(3, 4, 5), u(3, 4, 3), mask=mask, label=name)
    raise ValueError(f"unknown edge case {name!r}")


EDGE = ("one-key", "one-query", "d_k=1", "single-allowed-key", "huge-scores", "tiny-scores", "long-sequence",
        "one-query-masked", "batched-masks")

# ---------------------------------------------------------------------------------------------
# Causal attention: alignments and sliding windows
# ---------------------------------------------------------------------------------------------

def alignments() -> st.SearchStrategy[str]:
    """The causal alignments the followed implementation declares (``causal_alignment``)."""
    return st.sampled_from(tuple(variants()["causal_alignment"]))


def windows(n_k: int, *, window: bool | None = None) -> st.SearchStrategy:
    """None (plain causal) or a sliding window 1 … n_k + 1: ``window=True`` always a window (VariantNotApplicable
    without ``sliding_window``), False never, None sometimes (where ``sliding_window`` is declared)."""
    allowed = variants()["sliding_window"]
    if window and not allowed:
        raise _not_applicable("sliding_window", True)
    sizes = st.integers(1, n_k + 1)
    if window:
        return sizes
    return (st.none() | sizes) if allowed and window is None else st.none()


@dataclass(frozen=True)
class CausalCase:
    """q (…, n_q, d_k), k (…, n_k, d_k), v (…, n_k, d_v), an alignment, a window (or None), a scale (or None)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    alignment: str
    window: int | None
    scale: float | None

    def cast(self, dtype) -> "CausalCase":
        return CausalCase(self.q.astype(dtype), self.k.astype(dtype), self.v.astype(dtype), self.alignment,
                          self.window, self.scale)

    def describe(self) -> str:
        return (f"causal_attention(q{self.q.shape}, k{self.k.shape}, v{self.v.shape}, alignment={self.alignment!r}, "
                f"window={self.window}, scale={self.scale})")


@reused
@st.composite
def causal_cases(draw, *, alignment: str | None = None, window: bool | None = None, rectangular: bool = True):
    """Inputs of ``causal_attention``: dims drawn as for attention; n_q ≤ n_k for bottom-right (so every
    query sees a key) and n_q ≠ n_k sometimes either way (``rectangular``), where the alignments differ; a
    sliding window as :func:`windows` draws it (``window`` True: always, False: never — the alignment tests,
    which call without one —, None: sometimes)."""
    al = draw(alignments()) if alignment is None else alignment
    if al not in variants()["causal_alignment"]:
        raise _not_applicable("causal_alignment", al)
    d = draw(dims())
    tiles = draw(tile_crossing())
    if tiles is not None:  # one sequence: the kernel's blocks are crossed along n_q and n_k
        d = replace(d, batch=(1,) if d.batch else (), n_q=tiles[0], n_k=tiles[1], d_k=tiles[2],
                    d_v=tiles[2] if variants()["value_width"] == "d_k" else d.d_v)
    n_q, n_k = d.n_q, d.n_k if rectangular else d.n_q
    if al == "bottom-right" and n_q > n_k:
        n_q, n_k = n_k, n_q
    qk = draw(scales(-4, 1))
    q = draw(arrays(d.batch + (n_q, d.d_k), scale=qk))
    k = draw(arrays(d.batch + (n_k, d.d_k), scale=qk))
    v = draw(arrays(d.batch + (n_k, d.d_v), scale=draw(scales(-2, 2))))
    w = draw(windows(n_k, window=window))
    if w is not None and tiles is not None:  # a window shorter than a tile, or about one
        t = min(tile_sizes())
        w = draw(st.sampled_from(tuple(x for x in (1, 2, 3, t - 1, t, t + 1) if 1 <= x <= n_k + 1)))
    if w is not None and al == "top-left" and n_q > n_k:  # queries i >= n_k + w - 1 would see no key at all
        w = max(w, n_q - n_k + 1)
    scale = None if variants()["scale"] == "none" else draw(st.none() | explicit_scales().filter(lambda s: 0 < abs(s) <= 2))
    case = CausalCase(q, k, v, al, w, scale)
    note(case.describe())
    return case


# ---------------------------------------------------------------------------------------------
# Kernel edge cases: sized by the followed implementation's tiles, for @example
# ---------------------------------------------------------------------------------------------

#: The named kernel edge cases (:func:`kernel_edge_case`), T the smallest declared tile (16 by default):
#: ``partial-last-block`` (attention, n_k = 2T + 5: a last key block of 5), ``padded-blocks`` (attention with
#: leading and trailing padding of T + 1 keys on every other query, and a second batch element padded on the
#: left only: whole key blocks masked for some queries and not for others), ``two-blocks`` (attention,
#: n_q = n_k = T + 5; under the causal mask the first query sees none of the second key block and the last
#: query all of it), ``decode-top-left`` and
#: ``decode-bottom-right`` (causal, n_q = 1 against n_k = 2T + 5 keys), ``bottom-right-long-cache`` (causal,
#: n_q = 5, n_k = 4T + 4: the offset n_k − n_q = 4T − 1 puts every query block's causal end one key short of
#: a block boundary), ``short-window`` (causal top-left, n_q = n_k = 2T + 3, a window of 3 keys, far shorter
#: than a tile: the window of query T starts in the block before its own), ``negative-scale`` (causal top-left,
#: n_q = n_k = T + 5, scale −1: a kernel that writes −∞ into the hidden keys' raw scores and scales afterwards
#: turns them into +∞ and returns NaN — torch's CPU flash kernel does; only where ``scale='any'`` is declared).
KERNEL_EDGE = ("partial-last-block", "padded-blocks", "two-blocks", "decode-top-left", "decode-bottom-right",
               "bottom-right-long-cache", "short-window", "negative-scale")


def kernel_edge_case(name: str):
    """The named kernel edge case (:data:`KERNEL_EDGE`) for the followed implementation's smallest tile T
    (:func:`~attnclaims.checks.strategies.common.tile_sizes`): an :class:`AttentionCase` or a
    :class:`CausalCase` in float64 (q and k entries U[−1, 1]·2, so that a later key block raises a query's
    running maximum; v entries U[−1, 1]; d_k = 7 and d_v = 5, neither a power of two, or d_v = 7 where the
    implementation declares ``value_width='d_k'``). A causal case whose
    alignment or window the implementation does not declare declines the example
    (:func:`~attnclaims.checks.strategies.common.require_variant`)."""
    t = min(tile_sizes())
    d_v = 7 if variants()["value_width"] == "d_k" else 5  # d_v = d_k where the implementation declares so
    rng = np.random.default_rng(sum(map(ord, name)))
    u = lambda *shape, s=1.0: rng.uniform(-1.0, 1.0, size=shape) * s

    def causal(n_q, n_k, alignment, window=None, scale=None):
        require_variant("causal_alignment", alignment)
        if window is not None:
            require_variant("sliding_window", True)
        if scale is not None:
            require_variant("scale", scale)
        return CausalCase(u(n_q, 7, s=2.0), u(n_k, 7, s=2.0), u(n_k, d_v), alignment, window, scale)

    if name == "partial-last-block":
        n_k = 2 * t + 5
        return AttentionCase(u(3, 7, s=2.0), u(n_k, 7, s=2.0), u(n_k, d_v), label=name)
    if name == "padded-blocks":
        n_q, n_k = 4, 3 * t + 5
        mask = np.ones((2, n_q, n_k), dtype=bool)
        mask[0, ::2, : t + 1] = False  # queries 0 and 2 of sequence 0: leading and trailing blocks hidden
        mask[0, ::2, n_k - t - 1:] = False
        mask[1, :, : t + 1] = False  # sequence 1: left padding longer than a tile, for every query
        return AttentionCase(u(2, n_q, 7, s=2.0), u(2, n_k, 7, s=2.0), u(2, n_k, d_v), mask=mask, label=name)
    if name == "two-blocks":
        n = t + 5
        return AttentionCase(u(n, 7, s=2.0), u(n, 7, s=2.0), u(n, d_v), label=name)
    if name == "decode-top-left":
        return causal(1, 2 * t + 5, "top-left")
    if name == "decode-bottom-right":
        return causal(1, 2 * t + 5, "bottom-right")
    if name == "bottom-right-long-cache":
        return causal(5, 4 * t + 4, "bottom-right")
    if name == "short-window":
        return causal(2 * t + 3, 2 * t + 3, "top-left", 3)
    if name == "negative-scale":
        return causal(t + 5, t + 5, "top-left", scale=-1.0)
    raise ValueError(f"unknown kernel edge case {name!r}")


@dataclass(frozen=True)
class KernelEdge:
    """A kernel edge case named for ``@example`` and built when a test casts it: the followed implementation's
    tile sizes are known only then (``@example`` arguments are made when the test module is imported). With
    ``causal`` an attention case gets the top-left causal mask (:func:`with_causal_mask`) on top of its own."""

    name: str
    causal: bool = False

    def build(self):
        case = kernel_edge_case(self.name)
        if self.causal:
            case = with_causal_mask(case, case.mask)
        return case

    def cast(self, dtype):
        return self.build().cast(dtype)

    def describe(self) -> str:
        return f"kernel edge case {self.name!r}" + (" with the causal mask" if self.causal else "")


def causal_weights_probe(impl, q, k, alignment, window, scale):
    """The weights of ``impl.causal_attention`` (…, n_q, n_k), read with V = I as :func:`weights_probe` does
    for attention: the output is linear in V, so its column j is the weight of key j, and ``out(V + t e_j e_cᵀ)
    − out(V) = t·a_·j``: key j changes a query's output exactly where its weight is not 0. Returns (weights,
    (q', k', scale')), the inputs of the call. Where the probe widens q and k (n_k > d_k) for an implementation
    that takes no scale argument (``scale='none'``), q is multiplied by √(width/d_k) instead, so that its
    built-in 1/√width gives the same scores up to one rounding."""
    qp, kp, eye, s = weights_probe(q, k, scale)
    if s is not None and scale is None and variants()["scale"] == "none":
        qp, s = qp * np.asarray(math.sqrt(qp.shape[-1] / q.shape[-1]), dtype=qp.dtype), None
    batch = tuple(np.broadcast_shapes(qp.shape[:-2], kp.shape[:-2]))
    v = np.ascontiguousarray(np.broadcast_to(eye, batch + eye.shape))
    out = np.asarray(impl.causal_attention(qp, kp, v, alignment, window, s))[..., : k.shape[-2]]
    return out, (qp, kp, s)


def _norms(x: np.ndarray) -> np.ndarray:
    """‖x_i‖ over the last axis, with no underflow: ``np.linalg.norm`` squares the entries, so a row of
    entries ~1e-200 has norm 0 there, and with a scale ~1e300 a G_i of ~1e100 would read as 0 (every weight
    "provably" positive where the true weights underflow: a false alarm). Each row is divided by its largest
    magnitude first (exact up to one rounding per entry, far inside the factor-2 margin below); rows of
    infinities or NaNs give inf or NaN, which count as not reachable."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        top = np.max(np.abs(x), axis=-1, keepdims=True) if x.shape[-1] else np.zeros(x.shape[:-1] + (1,))
        safe = np.where((top > 0) & np.isfinite(top), top, 1.0)
        return np.linalg.norm(x / safe, axis=-1) * np.where(np.isfinite(top), safe, top)[..., 0]


def reachable_weights(q, k, mask, scale, dtype) -> np.ndarray:
    """Where an allowed weight is provably positive in a correct implementation's result (…, n_q, n_k) bool,
    from the inputs alone (no reference).

    With G_i = 2·|scale|·‖q_i‖·max_l ‖k_l‖ every score of query i lies within G_i of its maximum
    (Cauchy–Schwarz), so an allowed weight a_ij ≥ exp(−G_i)/n_k. Computing with unit roundoff u (the dtype's:
    larger than the float32 accumulation 16-bit bounds assume) perturbs the scores by at most
    (d_k + 1)·u·G_i/2 each, which changes a weight by a factor of at least exp(−(d_k + 2)·u·G_i), and the
    softmax's n_k + 4 roundings of exponentials, sum and division by factors (1 + δ), |δ| ≤ u, together at
    least exp(−2(n_k + 4)u): no step is additive, so the computed weight is at least
    exp(−G_i(1 + (d_k + 2)u) − 2(n_k + 4)u)/n_k. Where that is at least twice the dtype's smallest normal
    number it stays positive after the output's rounding and after any flush of subnormals, so a weight of 0
    there is a failure of the implementation, never of the draw: the property cannot raise a false alarm.
    Generic draws (entries U[−1, 1]·2^e, e ≤ 1, scales ≤ 2) meet it in float64 and float32; in float16
    (smallest normal 6.1e-5) only short rows do."""
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    info = finfo(dtype)
    u = float(info.eps) / 2
    n_k, d_k = k.shape[-2], q.shape[-1]
    s = abs(1.0 / math.sqrt(d_k) if scale is None else float(scale))
    qn = _norms(q)  # (..., n_q)
    kmax = np.max(_norms(k), axis=-1)[..., None] if n_k else np.zeros(qn.shape[:-1] + (1,))
    with np.errstate(over="ignore", invalid="ignore"):
        g = 2.0 * s * qn * kmax
        low = np.exp(-g * (1.0 + (d_k + 2) * u) - 2.0 * (n_k + 4) * u) / n_k
    ok = np.nan_to_num(low, nan=0.0) >= 2.0 * float(info.smallest_normal)
    allowed = np.ones(ok.shape + (n_k,), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    return np.broadcast_to(ok[..., None], np.broadcast_shapes(ok.shape + (n_k,), allowed.shape)) & allowed


def with_causal_mask(case: AttentionCase, padding: np.ndarray | None = None) -> AttentionCase:
    """``case`` with the top-left causal mask (:func:`causal_masks`), and with a key-padding mask
    (…, 1, n_k) on top of it when one is given: mask = causal ∧ padding, the mask a decoder passes when a
    batch holds sequences of different lengths."""
    causal = causal_masks(case.n_q, case.n_k)
    mask = causal if padding is None else causal & np.asarray(padding, dtype=bool)
    return replace(case, mask=mask, label=(case.label + " " if case.label else "") +
                   ("causal" if padding is None else "causal ∧ padding"))


@reused
@st.composite
def causal_padded_cases(draw, *, explicit_scale: bool | None = True, square: bool = False,
                        max_seq: int | None = None) -> AttentionCase:
    """Attention inputs (:func:`attention_cases`, no mask of their own; by default an explicit scale in every
    draw, and n_q ≠ n_k in some unless ``square``) with the top-left causal mask, and in some draws (a drawn
    boolean) a key-padding mask drawn together with it: sequence b keeps its first
    lengths[b] ≥ 1 keys (key 0 always, so every query keeps a key), the rest are padding. Where the sizes cross
    tiles the lengths include n_k − T − 1 (a trailing key block wholly padded) and T − 1 (padding from inside the
    first block)."""
    c = draw(attention_cases(mask=False, explicit_scale=explicit_scale, square=square, max_seq=max_seq))
    if not draw(st.booleans()):
        return with_causal_mask(c)
    n_k, t = c.n_k, min(tile_sizes())
    lengths = st.integers(1, n_k)
    if n_k > t + 1:
        lengths = st.sampled_from(tuple(x for x in (t - 1, n_k - t - 1) if x >= 1)) | lengths
    b = c.batch
    lens = np.asarray(draw(st.lists(lengths, min_size=max(1, math.prod(b)), max_size=max(1, math.prod(b)))))
    padding = (np.arange(n_k) < lens.reshape(b + (1,) if b else (1,))[..., None])
    padding = padding.reshape(b + (1, n_k))
    case = with_causal_mask(c, padding)
    note(case.describe())
    return case


# ---------------------------------------------------------------------------------------------
# Cases of the claim suite's attnclaims/suite/test_s31_attention.py, attnclaims/suite/test_contract.py
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def single_key_cases(draw):
    c = draw(attention_cases(mask=False, explicit_scale=None))
    return AttentionCase(c.q, c.k, c.v, draw(single_key_masks(c.batch + (c.n_q, c.n_k))), c.scale)


@reused
@st.composite
def scored_cases(draw, score_function: str):
    """(scores S, values V, mask, label): dot-product scores q kᵀ/√d_k, or Bahdanau's additive
    v_aᵀ tanh(W_q q + W_k k) with seeded weights."""
    c = draw(attention_cases(mask=None, explicit_scale=False, score_scale=draw(scales(-2, 1))))
    q, k = c.q.astype(np.float64), c.k.astype(np.float64)
    if score_function == "dot-product":
        s = q @ np.swapaxes(k, -1, -2) / math.sqrt(c.d_k)
    else:
        rng = np.random.default_rng(draw(seeds()))
        d_a = draw(st.integers(1, 8))
        w_q, w_k = rng.standard_normal((c.d_k, d_a)), rng.standard_normal((c.d_k, d_a))
        v_a = rng.standard_normal(d_a) * draw(scales(-1, 2))
        s = additive_scores(q, k, w_q, w_k, v_a)
    return s, c.v, c.mask


@reused
@st.composite
def bad_mask_shapes(draw, batch: tuple[int, ...], n_q: int, n_k: int):
    """Mask shapes that do not broadcast to batch + (n_q, n_k): a key or query too many or too few, or a
    batch axis of the wrong size. Where n_q or n_k is 1, numpy's own broadcasting would stretch the
    scores to such a mask (the trap the documented example adapter used to fall into)."""
    options = [(n_q, n_k + 1), (n_q + 1, n_k)]
    if n_k > 2:  # one fewer key (an axis of 1 would broadcast)
        options.append((n_q, n_k - 1))
    if n_q > 2:
        options.append((n_q - 1, n_k))
    if batch:
        options.append((batch[0] + 1,) + batch[1:] + (n_q, n_k))
    return draw(st.sampled_from(options))


__all__ += ["single_key_cases", "scored_cases", "bad_mask_shapes"]


# ---------------------------------------------------------------------------------------------
# Kernel features: the returned log-sum-exp (split KV), soft-capping, ALiBi, softmax over several axes
# ---------------------------------------------------------------------------------------------

@reused
@st.composite
def split_kv_cases(draw):
    """(case, split): attention inputs with n_k ≥ 2 (sizes that cross tiles among them) and a split point
    1 ≤ split < n_k — a smallest tile T − 1, T or T + 1 where it fits, n_k // 2, or any — where a split-KV
    kernel cuts the keys. A drawn mask keeps keys 0 and ``split`` for every query, so that both halves see a
    key (a query with no key in a half has no log-sum-exp to merge: −inf by the reference's convention, NaN
    or +inf in kernels)."""
    c = draw(attention_cases(mask=None, explicit_scale=None, min_seq=2))
    n_k, t = c.n_k, min(tile_sizes())
    near = tuple(sorted({x for x in (t - 1, t, t + 1, n_k // 2) if 1 <= x < n_k}))
    split = draw(st.sampled_from(near) | st.integers(1, n_k - 1)) if near else draw(st.integers(1, n_k - 1))
    if c.mask is not None:
        m = np.array(c.mask, dtype=bool, copy=True)
        m[..., 0] = True
        m[..., split] = True
        c = replace(c, mask=m)
    note(f"split the keys at {split} of {n_k}")
    return c, split


#: the caps the soft-capping tests pass: Gemma 2's 50 (attention) and 30 (final logits), and caps of the
#: scores' own size, where tanh bends them
SOFTCAPS = (50.0, 30.0, 5.0, 1.0, 0.5)


def softcaps() -> st.SearchStrategy[float]:
    return st.sampled_from(SOFTCAPS)


@reused
@st.composite
def softcap_cases(draw, *, huge: bool = False):
    """(case, softcap): attention inputs (:func:`attention_cases`, any mask and scale) and a cap of
    :data:`SOFTCAPS`; with ``huge`` an explicit scale of 10⁶ and a cap of 0.5 … 2, where uncapped scores
    would make every row one-hot and the capped ones keep every weight within e^{2c} of the others."""
    if huge:
        if variants()["scale"] == "none":
            raise _not_applicable("scale", 1e6)
        c = draw(attention_cases(mask=None, explicit_scale=False, score_scale=1.0))
        return replace(c, scale=1e6), draw(st.sampled_from((0.5, 1.0, 2.0)))
    return draw(attention_cases(mask=None, explicit_scale=None)), draw(softcaps())


@dataclass(frozen=True)
class AlibiCase:
    """q (…, h, n_q, d_k), k (…, h, n_k, d_k), v (…, h, n_k, d_v), slopes (h,), an optional key-padding mask
    (…, 1, 1, n_k), an optional scale; n_q ≤ n_k, so that every query sees key 0."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    slopes: np.ndarray
    mask: np.ndarray | None
    scale: float | None

    def cast(self, dtype) -> "AlibiCase":
        return replace(self, q=self.q.astype(dtype), k=self.k.astype(dtype), v=self.v.astype(dtype),
                       slopes=self.slopes.astype(dtype))

    def describe(self) -> str:
        mask = "none" if self.mask is None else f"{self.mask.shape}"
        return (f"alibi_attention(q{self.q.shape}, k{self.k.shape}, v{self.v.shape}, slopes={self.slopes.tolist()}, "
                f"mask={mask}, scale={self.scale})")


@reused
@st.composite
def alibi_slope_sets(draw, heads: int) -> np.ndarray:
    """Slopes for ``heads`` heads: Press et al.'s geometric ones (:func:`attnclaims.reference.attention.
    alibi_slopes`, decreasing) or distinct powers of two 2^−8 … 2^0 in a drawn order (exact in every dtype)."""
    from attnclaims.reference.attention import alibi_slopes

    if draw(st.booleans()):
        return alibi_slopes(heads)
    exps = draw(st.lists(st.integers(0, 8), min_size=heads, max_size=heads, unique=heads <= 9))
    return np.asarray([2.0 ** -e for e in exps])


@reused
@st.composite
def alibi_cases(draw, *, mask: bool | None = None):
    """Inputs of ``alibi_attention``: dims as for attention (sizes that cross tiles among them), 1–4 heads (two
    or more in three draws of four: slopes that differ), n_q ≤ n_k, slopes (:func:`alibi_slope_sets`), a
    key-padding mask sometimes (every sequence keeps its first L ≥ 1 keys), the default scale or one of
    1/8 … 2."""
    d = draw(dims())
    tiles = draw(tile_crossing())
    if tiles is not None:
        d = replace(d, batch=d.batch[:1], n_q=tiles[0], n_k=tiles[1], d_k=tiles[2],
                    d_v=tiles[2] if variants()["value_width"] == "d_k" else d.d_v)
    n_q, n_k = min(d.n_q, d.n_k), max(d.n_q, d.n_k)
    h = draw(st.sampled_from((1, 2, 3, 4, 2, 4, 3, 2)))
    qk = draw(scales(-4, 1))
    batch = d.batch[:1]
    q = draw(arrays(batch + (h, n_q, d.d_k), scale=qk))
    k = draw(arrays(batch + (h, n_k, d.d_k), scale=qk))
    v = draw(arrays(batch + (h, n_k, d.d_v), scale=draw(scales(-2, 2))))
    slopes = draw(alibi_slope_sets(h))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        lengths = draw(st.lists(st.integers(1, n_k), min_size=max(1, math.prod(batch)),
                                max_size=max(1, math.prod(batch))))
        m = (np.arange(n_k) < np.asarray(lengths)[:, None]).reshape(batch + (1, 1, n_k))
    scale = None if variants()["scale"] == "none" else draw(st.none() | st.sampled_from((1.0, 0.5, 0.125, 2.0)))
    case = AlibiCase(q, k, v, slopes, m, scale)
    note(case.describe())
    return case


@reused
@st.composite
def softmax_axes_inputs(draw):
    """(x, axes): x of 2–4 axes of 1–6 entries (the shapes (batch, n_q, n_k) of the implementation's shape menu
    where it has one), entries U[−1, 1]·2^e (e in −4 … 6), and a tuple of two or more distinct axes — the last
    two (a 2-D attention map), two that are not adjacent, or every axis — given as non-negative or negative
    indices, in either order. Sizes that cross tiles (:func:`~attnclaims.checks.strategies.common.
    tile_crossing`: every draw of the crossing run of a test marked ``crosses_tiles``) make x a 2-D map
    (n_q, n_k) or one of 1–2 maps (b, n_q, n_k), n_k a tile length and n_q 1, 3 or another: the normalised
    slice crosses a tile along n_k and (when n_q does) along n_q."""
    menu = _shape_menu()
    tiles = draw(tile_crossing())  # None for a shape menu, and outside a crossing draw
    if menu is not None:  # an implementation that compiles per shape: (batch, n_q, n_k) of its menu
        entry = draw(st.sampled_from(menu))
        shape = tuple(entry["batch"]) + (entry["n_q"], entry["n_k"])
        ndim = len(shape)
    elif tiles is not None:
        n_q, n_k, _ = tiles
        shape = (n_q, n_k) if draw(st.booleans()) else (draw(st.integers(1, 2)), n_q, n_k)
        ndim = len(shape)
    else:
        ndim = draw(st.integers(2, 4))
        shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    x = draw(arrays(shape, scale=draw(scales(-4, 6))))
    choices = [(ndim - 2, ndim - 1), tuple(range(ndim))]
    if ndim >= 3:
        choices.append((0, ndim - 1))
    axes = draw(st.sampled_from(choices))
    if draw(st.booleans()):
        axes = tuple(a - ndim for a in axes)
    if draw(st.booleans()):
        axes = axes[::-1]
    note(f"softmax x.shape={x.shape}, axis={axes}")
    return x, axes


__all__ += ["split_kv_cases", "SOFTCAPS", "softcaps", "softcap_cases", "AlibiCase", "alibi_slope_sets", "alibi_cases",
            "softmax_axes_inputs"]
