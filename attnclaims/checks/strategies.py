"""Every hypothesis strategy of the suite, in one module (docs/design.md "How we write" rule 7).

Dimensions are drawn first (:func:`dims`), then arrays of those shapes with a
controlled scale (:func:`arrays`, bounded and finite), masks that leave at
least one key per query (:func:`masks`, :func:`causal_masks`,
:func:`single_key_masks`, :func:`padding_masks`), permutations, and parameter
sets (:func:`multi_head_params`, :func:`encoder_layer_params`, …). The
composite strategies at the end bundle those into ready cases
(:func:`attention_cases`, :func:`model_cases`), and :data:`EDGE` holds the
edge cases the tests add with ``@example``: one key, one query, d_k = 1, a
single allowed key, huge and tiny score scales, a long sequence.

Sizes follow the active hypothesis profile (:func:`attnclaims.profiles.limits`):
``ci`` draws sequences up to 12 and widths up to 12, ``thorough`` up to 320 and
64 (n ≥ 256 is reached; see ``tests/checks/test_strategies.py``).

Following the implementation under test
---------------------------------------
Strategies draw arrays in the dtype of the implementation under test, and can
restrict shapes for implementations that compile per shape. They learn the
implementation from :func:`follow`, which the autouse fixture
:func:`follow_implementation` calls for every test that takes the ``impl``
fixture (import it into the test module). Outside a test they draw float64 and
free shapes.

An implementation (the object behind ``--attn-impl``) may declare:

* ``preferred_shapes``: a sequence of mappings with any of the keys ``batch``
  (a tuple), ``n_q``, ``n_k``, ``d_k``, ``d_v``, ``d_model``, ``num_heads``,
  ``d_ff``. :func:`dims` then samples from these shapes instead of drawing
  freely (a missing key takes its value from :data:`FIXED_SHAPES`' first entry),
  adjusting only what a test requires (``square`` sets n_k = n_q, a minimum
  length raises n). JAX compiles once per input shape (~0.5 s each), so the JAX
  adapter should set this (or ``fixed_shapes``).
* ``fixed_shapes = True``: the same, with the built-in menu :data:`FIXED_SHAPES`
  (three shapes, d_v = d_k in each, as ``jax.nn.dot_product_attention`` needs).

Edge cases given with ``@example`` keep their own shapes, so a JIT-compiled
implementation still compiles a few extra shapes.

Declared variants
-----------------
An implementation may also declare ``variants`` (:data:`attnclaims.protocol.VARIANTS`): the
strategies then draw only what it supports — Post-LN or Pre-LN layers (``norm_first``), cross- or
only self-attention (``cross_attention``; self-attention is always called with ``x_kv is x_q``),
even head dimensions (``head_dim``), positive explicit scales (``scale``). A test that needs a
variant the implementation does not support says so with :func:`needs_variant` (checked before the
test runs: "not applicable (variant …)"), and a strategy asked for an unsupported variant stops the
check the same way (:func:`require_variant`, a pytest skip with that message).

No subnormal numbers
--------------------
Every array the strategies return — inputs, masks' companions, parameters — holds no subnormal
number of the dtype it is returned in, *after* every transformation they apply (scaling by 2^e,
offsets, the cast to the implementation's dtype): entries whose magnitude falls below the dtype's
smallest normal number are set to 0 (:func:`flush_subnormals`). Backends that flush subnormals to
zero would differ on them by the smallest normal number, a convention of the hardware, not an error
in the claims' sense; ``tests/checks/test_strategies_draws.py`` searches every strategy for them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attnclaims.profiles import limits
from attnclaims.protocol import VARIANTS, declared_variants, supports, unsupported_message
from attnclaims.reference.params import (
    DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
    init_decoder_layer, init_encoder_layer, init_feed_forward, init_layer_norm, init_multi_head,
)

__all__ = [
    "follow", "following", "followed", "follow_implementation", "FIXED_SHAPES", "LAYER_MAX_SEQ", "ELEMENTWISE_LIMIT",
    "Dims", "dims", "seq_lengths", "batch_shapes", "scales", "arrays", "random_arrays",
    "masks", "mask_forms", "causal_masks", "single_key_masks", "padding_masks", "permutations", "seeds",
    "multi_head_params", "feed_forward_params", "layer_norm_params", "encoder_layer_params",
    "decoder_layer_params", "epsilons",
    "AttentionCase", "attention_cases", "ModelCase", "model_cases", "layer_norm_inputs",
    "weights_probe", "softmax_inputs", "cast", "EDGE", "edge_attention_case",
    "variants", "require_variant", "needs_variant", "VariantNotApplicable", "norm_firsts", "cross_or_self",
    "explicit_scales", "EXPLICIT_SCALES", "flush_subnormals", "finfo", "not_applicable",
]

# ---------------------------------------------------------------------------------------------
# Following the implementation under test
# ---------------------------------------------------------------------------------------------

_FOLLOWED: list[Any] = [None]


def follow(impl) -> None:
    """Make the strategies draw for ``impl`` (a GuardedImplementation or a protocol object)."""
    _FOLLOWED[0] = impl


@contextlib.contextmanager
def following(impl):
    """``with following(impl):`` draws for ``impl`` inside the block (used by the negative controls)."""
    before = _FOLLOWED[0]
    _FOLLOWED[0] = impl
    try:
        yield impl
    finally:
        _FOLLOWED[0] = before


def followed():
    return _FOLLOWED[0]


@pytest.fixture(autouse=True)
def follow_implementation(request):
    """Autouse: for tests that take ``impl``, the strategies draw in its dtype, shapes and variants — during
    that test only (a later test without ``impl`` in the same process draws float64 and free shapes again).
    A test marked with :func:`needs_variant` that the implementation does not support is skipped here as
    "not applicable (variant …)", before any example is drawn."""
    if "impl" in request.fixturenames:
        impl = request.getfixturevalue("impl")
        for key, value in _needed_variants(getattr(request, "function", None)).items():
            if not supports(impl, key, value):
                pytest.skip(unsupported_message(impl, key, value))
        with following(impl):
            yield
    else:
        yield


# ---------------------------------------------------------------------------------------------
# Declared variants (attnclaims.protocol.VARIANTS)
# ---------------------------------------------------------------------------------------------

#: What a check that needs an undeclared variant raises: pytest's skip, with the message ``not applicable
#: (variant norm_first=True): bert declares norm_first=(False,)`` — hypothesis re-raises it at once (from a
#: strategy or a test body), pytest reports a skip, and the plugin records "not applicable" with the message.
VariantNotApplicable = pytest.skip.Exception


def not_applicable(message: str):
    """Stop the running check as not applicable with ``message`` (a pytest skip: see VariantNotApplicable);
    while hypothesis draws or runs an example, the example is declined instead (counted and rejected,
    :mod:`attnclaims.declines`), so the examples the implementation supports still run."""
    from attnclaims import declines

    declines.decline(message)
    pytest.skip(message)


_NEEDS_ATTR = "attnclaims_variants"


def needs_variant(**required):
    """Decorator: the test needs these variants (``@needs_variant(cross_attention=True)``); an implementation
    that does not support one is "not applicable (variant …)" for it, before any example is drawn (the
    wrapper reads the ``impl`` argument). Put it directly above ``@given``."""
    for key in required:
        if key not in VARIANTS:
            raise ValueError(f"needs_variant({key}=...): unknown variant; known: {', '.join(VARIANTS)}")

    def mark(fn):
        @functools.wraps(fn)  # keeps the signature pytest reads and hypothesis' attributes
        def checked(*args, **kwargs):
            impl = kwargs.get("impl")
            if impl is not None:  # pytest passes fixtures by keyword
                for key, value in required.items():
                    if not supports(impl, key, value):
                        not_applicable(unsupported_message(impl, key, value))
            return fn(*args, **kwargs)

        setattr(checked, _NEEDS_ATTR, {**getattr(fn, _NEEDS_ATTR, {}), **required})
        return checked
    return mark


def _needed_variants(fn) -> dict:
    inner = getattr(getattr(fn, "hypothesis", None), "inner_test", None)
    return {**getattr(inner, _NEEDS_ATTR, {}), **getattr(fn, _NEEDS_ATTR, {})}


def variants() -> dict[str, Any]:
    """The followed implementation's declared variants (every key; defaults outside a test)."""
    impl = _FOLLOWED[0]
    return declared_variants(impl) if impl is not None else {k: v.default for k, v in VARIANTS.items()}


