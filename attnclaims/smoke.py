"""``attnclaims smoke --impl pkg.mod:attr``: a few seconds' check that a new adapter is wired up.

Before a full run (a minute or more), this calls each capability the implementation has once or twice on
small fixed inputs in its dtype — self- and cross-attention where it takes both, a mask, batch axes, a
Post-LN or Pre-LN layer among those it declares — and compares the result with the reference within the
same derived bound the claim tests use (``attnclaims/checks/tolerances.py``: u of the declared dtype plus
the reference's). Every call is guarded, so an exception, a wrong shape or dtype, NaN or a hang is one line
naming the capability and, where the adapter says so, the library function responsible. It prints one line
per capability and exits 1 if any check failed (2 for bad arguments). Passing here is not a verdict: it
only says the claim suite will get as far as the mathematics.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np

from attnclaims.protocol import CAPABILITIES, declared_variants

__all__ = ["SMOKE", "smoke", "configure", "run"]

_N_Q, _N_K, _D_MODEL, _HEADS, _D_FF = 3, 5, 8, 2, 12


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
    from attnclaims.checks import tolerances as T
    from attnclaims.reference import softmax

    (x,) = _inputs(dt, 1, (2, 3, _N_K))
    x = x * np.asarray(4.0, dtype=dt)
    T.assert_close(g.softmax(x, axis=-1), softmax(x, axis=-1), T.conformance(T.softmax_error, x, -1, dtype=dt),
                   f"softmax(x{x.shape}) vs reference")
    return f"softmax(x{x.shape})"


def _attention(g, dt):
    from attnclaims.checks import tolerances as T
    from attnclaims.reference import attention

    q, k, v = _inputs(dt, 2, (2, _N_Q, 4), (2, _N_K, 4), (2, _N_K, 3))  # d_v != d_k, a batch axis
    for mask in (None, _mask()):
        T.assert_close(g.attention(q, k, v, mask), attention(q, k, v, mask=mask),
                       T.conformance(T.attention_error, q, k, v, mask, dtype=dt),
                       f"attention(q{q.shape}, k{k.shape}, v{v.shape}, mask={None if mask is None else mask.shape})")
    return "attention with and without a mask, d_v != d_k"


def _mha(g, dt):
    from attnclaims.checks import tolerances as T
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
    return ", ".join(done) + f", {_HEADS} heads"


def _positional(g, dt):
    from attnclaims.checks import tolerances as T
    from attnclaims.reference.positional import sinusoidal_encoding

    u = T.unit_roundoff(dt)
    T.assert_close(g.positional_encoding(7, _D_MODEL), sinusoidal_encoding(7, _D_MODEL),
                   T.Bound(T.positional_encoding_error(7, _D_MODEL, u=u), u)
                   + T.Bound(T.positional_encoding_error(7, _D_MODEL, u=T.U64), T.U64),
                   f"positional_encoding(7, {_D_MODEL})")
    return f"positional_encoding(7, {_D_MODEL})"


def _layer_norm(g, dt):
    from attnclaims.checks import tolerances as T
    from attnclaims.reference import layer_norm
    from attnclaims.reference.params import init_layer_norm

    (x,) = _inputs(dt, 5, (2, _N_Q, _D_MODEL))
    n = init_layer_norm(_D_MODEL, 6, spread=0.5, dtype=dt)
    T.assert_close(g.layer_norm(x, n.gamma, n.beta, 1e-5), layer_norm(x, n.gamma, n.beta, 1e-5),
                   T.conformance(T.layer_norm_error, x, n.gamma, n.beta, 1e-5, dtype=dt), "layer_norm")
    return f"layer_norm(x{x.shape}, eps=1e-5)"


def _ffn(g, dt):
    from attnclaims.checks import tolerances as T
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
    from attnclaims.checks import tolerances as T
    from attnclaims.reference import encoder_layer
    from attnclaims.reference.params import init_encoder_layer

    (x,) = _inputs(dt, 9, (2, _N_Q, _D_MODEL))
    for nf in _placements(g):
        p = init_encoder_layer(10, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        T.assert_close(g.encoder_layer(x, p, None), encoder_layer(x, p),
                       T.conformance(T.encoder_layer_error, x, p, None, dtype=dt), f"encoder_layer(norm_first={nf})")
    return "encoder_layer " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


def _decoder(g, dt):
    from attnclaims.checks import tolerances as T
    from attnclaims.reference import decoder_layer
    from attnclaims.reference.params import init_decoder_layer

    y, memory = _inputs(dt, 11, (2, _N_Q, _D_MODEL), (2, _N_K, _D_MODEL))
    for nf in _placements(g):
        p = init_decoder_layer(12, _D_MODEL, _HEADS, _D_FF, norm_first=nf, norm_spread=0.3, dtype=dt)
        T.assert_close(g.decoder_layer(y, memory, p, None, None), decoder_layer(y, memory, p),
                       T.conformance(T.decoder_layer_error, y, memory, p, None, None, dtype=dt),
                       f"decoder_layer(norm_first={nf})")
    return "decoder_layer (causal) " + " and ".join("Pre-LN" if nf else "Post-LN" for nf in _placements(g))


#: capability -> its smoke check (the capabilities of the 2017 architecture; others are listed as present)
SMOKE: dict[str, Callable] = {
    "softmax": _softmax, "attention": _attention, "multi_head_attention": _mha, "positional_encoding": _positional,
    "layer_norm": _layer_norm, "feed_forward": _ffn, "encoder_layer": _encoder, "decoder_layer": _decoder,
}


def smoke(spec: str, *, timeout: float = 20.0, out=None) -> int:
    """Run the smoke checks of ``spec``; print one line per capability to ``out``. Returns the exit status."""
    from attnclaims.guard import CheckFailure, GuardedImplementation
    from attnclaims.impls import ImplementationError, resolve

    out = out or sys.stdout
    from attnclaims.terminal import safe_text

    try:
        raw = resolve(spec)
    except ImplementationError as exc:
        print(f"attnclaims smoke: {safe_text(exc)}", file=sys.stderr)
        return 2
    g = GuardedImplementation(raw, spec=spec, timeout=timeout)
    try:
        declared_variants(raw)
    except ValueError as exc:
        print(safe_text(f"{g.name}: {exc}"), file=out)
        return 1
    declared = getattr(raw, "variants", None) or {}
    print(safe_text(f"{g.name} · dtype {g.dtype.name}" + (f" · variants {declared}" if declared else "")
                    + (f" · versions {raw.versions}" if getattr(raw, "versions", None) else "")), file=out)
    responsible = getattr(raw, "responsible", None) or {}
    failed, others = 0, []
    for cap in CAPABILITIES:
        if not g.has(cap):
            continue
        check = SMOKE.get(cap)
        if check is None:
            others.append(cap)
            continue
        start = time.perf_counter()
        try:
            what = check(g, g.dtype)
        except CheckFailure as exc:
            failed += 1
            where = f" [responsible: {responsible[cap]}]" if cap in responsible and "responsible" not in str(exc) else ""
            print(f"  FAILED   {cap:<22} {safe_text(str(exc).splitlines()[0])}{safe_text(where)}", file=out)
            continue
        print(f"  ok       {cap:<22} {what} ({time.perf_counter() - start:.2f} s)", file=out)
    if others:
        print(f"  present  {', '.join(others)} (not smoke-tested: the claim suite tests them)", file=out)
    missing = [c for c in SMOKE if not g.has(c)]
    if missing:
        print(f"  absent   {', '.join(missing)} (their tests will be 'not applicable')", file=out)
    print(("all smoke checks passed; next: attnclaims check --impl " + spec) if not failed
          else f"{failed} smoke check(s) failed", file=out)
    return 1 if failed else 0


def configure(parser) -> None:
    from attnclaims.guard import call_timeout_arg

    parser.add_argument("--impl", metavar="NAME", required=True,
                        help="the implementation: a built-in name or package.module:attr")
    parser.add_argument("--call-timeout", metavar="SECONDS", type=call_timeout_arg, default=20.0,
                        help="time limit of one call (default 20)")


def _limit(call_timeout: float) -> float:
    """The whole smoke run's deadline: importing the library (120 s at most, as the orchestrator's probe
    allows) and two guarded calls per smoke-tested capability, each within the per-call limit."""
    return 120.0 + 2 * len(SMOKE) * (call_timeout or 20.0) + 30.0


def run(args) -> int:
    """The checks run in a child process (``python -m attnclaims.smoke``), in a process group of its own:
    the implementation's code never runs in the command line's process, so a SystemExit, an abort, a
    hang or a thread of the implementation cannot take the CLI with it."""
    import os
    import subprocess

    from attnclaims.orchestrator import kill_group

    cmd = [sys.executable, "-m", "attnclaims.smoke", "--impl", args.impl, "--call-timeout", str(args.call_timeout)]
    proc = subprocess.Popen(cmd, start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        code = proc.wait(timeout=_limit(args.call_timeout))
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        proc.wait()
        print(f"attnclaims smoke: {args.impl!r} did not finish within {_limit(args.call_timeout):g} s", file=sys.stderr)
        return 1
    finally:
        if proc.poll() is None:  # interrupted: take the child's process group down too
            kill_group(proc.pid)
    if code < 0 or code not in (0, 1, 2):
        print(f"attnclaims smoke: the check of {args.impl!r} ended with exit status {code} "
              "(the implementation exited or crashed the process)", file=sys.stderr)
        return 2 if code == 2 else 1
    return code


def _child_main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="attnclaims smoke")
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return smoke(args.impl, timeout=args.call_timeout)
    except SystemExit as exc:  # the implementation's import or factory called sys.exit
        print(f"attnclaims smoke: {args.impl!r} called sys.exit({exc.code!r})", file=sys.stderr)
        return 2


if __name__ == "__main__":
    import os

    code = _child_main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads the implementation started cannot keep the child alive
