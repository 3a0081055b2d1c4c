"""``attnclaims smoke --impl pkg.mod:attr``: a few seconds' check that a new adapter is wired up.

Before a full run (a minute or more), this calls each capability the implementation has once or twice on
small fixed inputs in its dtype — self- and cross-attention where it takes both, a mask, batch axes, a
Post-LN or Pre-LN layer among those it declares — and compares the result with the reference within the
same derived bound the claim tests use (``attnclaims/checks/tolerances.py``: u of the declared dtype plus
the reference's). Every call is guarded, so an exception, a wrong shape or dtype, NaN or a hang is one line
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

from attnclaims.protocol import CAPABILITIES, declared_variants

__all__ = ["SMOKE", "CONTRACT", "smoke", "configure", "run"]

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
    failed, passed, findings, others, declined = 0, 0, 0, [], []
    for cap in CAPABILITIES:
        if not g.has(cap):
            continue
        check = SMOKE.get(cap)
        if check is None:
            others.append(cap)
            continue
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
            print(f"  FAILED   {cap:<22} {safe_text(str(exc).splitlines()[0])}{safe_text(where)}", file=out)
            continue
        except NotApplicable as exc:  # the method raised NotImplementedError or NotApplicable: as in the claim suite
            declined.append(cap)
            print(f"  n/a      {cap:<22} {safe_text(str(exc).splitlines()[0])}", file=out)
            continue
        except (SystemExit, KeyboardInterrupt) as exc:  # raised by the method: it would end a test session
            failed += 1
            print(f"  FAILED   {cap:<22} raised {type(exc).__name__}({safe_text(repr(exc.args)[1:-1].rstrip(','))}), "
                  "which would end the test session", file=out)
            continue
        passed += 1
        print(f"  ok       {cap:<22} {what} ({time.perf_counter() - start:.2f} s)", file=out)
        for line in found if cap in CONTRACT else ():
            findings += 1
            print(f"  contract {cap:<22} {safe_text(line)}", file=out)
    if others:
        print(f"  present  {', '.join(others)} (not smoke-tested: the claim suite tests them)", file=out)
    missing = [c for c in SMOKE if not g.has(c)]
    if missing:
        print(f"  absent   {', '.join(missing)} (their tests will be 'not applicable')", file=out)
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
    ``ATTNCLAIMS_IMPORT_TIMEOUT``): two guarded calls per smoke check and per malformed call, each within the
    per-call limit, plus slack. Only a backstop: every call is limited by the guard and its watchdog."""
    return 2 * (len(SMOKE) + _MALFORMED_CALLS) * (call_timeout or 20.0) + 30.0


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
    from attnclaims.orchestrator import describe_exit, import_timeout, kill_group
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
        what = late or f"ended the process ({describe_exit(code)})"  # check's words (orchestrator.probe)
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