def require_variant(key: str, value: Any) -> None:
    """Raise :class:`VariantNotApplicable` unless the followed implementation supports ``value`` of ``key``."""
    impl = _FOLLOWED[0]
    if impl is not None and not supports(impl, key, value):
        not_applicable(unsupported_message(impl, key, value))


def norm_firsts() -> st.SearchStrategy[bool]:
    """The layer-norm placements the followed implementation supports (False = Post-LN, True = Pre-LN)."""
    supported = tuple(variants()["norm_first"])
    return st.booleans() if len(supported) == 2 else st.just(supported[0])


def cross_or_self() -> st.SearchStrategy[bool]:
    """True (cross-attention: x_kv is another sequence) or False (self-attention: x_kv is x_q) — only
    False for an implementation that declares ``cross_attention=False``."""
    return st.booleans() if variants()["cross_attention"] else st.just(False)


#: The explicit ``scale`` arguments the attention tests pass (docs/adapters.md): the default 1/√d_k's
#: neighbours, 0 (uniform weights), −1 (reversed preferences), 10⁶, and the huge and tiny 10³⁰⁰ and
#: 10⁻³⁰⁰ (clamped to the dtype's range by :meth:`AttentionCase.cast`).
EXPLICIT_SCALES = (1.0, 0.5, 0.125, 2.0, -1.0, 0.0, 1e6, 1e300, 1e-300)


