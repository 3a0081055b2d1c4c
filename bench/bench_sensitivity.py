"""Detection sensitivity of the suite's conformance check against the usual assertion defaults.

A relative perturbation of size ε = 10⁻ᵏ (k = 3 … 15) is injected into the
float64 output of a correct implementation, out′ = out ⊙ (1 + ε·s) with random
signs s = ±1 per element, and compared with the reference's output by three
checks in the same run:

* the suite: ``attnclaims/checks/bounds/`` ``assert_close`` with the derived
  ``conformance`` bound (implementation's rounding + the reference's), exactly
  as the property tests and the adapter tests call it;
* ``numpy.testing.assert_allclose`` at its defaults (rtol = 1e-7, atol = 0);
* ``torch.testing.assert_close`` at its float64 defaults (rtol = 1e-7, atol = 1e-7).

Operations: attention, multi-head attention, encoder layer (Post-LN and
Pre-LN); each on a few fixed inputs. The perturbed outputs come from the three
test-only correct implementations of different styles (einsum, explicit loops
with an online softmax, log domain) and from the reference itself. A check's
*detection threshold* is the smallest ε such that it flags every
perturbation of size ≥ ε on every input and every implementation: on the
grid 10⁻ᵏ, and exactly (bisection in log ε per input, the worst input kept),
which is what the ratios use — the grid alone would round torch's threshold
(≈ 1.5e-7) up to 1e-6 and overstate the suite's advantage by up to 10×.

False alarms: the unperturbed outputs of the same implementations, and of the
torch and jax adapters where installed (``--no-libraries`` skips them), must
all pass the suite's check, on the fixed inputs above and on ``--draws``
random inputs per operation (shapes, score scales up to peaked rows, random
and causal masks, Post-LN and Pre-LN); the tables give the largest measured
error / bound, i.e. the headroom below a false alarm. Only the test-only
implementations count as false alarms: a library may legitimately compute
less precisely (jax.nn.dot_product_attention computes its softmax in float32
even for float64 inputs), which the table shows against the float32 bound.

Run: ``.venv/bin/python bench/bench_sensitivity.py [--quick]``; the table goes
to the terminal and ``bench/results/sensitivity.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from attnclaims.guard import CheckFailure
from attnclaims.impls import ImplementationError, resolve
from attnclaims.reference import causal_mask, init_encoder_layer, init_multi_head, padding_mask
from attnclaims.checks import bounds as SP
from attnclaims.reference.impl import Reference
from attnclaims.checks import bounds as T
from _common import jsonable, machine  # bench/ is sys.path[0] when a script runs

RESULTS = Path(__file__).resolve().parent / "results" / "sensitivity.json"
KS = list(range(3, 16))  # ε = 10^-k
TARGET_FACTOR = 1e4  # at least this many times more sensitive than torch.testing.assert_close defaults
REF = Reference()

#: test-only correct implementations (different styles) whose outputs are perturbed
BASES = {
    "reference": "reference",
    "einsum": "attnclaims.zoo.einsum_style:einsum_impl",
    "loops": "attnclaims.zoo.loops_style:loops_impl",
    "logsumexp": "attnclaims.zoo.logsumexp_style:logsumexp_impl",
}
#: library adapters: compared unperturbed only (a library may legitimately be less accurate than float64)
LIBRARIES = {"torch": "torch", "jax": "jax"}
CAPABILITY = {"attention": "attention", "multi-head": "multi_head_attention", "encoder layer": "encoder_layer"}


# --------------------------------------------------------------------------- cases

class Case:
    """One operation on fixed inputs: how to call an implementation, and the suite's bound for it."""

    def __init__(self, op: str, name: str, call, error, args: tuple, sweep: bool = True, refine=None):
        self.op, self.name, self.call, self.error, self.args = op, name, call, error, args
        self.sweep = sweep  # False: a random draw for the false-alarm check only (no perturbation sweep)
        # (derived bound, reference output) -> the bound the suite's test uses; whole layers cap the
        # derived bound by the per-case measured one (attnclaims/checks/bounds/layers.py), as the tests do
        self.refine = refine

    def run(self, impl) -> np.ndarray:
        return np.asarray(self.call(impl), dtype=np.float64)

    def bound(self) -> T.Bound:
        derived = T.conformance(self.error, *self.args, dtype=np.float64)
        return derived if self.refine is None else self.refine(derived, self.run(REF))


def _layer_bound(x, p, mask):
    return lambda derived, ref: SP.encoder_layer_bound(derived, ref, x, p, mask, np.float64)


