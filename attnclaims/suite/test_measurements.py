"""Measured claims: statistics, growth classes and the paper's tables, each with a figure.

One test per measurement of :mod:`attnclaims.measurements` runs it at the
active profile's sizes (``dev`` / ``ci`` / ``thorough``, the hypothesis profile
of the run), records its decision, false-alarm bound, data, table and SVG
figures as the claim's evidence, and asserts the decision. Every decision has
a negative control (role "control"): the same rule applied to a system for
which the claim is false must fail — the controls run one size down (``dev``
under ``ci``), since they only need to show that the rule can fail.

The helpers the measurements rely on are tested here too: exact
backpropagation against central differences through the reference encoder,
the complex-step Jacobian, the secular-equation softmax Jacobian norm, the
critical-path and dependency-graph machinery, the growth-class selection and
the confidence intervals.

Tolerances. Central differences with step h on O(1) smooth maps err by
h²|f'''|/6 + u|f|/h ≈ 1e-10 at h = 1e-5; :data:`FD_RTOL` = 1e-6 leaves room
for third derivatives up to 1e4 (attention at these scales has them ≤ 1e2).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from attnclaims.measurements import CONTROLS, MEASUREMENTS, MeasurementResult, run
from attnclaims.measurements.backprop import KINDS, stack_gradients
from attnclaims.measurements.graphs import (
    DAG, attention_graph, critical_path, rnn_graph, scalar_attention_graph, scalar_decoding_graph, scan_graph,
)
from attnclaims.measurements.lipschitz import complex_step_jacobian, dot_product_attention_c, l2_attention_c
from attnclaims.measurements.paths import _layers_needed_identical, dependency_matrix, mha_params, transformer_params
from attnclaims.measurements.scaling import expected_chi, expected_max_normal, softmax_jacobian_norm
from attnclaims.measurements.stats import (
    bounded_mean_interval, chi2_interval, select_growth, slope_shift_bound, weighted_chi2_interval,
)
from attnclaims.profiles import current_profile
from attnclaims.reference import attention, encoder, init_encoder_layer, init_layer_norm
from attnclaims.reference.baselines import conv1d, l2_attention, linear_rnn_scan

FD_RTOL = 1e-6
CONTROL_PROFILE = {"dev": "dev", "ci": "dev", "thorough": "ci"}


def _record_and_check(result: MeasurementResult, attn_record):
    attn_record(decision=result.decision, false_alarm=result.false_alarm, data=result.data, table=result.table,
                measurement=result.name, profile=result.profile, seed=result.seed, seconds=result.seconds,
                figures=result.figures)
    for path in result.figures:
        text = Path(path).read_text(encoding="utf-8")
        assert text.lstrip().startswith("<?xml") and "<svg" in text, f"{path} is not an SVG file"
    json.dumps(result.to_dict())  # the evidence must be plain JSON
    assert result.passed, result.decision


def _measure(name, artifacts_dir, attn_record):
    result = run(name, profile=current_profile(), out_dir=artifacts_dir)
    _record_and_check(result, attn_record)
    return result


def _control(name, artifacts_dir, attn_record):
    """Run control ``name`` one size down and assert that its decision fails."""
    result = run(name, profile=CONTROL_PROFILE[current_profile()], out_dir=artifacts_dir)
    attn_record(decision=result.decision, control=CONTROLS[name].why, measurement=result.name,
                options=result.options, figures=result.figures)
    assert not result.passed, f"control {name} ({CONTROLS[name].why}) passed: {result.decision}"


# ---------------------------------------------------------------- the measurements


@pytest.mark.claim("scaling-variance", kind="statistical")
def test_scaling_variance(artifacts_dir, attn_record):
    """Var[q·k] = d_k and Var[q·k/√d_k] = 1 for d_k = 1 … 4096; E|q·k| → √(2d_k/π); max of n ~ √(2 d_k ln n)."""
    _measure("scaling-variance", artifacts_dir, attn_record)


@pytest.mark.claim("softmax-saturation", kind="statistical")
def test_softmax_saturation(artifacts_dir, attn_record):
    """Unscaled scores: E‖J‖₂ ~ d_k^(−1/2); scaled: no dependence on d_k beyond the small-d_k dip."""
    _measure("softmax-saturation", artifacts_dir, attn_record)


@pytest.mark.claim("seq2seq-bottleneck", kind="measurement")
def test_seq2seq_bottleneck(artifacts_dir, attn_record):
    """Colliding inputs of a fixed-length context; exponential forgetting in an RNN; none with attention."""
    _measure("seq2seq-bottleneck", artifacts_dir, attn_record)


@pytest.mark.claim("rnn-gradients", kind="measurement")
def test_rnn_gradients(artifacts_dir, attn_record):
    """‖∂h_T/∂h_1‖ decays / grows at rate ln ρ(W) (linear), vanishing and exploding regimes (tanh)."""
    _measure("rnn-gradients", artifacts_dir, attn_record)


@pytest.mark.claim("rnn-sequential", kind="measurement")
def test_rnn_sequential(artifacts_dir, attn_record):
    """Critical path: RNN O(n), parallel scan O(log n), self-attention O(1); scan == loop."""
    _measure("rnn-sequential", artifacts_dir, attn_record)


@pytest.mark.claim("constant-path-length", "paper-tables", kind="measurement")
def test_vaswani_table1(artifacts_dir, attn_record):
    """Vaswani Table 1 from the Jacobian sparsity of the reference layers."""
    _measure("vaswani-table1", artifacts_dir, attn_record)


@pytest.mark.claim("paper-tables", kind="measurement")
def test_vaswani_table3(artifacts_dir, attn_record):
    """Vaswani Table 3's parameter counts recomputed; multi-head cost identity."""
    _measure("vaswani-table3", artifacts_dir, attn_record)


