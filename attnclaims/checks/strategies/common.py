"""What every strategy module of the package shares: following the implementation under test, its
declared variants, dtypes and subnormal numbers, the sizes (:func:`dims`, the shape menu), arrays of a
controlled scale, seeds, permutations and the inputs of the layers (:func:`model_cases`).

Following the implementation under test
---------------------------------------
Strategies draw arrays in the dtype of the implementation under test, and can
restrict shapes for implementations that compile per shape. They learn the
implementation from :func:`following`, which the plugin's autouse fixture
``follow_implementation`` (``attnclaims/plugin.py``) enters for every test that takes the ``impl``
fixture. Outside a test they draw float64 and free shapes.

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
even head dimensions (``head_dim``), positive explicit scales (``scale``), and the variants of the
component modules (grouped-query heads, RoPE layouts, causal alignments and windows, decoder
blocks). A test that needs a variant the implementation does not support says so with
:func:`needs_variant` (checked before the test runs: "not applicable (variant …)"), and a strategy
asked for an unsupported variant stops the check the same way (:func:`require_variant`, a pytest
skip with that message).

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

__all__ = [
    "follow", "following", "followed", "FIXED_SHAPES", "LAYER_MAX_SEQ", "ELEMENTWISE_LIMIT", "SHORT_SEQ",
    "Dims", "dims", "seq_lengths", "batch_shapes", "scales", "arrays", "random_arrays", "permutations", "seeds",
    "ModelCase", "model_cases", "cast", "variants", "require_variant", "needs_variant", "VariantNotApplicable",
    "norm_firsts", "cross_or_self", "flush_subnormals", "finfo", "not_applicable",
    "DEFAULT_TILE_SIZES", "TILE_PRIME_LENGTHS", "TILE_HEAD_WIDTHS", "TILE_ODDS", "tile_sizes", "tile_lengths",
    "tile_crossing", "with_biases", "zero_biases", "fixed_eps", "TILE_SHARE", "tile_mode", "tile_decision",
    "tile_examples", "crosses_tiles", "crossing_now", "tile_crossings_drawn", "TILE_MAX_EXAMPLES", "reused",
]

def reused(composite):
    """One strategy object per argument tuple of a strategy function (an ``st.composite`` one, or any that
    builds its strategy from its arguments alone): hypothesis validates every new strategy object at its first
    draw, and a case strategy that builds its inner strategies afresh at every example (``arrays(shape)``,
    ``dims(...)``) spent about a fifth of a run's CPU time there (bench/README.md, "Where a check's time
    goes"). The draws are the same: an ``st.composite`` body runs at each draw, never at construction, so the
    object holds only the arguments. Unhashable arguments (arrays, lists) get a new object, as before."""
    cached = functools.lru_cache(maxsize=4096)(composite)

    @functools.wraps(composite)
    def strategy(*args, **kwargs):
        try:
            return cached(*args, **kwargs)
        except TypeError:  # an unhashable argument: no cache entry (lru_cache hashes before it calls)
            return composite(*args, **kwargs)

    return strategy


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

        return checked
    return mark


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


def _not_applicable(key: str, value) -> Exception:
    """Stop as "not applicable (variant key=value)" for the followed implementation (it raises); outside a
    test, where the defaults stand in for an implementation, the ValueError returned for the caller to raise."""
    require_variant(key, value)
    return ValueError(f"variant {key}={value!r} is not among the defaults {variants()[key]!r}")



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


#: the fields that are biases: every projection's (b_q … b_o, b1, b2, b_gate, b_up, b_down) and LayerNorm's beta
def _is_bias(name: str) -> bool:
    return name in ("b1", "b2", "beta") or name.startswith("b_")


def zero_biases(a):
    """``a`` (a parameter dataclass, nested ones too) with every bias and LayerNorm beta set to exactly 0, in
    its own dtype: the parameters of bias-free code (declared ``biases=(False,)``)."""
    if not (dataclasses.is_dataclass(a) and not isinstance(a, type)):
        return a
    changes = {}
    for f in fields(a):
        v = getattr(a, f.name)
        if isinstance(v, np.ndarray) and _is_bias(f.name):
            changes[f.name] = np.zeros_like(v)
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes[f.name] = zero_biases(v)
    return replace(a, **changes) if changes else a


@st.composite
def with_biases(draw, params):
    """``params`` as drawn, or with every bias zero (:func:`zero_biases`), per the followed implementation's
    ``biases`` (drawn between the two where it declares both)."""
    have = tuple(variants()["biases"])
    keep = draw(st.sampled_from(have)) if len(have) > 1 else have[0]
    if keep:
        return params
    note("biases: all zero (the implementation declares bias-free projections and norms)")
    return zero_biases(params)


def fixed_eps() -> float | None:
    """The ε the followed implementation's norms use whatever they are passed (``fixed_eps``), or None."""
    return variants()["fixed_eps"]


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
    return _seq_lengths(int(min_value), int(max(top, min_value)))