def cases(rng: np.random.Generator, quick: bool) -> list[Case]:
    out = []

    def attn(name, q, k, v, mask=None):
        out.append(Case("attention", name, lambda impl: impl.attention(q, k, v, mask=mask),
                        T.attention_error, (q, k, v, mask, None)))

    attn("(2, 2, 8, 16)", *(rng.standard_normal((2, 2, 8, 16)) for _ in range(3)))
    if not quick:
        attn("causal, n=12, d_k=8", *(rng.standard_normal((1, 12, 8)) for _ in range(3)), mask=causal_mask(12))
        q, k, v = (rng.standard_normal((2, 6, 32)) for _ in range(3))
        attn("peaked (q×4), d_k=32", 4.0 * q, k, v)

    def mha(name, x_q, x_kv, p, mask=None):
        out.append(Case("multi-head", name, lambda impl: impl.multi_head_attention(x_q, x_kv, p, mask),
                        T.multi_head_error, (x_q, x_kv, p, mask)))

    x = rng.standard_normal((2, 8, 16))
    mha("self, (2, 8, 16), 4 heads", x, x, init_multi_head(rng, 16, 4))
    if not quick:
        x_q, x_kv = rng.standard_normal((2, 6, 16)), rng.standard_normal((2, 10, 16))
        pad = padding_mask(np.array([10, 7]), 10)  # (2, 1, 10): the last keys of batch 1 are padding
        mha("cross, padding, 2 heads", x_q, x_kv, init_multi_head(rng, 16, 2), pad)

    def enc(name, x, p, mask=None):
        out.append(Case("encoder layer", name, lambda impl: impl.encoder_layer(x, p, mask),
                        T.encoder_layer_error, (x, p, mask), refine=_layer_bound(x, p, mask)))

    enc("Post-LN, (2, 8, 16), 4 heads, d_ff 32", rng.standard_normal((2, 8, 16)), init_encoder_layer(rng, 16, 4, 32))
    if not quick:
        enc("Pre-LN, causal, (2, 8, 16)", rng.standard_normal((2, 8, 16)),
            init_encoder_layer(rng, 16, 4, 32, norm_first=True), causal_mask(8))
    return out


def random_cases(rng: np.random.Generator, draws: int) -> list[Case]:
    """``draws`` random inputs per operation for the false-alarm check: shapes, score scales (up to peaked
    softmax rows), causal or random masks that leave every query a key, Post-LN and Pre-LN."""
    out = []
    for i in range(draws):
        b, n_q, n_k = int(rng.integers(1, 4)), int(rng.integers(1, 17)), int(rng.integers(1, 17))
        h = int(rng.choice([1, 2, 4]))
        d_k = int(rng.choice([1, 2, 4, 8, 16]))
        score_scale = float(rng.choice([0.1, 1.0, 4.0, 16.0]))
        mask = None
        if rng.random() < 0.5:
            mask = rng.random((b, n_q, n_k)) < 0.7
            mask[..., int(rng.integers(n_k))] = True  # every query keeps a key
        q = score_scale * rng.standard_normal((b, h, n_q, d_k))
        k, v = rng.standard_normal((b, h, n_k, d_k)), rng.standard_normal((b, h, n_k, d_k))
        head_mask = None if mask is None else mask[:, None]
        out.append(Case("attention", f"random {i}",
                        lambda impl, q=q, k=k, v=v, m=head_mask: impl.attention(q, k, v, mask=m),
                        T.attention_error, (q, k, v, head_mask, None), sweep=False))
        d_model = h * d_k
        x_q, x_kv = rng.standard_normal((b, n_q, d_model)), rng.standard_normal((b, n_k, d_model))
        p = init_multi_head(rng, d_model, h)
        out.append(Case("multi-head", f"random {i}",
                        lambda impl, a=x_q, c=x_kv, p=p, m=mask: impl.multi_head_attention(a, c, p, m),
                        T.multi_head_error, (x_q, x_kv, p, mask), sweep=False))
        x = rng.standard_normal((b, n_q, d_model)) * float(rng.choice([1.0, 10.0]))
        pe = init_encoder_layer(rng, d_model, h, 2 * d_model, norm_first=bool(rng.random() < 0.5))
        self_mask = causal_mask(n_q) if rng.random() < 0.5 else None
        out.append(Case("encoder layer", f"random {i}",
                        lambda impl, x=x, p=pe, m=self_mask: impl.encoder_layer(x, p, m),
                        T.encoder_layer_error, (x, pe, self_mask), sweep=False,
                        refine=_layer_bound(x, pe, self_mask)))
    return out