def explicit_scales() -> st.SearchStrategy[float]:
    """One of :data:`EXPLICIT_SCALES`; only the positive ones for an implementation that declares
    ``scale='positive'``."""
    values = EXPLICIT_SCALES if variants()["scale"] == "any" else tuple(s for s in EXPLICIT_SCALES if s > 0)
    return st.sampled_from(values)


# ---------------------------------------------------------------------------------------------
# Dtypes and subnormal numbers
# ---------------------------------------------------------------------------------------------

def finfo(dtype):
    """``numpy.finfo`` that also knows ml_dtypes' bfloat16 (and other ml_dtypes floats)."""
    dtype = np.dtype(dtype)
    try:
        return np.finfo(dtype)
    except ValueError:
        import ml_dtypes

        return ml_dtypes.finfo(dtype)


def flush_subnormals(a):
    """``a`` with every subnormal entry (0 < |x| < the dtype's smallest normal) set to 0 (same sign
    as the entry), in its own dtype; other arrays (bool, int) and non-arrays unchanged. Parameter
    dataclasses (nested ones too) get the same treatment field by field."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        changes = {f.name: flush_subnormals(getattr(a, f.name)) for f in fields(a)}
        return replace(a, **{k: v for k, v in changes.items() if v is not getattr(a, k)})
    if not isinstance(a, np.ndarray) or a.dtype.kind not in "fV" or a.dtype == np.bool_:
        return a
    try:
        tiny = float(finfo(a.dtype).smallest_normal)
    except (ValueError, TypeError):  # not a float dtype
        return a
    mag = np.abs(a.astype(np.float64))
    sub = (mag > 0) & (mag < tiny)
    if not sub.any():
        return a
    out = a.copy()
    out[sub] = np.copysign(0.0, a[sub].astype(np.float64)).astype(a.dtype)
    return out


def _dtype() -> np.dtype:
    impl = _FOLLOWED[0]
    return np.dtype(getattr(impl, "dtype", np.float64)) if impl is not None else np.dtype(np.float64)


def _raw(impl):
    return getattr(impl, "impl", impl)  # the object behind a GuardedImplementation


#: Longest sequence the tests of whole layers (encoder, decoder) draw, whatever the profile: their
#: structure does not depend on the length, long sequences are exercised where they matter (attention,
#: softmax, positional encodings, up to the profile's ``max_seq``/``long_seq``), and a layer's derived
#: error bound at n = 320 costs seconds per example.
LAYER_MAX_SEQ = 64

#: The built-in shape menu for ``fixed_shapes = True`` (d_v = d_k, num_heads divides d_model). Users
#: build compiled implementations for these shapes: docs/adapters.md publishes them ("What the tests
#: feed your implementation"), and tests/spec/test_documented_inputs.py keeps the two in agreement.
FIXED_SHAPES: tuple[dict, ...] = (
    dict(batch=(2,), n_q=5, n_k=7, d_k=4, d_v=4, d_model=8, num_heads=2, d_ff=16),
    dict(batch=(1,), n_q=1, n_k=3, d_k=2, d_v=2, d_model=4, num_heads=1, d_ff=8),
    dict(batch=(3,), n_q=6, n_k=6, d_k=8, d_v=8, d_model=12, num_heads=3, d_ff=24),
)


def _shape_menu() -> tuple[dict, ...] | None:
    raw = _raw(_FOLLOWED[0])
    if raw is None:
        return None
    menu = getattr(raw, "preferred_shapes", None)
    if menu:
        return tuple(dict(FIXED_SHAPES[0], **dict(m)) for m in menu)
    if getattr(raw, "fixed_shapes", False):
        return FIXED_SHAPES
    return None


def cast(a, dtype=None):
    """``a`` as an array of the followed implementation's dtype (or ``dtype``); bools and None unchanged."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a
    with np.errstate(over="ignore"):  # beyond the dtype's range: ±inf, which the tests that cast examples check
        return a.astype(dtype or _dtype())