@reused
def _seq_lengths(min_value: int, top: int) -> st.SearchStrategy[int]:
    return st.integers(min_value, min(top, max(SHORT_SEQ, min_value))) | st.integers(min_value, top)


def batch_shapes(min_ndim: int = 0, max_ndim: int = 2, max_size: int | None = None) -> st.SearchStrategy:
    top = limits().max_batch if max_size is None else max_size
    return _batch_shapes(int(min_ndim), int(max_ndim), int(top))


@reused
def _batch_shapes(min_ndim: int, max_ndim: int, top: int) -> st.SearchStrategy:
    return st.lists(st.integers(1, top), min_size=min_ndim, max_size=max_ndim).map(tuple)


@reused
@st.composite
def dims(draw, *, min_seq: int = 1, max_seq: int | None = None, square: bool = False, batch_ndim=(0, 2),
         max_dim: int | None = None, min_d_k: int = 1, max_heads: int = 4, min_d_model: int = 1,
         even_d_model: bool = False, min_heads: int = 1) -> Dims:
    """Dimensions first (docs/design.md, "How we write"): batch axes (``batch_ndim`` = (min, max) count), n_q, n_k (= n_q when
    ``square``), d_k, d_v (independent, so d_v ≠ d_k is common; d_v = d_k where ``value_width='d_k'`` is
    declared), num_heads (min(min_heads, top) … top,
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
        d_k = max(entry["d_k"], min_d_k)
        return Dims(batch=batch, n_q=n_q, n_k=n_q if square else n_k, d_k=d_k,
                    d_v=d_k if variants()["value_width"] == "d_k" else entry["d_v"], d_model=d_model, num_heads=heads, d_ff=entry["d_ff"])
    batch = draw(batch_shapes(batch_ndim[0], batch_ndim[1]))
    n_q = draw(seq_lengths(min_seq, max_seq))
    n_k = n_q if square else draw(seq_lengths(min_seq, max_seq))
    d_k = draw(st.integers(min_d_k, max(top_dim, min_d_k)))
    d_v = d_k if variants()["value_width"] == "d_k" else draw(st.integers(1, top_dim))  # declared d_v = d_k
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


# ---------------------------------------------------------------------------------------------
# Sizes that cross tiles (attention-level cases; docs/adapters.md, "Tile sizes")
# ---------------------------------------------------------------------------------------------

#: The tile sizes the attention-level strategies cross when the followed implementation declares none; an
#: implementation declares its kernel's blocks with the attribute ``tile_sizes`` (e.g. ``(64,)``).
DEFAULT_TILE_SIZES = (16, 32, 64, 128)
#: Sequence lengths no power-of-two tile divides (FlashAttention's 113, aotriton's primes 157 and 257), drawn
#: with the default tiles.
TILE_PRIME_LENGTHS = (113, 157, 257)
#: Head widths drawn with tile-crossing lengths: primes and widths just above powers of two.
TILE_HEAD_WIDTHS = (7, 23, 37, 17, 64)
#: Outside a test marked :func:`crosses_tiles` (the bench's draws, the packed-sequence strategies), one
#: draw in TILE_ODDS crosses tiles — if hypothesis drew the decision uniformly, which inside a larger
#: composite strategy it does not (bench/README.md, section 7): the marked tests do not rely on it.
TILE_ODDS = 20
#: A test marked :func:`crosses_tiles` runs one example in TILE_SHARE (rounded; at least one, at most
#: TILE_MAX_EXAMPLES) at sizes that cross tiles: 1 of ``dev``'s 20 examples, 3 of ``ci``'s 50, 10 of
#: ``thorough``'s 400 (whose own lengths, up to 320, cross tiles in some draws as well).
TILE_SHARE = 16
TILE_MAX_EXAMPLES = 10
#: The longest tile-crossing length, unless a declared tile is longer.
MAX_TILE_LENGTH = 257

#: How :func:`tile_crossing` decides: "draw" (one draw in TILE_ODDS), "always" or "never" (the two runs of a
#: test marked :func:`crosses_tiles`).
_TILE_MODE: list[str] = ["draw"]
#: Tile-crossing cases drawn in this process (bench/bench_sizes.py counts them per test).
_TILE_COUNT: list[int] = [0]


def tile_sizes() -> tuple[int, ...]:
    """The followed implementation's declared ``tile_sizes``, else :data:`DEFAULT_TILE_SIZES`."""
    impl = _FOLLOWED[0]
    declared = getattr(_raw(impl), "tile_sizes", None) if impl is not None else None
    return tuple(sorted({int(t) for t in declared if int(t) > 0})) if declared else DEFAULT_TILE_SIZES


