"""Print the test routes of bench/mutation.sh as JSON: which test files run for a mutant of which source file.

Run in the copy's root. The baselines have their own tests; the strategies and tolerances their
meta-tests; every other file of reference/ is covered by the reference's tests. The tests added
for this run's survivors (tests/test_reference_mutation.py) run for every file.
"""
import json
import os


def exists(*paths: str) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


extra = exists("tests/test_reference_mutation.py")
core = exists("tests/test_reference.py") + extra
helpers = exists("tests/test_strategies.py", "tests/test_tolerances.py") + extra
routes = {
    "*": core,
    "reference/baselines.py": exists("tests/test_baselines.py") + extra,
    "tests/strategies.py": helpers or core,
    "tests/tolerances.py": helpers or core,
    "watch": sorted(os.path.join("reference", f) for f in os.listdir("reference") if f.endswith(".py"))
    + exists("tests/strategies.py", "tests/tolerances.py"),
}
print(json.dumps(routes))
