"""``attnclaims smoke --impl pkg.mod:attr``: a few seconds' check that a new adapter is wired up.

Before a full run (a minute or more), this calls every capability the implementation has — the 2017
architecture's, the modern components' (``rms_norm``, ``gated_feed_forward``, ``rotary_embedding``,
``causal_attention``, grouped-query ``multi_head_attention``, ``decoder_block`` and its cached decoding) and
every ``*_vjp`` — once or twice on small fixed inputs in its dtype, within what it declares (``variants``:
self- and cross-attention, each Post-LN/Pre-LN placement, each RoPE layout and causal alignment, the gated
activations of ``block_ffn``, one decoder block of the most modern kind it takes), and compares the result
with the reference within the bound the claim tests use for the same comparison (forward:
``attnclaims/checks/bounds/``, u of the declared dtype plus the
reference's; backward: the derived vjp bounds, or the per-case measured ones of
``attnclaims/checks/bounds/``). Every call is guarded, so an exception, a wrong shape or dtype, NaN or a hang is one line
naming the capability and, where the adapter says so, the library function responsible. A method that
raises ``NotImplementedError`` (or ``NotApplicable``) is ``n/a``, as in the claim suite.

It also makes the calls outside the protocol that an implementation must refuse
(:mod:`attnclaims.checks.contract`: a mask that does not broadcast to the scores, queries and keys of
different widths, heads that do not divide d_model), including the shapes where numpy's broadcasting lets
them through, and prints a ``contract`` line for each one accepted, with the fix.

It prints one line per capability and exits like ``check``: 1 if any check failed (contract findings only
with ``--strict-contract``), 2 for bad arguments or an implementation that cannot be imported or
constructed. Passing here is not a verdict: it only says the claim suite will get as far as the mathematics.

The checks run in a child process under the same rules as ``check``'s (:func:`run`): a call past its limit
is a failed check, and one that never releases the GIL is ended by the guard's watchdog and named; a child
that ends before it says it finished (``os._exit(0)`` in a method, a crash) is a failure naming the last
step, never a success.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np

from attnclaims.evidence import plain_numbers
from attnclaims.protocol import CAPABILITIES, VJP_CAPABILITIES, declared_variants

__all__ = ["SMOKE", "CONTRACT", "smoke", "configure", "run"]

_N_Q, _N_K, _D_MODEL, _HEADS, _D_FF = 3, 5, 8, 2, 12
_WIDTH = max(map(len, CAPABILITIES))  # the capability column of the report lines (multi_head_attention_vjp)


def _inputs(dtype, seed: int, *shapes):
    from attnclaims.checks import strategies as S

    rng = np.random.default_rng(seed)
    return [S.flush_subnormals(rng.uniform(-1.0, 1.0, s).astype(dtype)) for s in shapes]


def _mask(batch=()) -> np.ndarray:
    m = np.ones(batch + (_N_Q, _N_K), dtype=bool)
    m[..., 0, 1:3] = False  # query 0 sees keys 0, 3, 4
    m[..., 2, 0] = False
    return m


def _softmax(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import softmax

    (x,) = _inputs(dt, 1, (2, 3, _N_K))
    x = x * np.asarray(4.0, dtype=dt)
    T.assert_close(g.softmax(x, axis=-1), softmax(x, axis=-1), T.conformance(T.softmax_error, x, -1, dtype=dt),
                   f"softmax(x{x.shape}) vs reference")
    return f"softmax(x{x.shape})"


def _attention(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import attention

    q, k, v = _inputs(dt, 2, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))  # d_v != d_k, a batch axis
    for mask in (None, _mask()):
        T.assert_close(g.attention(q, k, v, mask), attention(q, k, v, mask=mask),
                       T.conformance(T.attention_error, q, k, v, mask, dtype=dt),
                       f"attention(q{q.shape}, k{k.shape}, v{v.shape}, mask={None if mask is None else mask.shape})")
    return "attention with and without a mask, d_v != d_k"


def _mha(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import multi_head_attention
    from attnclaims.reference.params import init_multi_head

    p = init_multi_head(3, _D_MODEL, _HEADS, dtype=dt)
    x, memory = _inputs(dt, 4, (2, _N_Q, _D_MODEL), (2, _N_K, _D_MODEL))
    done = ["self-attention (x_kv is x_q)"]
    calls = [(x, x, None)]
    if declared_variants(g.impl)["cross_attention"]:
        calls.append((x, memory, _mask()))
        done.append("cross-attention with a mask")
    for x_q, x_kv, mask in calls:
        T.assert_close(g.multi_head_attention(x_q, x_kv, p, mask), multi_head_attention(x_q, x_kv, p, mask=mask),
                       T.conformance(T.multi_head_error, x_q, x_kv, p, mask, dtype=dt),
                       f"multi_head_attention(x_q{x_q.shape}, x_kv{x_kv.shape}, heads={_HEADS})")
    if declared_variants(g.impl)["grouped_query"]:  # num_kv_heads < num_heads (attnclaims/suite/test_ext_attention.py's bound)
        from attnclaims.checks import bounds as MT

        gp = init_multi_head(25, _D_MODEL, 4, num_kv_heads=2, dtype=dt)
        x_kv, mask = calls[-1][1:]
        T.assert_close(g.multi_head_attention(x, x_kv, gp, mask), multi_head_attention(x, x_kv, gp, mask=mask),
                       T.conformance(MT.grouped_query_error, x, x_kv, gp, mask, dtype=dt),
                       "multi_head_attention(heads=4, num_kv_heads=2)")
        return ", ".join(done) + f", {_HEADS} heads; grouped-query 4 heads / 2 K/V heads"
    return ", ".join(done) + f", {_HEADS} heads"


def _positional(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference.positional import sinusoidal_encoding

    u = T.unit_roundoff(dt)
    T.assert_close(g.positional_encoding(7, _D_MODEL), sinusoidal_encoding(7, _D_MODEL),
                   T.Bound(T.positional_encoding_error(7, _D_MODEL, u=u), u)
                   + T.Bound(T.positional_encoding_error(7, _D_MODEL, u=T.U64), T.U64),
                   f"positional_encoding(7, {_D_MODEL})")
    return f"positional_encoding(7, {_D_MODEL})"


def _layer_norm(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import layer_norm
    from attnclaims.reference.params import init_layer_norm

    (x,) = _inputs(dt, 5, (2, _N_Q, _D_MODEL))
    n = init_layer_norm(_D_MODEL, 6, spread=0.5, dtype=dt)
    T.assert_close(g.layer_norm(x, n.gamma, n.beta, 1e-5), layer_norm(x, n.gamma, n.beta, 1e-5),
                   T.conformance(T.layer_norm_error, x, n.gamma, n.beta, 1e-5, dtype=dt), "layer_norm")
    return f"layer_norm(x{x.shape}, eps=1e-5)"


def _ffn(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import feed_forward
    from attnclaims.reference.params import init_feed_forward

    (x,) = _inputs(dt, 7, (2, _N_Q, _D_MODEL))
    p = init_feed_forward(8, _D_MODEL, _D_FF, dtype=dt)
    T.assert_close(g.feed_forward(x, p), feed_forward(x, p), T.conformance(T.feed_forward_error, x, p, dtype=dt),
                   "feed_forward")
    return f"feed_forward(x{x.shape}, d_ff={_D_FF})"


def _placements(g):
    return declared_variants(g.impl)["norm_first"]


def _encoder(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import encoder_layer
    from attnclaims.reference.params import init_encoder_layer

    (x,) = _inputs(dt, 9, (2, _N_Q, _D_MODEL))
    for nf in _placements(g):
        p = init_encoder_layer(10, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        T.assert_close(g.encoder_layer(x, p, None), encoder_layer(x, p),
                       T.conformance(T.encoder_layer_error, x, p, None, dtype=dt), f"encoder_layer(norm_first={nf})")
    return "encoder_layer " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


def _decoder(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import decoder_layer
    from attnclaims.reference.params import init_decoder_layer

    y, memory = _inputs(dt, 11, (2, _N_Q, _D_MODEL), (2, _N_K, _D_MODEL))
    for nf in _placements(g):
        p = init_decoder_layer(12, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        T.assert_close(g.decoder_layer(y, memory, p, None, None), decoder_layer(y, memory, p),
                       T.conformance(T.decoder_layer_error, y, memory, p, None, None, dtype=dt),
                       f"decoder_layer(norm_first={nf})")
    return "decoder_layer (causal) " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


# -- modern components: bounds of attnclaims/suite/test_ext_attention.py and attnclaims/suite/test_ext_layers.py ----------

def _variants(g) -> dict:
    return declared_variants(g.impl)


def _rms(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.norms import rms_norm
    from attnclaims.reference.params import init_rms_norm

    (x,) = _inputs(dt, 17, (2, _N_Q, _D_MODEL))
    gamma = init_rms_norm(_D_MODEL, 18, spread=0.5, dtype=dt).gamma
    T.assert_close(g.rms_norm(x, gamma, 1e-6), rms_norm(x, gamma, 1e-6),
                   T.conformance(MT.rms_norm_error, x, gamma, 1e-6, dtype=dt), "rms_norm")
    return f"rms_norm(x{x.shape}, eps=1e-6)"


def _gated_activations(g) -> list[str]:
    """The activations ``gated_feed_forward`` is called with: the gated members of ``block_ffn`` (as in the
    claim suite, :func:`attnclaims.checks.strategies.gated_activations`)."""
    from attnclaims.guard import NotApplicable
    from attnclaims.protocol import unsupported_message

    have = [a for a in ("silu", "gelu") if a in _variants(g)["block_ffn"]]
    if not have:
        raise NotApplicable(g.name, reason=unsupported_message(g.impl, "block_ffn", "silu"))
    return have


def _gated(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.ffn import gated_feed_forward
    from attnclaims.reference.params import init_gated_feed_forward

    (x,) = _inputs(dt, 19, (2, _N_Q, _D_MODEL))
    acts = _gated_activations(g)
    for act in acts:
        p = init_gated_feed_forward(20, _D_MODEL, _D_FF, activation=act, dtype=dt)
        T.assert_close(g.gated_feed_forward(x, p), gated_feed_forward(x, p),
                       T.conformance(MT.gated_feed_forward_error, x, p, dtype=dt), f"gated_feed_forward({act!r})")
    return f"gated_feed_forward {' and '.join(acts)}, d_ff={_D_FF}"


_POSITIONS = np.arange(5, 5 + _N_Q)


def _rotary(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.positional import rotary_embedding

    (x,) = _inputs(dt, 21, (2, _N_Q, _D_MODEL))
    layouts = _variants(g)["rope_layout"]
    for layout in layouts:
        T.assert_close(g.rotary_embedding(x, _POSITIONS, 10000.0, layout), rotary_embedding(x, _POSITIONS, 10000.0, layout),
                       T.conformance(MT.rotary_error, x, _POSITIONS, 10000.0, layout, dtype=dt),
                       f"rotary_embedding(x{x.shape}, positions {_POSITIONS.tolist()}, layout={layout!r})")
    return f"rotary_embedding layout {' and '.join(layouts)}"


def _causal_calls(g):
    """(alignment, window) of each smoke call: every declared alignment, and a window of 2 if declared."""
    v = _variants(g)
    return [(a, None) for a in v["causal_alignment"]] + ([(v["causal_alignment"][0], 2)] if v["sliding_window"] else [])


def _causal(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.attention import causal_attention

    q, k, v = _inputs(dt, 22, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))
    calls = _causal_calls(g)
    for alignment, window in calls:
        T.assert_close(g.causal_attention(q, k, v, alignment, window), causal_attention(q, k, v, alignment, window),
                       T.conformance(MT.causal_attention_error, q, k, v, alignment, window, dtype=dt),
                       f"causal_attention(n_q={_N_Q}, n_k={_N_K}, alignment={alignment!r}, window={window})")
    return "causal_attention " + ", ".join(a + ("" if w is None else f" window={w}") for a, w in calls)


def _block_params(g, dt):
    """One decoder-only block within what the implementation declares: RMSNorm, a gated FFN, RoPE, Pre-LN
    and grouped-query attention where declared (the most modern block it takes), else the first declared."""
    from attnclaims.reference.params import RotaryParams, init_decoder_block

    v = _variants(g)
    norm = "rms" if "rms" in v["block_norm"] else v["block_norm"][0]
    ffn = next((a for a in ("silu", "gelu") if a in v["block_ffn"]), v["block_ffn"][0])
    rope = RotaryParams(layout=v["rope_layout"][0]) if True in v["block_rope"] else None
    nf = True if True in v["block_norm_first"] else v["block_norm_first"][0]
    p = init_decoder_block(23, _D_MODEL, _HEADS, _D_FF, num_kv_heads=1 if v["grouped_query"] else None, ffn=ffn,
                           norm=norm, norm_first=nf, rope=rope, norm_spread=0.3, dtype=dt)
    return p, (f"norm={norm}, ffn={ffn}, rope={'none' if rope is None else rope.layout}, norm_first={nf}, "
               f"kv_heads={p.self_attn.num_kv_heads}")


def _block(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.layers import decoder_block

    (x,) = _inputs(dt, 24, (2, _N_K, _D_MODEL))
    p, what = _block_params(g, dt)
    T.assert_close(g.decoder_block(x, p, None), decoder_block(x, p),
                   T.conformance(MT.decoder_block_error, x, p, dtype=dt), f"decoder_block({what})")
    return f"decoder_block ({what})"


def _step(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.layers import cached_decode, decoder_block, decoder_block_step

    (x,) = _inputs(dt, 24, (2, _N_K, _D_MODEL))
    p, what = _block_params(g, dt)
    caches = []

    def step(x_t, cache, params, position):
        y, new = g.decoder_block_step(x_t, cache, params, position)
        caches.append(new)
        return y, new

    out = cached_decode(step, x, p, 1, 2)  # a prompt of 1, then 2 positions per step
    T.assert_close(out, decoder_block(x, p), T.conformance(MT.decoder_block_error, x, p, dtype=dt),
                   f"{len(caches)} decoder_block_step calls (prompt_length=1, chunk=2; {what}) vs reference decoder_block")
    _, want = decoder_block_step(x, None, p, 0)
    for part in "kv":
        T.assert_close(getattr(caches[-1], part), getattr(want, part),
                       T.conformance(MT.kv_cache_error, x, p, part, dtype=dt),
                       f"the last step's cache.{part} vs the reference's", names=(f"cache.{part}", "reference"))
    return f"{len(caches)} steps against the KV cache, outputs and cache ({what})"


def _decode(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    from attnclaims.reference.layers import decoder_block

    (x,) = _inputs(dt, 24, (2, _N_K, _D_MODEL))
    p, what = _block_params(g, dt)
    T.assert_close(g.decoder_block_decode(x, p, 1, 2), decoder_block(x, p),
                   T.conformance(MT.decoder_block_error, x, p, dtype=dt),
                   f"decoder_block_decode(prompt_length=1, chunk=2; {what}) vs reference decoder_block")
    return f"decoder_block_decode prompt_length=1, chunk=2 ({what})"


# -- backward passes: bounds of attnclaims/suite/test_gradients.py and attnclaims/suite/test_ext_gradients.py --------------

def _d(dt, seed, shape):
    """An output gradient: seeded normal entries rounded to the dtype (as the claim suite's)."""
    from attnclaims.checks import strategies as S

    return S.cast(np.random.default_rng(seed).standard_normal(shape), dt)


def _derived(error, *args, dtype, index=None):
    """The claim suite's bound for a vjp with a derived error model (``attnclaims/suite/test_gradients.py``'s ``_bound``):
    the implementation's rounding in its dtype plus the reference's."""
    from attnclaims.checks import bounds as T

    u = T.unit_roundoff(dtype)

    def one(uu):
        e = error(*args, u=uu)
        return e if index is None else e[index]

    return 2 * T.Bound(one(u), u) if u == T.U64 else T.Bound(one(u), u) + T.Bound(one(T.U64), T.U64)


def _each(cap, got, want, bounds):
    """Compare every gradient (the leaves of the vjp's output) with the reference's."""
    from attnclaims.checks import bounds as BP
    from attnclaims.checks import bounds as T

    for (name, a), (_, b) in zip(BP.leaves(got), BP.leaves(want)):
        T.assert_close(a, b, bounds(name), f"{cap}: gradient {name} vs reference", names=("impl", "ref"))


def _softmax_vjp(g, dt):
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RB

    (x,) = _inputs(dt, 31, (2, 3, _N_K))
    d = _d(dt, 32, x.shape)
    T.assert_close(g.softmax_vjp(x, d, axis=-1), RB.softmax_vjp(x, d, axis=-1),
                   _derived(T.softmax_vjp_error, x, d, -1, dtype=dt), "softmax_vjp: dx vs reference", names=("dx", "ref"))
    return f"softmax_vjp(x{x.shape})"


def _attention_vjp(g, dt):
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RB

    q, k, v = _inputs(dt, 33, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))
    d = _d(dt, 34, (2, _N_Q, 3))
    mask = _mask()
    _each("attention_vjp", g.attention_vjp(q, k, v, d, mask), RB.attention_vjp(q, k, v, d, mask=mask),
          lambda name: _derived(T.attention_vjp_error, q, k, v, d, mask, None, dtype=dt, index=int(name)))
    return "attention_vjp with a mask: dq, dk, dv"


