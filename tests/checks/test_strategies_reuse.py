"""The strategies hand out one strategy object per argument tuple (``reused`` in
``attnclaims/checks/strategies/common.py``), and that object draws exactly what a new one would.

Why it matters: hypothesis validates every new strategy object at its first draw, and the case strategies
build their inner ones (``arrays(shape)``, ``dims(...)``, ``masks(shape)``) at every example, so a run of the
suite spent about a fifth of its CPU time validating objects it had validated before (bench/README.md,
"Where a check's time goes"). Reusing them must not change one draw: the verdicts and the kill matrix are
stated for the ``ci`` profile's draws. About the suite, not the article: no claim marker.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from attnclaims.checks import strategies as S
from attnclaims.checks.strategies import common as C
from attnclaims.checks.strategies import attention as A
from attnclaims.profiles import _LIMITS


@pytest.fixture(autouse=True)
def ci_limits(patch_strategies):
    """Sizes of the ``ci`` profile whatever profile runs this module."""
    patch_strategies("limits", lambda: _LIMITS["ci"])


def _sample(strategy, n: int = 40) -> list:
    """``n`` derandomized draws (the same seed for every strategy handed in: the test's source is fixed)."""
    out: list = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out


def test_the_same_arguments_give_the_same_strategy_object():
    """Equal arguments, however spelled (a list or a tuple, numpy or Python integers), give one object; other
    arguments another."""
    assert S.arrays((2, 3)) is S.arrays([2, 3]) is S.arrays((np.int64(2), 3))
    assert S.arrays((2, 3)) is not S.arrays((3, 2)) and S.arrays((2, 3)) is not S.arrays((2, 3), scale=2.0)
    assert S.dims(square=True, max_dim=6) is S.dims(square=True, max_dim=6)
    assert S.dims(square=True) is not S.dims(square=False)
    assert A.masks((2, 3, 4)) is A.masks((2, 3, 4))
    assert S.seq_lengths(2) is S.seq_lengths(2) and S.batch_shapes(1, 2) is S.batch_shapes(1, 2)


def test_an_unhashable_argument_gets_a_new_object_that_draws():
    """A list argument cannot be a cache key: the strategy is built afresh and draws as before."""
    @C.reused
    @st.composite
    def pick(draw, options):
        return draw(st.sampled_from(options))

    first, second = pick([1, 2, 3]), pick([1, 2, 3])
    assert first is not second
    assert set(_sample(first, 30)) <= {1, 2, 3}
    assert pick((1, 2)) is pick((1, 2))


@pytest.mark.parametrize("name, build", [
    ("arrays", lambda f: f((3, 5), 1.0, 0.0, None)),
    ("arrays, seeded (more entries than ELEMENTWISE_LIMIT)", lambda f: f((20, 20), 2.0, 0.5, None)),
    ("dims", lambda f: f(square=False, max_dim=8)),
    ("model_cases", lambda f: f(square=True)),
])
def test_a_reused_strategy_draws_what_a_new_one_draws(name, build):
    """The cached object and a freshly built one (the undecorated composite, ``__wrapped__``) give the same
    derandomized draws, value for value."""
    composite = {"arrays": C._arrays, "dims": C.dims, "model_cases": C.model_cases}[name.split(",")[0]]
    reused, fresh = _sample(build(composite)), _sample(build(composite.__wrapped__))
    assert build(composite) is build(composite)
    assert build(composite.__wrapped__) is not build(composite.__wrapped__)
    assert len(reused) == len(fresh) > 0
    for a, b in zip(reused, fresh):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
        elif isinstance(a, C.ModelCase):
            assert a.dims == b.dims and np.array_equal(a.x, b.x) and np.array_equal(a.memory, b.memory)
        else:
            assert a == b
