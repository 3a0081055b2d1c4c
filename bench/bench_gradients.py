"""How small a backward-pass error the gradient checks catch, next to torch.autograd.gradcheck's defaults and
FlashAttention's rule, the false alarms on correct implementations, and the time the checks add to a run.

For seeded attention cases (shapes, masks, scales as the strategies draw them) and encoder layers:

* **suite**: the conformance check of attnclaims/suite/test_gradients.py — |impl − ref| ≤ bound elementwise, the derived
  bound :func:`attnclaims.checks.bounds.attention_vjp_error` for dq, dk, dv, the per-case measured one
  (:mod:`attnclaims.checks.bounds`) for the encoder layer. A perturbation of relative size ε of
  every entry, g(1 + ε s) with random signs s, is detected when ε > tol / max_i(|g_i| / scale_i): that ε is
  the case's detection threshold.
* **gradcheck**: ``torch.autograd.gradcheck`` defaults (eps 1e-6, atol 1e-5, rtol 1e-3) accept an analytic
  gradient whose entries are within atol + rtol·|numerical| of the central difference: a relative
  perturbation is detected only when ε|g_i| > 1e-5 + 1e-3|g_i| for some entry, ε > min_i(1e-5/|g_i| + 1e-3)
  (and the central difference itself errs by ~eps² + u/eps ≈ 1e-10 relative, far below that).
* **FlashAttention**: error vs the float64 reference ≤ 2 × the error of the same computation naively in the
  implementation's precision (flash-attention's tests, ``(dq - dq_ref).abs().max() <= 2 * (dq_pt - dq_ref).abs().max()``):
  detected when ε·max|g| > 2·max|naive − golden|; for float64 the golden result is long double.

False alarms: the error/bound ratio of the einsum, loops and log-sum-exp styles and of torch on every case
(≤ 1 means no alarm). Time: ``pytest attnclaims/suite/test_gradients.py`` for the reference and torch (ci profile, one
process), next to the verdict times of bench/results/speed_idle.json.

    python bench/bench_gradients.py [--quick] [--out bench/results/gradients.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import jsonable, machine  # noqa: E402  (the bench directory is not a package)

from attnclaims.checks import bounds as BP  # noqa: E402  (below the sys.path entry)
from attnclaims.checks import bounds as T  # noqa: E402  (below the sys.path entry)
from attnclaims.checks.bounds import golden_dtype  # noqa: E402  (below the sys.path entry)
import attnclaims.reference as RB  # noqa: E402  (below the sys.path entry)
from attnclaims.reference.attention import _attention_backward, _row_softmax  # noqa: E402  (below the sys.path entry)
from attnclaims.reference import init_encoder_layer  # noqa: E402  (below the sys.path entry)

GRADCHECK = {"eps": 1e-6, "atol": 1e-5, "rtol": 1e-3}
SCALES = (None, None, 0.5, 2.0, -1.0, 0.125)


def attention_cases(rng, count):
    out = []
    for i in range(count):
        batch = [(), (2,), (2, 3)][i % 3]
        n_q, n_k, d_k, d_v = (int(a) for a in rng.integers(1, 24, size=4))
        e = float(rng.choice([-2.0, 0.0, 1.0]))
        q, k = (rng.uniform(-1, 1, batch + s) * 2.0 ** e for s in [(n_q, d_k), (n_k, d_k)])
        v = rng.standard_normal(batch + (n_k, d_v))
        mask = None
        if i % 2:
            mask = rng.random(batch + (n_q, n_k)) < 0.6
            mask[..., 0] = True
        d = rng.standard_normal(batch + (n_q, d_v))
        out.append((q, k, v, d, mask, SCALES[i % len(SCALES)]))
    return out


def attention_bound(c, dtype, i):
    q, k, v, d, mask, scale = c
    u = T.unit_roundoff(dtype)
    e = T.attention_vjp_error(q, k, v, d, mask, scale, u=u)[i]
    if u == T.U64:
        return 2 * T.Bound(e, u)
    return T.Bound(e, u) + T.Bound(T.attention_vjp_error(q, k, v, d, mask, scale, u=T.U64)[i], T.U64)


def ratio(out, ref, bound: T.Bound) -> float:
    """max |out − ref| / scale, in units of the bound's tol (≤ 1: passes)."""
    scale = np.broadcast_to(bound.scale, np.shape(ref))
    err = np.abs(np.asarray(out, np.float64) - ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(scale > 0, err / np.where(scale > 0, scale, 1.0), np.where(err > 0, np.inf, 0.0))
    return float(r.max() / bound.tol) if r.size else 0.0


def suite_threshold(ref, bound: T.Bound) -> float:
    scale = np.broadcast_to(bound.scale, np.shape(ref))
    with np.errstate(divide="ignore", invalid="ignore"):
        sens = np.where(scale > 0, np.abs(ref) / np.where(scale > 0, scale, 1.0), np.inf)
    top = float(sens.max()) if sens.size else 0.0
    return bound.tol / top if top > 0 else float("inf")


def gradcheck_threshold(ref) -> float:
    a = np.abs(ref)
    a = a[a > 0]
    return float(np.min(GRADCHECK["atol"] / a + GRADCHECK["rtol"])) if a.size else float("inf")


def flash_threshold(naive, golden) -> float:
    top = float(np.max(np.abs(golden))) if np.size(golden) else 0.0
    err = float(np.max(np.abs(np.asarray(naive, np.longdouble) - np.asarray(golden, np.longdouble)))) if top else 0.0
    return 2 * err / top if top else float("inf")


def _naive_attention(c, dtype):
    q, k, v, d, mask, scale = c
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    qb, kb, vb = (np.broadcast_to(np.asarray(a, np.float64).astype(dtype), batch + a.shape[-2:]) for a in (q, k, v))
    s = (qb @ np.swapaxes(kb, -1, -2)) * dtype.type(1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    target = batch + (q.shape[-2], k.shape[-2])
    a = _row_softmax(np.broadcast_to(s, target), None if mask is None else np.broadcast_to(mask, target))
    c_ = dtype.type(1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    dq, dk, dv, _ = _attention_backward(qb, kb, vb, a, np.asarray(d, np.float64).astype(dtype), c_)
    return RB.sum_to(dq, q.shape), RB.sum_to(dk, k.shape), RB.sum_to(dv, v.shape)


def implementations(libraries: bool) -> dict:
    from attnclaims.zoo.einsum_style import einsum_impl
    from attnclaims.zoo.logsumexp_style import logsumexp_impl
    from attnclaims.zoo.loops_style import loops_impl

    impls = {"einsum": einsum_impl, "loops": loops_impl, "logsumexp": logsumexp_impl}
    if libraries:
        try:
            from attnclaims.impls import resolve

            impls["torch"] = resolve("torch")
        except Exception as exc:  # torch not installed: the table says so
            print(f"torch unavailable: {exc}")
    return impls


def run_attention(rng, count, libraries):
    impls = implementations(libraries)
    rows = []
    for idx, c in enumerate(attention_cases(rng, count)):
        q, k, v, d, mask, scale = c
        ref = RB.attention_vjp(q, k, v, d, mask=mask, scale=scale)
        naive32 = _naive_attention(c, np.dtype(np.float32))
        golden_l = _naive_attention(c, np.dtype(np.longdouble)) if golden_dtype(np.float64) is not None else ref
        naive64 = _naive_attention(c, np.dtype(np.float64))
        row = {"case": idx, "shape": [list(np.shape(a)) for a in (q, k, v)], "mask": mask is not None, "scale": scale}
        for i, name in enumerate(("dq", "dk", "dv")):
            b64 = attention_bound(c, np.float64, i)
            b32 = attention_bound(c, np.float32, i)
            row[name] = {
                "suite_float64": suite_threshold(ref[i], b64),
                "suite_float32": suite_threshold(ref[i], b32),
                "gradcheck": gradcheck_threshold(ref[i]),
                "flash_float64": flash_threshold(naive64[i], golden_l[i]),
                "flash_float32": flash_threshold(naive32[i], ref[i]),
                "alarm_ratio": {},
            }
            for iname, impl in impls.items():
                out = impl.attention_vjp(q, k, v, d, mask=mask, scale=scale)[i]
                row[name]["alarm_ratio"][iname] = ratio(out, ref[i], b64)
        rows.append(row)
    return rows


def run_encoder(rng, count, libraries):
    impls = implementations(libraries)
    rows = []
    for idx in range(count):
        d_model, heads, d_ff, n = [(8, 2, 16, 5), (12, 3, 24, 7), (16, 4, 32, 9)][idx % 3]
        p = init_encoder_layer(rng, d_model, heads, d_ff, norm_first=bool(idx % 2), norm_spread=0.3)
        x, d = rng.standard_normal((2, n, d_model)), rng.standard_normal((2, n, d_model))
        ref = RB.encoder_layer_vjp(x, p, d)
        bounds = BP.measured_bounds("encoder_layer_vjp", ref, (x, p, d, None), np.float64)
        leaves = dict(BP.leaves(ref))
        row = {"case": idx, "d_model": d_model, "norm_first": p.norm_first,
               "suite_float64": min(suite_threshold(leaves[k], bounds[k]) for k in leaves),
               "gradcheck": min(gradcheck_threshold(leaves[k]) for k in leaves), "alarm_ratio": {}}
        for iname, impl in impls.items():
            got = dict(BP.leaves(impl.encoder_layer_vjp(x, p, d)))
            row["alarm_ratio"][iname] = max(ratio(got[k], leaves[k], bounds[k]) for k in leaves)
        rows.append(row)
    return rows


def time_tests(impls, quick):
    out = {}
    for impl in impls:
        # through the orchestrator, the one module that starts pytest (its deadlines, its process group)
        args = [sys.executable, "-m", "attnclaims.run.process", "pytest", "--pyargs", "attnclaims.suite.test_gradients",
                "--attn-impl", impl,
                "-q", "-p", "no:xdist", "--hypothesis-profile", "dev" if quick else "ci"]
        t0 = time.perf_counter()
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
        out[impl] = {"seconds": round(time.perf_counter() - t0, 1), "exit": proc.returncode,
                     "summary": (proc.stdout.strip().splitlines() or [""])[-1]}
    try:  # the whole verdict (attnclaims check, one process) on the quiet machine, for comparison
        runs = json.loads((ROOT / "bench/results/speed_idle.json").read_text())["results"]["runs"]
        verdict = {r["impl"]: round(r["wall_s"], 1) for r in runs if r.get("kind") == "check" and r.get("workers") == 0}
    except (OSError, ValueError, KeyError, TypeError):
        verdict = {}
    return {"gradient_tests": out, "verdict_seconds_quiet_machine": verdict}


def _median(values):
    v = [x for x in values if np.isfinite(x)]
    return float(np.median(v)) if v else float("inf")


def _worst(values):
    """The largest finite threshold; an all-zero gradient (dq = 0 when every query has one key) has none."""
    v = [x for x in values if np.isfinite(x)]
    return float(max(v)) if v else float("inf")


def summarise(att, enc):
    s = {}
    for name in ("dq", "dk", "dv"):
        rows = [r[name] for r in att]
        s[name] = {k: {"median": _median([r[k] for r in rows]), "worst": _worst([r[k] for r in rows])}
                   for k in ("suite_float64", "suite_float32", "gradcheck", "flash_float64", "flash_float32")}
        s[name]["zero_gradient_cases"] = sum(1 for r in rows if not np.isfinite(r["gradcheck"]))
        s[name]["max_alarm_ratio"] = {i: max(r["alarm_ratio"][i] for r in rows) for i in rows[0]["alarm_ratio"]}
    s["encoder_layer"] = {"suite_float64": {"median": _median([r["suite_float64"] for r in enc]),
                                            "worst": _worst([r["suite_float64"] for r in enc])},
                          "gradcheck": {"median": _median([r["gradcheck"] for r in enc])},
                          "max_alarm_ratio": {i: max(r["alarm_ratio"][i] for r in enc) for i in enc[0]["alarm_ratio"]}}
    return s


def print_summary(s, times):
    print("detection threshold (relative perturbation of every entry; median / worst over the cases)")
    print(f"{'':8}{'suite f64':>22}{'suite f32':>22}{'gradcheck':>22}{'FlashAttn f64':>22}{'FlashAttn f32':>22}")
    for name in ("dq", "dk", "dv"):
        cells = [f"{s[name][k]['median']:.1e} / {s[name][k]['worst']:.1e}"
                 for k in ("suite_float64", "suite_float32", "gradcheck", "flash_float64", "flash_float32")]
        print(f"{name:8}" + "".join(f"{c:>22}" for c in cells))
        print(f"{'':8}false alarms (max error/bound, ≤ 1 passes): {s[name]['max_alarm_ratio']}")
    e = s["encoder_layer"]
    print(f"encoder layer vjp: suite f64 {e['suite_float64']['median']:.1e} / {e['suite_float64']['worst']:.1e}, "
          f"gradcheck {e['gradcheck']['median']:.1e}; false alarms {e['max_alarm_ratio']}")
    for impl, t in times.get("gradient_tests", {}).items():
        print(f"time of attnclaims/suite/test_gradients.py for {impl}: {t}")
    if times.get("verdict_seconds_quiet_machine"):
        print(f"for comparison, attnclaims check (all claims, quiet machine): {times['verdict_seconds_quiet_machine']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: few cases, dev profile for the timing")
    ap.add_argument("--out", default=str(ROOT / "bench/results/gradients.json"))
    ap.add_argument("--no-libraries", action="store_true", help="skip torch (the correct styles only)")
    ap.add_argument("--no-timing", action="store_true", help="skip timing the gradient tests")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2026_12_01)
    att = run_attention(rng, 6 if args.quick else 60, not args.no_libraries)
    enc = run_encoder(rng, 3 if args.quick else 12, not args.no_libraries)
    summary = summarise(att, enc)
    times = {} if args.no_timing else time_tests(["reference"] + ([] if args.no_libraries else ["torch"]), args.quick)
    print_summary(summary, times)
    result = {"benchmark": "gradients", "quick": args.quick, "machine": machine(), "gradcheck_defaults": GRADCHECK, "summary": summary, "timing": times,
              "attention_cases": att, "encoder_cases": enc}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(jsonable(result), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
