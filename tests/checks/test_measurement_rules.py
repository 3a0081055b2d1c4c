"""The decision rules of the measurements, tested on series whose answer is known.

Growth classes (:func:`attnclaims.measurements.stats.select_growth`). The rule must tell n, n log n and
n² apart at the sizes the measurements use, powers of two or not, on exact counts and on counts with a
relative Gaussian noise of 1 % (the noise model the rule states). Each check below is also run against
the rule the suite used before (least squares per class, then the Bayesian information criterion over
constant / log / linear / quadratic, kept here as :func:`_bic_select`): it classified exact n log n data
as quadratic and 7n with 1 % noise as quadratic in most draws, so these checks fail on it — shown by
:func:`test_the_checks_reject_the_former_bic_rule`.

Error probability. For a curve whose minimax distance from every smaller class exceeds twice the
allowance ("separated"), the rule picks a wrong class with probability ≤ α (= 1e-6 by default) under the
stated noise; the tests assert that the pure curves are separated at these sizes, and that 200 seeded
noisy draws of each are all classified correctly (an error would be a 1-in-10⁶ event per draw; the draws
are seeded, so the test is deterministic).

The Post-LN band (``residual-gradient``, :func:`attnclaims.measurements.depth.drift_test`): a one-sided
t-test over independent seeds on the per-layer drift of ln‖∂L/∂x‖. Tested here for its formula, its
false-alarm rate at the boundary, a pass on Post-LN-like curves and a rejection of the same curves losing
5 % per layer — and against the former single-seed rule (max/min ≤ 10³), which passed a 13 %/layer decay.
The measurement's own controls (``residual-gradient:decaying``, ``:plain-band``) run in
``attnclaims/suite/test_measurements.py``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from attnclaims.measurements.depth import BAND_POST, DRIFT_TOLERANCE, drift_test
from attnclaims.measurements.graphs import critical_path, scalar_attention_graph, scalar_rnn_graph
from attnclaims.measurements.recurrence import SCALAR_CEILINGS
from attnclaims.measurements.stats import class_separation, growth_scales, select_growth

#: the sweep of rnn-sequential's position level (ci): powers of two and the points between them
SIZES = np.array([4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512], float)
POW2 = np.array([4, 8, 16, 32, 64, 128, 256, 512], float)
DRAWS = 200


def _bic_select(n, y, **_ignored):
    """The former rule: least squares per class (constant, log, linear, quadratic), smallest BIC wins,
    RSS/m floored at (1e-9·max|y|)². Returns the class name. Kept only to show the checks can fail."""
    n, y = np.asarray(n, float), np.asarray(y, float)
    m = n.size
    bases = {"constant": [np.ones_like(n)], "log": [np.ones_like(n), np.log2(n)], "linear": [np.ones_like(n), n],
             "quadratic": [np.ones_like(n), n, n * n]}
    floor = (1e-9 * float(np.max(np.abs(y)))) ** 2
    bic = {}
    for cls, cols in bases.items():
        b = np.stack(cols, axis=1)
        coef, *_ = np.linalg.lstsq(b, y, rcond=None)
        rss = float(np.sum((y - b @ coef) ** 2))
        bic[cls] = m * math.log(max(rss / m, floor)) + b.shape[1] * math.log(m)
    return min(bic, key=bic.get)


def _new_select(n, y, **kwargs):
    return select_growth(n, y, **kwargs).cls


EXACT = [  # (name, sizes, y(n), expected class, abs_error)
    ("4", SIZES, lambda n: np.full(n.size, 4.0), "constant", 0.0),
    ("2 log2 n + 1", SIZES, lambda n: 2 * np.log2(n) + 1, "log", 0.0),
    ("ceil(log3 n)", SIZES, lambda n: np.ceil(np.log(n) / np.log(3)), "log", 0.5),
    ("7n", SIZES, lambda n: 7 * n, "linear", 0.0),
    ("ceil((n-1)/2)", SIZES, lambda n: np.ceil((n - 1) / 2), "linear", 0.5),
    ("n log2 n", SIZES, lambda n: n * np.log2(n), "nlogn", 0.0),
    ("n log2 n at powers of two", POW2, lambda n: n * np.log2(n), "nlogn", 0.0),
    ("3 n log2 n + 5n + 2", SIZES, lambda n: 3 * n * np.log2(n) + 5 * n + 2, "nlogn", 0.0),
    ("n^2 + 50n", SIZES, lambda n: n * n + 50 * n, "quadratic", 0.0),
    ("9 + 3 ceil(log2 n)", SIZES, lambda n: 9 + 3 * np.ceil(np.log2(n)), "log", 1.5),
]

NOISY = [  # (name, sizes, f(n), expected class): y = f·(1 + 0.01 z)
    ("7n", SIZES, lambda n: 7 * n, "linear"),
    ("7n at powers of two", POW2, lambda n: 7 * n, "linear"),
    ("n log2 n", SIZES, lambda n: n * np.log2(n), "nlogn"),
    ("n log2 n at powers of two", POW2, lambda n: n * np.log2(n), "nlogn"),
    ("n^2", SIZES, lambda n: n * n, "quadratic"),
    ("10 log2 n", SIZES, lambda n: 10 * np.log2(n), "log"),
]


def _exact_failures(select):
    return [f"{name}: {got}, expected {cls}" for name, sizes, f, cls, err in EXACT
            if (got := select(sizes, f(sizes), abs_error=err)) != cls]


def _noisy_failures(select, rel_noise=0.01):
    out = []
    for name, sizes, f, cls in NOISY:
        r = np.random.default_rng(2024)
        wrong = sum(select(sizes, f(sizes) * (1 + rel_noise * r.standard_normal(sizes.size)), rel_noise=rel_noise,
                           separation=False) != cls
                    for _ in range(DRAWS))
        if wrong:
            out.append(f"{name} with {rel_noise:.0%} noise: {wrong}/{DRAWS} misclassified")
    return out


def test_exact_series_get_their_class():
    assert _exact_failures(_new_select) == []


def test_noisy_series_get_their_class_in_every_draw():
    assert _noisy_failures(_new_select) == []


def test_the_checks_reject_the_former_bic_rule():
    """The same checks on the former BIC rule: exact n log n → quadratic, noisy 7n → mostly quadratic."""
    exact = _exact_failures(_bic_select)
    assert any(line.startswith("n log2 n:") and "quadratic" in line for line in exact), exact
    noisy = _noisy_failures(_bic_select)
    assert any(line.startswith("7n with") for line in noisy), noisy


@pytest.mark.parametrize("name,sizes,f,cls", [pytest.param(*case, id=case[0]) for case in NOISY])
def test_pure_curves_are_separated_at_the_sizes_used(name, sizes, f, cls):
    """The error bound α applies to a curve only when it is separated from every smaller class: at these
    sizes and 1 % noise, each curve's distance from every smaller class exceeds twice the allowance."""
    fit = select_growth(sizes, f(sizes), rel_noise=0.01)
    assert fit.cls == cls and fit.separated, fit.to_dict()
    assert fit.error_probability == pytest.approx(1e-6)