def _layer_norm_vjp(g, dt):
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RB
    from attnclaims.reference.params import init_layer_norm

    (x,) = _inputs(dt, 35, (2, _N_Q, _D_MODEL))
    n = init_layer_norm(_D_MODEL, 36, spread=0.5, dtype=dt)
    d = _d(dt, 37, x.shape)
    _each("layer_norm_vjp", g.layer_norm_vjp(x, n.gamma, n.beta, 1e-5, d), RB.layer_norm_vjp(x, n.gamma, n.beta, 1e-5, d),
          lambda name: _derived(T.layer_norm_vjp_error, x, n.gamma, 1e-5, d, dtype=dt, index=int(name)))
    return "layer_norm_vjp: dx, dgamma, dbeta"


def _ffn_vjp(g, dt):
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RB
    from attnclaims.reference.params import init_feed_forward

    (x,) = _inputs(dt, 38, (2, _N_Q, _D_MODEL))
    p = init_feed_forward(39, _D_MODEL, _D_FF, dtype=dt)
    d = _d(dt, 40, x.shape)
    u = T.unit_roundoff(dt)
    e_i, e_r = T.feed_forward_vjp_error(x, p, d, u=u), T.feed_forward_vjp_error(x, p, d, u=T.U64)
    tol = u + (T.U64 if u != T.U64 else u)
    dx, dp = g.feed_forward_vjp(x, p, d)
    rdx, rdp = RB.feed_forward_vjp(x, p, d)
    T.assert_close(dx, rdx, T.Bound(e_i[0] + e_r[0], tol), "feed_forward_vjp: dx vs reference", names=("dx", "ref"))
    for name in ("w1", "b1", "w2", "b2"):
        T.assert_close(getattr(dp, name), getattr(rdp, name), T.Bound(e_i[1][name] + e_r[1][name], tol),
                       f"feed_forward_vjp: d{name} vs reference", names=("d" + name, "ref"))
    return "feed_forward_vjp: dx, dparams"