@pytest.mark.claim("residual-gradient", kind="measurement")
def test_residual_gradient(artifacts_dir, attn_record):
    """Plain stacks lose the gradient, residual + LN stacks keep it in a band; Post-LN vs Pre-LN (Xiong et al.)."""
    _measure("residual-gradient", artifacts_dir, attn_record)


@pytest.mark.claim("interpretability", kind="measurement", role="qualification")
def test_interpretability(artifacts_dir, attn_record):
    """Two different weight distributions with the same output (null space of [Vᵀ; 1ᵀ])."""
    _measure("interpretability", artifacts_dir, attn_record)


@pytest.mark.claim("multihead-expressivity", kind="measurement")
def test_multihead_expressivity(artifacts_dir, attn_record):
    """A two-head output outside the convex hull of the values: linprog infeasible."""
    _measure("multihead-expressivity", artifacts_dir, attn_record)


@pytest.mark.claim("alignment-example", kind="measurement", role="illustration")
def test_alignment_example(artifacts_dir, attn_record):
    """我 爱 中国 → China: weight on 中国 increases monotonically to 1 with the margin; heatmap."""
    _measure("alignment-example", artifacts_dir, attn_record)


@pytest.mark.claim("attention-lipschitz", kind="measurement")
def test_attention_lipschitz(artifacts_dir, attn_record):
    """Dot-product self-attention's local Jacobian norm grows like c²; L2 attention's stays bounded."""
    _measure("attention-lipschitz", artifacts_dir, attn_record)


# ---------------------------------------------------------------- negative controls

_CONTROL_CLAIMS = {
    "scaling-variance": ("scaling-variance", "statistical"),
    "softmax-saturation": ("softmax-saturation", "statistical"),
    "vaswani-table1": ("constant-path-length", "measurement"),
    "vaswani-table3": ("paper-tables", "measurement"),
}


def _control_params():
    params = []
    for name, ctl in CONTROLS.items():
        claim, kind = _CONTROL_CLAIMS.get(ctl.measurement, (MEASUREMENTS[ctl.measurement].claim, "measurement"))
        params.append(pytest.param(name, id=name, marks=pytest.mark.claim(claim, kind=kind, role="control")))
    return params


@pytest.mark.parametrize("name", _control_params())
def test_control_fails(name, artifacts_dir, attn_record):
    _control(name, artifacts_dir, attn_record)


def test_every_measurement_has_a_control():
    controlled = {ctl.measurement for ctl in CONTROLS.values()}
    assert controlled == set(MEASUREMENTS), f"measurements without a control: {set(MEASUREMENTS) - controlled}"


def test_run_rejects_unknown_names_and_profiles(tmp_path):
    with pytest.raises(ValueError, match="unknown measurement 'nope'"):
        run("nope", out_dir=tmp_path)
    with pytest.raises(ValueError, match="profile='fast', but should be one of"):
        run("vaswani-table3", profile="fast", out_dir=tmp_path)


def test_figures_have_labelled_axes(tmp_path):
    """The SVG keeps text as text (svg.fonttype none): axis labels and the title are searchable."""
    result = run("vaswani-table3", profile="dev", out_dir=tmp_path)
    svg = Path(result.figures[0]).read_text(encoding="utf-8")
    assert "parameters (millions)" in svg and "Vaswani Table 3" in svg


# ---------------------------------------------------------------- exact gradients