def test_sizes_that_cannot_resolve_a_curve_are_shown_as_such():
    """Within 1 % noise, n log₂ n is separated from every smaller class over the measurements' sizes
    (n = 4 … 512) but not over n = 4 … 8; and n log₂ n + 40n is not separated from a line even over
    n = 4 … 512 (the linear term hides the logarithm). There the rule's error bound does not apply, and
    class_separation says so."""
    narrow = np.array([4.0, 5, 6, 7, 8])
    smaller = ("constant", "log", "linear")
    assert min(class_separation(SIZES, SIZES * np.log2(SIZES), smaller, rel_noise=0.01).values()) >= 1
    assert class_separation(narrow, narrow * np.log2(narrow), smaller, rel_noise=0.01)["linear"] < 1
    assert class_separation(SIZES, SIZES * np.log2(SIZES) + 40 * SIZES, smaller, rel_noise=0.01)["linear"] < 1


def test_noise_beyond_the_stated_model_is_not_fitted_silently():
    """10 % noise on 7n, with 0.1 % stated: no class fits within the allowance (cls None), never a
    confident wrong class."""
    r = np.random.default_rng(5)
    y = 7 * SIZES * (1 + 0.1 * r.standard_normal(SIZES.size))
    fit = select_growth(SIZES, y, rel_noise=0.001)
    assert fit.cls is None and fit.big_o == "none of the classes"


def test_noise_too_large_for_the_rule_is_rejected():
    with pytest.raises(ValueError, match="rel_noise=0.2 is too large"):
        growth_scales(np.ones(10), rel_noise=0.2)
    with pytest.raises(ValueError, match="unknown growth classes"):
        select_growth(SIZES, SIZES, classes=("cubic",))


