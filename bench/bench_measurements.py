"""Timings of the measurements, and their robustness across seeds (not part of CI).

    python bench/bench_measurements.py                      # wall and CPU seconds of each measurement, ci profile
    python bench/bench_measurements.py --profile thorough
    python bench/bench_measurements.py --seeds 30           # every measurement must pass, and every control
                                                            # (run one size down, as in the tests) fail, for seeds 0 … 29
    python bench/bench_measurements.py --seeds 30 --only softmax-saturation

Figures go to a temporary folder unless --out is given.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time

from attnclaims.measurements import CONTROLS, MEASUREMENTS, run

CONTROL_PROFILE = {"dev": "dev", "ci": "dev", "thorough": "ci"}


def timed(name, profile, out, seed=None):
    wall, cpu = time.perf_counter(), time.process_time()
    result = run(name, profile=profile, out_dir=out, seed=seed)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="ci", choices=("dev", "ci", "thorough"))
    parser.add_argument("--seeds", type=int, default=0, help="check robustness over this many seeds")
    parser.add_argument("--only", action="append", help="measurement names (default: all)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="attnclaims-bench-")
    names = args.only or list(MEASUREMENTS)
    if not args.seeds:
        total_wall = total_cpu = 0.0
        print(f"{'measurement':28s} {'passed':>6s} {'wall s':>8s} {'cpu s':>8s}")
        for name in names:
            result, wall, cpu = timed(name, args.profile, out)
            total_wall, total_cpu = total_wall + wall, total_cpu + cpu
            print(f"{name:28s} {str(result.passed):>6s} {wall:8.2f} {cpu:8.2f}", flush=True)
        print(f"{'total':28s} {'':6s} {total_wall:8.2f} {total_cpu:8.2f}  (figures in {out})")
        return 0
    bad = []
    for name in names:
        controls = [c for c, ctl in CONTROLS.items() if ctl.measurement == name]
        passes, control_fails = 0, {c: 0 for c in controls}
        for seed in range(args.seeds):
            result, _, _ = timed(name, args.profile, out, seed)
            passes += result.passed
            if not result.passed:
                bad.append(f"{name} seed {seed}: {result.decision}")
            for c in controls:
                ctl, _, _ = timed(c, CONTROL_PROFILE[args.profile], out, seed)
                control_fails[c] += not ctl.passed
                if ctl.passed:
                    bad.append(f"control {c} seed {seed} passed: {ctl.decision}")
        summary = ", ".join(f"{c} failed {k}/{args.seeds}" for c, k in control_fails.items())
        print(f"{name}: passed {passes}/{args.seeds}; {summary}", flush=True)
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