def _measured(key, g_out, want, args, dt, what):
    from attnclaims.checks import bounds as BP
    from attnclaims.checks import bounds as MBP

    bounds = (BP if key in ("multi_head_attention_vjp", "encoder_layer_vjp", "decoder_layer_vjp") else MBP
              ).measured_bounds(key, want, args, dt)
    _each(what, g_out, want, bounds.__getitem__)


def _mha_vjp(g, dt):
    from attnclaims.checks import bounds as MBP
    import attnclaims.reference as RB
    from attnclaims.reference.params import init_multi_head

    x, memory = _inputs(dt, 41, (2, _N_Q, _D_MODEL), (2, _N_K, _D_MODEL))
    d = _d(dt, 42, x.shape)
    v = _variants(g)
    calls = [("multi_head_attention_vjp", init_multi_head(43, _D_MODEL, _HEADS, dtype=dt), "")]
    if v["grouped_query"]:
        calls.append((MBP.GQA_KEY, init_multi_head(44, _D_MODEL, 4, num_kv_heads=2, dtype=dt), ", grouped-query 4/2"))
    x_kv, mask = (memory, _mask()) if v["cross_attention"] else (x, None)
    for key, p, _ in calls:
        _measured(key, g.multi_head_attention_vjp(x, x_kv, p, d, mask), RB.multi_head_attention_vjp(x, x_kv, p, d, mask=mask),
                  (x, x_kv, p, d, mask), dt, f"multi_head_attention_vjp(heads={p.num_heads}, kv_heads={p.num_kv_heads})")
    return ("multi_head_attention_vjp " + ("cross-attention with a mask" if v["cross_attention"] else "self-attention")
            + "".join(c[2] for c in calls))