# ---------------------------------------------------------------------------------------------
# Dimensions
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dims:
    """Sizes of one case. ``batch`` are the leading axes; n_q/n_k the query/key (target/memory) lengths;
    d_k/d_v the attention widths; d_model = num_heads · (d_model / num_heads); d_ff the FFN width."""

    batch: tuple[int, ...]
    n_q: int
    n_k: int
    d_k: int
    d_v: int
    d_model: int
    num_heads: int
    d_ff: int

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads


#: Upper end of the short branch of :func:`seq_lengths`: a counterexample of up to 8 positions
#: shrinks fast and stays readable by hand (docs/adapters.md).
SHORT_SEQ = 8


def seq_lengths(min_value: int = 1, max_value: int | None = None) -> st.SearchStrategy[int]:
    """Sequence lengths: the mixture ``integers(min, SHORT_SEQ) | integers(min, max_seq)`` — short
    lengths (≤ :data:`SHORT_SEQ`, where shrinking is fast) and lengths up to the profile's ``max_seq``
    (320 in ``thorough``); the short branch is widened to ``min_value`` and capped by ``max_value``."""
    top = limits().max_seq if max_value is None else max_value
    top = max(top, min_value)
    return st.integers(min_value, min(top, max(SHORT_SEQ, min_value))) | st.integers(min_value, top)


def batch_shapes(min_ndim: int = 0, max_ndim: int = 2, max_size: int | None = None) -> st.SearchStrategy:
    top = limits().max_batch if max_size is None else max_size
    return st.lists(st.integers(1, top), min_size=min_ndim, max_size=max_ndim).map(tuple)


