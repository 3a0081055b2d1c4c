"""The adapter guide's example, run verbatim, and what a contract finding looks like next to it.

``docs/adapters.md`` ("Write the adapter") promises that its example adapter passes every check. The
code block is read from the page as it is written (no copy here that could drift from it), saved as a
module and run through every implementation test (``-m impl_test``, the derandomized ``ci`` profile, a
fresh pytest process), as ``attnclaims check --impl mypkg.attnclaims_adapter:impl`` runs it; the verdicts
come from :func:`attnclaims.verdicts.compute_verdicts`. No check may fail, no claim may come out refuted,
blocked or error, and the exit status is 0.

Then a correct numpy attention that leaves out the example's shape checks — the form the example had,
and the form three independent numpy implementations written outside this project took: it accepts a mask
of shape (n_q, 2) when n_k = 1, because ``np.where`` broadcasts. That is exactly one *contract finding*
(``attnclaims/suite/test_contract.py``, kind ``contract``), one line with the fix, and nothing else: every claim as
for the example, exit status 0.

Cost: two runs of the implementation tests on a two-capability adapter, about 25 s of CPU each (mostly
collecting the suite).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

PROBLEMS = ("refuted", "blocked", "error")

#: the example without its two shape checks (a correct attention on every valid call): smoke's own
#: ``UncheckedMask`` (tests/run/smoke_impls.py), which smoke's tests show one contract finding for too
UNCHECKED = "from smoke_impls import UncheckedMask\n\nimpl = UncheckedMask()\n"


def documented_example() -> str:
    """The code block of docs/adapters.md that starts ``# mypkg/attnclaims_adapter.py``, verbatim."""
    for parent in Path(__file__).resolve().parents:
        page = parent / "docs" / "adapters.md"
        if page.is_file():
            break
    else:
        pytest.skip("docs/adapters.md is not next to this installed copy of the tests (it ships with the repository)")
    blocks = re.findall(r"^```python\n(# mypkg/attnclaims_adapter\.py\n.*?)^```", page.read_text(encoding="utf-8"),
                        re.S | re.M)
    assert len(blocks) == 1, f"docs/adapters.md: expected one example adapter block, found {len(blocks)}"
    return blocks[0]


def run_checks(suite_run, module: str, source: str) -> tuple[str, list, dict, int]:
    """Every implementation test against ``module:impl`` (written from ``source``) in a fresh pytest process
    (``suite_run`` in ``tests/conftest.py``): (the implementation's name, its evidence, its verdict per claim,
    the exit status ``check`` would give)."""
    from attnclaims.evidence import Evidence
    from attnclaims.registry import load_registry
    from attnclaims.verdicts import compute_verdicts, exit_status

    data = suite_run(f"{module}:impl", pythonpath=[str(Path(__file__).resolve().parent)], profile="ci",
                     files={f"{module}.py": source}).results
    name = data["implementation"]["name"]
    evidence = [Evidence.from_dict(e) for e in data["evidence"]]
    verdicts = compute_verdicts(load_registry(), evidence, [name])
    mine = {cid: cols[name] for cid, cols in verdicts.items() if name in cols}
    return name, evidence, mine, exit_status(verdicts)


def _problems(verdicts: dict) -> dict[str, str]:
    return {cid: f"{v.verdict}: {v.reason[:400]}" for cid, v in verdicts.items()
            if v.is_problem or v.verdict.startswith(PROBLEMS)}


def _not_passed(evidence) -> list[str]:
    return [f"{e.name} [{e.kind}] {e.outcome}: {e.message[:300]}" for e in evidence
            if e.outcome not in ("passed", "not-applicable")]


def test_the_documented_example_adapter_passes_every_check(suite_run):
    """The guide's example verbatim: no failed or erroring check of any kind (contract findings included),
    no refuted, blocked or error claim, exit status 0; its own checks ran (softmax-distribution positive)."""
    name, evidence, verdicts, status = run_checks(suite_run, "mypkg_attnclaims_adapter", documented_example())
    assert not _not_passed(evidence), "\n".join(_not_passed(evidence))
    assert not _problems(verdicts), _problems(verdicts)
    assert status == 0
    rejected = {e.name for e in evidence if e.kind == "contract" and e.outcome == "passed"}
    assert any("test_masks_that_do_not_broadcast_are_rejected[attention]" in n for n in rejected), rejected
    assert any("test_queries_and_keys_of_different_widths_are_rejected" in n for n in rejected), rejected
    assert verdicts["softmax-distribution"].verdict not in ("not applicable", "no evidence"), verdicts


def test_a_correct_attention_that_accepts_a_non_broadcasting_mask_has_one_contract_finding(suite_run):
    """Without the mask check, numpy broadcasting lets a mask of two keys through when n_k = 1: one contract
    finding, stating what was accepted and the fix, and nothing else — the claims as for the documented
    example, exit status 0."""
    name, evidence, verdicts, status = run_checks(suite_run, "unchecked_numpy_attention", UNCHECKED)
    bad = [e for e in evidence if e.outcome not in ("passed", "not-applicable")]
    assert len({e.name for e in bad}) == 1, "\n".join(_not_passed(evidence))
    finding = bad[0]
    assert finding.kind == "contract" and finding.outcome == "failed", (finding.kind, finding.outcome)
    assert "test_masks_that_do_not_broadcast_are_rejected[attention]" in finding.name, finding.name
    first_line = finding.message.splitlines()[0]
    assert "attention accepts a mask of shape" in first_line and "instead of raising" in first_line, first_line
    assert "broadcasting lets it through when n_" in first_line, first_line
    assert "Fix in the adapter: check the mask against the scores' shape" in first_line, first_line
    assert not _problems(verdicts), _problems(verdicts)
    assert status == 0
    assert verdicts["softmax-distribution"].verdict not in ("not applicable", "no evidence"), verdicts