def _encoder_vjp(g, dt):
    import attnclaims.reference as RB
    from attnclaims.reference.params import init_encoder_layer

    (x,) = _inputs(dt, 45, (2, _N_Q, _D_MODEL))
    d = _d(dt, 46, x.shape)
    for nf in _placements(g):
        p = init_encoder_layer(47, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        _measured("encoder_layer_vjp", g.encoder_layer_vjp(x, p, d, None), RB.encoder_layer_vjp(x, p, d),
                  (x, p, d, None), dt, f"encoder_layer_vjp(norm_first={nf})")
    return "encoder_layer_vjp " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


def _decoder_vjp(g, dt):
    import attnclaims.reference as RB
    from attnclaims.reference.params import init_decoder_layer

    y, memory = _inputs(dt, 48, (2, _N_Q, _D_MODEL), (2, _N_K, _D_MODEL))
    d = _d(dt, 49, y.shape)
    for nf in _placements(g):
        p = init_decoder_layer(50, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        _measured("decoder_layer_vjp", g.decoder_layer_vjp(y, memory, p, d, None, None), RB.decoder_layer_vjp(y, memory, p, d),
                  (y, memory, p, d, None, None), dt, f"decoder_layer_vjp(norm_first={nf})")
    return "decoder_layer_vjp " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


def _rms_vjp(g, dt):
    import attnclaims.reference as RMB
    from attnclaims.reference.params import init_rms_norm

    (x,) = _inputs(dt, 51, (2, _N_Q, _D_MODEL))
    gamma = init_rms_norm(_D_MODEL, 52, spread=0.5, dtype=dt).gamma
    d = _d(dt, 53, x.shape)
    _measured("rms_norm_vjp", g.rms_norm_vjp(x, gamma, 1e-6, d), RMB.rms_norm_vjp(x, gamma, 1e-6, d),
              (x, gamma, 1e-6, d), dt, "rms_norm_vjp")
    return "rms_norm_vjp: dx, dgamma"


def _gated_vjp(g, dt):
    import attnclaims.reference as RMB
    from attnclaims.reference.params import init_gated_feed_forward

    (x,) = _inputs(dt, 54, (2, _N_Q, _D_MODEL))
    d = _d(dt, 55, x.shape)
    acts = _gated_activations(g)
    for act in acts:
        p = init_gated_feed_forward(56, _D_MODEL, _D_FF, activation=act, dtype=dt)
        _measured("gated_feed_forward_vjp", g.gated_feed_forward_vjp(x, p, d), RMB.gated_feed_forward_vjp(x, p, d),
                  (x, p, d), dt, f"gated_feed_forward_vjp({act!r})")
    return f"gated_feed_forward_vjp {' and '.join(acts)}"


def _rotary_vjp(g, dt):
    from attnclaims.checks import bounds as MT
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RMB

    (x,) = _inputs(dt, 57, (2, _N_Q, _D_MODEL))
    d = _d(dt, 58, x.shape)
    layouts = _variants(g)["rope_layout"]
    for layout in layouts:
        T.assert_close(g.rotary_embedding_vjp(x, _POSITIONS, d, 10000.0, layout),
                       RMB.rotary_embedding_vjp(x, _POSITIONS, d, 10000.0, layout),
                       T.conformance(MT.rotary_error, d, -_POSITIONS, 10000.0, layout, dtype=dt),
                       f"rotary_embedding_vjp(layout={layout!r}) vs reference", names=("dx", "ref"))
    return f"rotary_embedding_vjp layout {' and '.join(layouts)}"


def _causal_vjp(g, dt):
    from attnclaims.checks import bounds as T
    import attnclaims.reference as RMB
    from attnclaims.reference import sliding_window_mask

    q, k, v = _inputs(dt, 59, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))
    d = _d(dt, 60, (2, _N_Q, 3))
    calls = _causal_calls(g)
    for alignment, window in calls:
        mask = sliding_window_mask(_N_Q, _N_K, window, alignment)
        _each(f"causal_attention_vjp(alignment={alignment!r}, window={window})",
              g.causal_attention_vjp(q, k, v, d, alignment, window),
              RMB.causal_attention_vjp(q, k, v, d, alignment=alignment, window=window),
              lambda name, mask=mask: _derived(T.attention_vjp_error, q, k, v, d, mask, None, dtype=dt, index=int(name)))
    return "causal_attention_vjp " + ", ".join(a + ("" if w is None else f" window={w}") for a, w in calls)


def _block_vjp(g, dt):
    import attnclaims.reference as RMB

    (x,) = _inputs(dt, 61, (2, _N_K, _D_MODEL))
    d = _d(dt, 62, x.shape)
    p, what = _block_params(g, dt)
    _measured("decoder_block_vjp", g.decoder_block_vjp(x, p, d, None), RMB.decoder_block_vjp(x, p, d),
              (x, p, d, None), dt, f"decoder_block_vjp({what})")
    return f"decoder_block_vjp ({what})"


def _varlen(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import varlen_attention

    d_v = 4 if _variants(g)["value_width"] == "d_k" else 3
    q, k, v = _inputs(dt, 63, (7, 2, 4), (9, 2, 4), (9, 2, d_v))
    cu_q, cu_k = np.array([0, 3, 3, 7], dtype=np.int32), np.array([0, 4, 5, 9], dtype=np.int32)  # one query-less
    for causal in _variants(g)["varlen_causal"]:
        T.assert_close(g.varlen_attention(q, k, v, cu_q, cu_k, causal), varlen_attention(q, k, v, cu_q, cu_k, causal),
                       T.conformance(T.varlen_attention_error, q, k, v, cu_q, cu_k, causal, dtype=dt),
                       f"varlen_attention(cu_seqlens_q={cu_q.tolist()}, cu_seqlens_k={cu_k.tolist()}, causal={causal})")
    return "varlen_attention 3 sequences, causal " + " and ".join(map(str, _variants(g)["varlen_causal"]))


def _paged(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.reference import paged_attention

    d_v = 4 if _variants(g)["value_width"] == "d_k" else 3
    q, k_cache, v_cache = _inputs(dt, 64, (2, 1, 2, 4), (5, 4, 2, 4), (5, 4, 2, d_v))
    table, lens = np.array([[3, 0, 4], [1, 2, 0]], dtype=np.int32), np.array([10, 5], dtype=np.int32)
    T.assert_close(g.paged_attention(q, k_cache, v_cache, table, lens),
                   paged_attention(q, k_cache, v_cache, table, lens),
                   T.conformance(T.paged_attention_error, q, k_cache, v_cache, table, lens, dtype=dt),
                   f"paged_attention(block_table={table.tolist()}, seq_lens={lens.tolist()})")
    return "paged_attention pages of 4 in a shuffled order, partial last pages"


def _attention_lse(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.checks.bounds.attention import lse_error
    from attnclaims.reference.attention import attention_lse

    q, k, v = _inputs(dt, 63, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))
    mask = _mask()
    out, lse = attention_lse(q, k, v, mask=mask)
    got = g.attention_lse(q, k, v, mask)
    T.assert_close(got[0], out, T.conformance(T.attention_error, q, k, v, mask, dtype=dt), "attention_lse: out vs reference")
    T.assert_close(got[1], lse, T.conformance(lse_error, q, k, mask, dtype=dt), "attention_lse: lse vs reference",
                   names=("lse", "ref"))
    return "attention_lse with a mask: out and lse"


def _softcap(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.checks.bounds.attention import softcap_attention_error
    from attnclaims.reference.attention import softcap_attention

    q, k, v = _inputs(dt, 64, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))
    q = q * np.asarray(4.0, dtype=dt)
    T.assert_close(g.softcap_attention(q, k, v, 1.0, _mask()), softcap_attention(q, k, v, 1.0, mask=_mask()),
                   T.conformance(softcap_attention_error, q, k, v, 1.0, _mask(), dtype=dt),
                   "softcap_attention(softcap=1) vs reference")
    return "softcap_attention with a cap of 1 and a mask"


def _alibi(g, dt):
    from attnclaims.checks import bounds as T
    from attnclaims.checks.bounds.attention import alibi_attention_error
    from attnclaims.reference.attention import alibi_attention, alibi_slopes

    q, k, v = _inputs(dt, 65, (2, _HEADS, _N_Q, 4), (2, _HEADS, _N_K, 4), (2, _HEADS, _N_K, 3))
    slopes = alibi_slopes(_HEADS).astype(dt)
    T.assert_close(g.alibi_attention(q, k, v, slopes), alibi_attention(q, k, v, slopes),
                   T.conformance(alibi_attention_error, q, k, v, slopes, dtype=dt),
                   f"alibi_attention({_HEADS} heads, n_q={_N_Q}, n_k={_N_K}) vs reference")
    return f"alibi_attention {_HEADS} heads, n_q < n_k"


#: capability -> its smoke check: every capability of the protocol, forward and backward
SMOKE: dict[str, Callable] = {
    "softmax": _softmax, "attention": _attention, "multi_head_attention": _mha, "positional_encoding": _positional,
    "layer_norm": _layer_norm, "feed_forward": _ffn, "encoder_layer": _encoder, "decoder_layer": _decoder,
    "rms_norm": _rms, "gated_feed_forward": _gated, "rotary_embedding": _rotary, "causal_attention": _causal,
    "decoder_block": _block, "decoder_block_decode": _decode, "decoder_block_step": _step,
    "softmax_vjp": _softmax_vjp, "attention_vjp": _attention_vjp, "layer_norm_vjp": _layer_norm_vjp,
    "multi_head_attention_vjp": _mha_vjp, "feed_forward_vjp": _ffn_vjp, "encoder_layer_vjp": _encoder_vjp,
    "decoder_layer_vjp": _decoder_vjp, "rms_norm_vjp": _rms_vjp, "gated_feed_forward_vjp": _gated_vjp,
    "rotary_embedding_vjp": _rotary_vjp, "causal_attention_vjp": _causal_vjp, "decoder_block_vjp": _block_vjp,
    "varlen_attention": _varlen, "paged_attention": _paged,
    "attention_lse": _attention_lse, "softcap_attention": _softcap, "alibi_attention": _alibi,
}
assert set(SMOKE) == set(CAPABILITIES), "every capability of the protocol has a smoke check"


# ---------------------------------------------------------------------------------------------
# The protocol's edges: calls that must be refused
# ---------------------------------------------------------------------------------------------

def _contract_attention(g, dt) -> list[tuple]:
    """(args, accepted, fix, why) of the malformed ``attention`` calls: a mask of two keys for one key and of
    two queries for one query (numpy's ``np.where`` stretches the scores to both), keys of another width (an
    elementwise q·k stretches a width of 1)."""
    from attnclaims.checks import contract as K

    q, k, v = _inputs(dt, 13, (_N_Q, 4), (_N_K, 4), (_N_K, 3))
    q1, k1 = _inputs(dt, 14, (_N_Q, 1), (_N_K, 2))
    calls = []
    for args, shape in (((q, k[:1], v[:1]), (_N_Q, 2)), ((q[:1], k, v), (2, _N_K))):
        scores = (args[0].shape[-2], args[1].shape[-2])
        calls.append((args + (np.ones(shape, dtype=bool),), f"a mask of shape {shape} for scores of shape {scores}",
                      K.FIX["mask"], K.mask_why(shape, scores)))
    calls.append(((q1, k1, v), "queries of width 1 with keys of width 2", K.FIX["width"], K.width_why(1, 2)))
    return calls


def _contract_mha(g, dt) -> list[tuple]:
    """The malformed ``multi_head_attention`` calls (self-attention, x_kv is x_q, so a self-attention-only
    module is asked too): 2 heads for d_model = 5, and a mask of two keys for one position."""
    from attnclaims.checks import contract as K
    from attnclaims.reference.params import init_multi_head

    odd = init_multi_head(15, 5, 1, dtype=dt)
    x5, x1 = _inputs(dt, 16, (2, _N_Q, 5), (2, 1, _D_MODEL))
    p = init_multi_head(3, _D_MODEL, _HEADS, dtype=dt)
    return [((x5, x5, K.unchecked(odd, num_heads=2, num_kv_heads=2), None), "num_heads=2 for d_model=5 (not a divisor)",
             K.FIX["heads"], K.heads_why(5, 2)),
            ((x1, x1, p, np.ones((1, 2), dtype=bool)), "a mask of shape (1, 2) for scores of shape (2, 1, 1)",
             K.FIX["mask"], K.mask_why((1, 2), (2, 1, 1)))]


#: capability -> its malformed calls (the capabilities whose edges the claim suite's contract tests ask)
CONTRACT: dict[str, Callable] = {"attention": _contract_attention, "multi_head_attention": _contract_mha}
_MALFORMED_CALLS = 5  # three of attention, two of multi_head_attention


def _edges(g, cap: str) -> tuple[int, list[str]]:
    """(calls refused, contract findings) of ``cap``'s malformed calls."""
    from attnclaims.checks.contract import ContractFinding, must_reject

    refused, findings = 0, []
    for args, accepted, fix, why in CONTRACT[cap](g, g.dtype):
        try:
            must_reject(g, cap, args, accepted=accepted, fix=fix, why=why)
            refused += 1
        except ContractFinding as exc:
            findings.append(str(exc).splitlines()[0])
    return refused, findings


class _Status:
    """The child's progress, one line per step (``resolved``, ``check <cap>``, ``done <code>``), written
    unbuffered to a file the parent reads: an exit before ``done`` is never a success."""

    def __init__(self, path: str | None):
        import os

        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    def __call__(self, line: str) -> None:
        import os

        if self._fd is not None:
            os.write(self._fd, (line + "\n").encode("utf-8", "replace"))


def smoke(spec: str, *, timeout: float = 20.0, out=None, strict_contract: bool = False, status_file: str | None = None,
          watchdog_file: str | None = None) -> int:
    """Run the smoke checks of ``spec``; print one line per capability to ``out``. Returns the exit status.

    ``status_file``: where the progress goes (:class:`_Status`); ``watchdog_file``: arms the guard's
    :class:`~attnclaims.guard.Watchdog` on every call (a call that holds the GIL past its limit ends the
    process, and the file names it)."""
    from attnclaims.guard import CheckFailure, GuardedImplementation, NotApplicable, Watchdog
    from attnclaims.impls import ImplementationError, resolve
    from attnclaims.terminal import safe_text

    out = out or sys.stdout
    status = _Status(status_file)
    try:
        raw = resolve(spec)
    except ImplementationError as exc:
        print(f"attnclaims smoke: {safe_text(exc)}", file=sys.stderr)
        return 2
    status("resolved")
    try:
        g = GuardedImplementation(raw, spec=spec, timeout=timeout)
    except Exception as exc:  # a name or dtype that cannot be read: the implementation's error, one line
        print(safe_text(f"attnclaims smoke: {spec!r}: reading its name or dtype raised {type(exc).__name__}: {exc}"),
              file=out)
        return 1
    if watchdog_file and timeout:
        g.watchdog = Watchdog(watchdog_file, grace=Watchdog.grace_for(timeout))
    try:
        declared_variants(raw)
    except ValueError as exc:
        print(safe_text(f"{g.name}: {exc}"), file=out)
        return 1
    declared = getattr(raw, "variants", None) or {}
    print(safe_text(f"{g.name} · dtype {g.dtype.name}" + (f" · variants {declared}" if declared else "")
                    + (f" · versions {raw.versions}" if getattr(raw, "versions", None) else "")), file=out)
    responsible = getattr(raw, "responsible", None) or {}
    failed, passed, findings, declined = 0, 0, 0, []
    for cap in CAPABILITIES:
        if not g.has(cap):
            continue
        check = SMOKE[cap]
        status(f"check {cap}")
        start = time.perf_counter()
        try:
            what = check(g, g.dtype)
            if cap in CONTRACT:
                status(f"contract {cap}")
                refused, found = _edges(g, cap)
                what += f"; refuses {refused} of {refused + len(found)} calls outside the protocol"
        except CheckFailure as exc:
            failed += 1
            where = f" [responsible: {responsible[cap]}]" if cap in responsible and "responsible" not in str(exc) else ""
            line = plain_numbers(str(exc).splitlines()[0])  # numbers as numbers, never np.float64(…)
            print(f"  FAILED   {cap:<{_WIDTH}} {safe_text(line)}{safe_text(where)}", file=out)
            continue
        except NotApplicable as exc:  # the method raised NotImplementedError or NotApplicable: as in the claim suite
            declined.append(cap)
            print(f"  n/a      {cap:<{_WIDTH}} {safe_text(str(exc).splitlines()[0])}", file=out)
            continue
        except (SystemExit, KeyboardInterrupt) as exc:  # raised by the method: it would end a test session
            failed += 1
            print(f"  FAILED   {cap:<{_WIDTH}} raised {type(exc).__name__}({safe_text(repr(exc.args)[1:-1].rstrip(','))}), "
                  "which would end the test session", file=out)
            continue
        passed += 1
        print(f"  ok       {cap:<{_WIDTH}} {what} ({time.perf_counter() - start:.2f} s)", file=out)
        for line in found if cap in CONTRACT else ():
            findings += 1
            print(f"  contract {cap:<{_WIDTH}} {safe_text(line)}", file=out)
    missing = [c for c in SMOKE if not g.has(c) and c not in VJP_CAPABILITIES]
    if missing:
        print(f"  absent   {', '.join(missing)} (their tests will be 'not applicable')", file=out)
    no_vjp = [c for c in VJP_CAPABILITIES if not g.has(c)]
    if no_vjp:
        print("  absent   " + ("every *_vjp (no backward pass exposed: " if len(no_vjp) == len(VJP_CAPABILITIES)
                              else ", ".join(no_vjp) + " (") + "their gradient tests will be 'not applicable')",
              file=out)
    contract = (f"{findings} contract finding(s): calls outside the protocol accepted (docs/adapters.md, "
                "\"What must be rejected\")") if findings else ""
    if failed:
        summary = f"{failed} smoke check(s) failed" + (f"; {contract}" if contract else "")
    elif not passed:
        summary = ("nothing was smoke-tested: " + (f"every capability it has declined ({', '.join(declined)})"
                                                   if declined else "it has none of the smoke-tested capabilities"))
    else:
        summary = "all smoke checks passed" + (f"; {contract}" if contract else "") + f"; next: attnclaims check --impl {spec}"
    print(safe_text(summary), file=out)
    return 1 if failed or (strict_contract and findings) else 0


def configure(parser) -> None:
    from attnclaims.guard import call_timeout_arg

    parser.add_argument("--impl", metavar="NAME", required=True,
                        help="the implementation: a built-in name or package.module:attr")
    parser.add_argument("--call-timeout", metavar="SECONDS", type=call_timeout_arg, default=20.0,
                        help="time limit of one call (default 20)")
    parser.add_argument("--strict-contract", action="store_true",
                        help="exit status 1 when a call outside the protocol is accepted (a contract finding)")


def _limit(call_timeout: float) -> float:
    """The checks' deadline once the implementation is constructed (the import has its own, ``check``'s
    ``ATTNCLAIMS_IMPORT_TIMEOUT``): up to six guarded calls per smoke check (three decoding steps or three
    causal alignments/windows, the first two of each capability made twice by the guard's determinism
    check) and two per malformed call, each within the per-call limit, plus slack. Only a backstop: every
    call is limited by the guard and its watchdog."""
    return (6 * len(SMOKE) + 2 * _MALFORMED_CALLS) * (call_timeout or 20.0) + 30.0


def _lines(path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def run(args) -> int:
    """The checks run in a child process (``python -m attnclaims.smoke``), in a process group of its own:
    the implementation's code never runs in the command line's process, so a SystemExit, an abort, a
    hang or a thread of the implementation cannot take the CLI with it. The rules are ``check``'s: the
    import and construction are limited to ``ATTNCLAIMS_IMPORT_TIMEOUT`` seconds and an exit or hang there is
    one line with exit status 2; a call that holds the GIL is ended by the watchdog and named (exit 1); a child
    that ends without saying it finished is a failure naming its last step (exit 1), never a success."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from attnclaims.guard import Watchdog
    from attnclaims.run.probe import import_timeout
    from attnclaims.run.process import describe_exit, kill_group
    from attnclaims.terminal import safe_text

    with tempfile.TemporaryDirectory(prefix="attnclaims-smoke-") as tmp:
        status, dog = Path(tmp) / "status", Path(tmp) / "watchdog"
        cmd = [sys.executable, "-m", "attnclaims.smoke", "--impl", args.impl, "--call-timeout", str(args.call_timeout),
               "--status-file", str(status), "--watchdog-file", str(dog)]
        if getattr(args, "strict_contract", False):
            cmd.append("--strict-contract")
        proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        late = ""
        try:
            t0, resolved_at = time.monotonic(), None
            while proc.poll() is None:
                time.sleep(0.05)
                now = time.monotonic()
                if resolved_at is None and "resolved" in _lines(status):
                    resolved_at = now
                if resolved_at is None and now - t0 > import_timeout():
                    late = f"did not finish within {import_timeout():g} s"
                elif resolved_at is not None and now - resolved_at > _limit(args.call_timeout):
                    late = f"the smoke checks did not finish within {_limit(args.call_timeout):g} s"
                if late:
                    break
        finally:
            kill_group(proc.pid)  # also members of its group that outlived it (threads cannot, processes can)
            code = proc.wait()
        steps = _lines(status)
        fired = Watchdog.read(str(dog))
    done = [s for s in steps if s.startswith("done ")]
    if done:
        return int(done[-1].split()[1])
    last = next((s for s in reversed(steps) if s.startswith(("check ", "contract "))), "")
    during = (f" during the {'malformed calls' if last.startswith('contract') else 'check'} of {last.split()[1]}"
              if last else "")
    if "resolved" not in steps:
        what = late or f"ended the process ({describe_exit(code)})"  # check's words (attnclaims.run.probe)
        print(safe_text(f"attnclaims smoke: implementation {args.impl!r}: importing or constructing it {what}"),
              file=sys.stderr)
        return 2
    if fired:
        print(safe_text(f"attnclaims smoke: {fired['call']}: did not return within {fired['limit']} s and never "
                        "released the interpreter (GIL); the watchdog ended the smoke check"), file=sys.stderr)
    elif late:
        print(safe_text(f"attnclaims smoke: {args.impl!r}: {late}{during}"), file=sys.stderr)
    else:
        print(safe_text(f"attnclaims smoke: {args.impl!r} ended the process ({describe_exit(code)}){during} "
                        "before the smoke check finished"), file=sys.stderr)
    return 1


def _child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="attnclaims smoke")
    configure(parser)
    parser.add_argument("--status-file", help=argparse.SUPPRESS)
    parser.add_argument("--watchdog-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        code = smoke(args.impl, timeout=args.call_timeout, strict_contract=args.strict_contract,
                     status_file=args.status_file, watchdog_file=args.watchdog_file)
    except SystemExit as exc:  # the implementation's import or factory called sys.exit
        print(f"attnclaims smoke: {args.impl!r} called sys.exit({exc.code!r})", file=sys.stderr)
        code = 2
    _Status(args.status_file)(f"done {code}")
    return code


if __name__ == "__main__":
    import os

    code = _child_main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads the implementation started cannot keep the child alive