def _fd_input_gradient(f, x, g, h=1e-5):
    """∂⟨g, f(x)⟩/∂x by central differences, x flattened."""
    out = np.zeros(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        e = e.reshape(x.shape)
        out[i] = (np.sum(g * f(x + e)) - np.sum(g * f(x - e))) / (2 * h)
    return out.reshape(x.shape)


@pytest.mark.parametrize("kind", KINDS)
def test_backprop_matches_finite_differences(kind):
    r = np.random.default_rng(3)
    d, n = 8, 3
    layers = [init_encoder_layer(r, d, 2, 16, norm_first=(kind == "pre"), norm_spread=0.2) for _ in range(2)]
    final = init_layer_norm(d, r, spread=0.2) if kind == "pre" else None
    x = r.standard_normal((1, n, d))
    g = r.standard_normal((1, n, d))

    def forward(xx):
        return stack_gradients(xx, layers, kind, g, final)[0]

    out, gx, per_layer, _ = stack_gradients(x, layers, kind, g, final)
    if kind in ("post", "pre"):
        np.testing.assert_allclose(out, encoder(x, layers, final_norm=final), rtol=0, atol=1e-12)
    fd = _fd_input_gradient(forward, x, g)
    np.testing.assert_allclose(gx, fd, rtol=FD_RTOL, atol=FD_RTOL * np.abs(fd).max())
    # one entry of each kind of parameter, by perturbing the container's array in place on a copy
    for name, attr in (("ffn.w2", ("ffn", "w2")), ("attn.w_q", ("self_attn", "w_q")), ("attn.b_v", ("self_attn", "b_v"))):
        holder = getattr(layers[0], attr[0])
        arr = getattr(holder, attr[1])
        idx = (1, 2) if arr.ndim == 2 else (3,)
        base = arr[idx]
        vals = []
        for step in (1e-5, -1e-5):
            arr[idx] = base + step
            vals.append(np.sum(g * forward(x)))
        arr[idx] = base
        fd_p = (vals[0] - vals[1]) / 2e-5
        assert math.isclose(per_layer[0][name][idx], fd_p, rel_tol=FD_RTOL, abs_tol=FD_RTOL), (name, kind)


def test_complex_step_jacobian_matches_finite_differences():
    r = np.random.default_rng(4)
    n, d = 4, 3
    wq, wk, wv = (r.standard_normal((d, d)) for _ in range(3))
    x = r.standard_normal((n, d))
    for f, ref in ((lambda xx: dot_product_attention_c(xx, wq, wk, wv), lambda xx: attention(xx @ wq, xx @ wk, xx @ wv)),
                   (lambda xx: l2_attention_c(xx, wq, wv), lambda xx: l2_attention(xx, wq, wv))):
        jac = complex_step_jacobian(f, x)
        np.testing.assert_allclose(f(x).real, ref(x), rtol=0, atol=1e-13)
        cols = []
        for i in range(x.size):
            e = np.zeros(x.size)
            e[i] = 1e-6
            cols.append((ref(x + e.reshape(x.shape)) - ref(x - e.reshape(x.shape))).ravel() / 2e-6)
        np.testing.assert_allclose(jac, np.stack(cols, axis=1), rtol=0, atol=1e-7 * max(1.0, np.abs(jac).max()))


def test_softmax_jacobian_norm_matches_eigvalsh():
    r = np.random.default_rng(5)
    for n in (2, 5, 12, 40):
        p = np.exp(r.standard_normal((300, n)) * r.choice([0.1, 1, 10, 100], size=(300, 1)))
        p /= p.sum(axis=1, keepdims=True)
        p[:3] = 1.0 / n  # ties
        p[3] = np.eye(n)[0]  # a weight of exactly 1
        jac = p[:, :, None] * np.eye(n) - p[:, :, None] * p[:, None, :]
        np.testing.assert_allclose(softmax_jacobian_norm(p), np.linalg.eigvalsh(jac)[:, -1], rtol=0, atol=1e-14)
    assert softmax_jacobian_norm(np.array([[0.5, 0.5]]))[0] == pytest.approx(0.5, abs=1e-15)  # sup ‖J‖₂ = ½


def test_exact_moments():
    """E χ_d and m_n against known values: E χ_1 = √(2/π), E χ_2 = √(π/2); m_2 = 1/√π, m_3 = 3/(2√π)."""
    assert expected_chi(1) == pytest.approx(math.sqrt(2 / math.pi), rel=1e-14)
    assert expected_chi(2) == pytest.approx(math.sqrt(math.pi / 2), rel=1e-14)
    assert expected_chi(4096) / math.sqrt(4096) == pytest.approx(1 - 1 / (4 * 4096), rel=1e-7)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-10)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-10)


# ---------------------------------------------------------------- graphs, dependencies, counts