# --------------------------------------------------------------------------- the three checks

def suite_check(out, ref, bound: T.Bound) -> tuple[bool, float]:
    """(detected, measured / bound) with the suite's own assert_close and conformance bound."""
    try:
        measured = T.assert_close(out, ref, bound, "sensitivity")
        return False, measured / bound.tol
    except CheckFailure as exc:
        return True, (exc.measured if exc.measured is not None else np.inf) / bound.tol


def numpy_check(out, ref) -> bool:
    try:
        np.testing.assert_allclose(out, ref)  # defaults: rtol=1e-7, atol=0
        return False
    except AssertionError:
        return True


def torch_check(out, ref) -> bool:
    try:
        torch.testing.assert_close(torch.from_numpy(out), torch.from_numpy(ref))  # float64: rtol=1e-7, atol=1e-7
        return False
    except AssertionError:
        return True


CHECKS = ("suite", "numpy assert_allclose", "torch assert_close")


def smallest_detected(detects, lo: float = 1e-18, hi: float = 1e-1, steps: int = 40) -> float:
    """The smallest ε the check flags, by bisection in log ε (detection is monotone once ε·|out| dominates the
    implementation's own rounding error, which is ~1e-16 relative); ``hi`` if it flags nothing below it."""
    if not detects(hi):
        return np.inf
    if detects(lo):
        return lo
    a, b = np.log10(lo), np.log10(hi)
    for _ in range(steps):
        mid = (a + b) / 2
        a, b = (a, mid) if detects(10.0 ** mid) else (mid, b)
    return 10.0 ** b


def threshold(detected_by_k: dict[int, bool]) -> float | None:
    """Smallest ε = 10^-k such that every perturbation of size >= ε was detected; None if not even 10^-3."""
    best = None
    for k in KS:
        if not detected_by_k[k]:
            break
        best = 10.0 ** -k
    return best


# --------------------------------------------------------------------------- run

def load(specs: dict) -> dict:
    impls = {}
    for name, spec in specs.items():
        try:
            impls[name] = resolve(spec)
        except ImplementationError as exc:
            impls[name] = str(exc)
    return impls


