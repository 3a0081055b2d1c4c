"""Print the test routes of bench/mutation.sh as JSON: which test files run for a mutant of which source file.

Run in the copy's root. The baselines have their own tests; the strategies their meta-tests
(tests/test_strategies.py), the tolerances the tolerance part of those and the soundness and
tightness tests of tests/test_reference_mutation.py, and the formula tests of tests/test_tolerance_formulas.py; the
strategies also tests/test_strategies_mutation.py (tests for their survivors); every other file of reference/ is covered
by the reference's tests. The tests added
for this run's survivors (tests/test_reference_mutation.py) run for every file but tests/strategies.py (which they
never import).

"profiles" names the hypothesis profile of a route's mutant runs when it is not the ``ci`` of bench/mutation.sh:
tests/strategies.py runs under the fast ``mutation`` profile (bench/mutation_server.py), and its survivors are
re-checked under ``ci`` at the end of the run (docs/mutation_strategies.md).
"""
import json
import os


def exists(*paths: str) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


extra = exists("tests/test_reference_mutation.py")
core = exists("tests/test_reference.py") + extra
# The tolerance meta-tests of tests/test_strategies.py (the rest of that module tests the strategies).
tolerance_meta = [f"tests/test_strategies.py::{name}" for name in (
    "test_assert_close_message_and_measured_bound", "test_exact_zero_and_differs_checks",
    "test_bounds_scale_with_the_unit_roundoff", "test_attention_bound_covers_a_float32_evaluation",
)] if os.path.exists("tests/test_strategies.py") else []
routes = {
    "*": core,
    "reference/baselines.py": exists("tests/test_baselines.py") + extra,
    # Not tests/test_reference_mutation.py: it never imports tests/strategies.py (checked: after a run of it,
    # no strategies module is loaded), so it cannot fail on a mutant of it and only costs ~0.7 s a mutant.
    "tests/strategies.py": exists("tests/test_strategies.py", "tests/test_strategies_mutation.py",
                                  "tests/test_documented_inputs.py"),  # docs/adapters.md tables vs the code
    "tests/tolerances.py": exists("tests/test_tolerance_formulas.py") + tolerance_meta + extra,
    # The per-case measured bound of whole layers: its calibration and power tests, and the check of the
    # ORDERS that docs/adapters.md states (the layer tests of tests/test_s7_architecture.py use it too, but
    # take minutes; these take seconds).
    "tests/same_precision.py": exists("tests/test_same_precision.py", "tests/test_documented_inputs.py"),
    # The strategies' meta-tests draw many examples: their mutants run under the fast "mutation" profile
    # (bench/mutation_server.py), and bench/mutation.sh re-checks every survivor under the full ci profile.
    "profiles": {"tests/strategies.py": "mutation"} if os.path.exists("tests/strategies.py") else {},
    "watch": sorted(os.path.join("reference", f) for f in os.listdir("reference") if f.endswith(".py"))
    + exists("tests/strategies.py", "tests/tolerances.py", "tests/same_precision.py"),
}
print(json.dumps(routes))
