"""Every negative control fails its broken implementation for every seed and profile (attnclaims/suite/test_negative_controls.py).

A control that misses its planted bug under one draw makes its claim an *error* for every implementation
under that draw (``attnclaims check --profile dev --seed S``). The controls therefore run under a fixed,
derandomized draw (``CONTROL_PROFILE``); the ``ci`` run of the control module shows that each control fails
under it, and this test runs the whole module again as ``attnclaims check`` would under ``--profile dev``
with two seeds — among them the two that once let a control miss (2149641773: "RMSNorm does not remove a
constant offset"; 1: ``cache_not_updated`` in the cached-decoding test) — in fresh processes, so that the
test modules are imported under ``dev`` as they are in such a run. Every control must fail there too.
The two runs go in parallel (~25 s each on one core).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from attnclaims.suite import test_negative_controls as controls

SEEDS = (2149641773, 1)
PROFILE = "dev"
RUN_LIMIT_S = 600


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[int, tuple[int, str]]:
    """One pytest process per seed, under the dev profile, all started at once: seed -> (exit status, output)."""
    folder = tmp_path_factory.mktemp("controls")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    started = {}
    for seed in SEEDS:
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "attnclaims.suite.test_negative_controls", "-q",
               "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "test_property_test_rejects_broken_implementation",
               "--hypothesis-profile", PROFILE, f"--hypothesis-seed={seed}", "--rootdir", str(folder)]
        started[seed] = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True)
    done = {}
    for seed, proc in started.items():
        try:
            out, _ = proc.communicate(timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            out = f"did not finish within {RUN_LIMIT_S} s\n{out}"
        done[seed] = (proc.returncode, out)
    return done


@pytest.mark.parametrize("seed", SEEDS)
def test_every_control_fails_its_broken_implementation_under_dev_with_this_seed(runs, seed):
    code, out = runs[seed]
    tail = "\n".join(out.splitlines()[-30:])
    assert code == 0, f"--hypothesis-profile {PROFILE} --hypothesis-seed={seed}: exit status {code}\n{tail}"
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) == len(controls.CONTROLS), \
        f"{len(controls.CONTROLS)} controls, but the run says: {tail}"


def test_controls_run_under_a_fixed_draw_whatever_the_active_profile():
    """The runner's settings come from CONTROL_PROFILE and are derandomized, whichever profile is loaded."""
    from hypothesis import settings

    previous = settings.get_current_profile_name()
    seen = []
    try:
        for profile in ("dev", "ci", "thorough"):
            settings.load_profile(profile)
            wrapped = controls.without_shrinking(controls.CONTROLS[0][0])
            chosen = wrapped._hypothesis_internal_use_settings
            with controls.control_profile():
                inside = settings.get_current_profile_name()
            seen.append((chosen.max_examples, chosen.derandomize, inside, settings.get_current_profile_name()))
    finally:
        settings.load_profile(previous)
    fixed = settings.get_profile(controls.CONTROL_PROFILE)
    assert seen == [(fixed.max_examples, True, controls.CONTROL_PROFILE, p) for p in ("dev", "ci", "thorough")], seen