def test_critical_path_hand_cases():
    g = DAG()
    x = g.add(2, op=False)
    a = g.add(1, [x[:1]])
    b = g.add(1, [a])
    g.add(1, [b, x[1:]])
    assert critical_path(g) == 3
    cyc = DAG()
    u = cyc.add(2)
    cyc.src.append(np.array([u[0], u[1]]))
    cyc.dst.append(np.array([u[1], u[0]]))
    with pytest.raises(ValueError, match="cycle"):
        critical_path(cyc)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 33, 128])
def test_graph_depths(n):
    assert critical_path(rnn_graph(n)) == n
    scan = linear_rnn_scan(np.zeros((n, 1)), [[0.5]], [[1.0]])
    assert critical_path(scan_graph(scan.rounds, n)) <= scan.depth + 1
    assert critical_path(attention_graph(n)) == 4
    assert critical_path(attention_graph(n, causal=True)) == 4
    assert critical_path(attention_graph(n, autoregressive=True)) == 5 * n - 1


def test_scalar_attention_depth_grows_like_log_n():
    depths = [critical_path(scalar_attention_graph(n)) for n in (4, 8, 16, 32)]
    assert np.all(np.diff(depths) == 3)  # max, sum and weighted-sum trees each gain one level per doubling
    # non-powers of two: each tree over n keys has depth ⌈log₂ n⌉
    assert [critical_path(scalar_attention_graph(n)) for n in (5, 6, 12, 24)] == [18, 18, 21, 24]


def test_scalar_decoding_depth_grows_faster_than_log_n():
    """Decoding one position at a time chains the steps: each added position adds at least a whole step
    (the first step's depth) to the critical path — linear or faster, the control of rnn-sequential."""
    depths = [critical_path(scalar_decoding_graph(n)) for n in range(1, 9)]
    assert min(np.diff(depths)) >= depths[0] > 0, depths


def test_dependency_matrix_of_a_convolution_is_its_band():
    r = np.random.default_rng(6)
    n, d, k = 12, 3, 3
    w = r.standard_normal((k, d, d))
    dep = dependency_matrix(lambda x: conv1d(x, w), r.standard_normal((n, d)), r)
    i, j = np.indices((n, n))
    np.testing.assert_array_equal(dep, (i - j >= 0) & (i - j < k))
    assert _layers_needed_identical(dep, causal=True) == math.ceil((n - 1) / (k - 1))


def test_parameter_count_formula():
    """Base Transformer by hand: 6·(4·512² + 4·512 + 2·512·2048 + 2048 + 512 + 4·512) encoder,
    6·(2·(4·512² + 4·512) + 2·512·2048 + 2048 + 512 + 6·512) decoder, 37000·512 shared embedding."""
    enc = 6 * (4 * 512 ** 2 + 4 * 512 + 2 * 512 * 2048 + 2048 + 512 + 4 * 512)
    dec = 6 * (2 * (4 * 512 ** 2 + 4 * 512) + 2 * 512 * 2048 + 2048 + 512 + 6 * 512)
    assert transformer_params(6, 512, 2048, 8, 64, 64)["total"] == enc + dec + 37000 * 512
    assert mha_params(512, 8, 64, 64) == mha_params(512, 1, 512, 512) == 4 * 512 ** 2 + 4 * 512


# ---------------------------------------------------------------- statistics


def test_select_growth_on_exact_sequences():
    n = np.array([4, 8, 16, 32, 64, 128, 256, 512], float)
    assert select_growth(n, np.full(n.size, 4.0)).cls == "constant"
    assert select_growth(n, 2 * np.log2(n) + 1).cls == "log"
    assert select_growth(n, n - 1).cls == "linear"
    assert select_growth(n, 3 * n * n + n).cls == "quadratic"
    assert select_growth(n, n * np.log2(n)).cls == "nlogn"
    assert select_growth(n, np.ceil(np.log(n) / np.log(3)), abs_error=0.5).cls == "log"  # one ceiling: ½
    with pytest.raises(ValueError):
        select_growth(n[:3], n[:3])


def test_slope_shift_bound_is_attained():
    x = np.arange(10.0)
    bound = slope_shift_bound(x, 2.0)
    shift = np.where(x > x.mean(), 2.0, 0.0)
    assert np.polyfit(x, shift, 1)[0] == pytest.approx(bound, rel=1e-12)


def test_intervals_basic_properties():
    lo, hi = chi2_interval(100, 1e-9)
    assert lo < 100 < hi
    a = np.full(50, 2.0)
    wlo, whi = weighted_chi2_interval(a, 1e-9)
    assert wlo < a.sum() < whi
    x = np.random.default_rng(7).uniform(0, 1, 5000)
    mean, mlo, mhi = bounded_mean_interval(x, 0.0, 1.0, 1e-9)
    assert mlo <= 0.5 <= mhi and mhi - mlo < 0.15
    with pytest.raises(ValueError):
        bounded_mean_interval([2.0, 0.5], 0.0, 1.0, 0.1)
