"""Reference speed against torch CPU float64.

Scaled dot-product attention and multi-head self-attention of the numpy
reference, timed side by side with torch float64 on the same inputs and the
same machine, at realistic shapes: batch 8, 8 heads, d_k = 64 (d_model = 512),
n = 128 … 1024. The methods are called in interleaved rounds (the order rotates
each round) and each one's median is kept, so load from other processes on the
machine hits all of them alike; the ratio reference / torch is the figure to
read, not the absolute times. Torch runs under ``inference_mode`` with its
default thread count; numpy uses its BLAS threads for matmuls.

Comparators:

* attention: ``torch.nn.functional.scaled_dot_product_attention`` (the fused
  CPU kernel a user would call) and the unfused torch composition
  ``softmax(q kᵀ · scale) v`` (the same algorithm as the reference: all scores
  materialised).
* attention, for scale: "numpy minimal", the shortest float64 numpy code for
  the same algorithm (scores, max shift, exp, normalise, times v; no checks, no
  masks). reference / numpy minimal is what the reference's own checks and
  mask handling cost; numpy minimal / torch is what numpy itself costs.
* multi-head: ``torch.nn.MultiheadAttention`` in eval mode with
  ``need_weights=False`` (its fast path for self-attention).

The ratio is taken of the best (minimum) times, the statistic least disturbed
by other load on a shared machine; the ratio of medians is printed next to it.
A cProfile of one reference call at the largest shape says where the
reference's time goes. Run: ``.venv/bin/python bench/bench_reference_speed.py
[--quick] [--threads N]``; the table goes to the terminal and
``bench/results/reference_speed.json``. ``--threads 1`` pins torch and numpy's
BLAS to one thread each: on a loaded machine that ratio is the steadier one.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path


def _threads_from_argv() -> int | None:
    """``--threads N`` must reach OpenBLAS before numpy is imported (it reads its thread count at load)."""
    if "--threads" in sys.argv[1:-1]:
        n = sys.argv[sys.argv.index("--threads") + 1]
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = n
        return int(n)
    return None


THREADS = _threads_from_argv()

# The imports below come after the thread count is set: numpy and torch read it when imported.
import numpy as np  # noqa: E402 - after the thread count is set
import torch  # noqa: E402 - after the thread count is set
import torch.nn.functional as F  # noqa: E402 - after the thread count is set
from rich.console import Console  # noqa: E402 - after the thread count is set
from rich.table import Table  # noqa: E402 - after the thread count is set

from attnclaims.reference import attention, init_multi_head, multi_head_attention  # noqa: E402 - after the thread count is set
from _common import jsonable, machine  # noqa: E402 - bench/ is sys.path[0] when a script runs

RESULTS = Path(__file__).resolve().parent / "results" / "reference_speed.json"
TARGET_RATIO = 2.0


# --------------------------------------------------------------------------- workloads

def attention_workload(batch: int, heads: int, n: int, d_k: int, rng: np.random.Generator) -> dict:
    """q, k, v (batch, heads, n, d_k) and the three callables on them."""
    q, k, v = (rng.standard_normal((batch, heads, n, d_k)) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    scale = 1.0 / np.sqrt(d_k)

    def torch_sdpa():
        with torch.inference_mode():
            return F.scaled_dot_product_attention(tq, tk, tv)

    def torch_unfused():
        with torch.inference_mode():
            return torch.softmax(tq @ tk.transpose(-1, -2) * scale, dim=-1) @ tv

    def numpy_minimal():
        s = (q @ np.swapaxes(k, -1, -2)) * scale  # (b, h, n, n)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v

    return {"reference": lambda: attention(q, k, v), "torch SDPA": torch_sdpa, "torch unfused": torch_unfused,
            "numpy minimal": numpy_minimal}


def torch_mha(params) -> torch.nn.MultiheadAttention:
    """nn.MultiheadAttention holding the reference's parameters (in_proj stacks W_qᵀ, W_kᵀ, W_vᵀ)."""
    d, h = params.d_model, params.num_heads
    m = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.from_numpy(np.concatenate([params.w_q.T, params.w_k.T, params.w_v.T])))
        m.in_proj_bias.copy_(torch.from_numpy(np.concatenate([params.b_q, params.b_k, params.b_v])))
        m.out_proj.weight.copy_(torch.from_numpy(np.ascontiguousarray(params.w_o.T)))
        m.out_proj.bias.copy_(torch.from_numpy(params.b_o))
    return m


def multi_head_workload(batch: int, heads: int, n: int, d_k: int, rng: np.random.Generator) -> dict:
    d_model = heads * d_k
    params = init_multi_head(rng, d_model, heads)
    x = rng.standard_normal((batch, n, d_model))
    tx = torch.from_numpy(x)
    module = torch_mha(params)

    def torch_module():
        with torch.inference_mode():
            return module(tx, tx, tx, need_weights=False)[0]

    # The comparison is only meaningful if both compute the same thing.
    agree = float(np.max(np.abs(torch_module().numpy() - multi_head_attention(x, x, params))))
    if agree > 1e-10:
        raise AssertionError(f"torch MultiheadAttention and the reference differ by {agree:.3g}")
    return {"reference": lambda: multi_head_attention(x, x, params), "torch MultiheadAttention": torch_module}


# --------------------------------------------------------------------------- timing

