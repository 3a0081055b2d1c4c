"""Kill-matrix test order: the named tests run first (``-p attnclaims.kill_order --attn-kill-order ID``).

A mutant's first-detection run (:func:`attnclaims.mutants.run_target` with ``stop_at_kill``) ends at its
first failing test, so nearly all of its time is the passing tests that run before that one (measured on
six mutants: 73-94 % of each run's time). Naming first the test that caught the mutant last time (a hint,
``Target.first``) makes the kill the first thing the run does. Any order is correct: a test's examples
under the derandomized ``ci`` profile depend on the test, not on what ran before it, and a mutant's row
says killed only when a test of a declared claim failed; a stale hint (a renamed test, a test that no
longer catches the mutant) only costs the time the hint would have saved.

Node ids are those of every run's children (rootdir: the folder above the suite,
:func:`attnclaims.run.process.suite_rootdir`), e.g.
``suite/test_s31_attention.py::test_default_scale_is_one_over_sqrt_dk``; the option repeats.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser) -> None:
    parser.getgroup("attnclaims").addoption(
        "--attn-kill-order", action="append", default=[], metavar="NODEID",
        help="kill-matrix mode: run this test first (repeatable; the given order, then every other test "
             "in collection order)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """Move the named tests to the front, in the order named; the others keep their order (a stable sort)."""
    rank = {nodeid: i for i, nodeid in enumerate(dict.fromkeys(config.getoption("attn_kill_order") or ()))}
    if rank:
        items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