def test_allowance_formula():
    """s_i = abs_error + 1e-9·max|y| + zσ|y_i|/(1 − zσ), z = Φ⁻¹(1 − α/2m)."""
    y = np.array([1.0, 2.0, 4.0, 8.0])
    s, z = growth_scales(y, rel_noise=0.01, abs_error=0.25, alpha=1e-4)
    assert z == pytest.approx(4.2148, abs=1e-4)  # Φ⁻¹(1 − 1.25e-5)
    np.testing.assert_allclose(s, 0.25 + 8e-9 + z * 0.01 * y / (1 - z * 0.01), rtol=1e-12)


def test_scalar_depths_of_rnn_sequential_are_separated():
    """The series rnn-sequential decides on: attention's scalar critical path is 9 + 3⌈log₂ n⌉ (three
    reduction trees over n keys), the RNN's 4n − 1; with the stated allowance (½ per ceiling) the rule
    picks log and linear, separated, at the dev sizes (the smallest sweep, n = 4 … 32)."""
    n = [4, 6, 8, 12, 16, 24, 32]
    att = [critical_path(scalar_attention_graph(k)) for k in n]
    assert att == [9 + 3 * math.ceil(math.log2(k)) for k in n]
    fit_att = select_growth(n, att, abs_error=SCALAR_CEILINGS)
    fit_rnn = select_growth(n, [critical_path(scalar_rnn_graph(k)) for k in n], abs_error=SCALAR_CEILINGS)
    assert (fit_att.cls, fit_att.separated, fit_rnn.cls, fit_rnn.separated) == ("log", True, "linear", True)


# ---------------------------------------------------------------- the Post-LN band (residual-gradient)


def test_drift_test_formula():
    """decays iff mean + t_{S−1}(1 − α)·sd/√S < −tolerance."""
    from scipy import stats

    d = np.array([-0.01, -0.03, 0.02, -0.05, -0.02, 0.0])
    out = drift_test(d, tolerance=0.03, alpha=0.01)
    upper = d.mean() + stats.t.ppf(0.99, 5) * d.std(ddof=1) / math.sqrt(6)
    assert out["upper_bound"] == pytest.approx(upper, rel=1e-12) and out["decays"] is bool(upper < -0.03)
    with pytest.raises(ValueError, match="need >= 2 seeds"):
        drift_test([0.1])


def test_drift_test_false_alarm_rate_at_the_boundary():
    """Gaussian drifts with mean exactly −tolerance (the worst case of "does not decay"): the test rejects in
    a fraction α of the draws. α = 0.05 here so that the rate is measurable: 4000 seeded draws of 16 seeds,
    the count within its binomial 1e-6 tails (≈ 200 ± 70)."""
    r = np.random.default_rng(11)
    rejected = sum(drift_test(-DRIFT_TOLERANCE + 0.024 * r.standard_normal(16), alpha=0.05)["decays"]
                   for _ in range(4000))
    assert 130 <= rejected <= 275, rejected


def _post_ln_like(seed, decay=0.0, layers=48):
    """A Post-LN-like curve ln‖∂L/∂x‖ over L = 1 … 48: a random walk with drift −2 %/layer (Post-LN's mean
    over 16 seeds) and per-layer steps of sd 0.024·√(layers/3) (its per-seed drift spread), × (1 − decay)^L."""
    r = np.random.default_rng(seed)
    steps = -0.02 + np.log1p(-decay) + 0.1 * r.standard_normal(layers)
    return np.cumsum(steps)


def test_the_band_rule_passes_post_ln_like_stacks_and_rejects_a_5_percent_decay():
    """Sixteen seeds of a Post-LN-like curve pass; the same curves losing 5 % more per layer fail."""
    depths = np.arange(1, 49)
    keep = [np.polyfit(depths, _post_ln_like(s), 1)[0] for s in range(16)]
    lose = [np.polyfit(depths, _post_ln_like(s, decay=0.05), 1)[0] for s in range(16)]
    assert not drift_test(keep)["decays"]
    assert drift_test(lose)["decays"]


def test_the_former_single_seed_band_passed_a_13_percent_decay():
    """The former rule (max/min of ‖∂L/∂x‖ over L = 1 … 48 ≤ 10³, one seed) passes a stack losing 13 % per
    layer (0.87^47 ≈ 1.4e-3); the drift test rejects it from any 2 seeds."""
    curve = 47 * np.log(0.87)
    assert math.exp(-curve) <= BAND_POST  # the former decision: passes
    depths = np.arange(1, 49)
    drifts = [np.polyfit(depths, depths * np.log(0.87) + 0.01 * np.random.default_rng(s).standard_normal(48), 1)[0]
              for s in range(2)]
    assert drift_test(drifts)["decays"]
