"""Print the test routes of bench/mutation.sh as JSON: which test files run for a mutant of which source file.

Run in the copy's root. The baselines have their own tests; the strategies their meta-tests
(tests/checks/test_strategies.py), the tolerances the tolerance part of those and the soundness and
tightness tests of tests/reference/test_reference_edges.py, and the formula tests of tests/checks/test_tolerances.py; the
strategies also tests/checks/test_strategies_draws.py (tests for their survivors); every other file of reference/ is covered
by the reference's tests, its backward passes' and its layers' (each component's module holds its forward and its vjp), and
attnclaims/reference/masks.py also by the baselines' tests (its window_mask is the restricted-attention band). The tests added
for this run's survivors (tests/reference/test_reference_edges.py) run for every file but attnclaims/checks/strategies/ (which they
never import).

"profiles" names the hypothesis profile of a route's mutant runs when it is not the ``ci`` of bench/mutation.sh:
attnclaims/checks/strategies/ runs under the fast ``mutation`` profile (bench/mutation_server.py), and its survivors are
re-checked under ``ci`` at the end of the run (docs/mutation_strategies.md).
"""
import json
import os


def exists(*paths: str) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


extra = exists("tests/reference/test_reference_edges.py")
core = exists("tests/reference/test_reference.py", "tests/reference/test_reference_backward.py",
              "tests/reference/test_reference_layers.py",
              # the kernel features' reference functions (scores: log-sum-exp, softmax over several axes,
              # soft-capping, ALiBi; packed: varlen, paged; the FFN activations) have their own modules
              "tests/reference/test_reference_scores.py", "tests/reference/test_reference_packed.py",
              "tests/reference/test_reference_activations.py") + extra
# The tolerance meta-tests of tests/checks/test_strategies.py (the rest of that module tests the strategies).
tolerance_meta = [f"tests/checks/test_strategies.py::{name}" for name in (
    "test_assert_close_message_and_measured_bound", "test_exact_zero_and_differs_checks",
    "test_bounds_scale_with_the_unit_roundoff", "test_attention_bound_covers_a_float32_evaluation",
)] if os.path.exists("tests/checks/test_strategies.py") else []


def modules(folder: str) -> list[str]:
    """The modules of a package of the check library (attnclaims/checks/strategies/, attnclaims/checks/bounds/)."""
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")) if os.path.isdir(folder) else []


strategy_files = modules("attnclaims/checks/strategies")
bound_files = modules("attnclaims/checks/bounds")
# Every module of tests/checks/ that imports the package runs for its mutants (tests/project/test_mutation_routes.py
# keeps it so), the quick ones first: a mutant stops at its first failing test.
strategy_tests = exists("tests/checks/test_strategies.py", "tests/checks/test_strategies_draws.py",
                        "tests/checks/test_strategies_packed.py",
                        "tests/checks/test_declines.py",  # draws from the strategies (the draws fixture's decline checks)
                        "tests/spec/test_documented_inputs.py",  # docs/adapters.md tables vs the code
                        "tests/checks/test_strategies_layers.py", "tests/checks/test_tolerances.py",
                        "tests/checks/test_backward_precision.py", "tests/checks/test_same_precision.py",
                        "tests/checks/test_bounds_16bit.py")
bound_tests = (exists("tests/checks/test_tolerances.py") + tolerance_meta + extra
               + exists("tests/checks/test_same_precision.py", "tests/checks/test_backward_precision.py",
                        "tests/spec/test_documented_inputs.py", "tests/checks/test_bounds_store.py",
                        "tests/checks/test_bounds_16bit.py")
               # the one test of the messages module that reads the error models: assert_close's failure message
               + [f"tests/checks/test_messages.py::{name}" for name in (
                   "test_a_conformance_failure_leads_with_the_relative_error_then_the_scaled_figure",)
                  if os.path.exists("tests/checks/test_messages.py")]
               # and the one draw test that does: the contract calls' error models
               + [f"tests/checks/test_strategies_draws.py::{name}" for name in (
                   "test_contract_calls_batch_every_batched_argument_and_carry_their_error_model",)
                  if os.path.exists("tests/checks/test_strategies_draws.py")])
routes = {
    "*": core,
    "attnclaims/reference/baselines.py": exists("tests/reference/test_reference_baselines.py") + extra,
    "attnclaims/reference/masks.py": core + exists("tests/reference/test_reference_baselines.py"),
    # Not tests/reference/test_reference_edges.py: it never imports attnclaims/checks/strategies/ (checked: after a run of it,
    # no strategies module is loaded), so it cannot fail on a mutant of it and only costs ~0.7 s a mutant.
    **{f: strategy_tests for f in strategy_files},
    # The error models: the formula tests and tolerance meta-tests, and the per-case measured bounds' calibration and
    # power tests with the check of the ORDERS that docs/adapters.md states (the layer tests of
    # attnclaims/suite/test_s7_architecture.py use them too, but take minutes; these take seconds).
    **{f: bound_tests for f in bound_files},
    # The strategies' meta-tests draw many examples: their mutants run under the fast "mutation" profile
    # (bench/mutation_server.py), and bench/mutation.sh re-checks every survivor under the full ci profile.
    "profiles": {f: "mutation" for f in strategy_files},
    "watch": sorted(os.path.join("attnclaims/reference", f) for f in os.listdir("attnclaims/reference") if f.endswith(".py"))
    + strategy_files + bound_files,
}
print(json.dumps(routes))