def tile_lengths() -> tuple[int, ...]:
    """Lengths around each tile size T: T − 1, T, T + 1 and 2T + r (r = max(1, T // 3)), with
    :data:`TILE_PRIME_LENGTHS` when no tile is declared; at most :data:`MAX_TILE_LENGTH` (or the longest tile
    + 1)."""
    tiles = tile_sizes()
    top = max(MAX_TILE_LENGTH, max(tiles) + 1)
    out = {n for t in tiles for n in (t - 1, t, t + 1, 2 * t + max(1, t // 3)) if 1 <= n <= top}
    if tiles == DEFAULT_TILE_SIZES:
        out.update(TILE_PRIME_LENGTHS)
    return tuple(sorted(out))


@contextlib.contextmanager
def tile_mode(mode: str):
    """``with tile_mode("always"):`` every :func:`tile_crossing` draw inside crosses tiles ("never": none;
    "draw": one in :data:`TILE_ODDS`). Strategies still return no crossing for an implementation with a shape
    menu."""
    if mode not in ("draw", "always", "never"):
        raise ValueError(f"tile_mode({mode!r}): expected 'draw', 'always' or 'never'")
    before = _TILE_MODE[0]
    _TILE_MODE[0] = mode
    try:
        yield
    finally:
        _TILE_MODE[0] = before


def tile_crossings_drawn() -> int:
    """How many tile-crossing cases :func:`tile_crossing` has returned in this process."""
    return _TILE_COUNT[0]


def crossing_now() -> bool:
    """Whether the strategies cross tiles on every draw now (inside a marked test's crossing run)."""
    return _TILE_MODE[0] == "always" and _shape_menu() is None


@reused
@st.composite
def tile_decision(draw) -> bool:
    """True where this draw is to cross tiles: always inside the crossing run of a test marked
    :func:`crosses_tiles`, never in its other run or for an implementation with a shape menu, else one draw in
    :data:`TILE_ODDS`. Counted (:func:`tile_crossings_drawn`) when True."""
    if _shape_menu() is not None:
        return False
    # drawn in every mode, so that the other run of a marked test draws the examples an unmarked test would
    # (the same choices), less the crossing ones
    drawn = draw(st.integers(0, TILE_ODDS - 1))
    mode = _TILE_MODE[0]
    if mode == "never" or (mode == "draw" and drawn != TILE_ODDS - 1):
        return False
    _TILE_COUNT[0] += 1
    return True


@reused
@st.composite
def tile_crossing(draw):
    """None, or (on a :func:`tile_decision`) ``(n_q, n_k, d_k)`` with n_k one of :func:`tile_lengths`, n_q 1
    (decoding against a long cache), 3, or another tile length (n_q ≠ n_k either way), and d_k one of
    :data:`TILE_HEAD_WIDTHS`. Always None for an implementation with a shape menu."""
    if _shape_menu() is not None:
        return None
    drawn = draw(st.integers(0, TILE_ODDS - 1))  # as tile_decision draws it
    mode = _TILE_MODE[0]
    cross = mode == "always" or (mode == "draw" and drawn == TILE_ODDS - 1)
    if not cross and drawn != TILE_ODDS - 1:
        return None
    lengths = tile_lengths()
    n_k = draw(st.sampled_from(lengths))
    n_q = draw(st.sampled_from((1, 3) + lengths))
    d_k = draw(st.sampled_from(TILE_HEAD_WIDTHS))
    if not cross:  # the other run of a marked test: the sizes an unmarked draw would take, left unused
        return None
    _TILE_COUNT[0] += 1
    note(f"tile-crossing sizes: n_q={n_q}, n_k={n_k}, d_k={d_k} (tiles {tile_sizes()})")
    return n_q, n_k, d_k


def tile_examples(max_examples: int) -> int:
    """The examples a marked test runs at sizes that cross tiles: max_examples / :data:`TILE_SHARE`, rounded,
    at least 1 and at most :data:`TILE_MAX_EXAMPLES` (``dev`` 1 of 20, ``ci`` 3 of 50, ``thorough`` 10 of 400),
    never all of them."""
    if max_examples <= 1:
        return 0
    return max(1, min(max_examples - 1, TILE_MAX_EXAMPLES, round(max_examples / TILE_SHARE)))


def _both_runs(earlier_runs: list, stats: dict) -> dict:
    """Hypothesis' statistics of a marked test's crossing run with the first run's generated examples added,
    so that the examples a test reports (``Evidence.examples``) are those of both runs."""
    try:
        for earlier in earlier_runs:
            for phase, more in earlier.items():  # "explicit-phase", "generate-phase", "shrink-phase", …
                if not (phase.endswith("-phase") and isinstance(more, dict)):
                    continue
                if phase not in stats:  # the explicit examples: in the first run only
                    stats[phase] = dict(more)
                    continue
                mine = stats[phase]
                mine["test-cases"] = list(more.get("test-cases", [])) + list(mine.get("test-cases", []))
                mine["duration-seconds"] = mine.get("duration-seconds", 0.0) + more.get("duration-seconds", 0.0)
    except (AttributeError, TypeError):  # another hypothesis' layout: the crossing run's own statistics
        pass
    return stats


def crosses_tiles(test):
    """Decorator, above ``@given`` (and above :func:`needs_variant`): the test runs its examples in two
    hypothesis runs — first all but :func:`tile_examples` of them, the ``@example`` cases included, with no
    draw crossing tiles (``tile_mode("never")``: otherwise the examples an unmarked test draws), then those
    with every :func:`tile_crossing` draw crossing tiles (``"always"``; no ``@example`` cases): under the
    derandomized ``ci`` profile exactly 3 of its 50 examples cross tiles, whatever hypothesis would draw. The
    first failure ends the test, each run shrinks and reports its own counterexample; a crossing run whose
    every draw the implementation declines (hypothesis' ``Unsatisfiable``) leaves the verdict to the first run.
    For an implementation with a shape menu (no crossing at all) the test runs once, as it would unmarked."""
    given_test = test
    while hasattr(given_test, "__wrapped__"):  # through needs_variant & co. to hypothesis' own wrapper
        given_test = given_test.__wrapped__
    if not getattr(given_test, "is_hypothesis_test", False):
        raise TypeError(f"@crosses_tiles goes above @given: {getattr(test, '__name__', test)!r} is not a "
                        "hypothesis test")
    from hypothesis import Phase, settings
    from hypothesis.errors import Unsatisfiable
    from hypothesis.statistics import collector

    @functools.wraps(test)
    def run(*args, **kwargs):
        own = getattr(run, "_hypothesis_internal_use_settings", None) or settings.default
        k = tile_examples(own.max_examples)
        if not k or _shape_menu() is not None:
            with tile_mode("never"):
                return test(*args, **kwargs)
        kept = given_test._hypothesis_internal_use_settings  # what hypothesis reads when the test runs
        report = collector.value  # hypothesis' pytest plugin: the statistics of the test (examples run)
        first: list = []
        try:
            given_test._hypothesis_internal_use_settings = settings(own, max_examples=own.max_examples - k)
            with tile_mode("never"), collector.with_value(first.append if report else None):
                result = test(*args, **kwargs)
            given_test._hypothesis_internal_use_settings = settings(
                own, max_examples=k, phases=tuple(p for p in own.phases if p is not Phase.explicit))
            with tile_mode("always"), collector.with_value((lambda stats: report(_both_runs(first, stats)))
                                                           if report else None):
                try:
                    test(*args, **kwargs)
                except Unsatisfiable:  # every crossing draw declined: the first run decides
                    if report and first:
                        report(first[-1])
            return result
        finally:
            given_test._hypothesis_internal_use_settings = kept

    run.crosses_tiles = True
    return run


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


@reused
@st.composite
def _arrays(draw, shape, scale, offset, dtype) -> np.ndarray:
    dtype = np.dtype(dtype or _dtype())
    size = math.prod(shape)
    if size <= ELEMENTWISE_LIMIT:
        base = draw(_elementwise(shape, dtype))
    else:
        base = np.random.default_rng(draw(seeds())).uniform(-1.0, 1.0, size=shape)
    return flush_subnormals((offset + scale * base).astype(dtype))


@reused
def _elementwise(shape: tuple, dtype: np.dtype) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(np.float64, shape, elements=_unit_floats(dtype))


def arrays(shape, *, scale: float = 1.0, offset: float = 0.0, dtype=None) -> st.SearchStrategy[np.ndarray]:
    """Bounded, finite arrays: entries offset + scale·U[−1, 1], in the followed dtype (resolved at the draw when
    ``dtype`` is None). Entry by entry through hypothesis up to :data:`ELEMENTWISE_LIMIT` entries, else from a
    drawn seed."""
    return _arrays(tuple(int(s) for s in shape), scale, offset, dtype)


@reused
@st.composite
def random_arrays(draw, shape, *, scale: float = 1.0, dtype=None) -> np.ndarray:
    """Generic (seeded normal) arrays: no ties, no zero rows, for tests that need a generic input
    (e.g. "the output depends on every input"). Scale as in :func:`arrays`."""
    dtype = np.dtype(dtype or _dtype())
    seed = draw(seeds())
    note(f"random_arrays seed={seed}")
    return flush_subnormals((scale * np.random.default_rng(seed).standard_normal(tuple(shape))).astype(dtype))


def permutations(n: int) -> st.SearchStrategy[np.ndarray]:
    return st.permutations(list(range(n))).map(lambda p: np.asarray(p, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# Cases shared by the components: the inputs of the layers
# ---------------------------------------------------------------------------------------------

def _cast_fields(obj, dtype):
    changes = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, np.ndarray) and value.dtype != np.bool_:
            changes[f.name] = flush_subnormals(value.astype(dtype))
    return replace(obj, **changes)



@dataclass(frozen=True)
class ModelCase:
    """x (batch, n_q, d_model) and memory (batch, n_k, d_model) inputs with their dims."""

    x: np.ndarray
    memory: np.ndarray
    dims: Dims

    def cast(self, dtype) -> "ModelCase":
        return replace(self, x=flush_subnormals(self.x.astype(dtype)), memory=flush_subnormals(self.memory.astype(dtype)))


@reused
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


