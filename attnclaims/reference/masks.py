"""Attention masks: bool arrays, True = the query may attend to the key (article §7; Vaswani §3.2.3).

Causal masks in both alignments, padding masks, the restricted-attention band (:func:`window_mask`, the
baseline of :mod:`attnclaims.reference.baselines`) and causal sliding windows: mask construction only, used
by the attention (:mod:`attnclaims.reference.attention`), the layers and the baselines.

Masks broadcast to the scores' shape (..., n_q, n_k) and are applied with
``where`` by :mod:`attnclaims.reference.attention`, so a masked weight is
exactly 0. They are combined by logical AND: a key is allowed only if every
mask allows it.
"""
from __future__ import annotations

import numpy as np

from attnclaims.reference._validate import check_count

__all__ = ["CAUSAL_ALIGNMENTS", "causal_mask", "padding_mask", "combine_masks", "window_mask", "sliding_window_mask"]

#: Where the diagonal of a non-square causal mask sits.
CAUSAL_ALIGNMENTS = ("top-left", "bottom-right")


def causal_mask(n_q: int, n_k: int | None = None, alignment: str = "top-left") -> np.ndarray:
    """M_ij = (j <= i + offset): query i sees keys up to its own position (article §7, "掩码自注意力"; Vaswani §3.2.3).

    -> (n_q, n_k) bool; n_k defaults to n_q, where both alignments give the
    lower triangle (diagonal included).

    When n_q != n_k the two conventions in use differ:

    * ``"top-left"`` (offset 0; torch's ``is_causal`` and
      ``scaled_dot_product_attention``): query i sees keys 0..i. If n_q > n_k,
      queries i >= n_k see every key.
    * ``"bottom-right"`` (offset n_k - n_q; FlashAttention >= 2.1, decoding with
      a KV cache): the queries are the *last* n_q positions of the key sequence,
      so the last query sees every key. If n_q > n_k, the first n_q - n_k
      queries see no key at all (fully masked rows).
    """
    n_q = check_count("n_q", n_q)
    n_k = n_q if n_k is None else check_count("n_k", n_k)
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment={alignment!r}, but should be one of {CAUSAL_ALIGNMENTS}")
    offset = 0 if alignment == "top-left" else n_k - n_q
    i = np.arange(n_q)[:, None]  # (n_q, 1)
    j = np.arange(n_k)[None, :]  # (1, n_k)
    return j <= i + offset  # (n_q, n_k)


def padding_mask(lengths, n_k: int) -> np.ndarray:
    """M_bj = (j < lengths[b]): sequence b has ``lengths[b]`` real keys followed by padding.

    lengths (batch,) integers in [0, n_k] -> (batch, 1, n_k) bool, which
    broadcasts over the queries (and, with ``mask[:, None]``, over heads). A
    length of 0 masks every key of that sequence.
    """
    n_k = check_count("n_k", n_k)
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"lengths.shape={lengths.shape}, but should be (batch,)")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths.dtype={lengths.dtype}, but should be an integer dtype")
    if lengths.size and (lengths.min() < 0 or lengths.max() > n_k):
        raise ValueError(f"lengths={lengths.tolist()}, but each should be in [0, n_k={n_k}]")
    j = np.arange(n_k)  # (n_k,)
    return (j[None, :] < lengths[:, None])[:, None, :]  # (batch, n_k) -> (batch, 1, n_k)


def combine_masks(*masks) -> np.ndarray | None:
    """M = M_1 ∧ M_2 ∧ … with broadcasting; ``None`` entries (no mask) are skipped.

    Returns None if every argument is None (or there are none), so the result
    can be passed on as "no mask".
    """
    present = []
    for index, m in enumerate(masks):
        if m is None:
            continue
        m = np.asarray(m)
        if m.dtype != np.bool_:
            raise ValueError(f"masks[{index}].dtype={m.dtype}, but should be bool (True = may attend)")
        present.append(m)
    if not present:
        return None
    try:
        shape = np.broadcast_shapes(*(m.shape for m in present))
    except ValueError:
        raise ValueError(f"mask shapes {[m.shape for m in present]} do not broadcast together") from None
    out = np.ones(shape, dtype=bool)
    for m in present:
        out &= m
    return out


def window_mask(n: int, window: int) -> np.ndarray:
    """M_ij = (−⌊(r−1)/2⌋ <= j − i <= ⌊r/2⌋): a neighbourhood of r = ``window`` positions around i.

    -> (n, n) bool, True = may attend. For odd r it is centred, |j − i| <= (r−1)/2;
    each row has at most r allowed keys (fewer at the ends).
    """
    n = check_count("n", n)
    window = check_count("window", window, minimum=1)
    offset = np.arange(n)[None, :] - np.arange(n)[:, None]  # (n, n): j − i
    return (offset >= -((window - 1) // 2)) & (offset <= window // 2)


def sliding_window_mask(n_q: int, n_k: int | None = None, window: int | None = None,
                        alignment: str = "top-left") -> np.ndarray:
    """Causal sliding-window (local) attention: M_ij = (p_i − w < j <= p_i), p_i = i + offset the
    position of query i (offset as in :func:`causal_mask`), w = ``window`` >= 1 (Beltagy et al. 2020,
    Longformer; Mistral 7B's sliding window). ``window=None`` is the plain causal mask.

    -> (n_q, n_k) bool. It is :func:`causal_mask` ∧ the band |j − p_i| <= w − 1, which is the
    restricted-attention baseline's neighbourhood :func:`window_mask` of
    r = 2w − 1 positions, read at rows p_i and columns j (embedded in a square large enough for
    negative positions).
    """
    causal = causal_mask(n_q, n_k, alignment)
    if window is None:
        return causal
    window = check_count("window", window, minimum=1)
    n_q, n_k = causal.shape
    offset = 0 if alignment == "top-left" else n_k - n_q
    side = 2 * (n_q + n_k)  # rows p_i + n_q >= 1 and columns j + n_q both lie inside the square
    band = window_mask(side, 2 * window - 1)[np.ix_(np.arange(n_q) + offset + n_q, np.arange(n_k) + n_q)]
    return causal & band  # (n_q, n_k)