def run(quick: bool = False, seed: int = 0, libraries: bool = True, draws: int | None = None) -> dict:
    rng = np.random.default_rng(seed)
    draws = (5 if quick else 100) if draws is None else draws
    all_cases = cases(rng, quick) + random_cases(rng, draws)
    bases = load(BASES)
    libs = load(LIBRARIES) if libraries else {}
    ops = list(dict.fromkeys(c.op for c in all_cases))

    # detected[op][check][k] = detected on every (case, base)
    detected = {op: {ch: {k: True for k in KS} for ch in CHECKS} for op in ops}
    counts = {op: {ch: {k: 0 for k in KS} for ch in CHECKS} for op in ops}
    refined = {op: {ch: 0.0 for ch in CHECKS} for op in ops}  # worst (largest) smallest-detected ε
    trials = {op: 0 for op in ops}
    alarms = []  # every unperturbed comparison: implementation, case, measured / bound
    floor = {op: 0.0 for op in ops}  # largest normwise relative error of a correct implementation
    for case in all_cases:
        ref = case.run(REF)
        bound = case.bound()
        for impl_name, impl in {**bases, **libs}.items():
            if isinstance(impl, str):
                continue
            row = {"op": case.op, "case": case.name, "implementation": impl_name,
                   "role": "correct (test-only)" if impl_name in bases else "library adapter"}
            if impl_name not in bases and not callable(getattr(impl, CAPABILITY[case.op], None)):
                alarms.append({**row, "status": "n/a"})
                continue
            out = case.run(impl)
            alarm, ratio = suite_check(out, ref, bound)
            row.update(status="false alarm" if alarm else "passed", measured_over_bound=ratio)
            if alarm and impl_name not in bases:
                # A library adapter off by more than float64 rounding allows: is it float32-level instead?
                row["status"] = "detected"
                f32 = T.conformance(case.error, *case.args, dtype=np.float32)
                row["measured_over_float32_bound"] = suite_check(out, ref, f32)[1]
            alarms.append(row)
            if impl_name not in bases or not case.sweep:
                continue
            floor[case.op] = max(floor[case.op], float(np.max(np.abs(out - ref)) / np.max(np.abs(ref))))
            trials[case.op] += 1
            signs = np.where(np.random.default_rng([seed, len(alarms)]).random(out.shape) < 0.5, -1.0, 1.0)
            for k in KS:
                perturbed = out * (1.0 + 10.0 ** -k * signs)
                hits = {"suite": suite_check(perturbed, ref, bound)[0],
                        "numpy assert_allclose": numpy_check(perturbed, ref),
                        "torch assert_close": torch_check(perturbed, ref)}
                for ch, hit in hits.items():
                    counts[case.op][ch][k] += hit
                    detected[case.op][ch][k] &= hit
            perturb = lambda e: out * (1.0 + e * signs)
            exact = {"suite": lambda e: suite_check(perturb(e), ref, bound)[0],
                     "numpy assert_allclose": lambda e: numpy_check(perturb(e), ref),
                     "torch assert_close": lambda e: torch_check(perturb(e), ref)}
            for ch, detects in exact.items():
                refined[case.op][ch] = max(refined[case.op][ch], smallest_detected(detects))

    summary_ops = {}
    for op in ops:
        th = refined[op]
        summary_ops[op] = {
            "threshold_grid": {ch: threshold(detected[op][ch]) for ch in CHECKS}, "threshold": th,
            "sensitivity_vs_torch": th["torch assert_close"] / th["suite"],
            "sensitivity_vs_numpy": th["numpy assert_allclose"] / th["suite"],
            "rounding_floor": floor[op], "threshold_over_floor": th["suite"] / floor[op] if floor[op] else None,
        }
    false_alarms = [a for a in alarms if a["status"] == "false alarm"]
    measured = [a["measured_over_bound"] for a in alarms if a["status"] in ("passed", "false alarm")]
    random_summary = {}
    for op in ops:
        rows = [a for a in alarms if a["op"] == op and a["case"].startswith("random ")]
        by_impl = {}
        for a in rows:
            entry = by_impl.setdefault(a["implementation"], {"inputs": 0, "false_alarms": 0, "detected": 0,
                                                             "max_measured_over_bound": 0.0})
            if a["status"] == "n/a":
                continue
            entry["inputs"] += 1
            entry["false_alarms"] += a["status"] == "false alarm"
            entry["detected"] += a["status"] == "detected"
            if a["status"] in ("passed", "false alarm"):
                entry["max_measured_over_bound"] = max(entry["max_measured_over_bound"], a["measured_over_bound"])
        random_summary[op] = by_impl
    return {
        "ks": KS, "cases": [{"op": c.op, "case": c.name} for c in all_cases if c.sweep], "random_draws": draws,
        "random_inputs": random_summary,
        "implementations": {n: (v if isinstance(v, str) else "ok") for n, v in {**bases, **libs}.items()},
        "detections": {op: {ch: {str(k): f"{counts[op][ch][k]}/{trials[op]}" for k in KS} for ch in CHECKS}
                       for op in ops},
        "per_op": summary_ops, "unperturbed": [a for a in alarms if not a["case"].startswith("random ")],
        "false_alarms": len(false_alarms), "max_unperturbed_measured_over_bound": max(measured, default=0.0),
    }


def verdicts(results: dict) -> dict:
    ratios = {op: s["sensitivity_vs_torch"] for op, s in results["per_op"].items()}
    met = all(r is not None and r >= TARGET_FACTOR for r in ratios.values())
    return {"target_factor_vs_torch": TARGET_FACTOR, "sensitivity_target_met": met,
            "zero_false_alarms": results["false_alarms"] == 0, "ratios_vs_torch": ratios}


# --------------------------------------------------------------------------- output

def eps_str(e: float | None) -> str:
    return "> 1e-03 (none)" if e is None else f"1e-{round(-np.log10(e)):02d}"