@st.composite
def dims(draw, *, min_seq: int = 1, max_seq: int | None = None, square: bool = False, batch_ndim=(0, 2),
         max_dim: int | None = None, min_d_k: int = 1, max_heads: int = 4, min_d_model: int = 1,
         even_d_model: bool = False, min_heads: int = 1) -> Dims:
    """Dimensions first (docs/design.md, "How we write"): batch axes (``batch_ndim`` = (min, max) count), n_q, n_k (= n_q when
    ``square``), d_k, d_v (independent, so d_v ≠ d_k is common), num_heads (min(min_heads, top) … top,
    top = min(max_heads, max_dim)) dividing d_model ≤ max_dim, d_ff in 1 … 2·max_dim. From the
    implementation's shape menu when it declares one (module docstring)."""
    lim = limits()
    top_dim = lim.max_dim if max_dim is None else max_dim
    menu = _shape_menu()
    if menu is not None:
        entry = dict(draw(st.sampled_from(menu)))
        n_q, n_k = max(entry["n_q"], min_seq), max(entry["n_k"], min_seq)
        batch = tuple(entry["batch"])[: batch_ndim[1]]
        batch = batch + (1,) * max(0, batch_ndim[0] - len(batch))
        d_model = entry["d_model"] + (entry["d_model"] % 2 if even_d_model else 0)
        d_model = max(d_model, min_d_model + (min_d_model % 2 if even_d_model else 0))
        heads = entry["num_heads"] if d_model % entry["num_heads"] == 0 else 1
        if variants()["head_dim"] == "even" and (d_model // heads) % 2:
            d_model += heads  # one more column per head: d_model / heads becomes even
        return Dims(batch=batch, n_q=n_q, n_k=n_q if square else n_k, d_k=max(entry["d_k"], min_d_k),
                    d_v=entry["d_v"], d_model=d_model, num_heads=heads, d_ff=entry["d_ff"])
    batch = draw(batch_shapes(batch_ndim[0], batch_ndim[1]))
    n_q = draw(seq_lengths(min_seq, max_seq))
    n_k = n_q if square else draw(seq_lengths(min_seq, max_seq))
    d_k = draw(st.integers(min_d_k, max(top_dim, min_d_k)))
    d_v = draw(st.integers(1, top_dim))
    top_heads = max(1, min(max_heads, top_dim))  # at most max_dim heads: d_model ≤ max_dim
    num_heads = draw(st.integers(max(1, min(min_heads, top_heads)), top_heads))
    d_head = draw(st.integers(1, max(1, top_dim // num_heads)))
    if variants()["head_dim"] == "even" and d_head % 2:  # declared: even head dimensions only
        d_head += 1 if d_head == 1 or num_heads * (d_head + 1) <= top_dim else -1
    if even_d_model and (num_heads * d_head) % 2:  # both odd: an even d_head makes d_model even (one up, or one
        d_head += 1 if d_head == 1 or num_heads * (d_head + 1) <= top_dim else -1  # down not to pass max_dim)
    while num_heads * d_head < min_d_model:
        d_head += 2 if (even_d_model and num_heads % 2) or variants()["head_dim"] == "even" else 1
    d_model = num_heads * d_head
    d_ff = draw(st.integers(1, 2 * top_dim))
    return Dims(batch=batch, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v, d_model=d_model, num_heads=num_heads, d_ff=d_ff)


# ---------------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------------

#: Arrays with at most this many entries are drawn entry by entry by hypothesis (so it can shrink
#: them towards 0 and find ties); larger ones from a drawn seed (numpy uniform), which keeps
#: hypothesis' buffer small for the ``thorough`` profile's long sequences.
ELEMENTWISE_LIMIT = 256


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``np.random.default_rng``: any 32-bit unsigned integer, 0 … 2³² − 1."""
    return st.integers(0, 2**32 - 1)


def scales(low: int = -3, high: int = 3) -> st.SearchStrategy[float]:
    """Powers of two 2^low … 2^high: scaling by them is exact in every binary dtype."""
    return st.integers(low, high).map(lambda e: 2.0 ** e)


def _unit_floats(dtype) -> st.SearchStrategy[float]:
    """Entries of U[−1, 1] for entry-by-entry draws, representable in ``dtype``'s width and never
    subnormal: backends that flush subnormals to zero (XLA on CPU, most GPU kernels) differ on them by
    the smallest normal number — a convention of the hardware, not an error the claims are about."""
    size = np.dtype(dtype).itemsize
    width = 16 if size <= 2 and np.dtype(dtype) == np.float16 else 32 if size <= 4 else 64
    return st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False, allow_subnormal=False, width=width)


@st.composite
def arrays(draw, shape, *, scale: float = 1.0, offset: float = 0.0, dtype=None) -> np.ndarray:
    """Bounded, finite arrays: entries offset + scale·U[−1, 1], in the followed dtype. Entry by entry
    through hypothesis up to :data:`ELEMENTWISE_LIMIT` entries, else from a drawn seed."""
    dtype = np.dtype(dtype or _dtype())
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    if size <= ELEMENTWISE_LIMIT:
        base = draw(hnp.arrays(np.float64, shape, elements=_unit_floats(dtype)))
    else:
        base = np.random.default_rng(draw(seeds())).uniform(-1.0, 1.0, size=shape)
    return flush_subnormals((offset + scale * base).astype(dtype))


@st.composite
def random_arrays(draw, shape, *, scale: float = 1.0, dtype=None) -> np.ndarray:
    """Generic (seeded normal) arrays: no ties, no zero rows, for tests that need a generic input
    (e.g. "the output depends on every input"). Scale as in :func:`arrays`."""
    dtype = np.dtype(dtype or _dtype())
    seed = draw(seeds())
    note(f"random_arrays seed={seed}")
    return flush_subnormals((scale * np.random.default_rng(seed).standard_normal(tuple(shape))).astype(dtype))


# ---------------------------------------------------------------------------------------------
# Masks (bool, True = may attend; every query keeps at least one key)
# ---------------------------------------------------------------------------------------------

@st.composite
def masks(draw, shape) -> np.ndarray:
    """Random masks of ``shape`` (…, n_q, n_k) with at least one allowed key in every row. Up to
    4·ELEMENTWISE_LIMIT (1024) entries drawn entry by entry by hypothesis, so a failing mask shrinks to
    the fewest masked entries; larger ones from a drawn seed with density 0.1, 0.5 or 0.9 (a bool
    takes far less of hypothesis' buffer than a float, hence a larger limit than for arrays)."""
    shape = tuple(shape)
    size = math.prod(shape)
    if size <= 4 * ELEMENTWISE_LIMIT:
        m = draw(hnp.arrays(np.bool_, shape))
    else:
        m = np.random.default_rng(draw(seeds())).random(shape) < draw(st.sampled_from([0.1, 0.5, 0.9]))
    keep = draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(0, shape[-1] - 1)))
    rows = ~m.any(axis=-1)
    m = m.copy()
    np.put_along_axis(m, keep[..., None], np.take_along_axis(m, keep[..., None], axis=-1) | rows[..., None], axis=-1)
    return m


@st.composite
def mask_forms(draw, batch: tuple[int, ...], n_q: int, n_k: int) -> np.ndarray:
    """A mask in one of the broadcastable forms the protocol allows: (n_q, n_k), (1, …, n_q, n_k),
    the full (batch…, n_q, n_k), or a per-sequence key mask (batch…, 1, n_k)."""
    forms = [(n_q, n_k), batch + (n_q, n_k), batch + (1, n_k)]
    if batch:
        forms.append((1,) * len(batch) + (n_q, n_k))
    shape = draw(st.sampled_from(forms))
    return draw(masks(shape))


def causal_masks(n_q: int, n_k: int | None = None) -> np.ndarray:
    """M_ij = (j ≤ i), top-left aligned (query i sees keys 0 … i); every row keeps key 0."""
    n_k = n_q if n_k is None else n_k
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]


@st.composite
def single_key_masks(draw, shape) -> np.ndarray:
    """Exactly one allowed key per query (the one-hot case of convex-combination)."""
    shape = tuple(shape)
    keep = draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(0, shape[-1] - 1)))
    return np.arange(shape[-1]) == keep[..., None]