def time_side_by_side(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Each callable once per round, order rotated every round; one warm-up call each first."""
    names = list(fns)
    for f in fns.values():
        f()
    times = {name: [] for name in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            gc.collect()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def profile(fn, top: int = 6) -> list[dict]:
    """One call under cProfile; the functions with the most own time, as % of the call."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = []
    for (path, _line, func), (_cc, _nc, tottime, cumtime, _callers) in stats.stats.items():
        where = f"{Path(path).name}:{func}" if path != "~" else func
        rows.append({"function": where, "own_s": tottime, "cum_s": cumtime, "own_pct": 100 * tottime / total})
    return sorted(rows, key=lambda r: r["own_s"], reverse=True)[:top]


def run(quick: bool = False, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    if quick:
        # one small shape, two rounds: a smoke run (every round of every shape pays a gc.collect() per method,
        # a tenth of a second or more once torch is imported)
        shapes, repeats, batch, heads, d_k = [64], {64: 2}, 2, 2, 32
    else:
        shapes, repeats, batch, heads, d_k = [128, 256, 512, 1024], {128: 9, 256: 7, 512: 5, 1024: 3}, 8, 8, 64
    out = {"batch": batch, "heads": heads, "d_k": d_k, "d_model": heads * d_k, "attention": [], "multi_head": []}
    last = {}
    for kind, make in (("attention", attention_workload), ("multi_head", multi_head_workload)):
        for n in shapes:
            fns = make(batch, heads, n, d_k, rng)
            times = time_side_by_side(fns, repeats[n])
            med = {m: statistics.median(t) for m, t in times.items()}
            best = {m: min(t) for m, t in times.items()}
            out[kind].append({
                "n": n, "repeats": repeats[n], "min_s": best, "median_s": med,
                "ratio_reference_over": {m: best["reference"] / best[m] for m in best if m != "reference"},
                "ratio_of_medians": {m: med["reference"] / med[m] for m in med if m != "reference"},
            })
            last[kind] = fns["reference"]
            del fns
            gc.collect()
    out["profile"] = {kind: {"n": shapes[-1], "top": profile(fn)} for kind, fn in last.items()}
    return out


def verdicts(results: dict) -> dict:
    """Target: the reference within 2× of torch (the first torch comparator of each kind), best times."""
    misses = []
    for kind, primary in (("attention", "torch SDPA"), ("multi_head", "torch MultiheadAttention")):
        for r in results[kind]:
            ratio = r["ratio_reference_over"][primary]
            if ratio > TARGET_RATIO:
                misses.append({"kind": kind, "n": r["n"], "vs": primary, "ratio": ratio})
    return {"target_ratio": TARGET_RATIO, "within_target": not misses, "misses": misses}


def print_tables(results: dict, summary: dict, console: Console) -> None:
    b, h, d_k = results["batch"], results["heads"], results["d_k"]
    for kind, title in (("attention", f"attention, q/k/v ({b}, {h}, n, {d_k}) float64"),
                        ("multi_head", f"multi-head self-attention, x ({b}, n, {h * d_k}), {h} heads, float64")):
        rows = results[kind]
        methods = list(rows[0]["min_s"])
        t = Table(title=f"{title}: best seconds of {rows[0]['repeats']}+ rounds side by side; "
                        f"ratio = reference / torch (best; median in brackets)")
        t.add_column("n", justify="right")
        for m in methods:
            t.add_column(m, justify="right")
        for m in methods[1:]:
            t.add_column(f"ratio vs {m}", justify="right")
        for r in rows:
            ratio_cells = []
            for m in methods[1:]:
                x = r["ratio_reference_over"][m]
                colour = "green" if x <= TARGET_RATIO else "red"
                ratio_cells.append(f"[{colour}]{x:.2f}×[/{colour}] ({r['ratio_of_medians'][m]:.2f}×)")
            t.add_row(str(r["n"]), *(f"{r['min_s'][m]:.4f}" for m in methods), *ratio_cells)
        console.print(t)
    for kind, prof in results["profile"].items():
        t = Table(title=f"where the reference's time goes: {kind}, n={prof['n']} (cProfile, own time)")
        t.add_column("function")
        t.add_column("own s", justify="right")
        t.add_column("% of call", justify="right")
        for r in prof["top"]:
            t.add_row(r["function"], f"{r['own_s']:.4f}", f"{r['own_pct']:.0f}%")
        console.print(t)
    ok = summary["within_target"]
    verdict = "[green]yes[/green]" if ok else "[red]no[/red]"
    console.print(f"reference within {TARGET_RATIO:g}× of torch everywhere: {verdict}")
    for m in summary["misses"]:
        console.print(f"  [red]{m['kind']} n={m['n']}[/red]: {m['ratio']:.2f}× {m['vs']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small shape, for a smoke run (a few seconds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for torch and numpy's BLAS (default: the libraries' defaults)")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON output (default {RESULTS}, or reference_speed_threadsN.json with --threads N)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = RESULTS if not args.threads else RESULTS.with_name(f"reference_speed_threads{args.threads}.json")
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    results = run(quick=args.quick, seed=args.seed)
    results["threads"] = {"requested": args.threads, "torch": torch.get_num_threads(),
                          "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    summary = verdicts(results)
    doc = {"benchmark": "reference_speed", "quick": args.quick, "seed": args.seed, "machine": machine(),
           "results": results, "summary": summary, "elapsed_s": round(time.perf_counter() - start, 2)}
    print_tables(results, summary, Console(width=160))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n")
    print(f"wrote {args.out} ({doc['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