def print_tables(results: dict, summary: dict, console: Console) -> None:
    ops = list(results["per_op"])
    t = Table(title="detections per perturbation size ε (perturbed outputs detected / compared)")
    t.add_column("ε", justify="right")
    for op in ops:
        for ch in CHECKS:
            t.add_column(f"{op}\n{ch}", justify="right")
    for k in KS:
        t.add_row(f"1e-{k:02d}", *(results["detections"][op][ch][str(k)] for op in ops for ch in CHECKS))
    console.print(t)

    t = Table(title="detection threshold: smallest ε always detected (bisection; grid value in brackets)")
    t.add_column("operation")
    for ch in CHECKS:
        t.add_column(ch, justify="right")
    t.add_column("suite vs torch", justify="right")
    t.add_column("suite vs numpy", justify="right")
    t.add_column("rounding floor", justify="right")
    t.add_column("suite / floor", justify="right")
    for op, s in results["per_op"].items():
        r = s["sensitivity_vs_torch"]
        colour = "green" if r is not None and r >= TARGET_FACTOR else "red"
        rn, tf = s["sensitivity_vs_numpy"], s["threshold_over_floor"]
        t.add_row(op, *(f"{s['threshold'][ch]:.1e} ({eps_str(s['threshold_grid'][ch])})" for ch in CHECKS),
                  f"[{colour}]{r:.1e}×[/{colour}]", f"{rn:.1e}×",
                  f"{s['rounding_floor']:.1e}", f"{tf:.0e}×" if tf else "—")
    console.print(t)

    t = Table(title="false alarms: unperturbed correct implementations vs the reference (suite's check)")
    t.add_column("operation")
    t.add_column("case")
    impls = list(dict.fromkeys(a["implementation"] for a in results["unperturbed"]))
    for name in impls:
        t.add_column(name, justify="right")
    rows: dict[tuple, dict] = {}
    for a in results["unperturbed"]:
        if a["status"] == "n/a":
            cell = "n/a"
        elif a["status"] == "passed":
            cell = f"{a['measured_over_bound']:.1e}"
        elif a["status"] == "detected":
            cell = (f"[yellow]{a['measured_over_bound']:.0e} (float32 bound: "
                    f"{a['measured_over_float32_bound']:.1e})[/yellow]")
        else:
            cell = f"[red]FALSE ALARM {a['measured_over_bound']:.1e}[/red]"
        rows.setdefault((a["op"], a["case"]), {})[a["implementation"]] = cell
    for (op, case), cells in rows.items():
        t.add_row(op, case, *(cells.get(n, "—") for n in impls))
    console.print(t)
    console.print("cells: measured error / float64 bound (< 1 passes; the distance below 1 is the headroom). "
                  "Yellow: a library adapter beyond float64 rounding, shown against the float32 bound; "
                  "not counted as a false alarm (only the test-only correct implementations are).")
    t = Table(title=f"false alarms on {results['random_draws']} random inputs per operation (shapes, score scales, "
                    f"masks, Post/Pre-LN): alarms / inputs, largest measured / bound")
    t.add_column("operation")
    impls = list(dict.fromkeys(n for by in results["random_inputs"].values() for n in by))
    for name in impls:
        t.add_column(name, justify="right")
    for op, by in results["random_inputs"].items():
        cells = []
        for name in impls:
            e = by.get(name)
            if not e or not e["inputs"]:
                cells.append("n/a")
            elif e["detected"]:
                cells.append(f"[yellow]{e['detected']}/{e['inputs']} beyond float64[/yellow]")
            else:
                colour = "red" if e["false_alarms"] else "green"
                cells.append(f"[{colour}]{e['false_alarms']}/{e['inputs']}[/{colour}], "
                             f"{e['max_measured_over_bound']:.1e}")
        t.add_row(op, *cells)
    console.print(t)
    console.print("rounding floor: largest ‖out − ref‖∞ / ‖ref‖∞ of the correct implementations; "
                  "suite / floor: how far above it the suite's threshold sits")
    for n, v in results["implementations"].items():
        if v != "ok":
            console.print(f"  [yellow]{n} not run: {v}[/yellow]")
    ok = summary["sensitivity_target_met"]
    console.print(f"suite ≥ {TARGET_FACTOR:.0e}× more sensitive than torch.testing.assert_close defaults on every "
                  f"operation: {'[green]yes[/green]' if ok else '[red]no[/red]'}; false alarms: "
                  f"{results['false_alarms']}; largest unperturbed error / bound: "
                  f"{results['max_unperturbed_measured_over_bound']:.2g}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one input per operation, for a smoke run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=None,
                    help="random inputs per operation for the false-alarm check (default 100, --quick 5)")
    ap.add_argument("--no-libraries", action="store_true", help="skip the torch and jax adapters' false-alarm check")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS})")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    results = run(quick=args.quick, seed=args.seed, libraries=not args.no_libraries, draws=args.draws)
    summary = verdicts(results)
    doc = {"benchmark": "sensitivity", "quick": args.quick, "seed": args.seed, "machine": machine(),
           "results": results, "summary": summary, "elapsed_s": round(time.perf_counter() - start, 2)}
    print_tables(results, summary, Console(width=200))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