@st.composite
def padding_masks(draw, batch: int, n_k: int) -> np.ndarray:
    """Key-padding masks (batch, 1, n_k): sequence b has lengths[b] ≥ 1 real keys, then padding."""
    lengths = np.asarray(draw(st.lists(st.integers(1, n_k), min_size=batch, max_size=batch)))
    return (np.arange(n_k)[None, :] < lengths[:, None])[:, None, :]


def permutations(n: int) -> st.SearchStrategy[np.ndarray]:
    return st.permutations(list(range(n))).map(lambda p: np.asarray(p, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# Parameter sets (seeded Glorot/Xavier weights in the paper's layout, in the followed dtype)
# ---------------------------------------------------------------------------------------------

@st.composite
def epsilons(draw) -> float:
    """Layer-norm ε: torch's 1e-5, flax's 1e-6, and values that matter (0.1) or nearly don't (1e-12) — those
    whose 1/√ε (a constant row's scale, and its Jacobian's size) the followed dtype can hold: float16
    (max 65504) does not get 1e-12. Decided when drawn (``@given(eps=epsilons())`` is built at import,
    before any implementation is followed)."""
    top = float(finfo(_dtype()).max) / 16.0
    return draw(st.sampled_from([e for e in (1e-5, 1e-6, 1e-12, 0.1) if e ** -0.5 <= top]))


@st.composite
def multi_head_params(draw, d_model: int, num_heads: int, *, bias_scale: float | None = None) -> MultiHeadParams:
    """Seeded Xavier weights; biases U[−b, b] with b drawn from 0.1, 0 (no bias) and 0.5 unless ``bias_scale``
    is given. The note carries the seed and sizes (``init_multi_head`` rebuilds the draw)."""
    seed = draw(seeds())
    b = draw(st.sampled_from([0.1, 0.0, 0.5])) if bias_scale is None else bias_scale
    note(f"multi_head_params(seed={seed}, d_model={d_model}, num_heads={num_heads}, bias_scale={b})")
    if d_model % num_heads == 0:
        require_variant("head_dim", d_model // num_heads)
    return flush_subnormals(init_multi_head(seed, d_model, num_heads, bias_scale=b, dtype=_dtype()))


@st.composite
def feed_forward_params(draw, d_model: int, d_ff: int) -> FeedForwardParams:
    seed = draw(seeds())
    note(f"feed_forward_params(seed={seed}, d_model={d_model}, d_ff={d_ff})")
    return flush_subnormals(init_feed_forward(seed, d_model, d_ff, dtype=_dtype()))


@st.composite
def layer_norm_params(draw, d_model: int) -> LayerNormParams:
    """γ = 1, β = 0 (the usual initialisation), or both perturbed so that γ and β can be told apart."""
    spread = draw(st.sampled_from([0.5, 0.0]))
    return flush_subnormals(init_layer_norm(d_model, draw(seeds()), spread=spread, dtype=_dtype()))


@st.composite
def encoder_layer_params(draw, d_model: int, num_heads: int, d_ff: int, *, norm_first=None) -> EncoderLayerParams:
    """Post-LN or Pre-LN (drawn among the implementation's declared ``norm_first`` unless given; a given one
    it does not support raises :class:`VariantNotApplicable`), norm parameters perturbed (spread 0.3) so
    that a layer that reuses norm1 for norm2 shows, ε drawn (1e-5 or 1e-6)."""
    return _layer_params(draw, init_encoder_layer, "encoder_layer_params", d_model, num_heads, d_ff, norm_first)


@st.composite
def decoder_layer_params(draw, d_model: int, num_heads: int, d_ff: int, *, norm_first=None) -> DecoderLayerParams:
    """As :func:`encoder_layer_params`, for the decoder layer (its cross-attention and third norm included)."""
    return _layer_params(draw, init_decoder_layer, "decoder_layer_params", d_model, num_heads, d_ff, norm_first)


def _layer_params(draw, init, what: str, d_model: int, num_heads: int, d_ff: int, norm_first):
    """The layer-parameter draw of both layers, in this order: a seed, the placement (the declared ones unless
    given, then checked against the declaration), ε; ``init`` is init_encoder_layer or init_decoder_layer."""
    seed = draw(seeds())
    nf = draw(norm_firsts()) if norm_first is None else norm_first
    require_variant("norm_first", nf)
    require_variant("head_dim", d_model // num_heads)
    eps = draw(st.sampled_from([1e-5, 1e-6]))
    note(f"{what}(seed={seed}, d_model={d_model}, num_heads={num_heads}, d_ff={d_ff}, norm_first={nf}, eps={eps})")
    return flush_subnormals(init(seed, d_model, num_heads, d_ff, norm_first=nf, eps=eps, norm_spread=0.3,
                                 dtype=_dtype()))


# ---------------------------------------------------------------------------------------------
# Cases: dimensions, arrays and masks bundled
# ---------------------------------------------------------------------------------------------

def _cast_fields(obj, dtype):
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray) and value.dtype != np.bool_:
            changes[f.name] = flush_subnormals(value.astype(dtype))
    return replace(obj, **changes)


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
    qk = draw(scales(-4, 1)) if score_scale is None else score_scale
    q = draw(arrays(d.batch + (d.n_q, d.d_k), scale=qk))
    kb = draw(st.sampled_from([d.batch, d.batch[1:], ()])) if d.batch else ()
    k = draw(arrays(kb + (d.n_k, d.d_k), scale=qk))
    v = draw(arrays(d.batch + (d.n_k, d.d_v), scale=draw(scales(-2, 2))))
    m = None
    if mask or (mask is None and draw(st.booleans())):
        m = draw(mask_forms(d.batch, d.n_q, d.n_k))
    s = None
    if explicit_scale or (explicit_scale is None and draw(st.booleans())):
        s = draw(explicit_scales())
    case = AttentionCase(q, k, v, m, s)
    note(case.describe())
    return case


@dataclass(frozen=True)
class ModelCase:
    """x (batch, n_q, d_model) and memory (batch, n_k, d_model) inputs with their dims."""

    x: np.ndarray
    memory: np.ndarray
    dims: Dims

    def cast(self, dtype) -> "ModelCase":
        return replace(self, x=flush_subnormals(self.x.astype(dtype)), memory=flush_subnormals(self.memory.astype(dtype)))


@st.composite
def model_cases(draw, *, min_seq: int = 1, max_seq: int | None = None, square: bool = False, scale=None,
                max_dim: int | None = None, max_heads: int = 4, generic: bool = False,
                min_d_model: int = 1, min_heads: int = 1) -> ModelCase:
    """Inputs of the layers: one batch axis (the protocol's (batch, n, d_model)), x and a memory of
    drawn lengths; entries U[−1, 1]·2^e (or seeded normal when ``generic``). Tests of "the output depends
    on …" after a layer norm need ``min_d_model=3``: LN of one feature is constant, of two is ±1."""
    d = draw(dims(min_seq=min_seq, max_seq=max_seq, square=square, batch_ndim=(1, 1), max_dim=max_dim,
                  max_heads=max_heads, min_d_model=min_d_model, min_heads=min_heads))
    s = draw(scales(-1, 1)) if scale is None else scale
    make = random_arrays if generic else arrays
    x = draw(make(d.batch + (d.n_q, d.d_model), scale=s))
    memory = draw(make(d.batch + (d.n_k, d.d_model), scale=s))
    note(f"model case: batch={d.batch}, n_q={d.n_q}, n_k={d.n_k}, d_model={d.d_model}, heads={d.num_heads}, "
         f"d_ff={d.d_ff}, scale={s}")
    return ModelCase(x, memory, d)


@st.composite
def layer_norm_inputs(draw, *, max_seq: int | None = None) -> np.ndarray:
    """Rows x = μ + σ·U[−1, 1] with σ from 1e-4 (where ε = 1e-5 matters: σ² ~ ε) to 16 (σ ∈ {1, 1e-2, 3e-3,
    1e-4, 16}) and an offset μ = r·σ up to 10⁶·σ (r ∈ {0, 1, 10², 10⁴, 10⁶}; where the one-pass variance
    E[x²] − μ² cancels catastrophically). The note gives the shape, σ and r."""
    batch = draw(batch_shapes(0, 2))
    n = draw(seq_lengths(1, max_seq))
    d = draw(st.integers(1, limits().max_dim))
    sigma = draw(st.sampled_from([1.0, 1e-2, 3e-3, 1e-4, 16.0]))
    top = float(finfo(_dtype()).max) / 16.0  # float16 (max 65504) cannot hold 1e6: only the offsets it can
    ratio = draw(st.sampled_from([r for r in (0.0, 0.0, 1.0, 1e2, 1e4, 1e6) if r * sigma + sigma <= top]))
    x = draw(arrays(batch + (n, d), scale=sigma, offset=ratio * sigma))
    note(f"layer_norm_inputs: shape={x.shape}, sigma={sigma}, offset={ratio}·sigma")
    return x


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


@st.composite
def softmax_inputs(draw, *, huge: bool = False, max_len: int | None = None, low: int = -4, high: int = 6,
                   min_len: int = 1):
    """(x, axis): x of 1–3 axes, entries U[−1, 1]·2^e (e in [low, high]) or, when ``huge``, ±(0.5…1)·M with
    M = 1e300 (float64; for float32 the largest power of ten below max/16), and an axis that is often not
    the last one. The softmax axis has :func:`seq_lengths` entries, or uniformly min_len … max_len of them
    when ``min_len`` > 1 (long rows, whatever the profile)."""
    batch = list(draw(batch_shapes(0, 2)))
    n = draw(seq_lengths(1, max_len) if min_len <= 1 else st.integers(min_len, max(min_len, max_len or 0)))
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
