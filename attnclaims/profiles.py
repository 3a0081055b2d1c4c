"""Hypothesis profiles (registered once, on import of this module).

* ``dev``      quick local iteration: few examples, random seeds.
* ``ci``       derandomized (the seed is derived from the test, so every run draws the same
               examples and verdicts are reproducible); the default of ``attnclaims`` and of
               the pytest plugin.
* ``thorough`` many examples and long sequences (n >= 256).

Strategies size their draws with :func:`limits`, so one profile name sets both the
number of examples and how large they are.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, settings

from attnclaims.vocab import DEFAULT_PROFILE, PROFILES

__all__ = ["PROFILES", "DEFAULT_PROFILE", "Limits", "current_profile", "limits", "pinned_constants"]

# report_multiple_bugs=False: a test reports its one minimal failure, never an ExceptionGroup.
# filter_too_much: an implementation that declines some inputs has those examples rejected
# (attnclaims.declines); it is judged on the examples it ran, not failed by a health check.
_common = dict(deadline=None, print_blob=True, report_multiple_bugs=False,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much])
# dev and ci skip the explain phase: on a failing library test it costs up to ~30 s and the report
# already carries the shrunk example; thorough keeps it.
_quick_phases = tuple(p for p in Phase if p is not Phase.explain)
settings.register_profile("dev", max_examples=20, phases=_quick_phases, **_common)
settings.register_profile("ci", max_examples=50, derandomize=True, database=None, phases=_quick_phases, **_common)
settings.register_profile("thorough", max_examples=400, **_common)


@dataclass(frozen=True)
class Limits:
    max_seq: int        # largest n_q / n_k drawn
    max_dim: int        # largest d_k / d_v / d_model drawn
    max_batch: int
    long_seq: int       # length used by the "long sequence" cases


_LIMITS = {
    "dev": Limits(max_seq=8, max_dim=8, max_batch=2, long_seq=64),
    "ci": Limits(max_seq=12, max_dim=12, max_batch=3, long_seq=128),
    "thorough": Limits(max_seq=320, max_dim=64, max_batch=4, long_seq=512),
}


def current_profile() -> str:
    name = settings.get_current_profile_name()
    return name if name in _LIMITS else DEFAULT_PROFILE


def limits() -> Limits:
    """Size limits of the active profile (``ci`` sizes for any profile not registered here)."""
    return _LIMITS[current_profile()]


# ---------------------------------------------------------------------------------------------
# The same examples in every process: hypothesis' pool of local constants pinned
# ---------------------------------------------------------------------------------------------
# With probability 0.05-0.15 per primitive draw, hypothesis draws a constant from the source of every "local"
# module (not the standard library, not site-packages, not a test file) imported so far in the process
# (hypothesis.internal.conjecture.providers._get_local_constants, hypothesis 6.170). So a derandomized test's
# examples depended on the process's history: ``check --claim X`` (fewer modules imported) or a forked CI lane drew
# other examples than a full run, a non-editable install (attnclaims in site-packages) others than the repository's
# editable one, and an adapter's own source constants changed what its tests drew. Inside the claim suite's tests
# (attnclaims.plugin: every test with a claim marker) the local pool is pinned empty — hypothesis' own global
# constants (0, ±1, powers of two, the float edge values) stay — so a ``ci`` test draws the same examples
# whatever was imported before it. The pool is a private part of hypothesis: CI pins hypothesis
# (.ci/constraints.txt), where tests/run/test_plugin.py's test of this passes; a hypothesis without it (older than
# the pool, or a release that moved it) leaves nothing to pin and runs as it is (that test then fails in CI).

_PINNED = [0]
try:
    from hypothesis.internal.conjecture import providers as _providers

    _LOCAL_CONSTANTS = _providers._get_local_constants
    _NO_LOCAL_CONSTANTS = _providers.Constants()
    _CACHE = _providers.CONSTANTS_CACHE
except (ImportError, AttributeError):  # another hypothesis: no pool of local constants to pin
    _providers = None
else:
    def _local_constants():
        return _NO_LOCAL_CONSTANTS if _PINNED[0] else _LOCAL_CONSTANTS()

    _providers._get_local_constants = _local_constants


@contextlib.contextmanager
def pinned_constants():
    """Within: hypothesis draws no constant of the process's local modules (above). Hypothesis caches the
    constants each draw may take; the cache is cleared on entry and on exit so that neither side sees the
    other's pool."""
    _PINNED[0] += 1
    if _providers is not None:
        _CACHE.cache.clear()
    try:
        yield
    finally:
        _PINNED[0] -= 1
        if _providers is not None:
            _CACHE.cache.clear()
