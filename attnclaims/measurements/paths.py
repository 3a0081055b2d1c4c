"""Vaswani Table 1 and Table 3, recomputed (claims constant-path-length and paper-tables; Vaswani et al. 2017 §4).

Table 1: for each layer type, its dependency graph is read off the reference
layer itself — output position i depends on input position j iff perturbing
x_j changes y_i (:func:`dependency_matrix`, the block sparsity of the
Jacobian) — then

* maximum path length: layers are stacked until every required pair (all
  pairs; j ≤ i for the causal layers) is connected, shortest paths by
  scipy.sparse.csgraph; every path through an L-layer stack has L edges, so the
  number of layers needed is the maximum path length. The recurrent layer's
  graph is its step: h_t depends on h_{t−1} and x_t;
* sequential operations: the critical path of the layer's position-level
  computation graph (:mod:`~attnclaims.measurements.graphs`);
* complexity per layer: multiply-adds, counted as (measured number of
  dependencies) × (multiply-adds per dependency) + per-position projections;

each fitted over n = 4 … 128 (512 under thorough), powers of two and the points between them, by
:func:`~attnclaims.measurements.stats.select_growth` (the smallest of constant, log, n, n log n, n² whose
minimax fit is within ½ of every count — one ceiling — and separated from every smaller class).

Table 3: parameter counts of the base and big models and the rows of the
ablation that change the count, from the architecture (counted on the
reference's parameter containers where they apply, by formula where d_k ≠
d_model/h), next to the paper's.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.sparse import csgraph, csr_matrix

from attnclaims.measurements._core import MeasurementResult, control, pyplot, register, rng, save, sizes, suffix
from attnclaims.measurements.graphs import DAG, attention_graph, critical_path, rnn_graph
from attnclaims.measurements.stats import select_growth
from attnclaims.reference import init_multi_head, self_attention
from attnclaims.reference.baselines import conv1d, restricted_attention, tanh_rnn, tanh_rnn_step

CI_SEED = 1706_03762  # arXiv 1706.03762
KERNEL = 3   # convolution kernel size k
DILATED_KERNEL = 2  # dilated stack: kernel 2, dilations 1, 2, 4, … (WaveNet); path ⌈log₂ n⌉, exact at powers of 2
WINDOW = 5   # restricted self-attention neighbourhood size r (centred: |i − j| ≤ 2)


def dependency_matrix(layer, x: np.ndarray, r: np.random.Generator, chunk: int = 32) -> np.ndarray:
    """S[i, j] = True iff output position i changes when input position j is perturbed.

    Each position j is moved by a random vector of norm 1 (twice, with
    independent directions, OR-ed, so that an accidental zero directional
    derivative cannot hide a dependency); a change counts when it exceeds
    1e-9·(1 + max|y|) — independent positions give bitwise-identical outputs,
    dependent ones change by at least ~1e-4 for the sizes used here.
    layer: (batch, n, d) -> (batch, n, d_out); x (n, d) -> (n, n) bool.
    """
    n, d = x.shape
    base = layer(x[None])[0]
    thresh = 1e-9 * (1.0 + float(np.abs(base).max()))
    dep = np.zeros((n, n), bool)
    for _ in range(2):
        if dep.all():  # nothing left to find (a dense layer): the second round would only repeat the first
            break
        delta = r.standard_normal((n, d))
        delta /= np.linalg.norm(delta, axis=1, keepdims=True)
        for start in range(0, n, chunk):
            js = np.arange(start, min(n, start + chunk))
            xs = np.repeat(x[None], len(js), axis=0)  # (chunk, n, d)
            xs[np.arange(len(js)), js] += delta[js]
            change = np.abs(layer(xs) - base[None]).max(axis=-1)  # (chunk, n): per output position
            dep[:, js] |= (change > thresh).T
    return dep


def _layer_graph(dep: np.ndarray) -> csr_matrix:
    """Directed graph j → i for every dependency S[i, j] (csgraph orientation: row = source)."""
    return csr_matrix(dep.T.astype(np.int8))


def _required(n: int, causal: bool) -> np.ndarray:
    """Pairs (j, i) that must be connected: all, or j ≤ i for a causal layer. (n, n) bool indexed [j, i]."""
    return np.triu(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)


def _layers_needed_identical(dep: np.ndarray, causal: bool) -> int:
    """Layers of a stack of identical layers needed to connect every required pair.

    With self-dependencies (S[i, i]) a walk of fewer than L edges can be padded
    to exactly L, so input j reaches output i through L stacked layers iff the
    one-layer graph has a path j → i of length ≤ L: the answer is the largest
    shortest-path distance over the required pairs.
    """
    if not np.all(np.diag(dep)):
        raise ValueError("the layer has a position that does not depend on itself; the stacking argument needs it")
    dist = csgraph.shortest_path(_layer_graph(dep), directed=True, unweighted=True)  # dist[j, i]
    need = dist[_required(dep.shape[0], causal)]
    if not np.all(np.isfinite(need)):
        raise ValueError("some required pair is never connected")
    return int(need.max())


def _stack_graph(deps: list) -> tuple[csr_matrix, int]:
    """The stacked graph of layers with dependency matrices ``deps`` (layer ℓ: nodes ℓ·n … (ℓ+1)·n − 1)."""
    n = deps[0].shape[0]
    rows, cols = [], []
    for level, dep in enumerate(deps):
        i, j = np.nonzero(dep)
        rows.append(level * n + j)
        cols.append((level + 1) * n + i)
    size = (len(deps) + 1) * n
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return csr_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(size, size)), n


def _stack_connects(deps: list, causal: bool) -> tuple[bool, float]:
    """Whether the explicit stack connects every required (input j, output i) pair, and the longest such path."""
    graph, n = _stack_graph(deps)
    dist = csgraph.shortest_path(graph, directed=True, unweighted=True, indices=np.arange(n))[:, -n:]
    need = dist[_required(n, causal)]
    return bool(np.all(np.isfinite(need))), float(need.max()) if np.all(np.isfinite(need)) else math.inf


def _dag_from_dependencies(dep: np.ndarray) -> DAG:
    """One layer computed position-wise: output i is one operation reading the inputs it depends on."""
    g = DAG()
    x = g.add(dep.shape[1], op=False)
    y = g.add(dep.shape[0])
    i, j = np.nonzero(dep)
    g.src.append(x[j])
    g.dst.append(y[i])
    return g


def _layers(r, d, n):
    """The reference layers of Table 1 at width d, as functions (batch, n, d) -> (batch, n, d)."""
    mh = init_multi_head(r, d, 2)
    w_conv = r.standard_normal((KERNEL, d, d)) / math.sqrt(KERNEL * d)
    w_dil = r.standard_normal((DILATED_KERNEL, d, d)) / math.sqrt(DILATED_KERNEL * d)
    wq, wk, wv = (r.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))
    # orthogonal W and small U keep tanh' near 1, so an input's influence does not decay below the detection
    # threshold along the sequence (a decayed dependency is still a dependency)
    w_rnn, u_rnn = np.linalg.qr(r.standard_normal((d, d)))[0], 0.1 * r.standard_normal((d, d)) / math.sqrt(d)
    return {
        "self-attention": lambda x: self_attention(x, mh),
        "convolution": lambda x: conv1d(x, w_conv),
        "restricted self-attention": lambda x: restricted_attention(x @ wq, x @ wk, x @ wv, WINDOW),
        "dilated": lambda dil: (lambda x: conv1d(x, w_dil, dilation=dil)),
        "rnn": (w_rnn, u_rnn),
    }


def _macs(kind: str, n: int, d: int, nnz: int) -> int:
    """Multiply-adds of one layer: per-dependency cost × measured dependencies + per-position projections.

    self-attention / restricted: Q, K, V and output projections 4·n·d², then a
    score q_i·k_j (d) and a weighted-sum term a_ij v_j (d) per dependency;
    recurrent: h_{t−1}W and x_tU per step, 2·n·d²; convolution (contiguous or
    dilated): one d×d tap x_j W_m per dependency.
    """
    if kind in ("self-attention", "restricted self-attention"):
        return 4 * n * d * d + 2 * nnz * d
    if kind == "recurrent":
        return 2 * n * d * d
    return nnz * d * d


PAPER_TABLE1 = {  # Vaswani et al. 2017, Table 1 (and §4 for contiguous kernels)
    "self-attention": ("O(n²·d)", "O(1)", "O(1)"),
    "recurrent": ("O(n·d²)", "O(n)", "O(n)"),
    "convolution": ("O(k·n·d²)", "O(1)", "O(n/k)"),
    "dilated convolution": ("O(k·n·d²)", "O(1)", "O(log_k(n))"),
    "restricted self-attention": ("O(r·n·d)", "O(1)", "O(n/r)"),
}
EXPECTED_CLASSES = {  # growth in n at fixed d, k, r
    "self-attention": ("quadratic", "constant", "constant"),
    "recurrent": ("linear", "linear", "linear"),
    "convolution": ("linear", "constant", "linear"),
    "dilated convolution": ("linear", "constant", "log"),
    "restricted self-attention": ("linear", "constant", "linear"),
}


def _exact_path(kind: str, n: int) -> int:
    """The closed forms the measured path lengths are compared with."""
    if kind == "self-attention":
        return 1
    if kind == "recurrent":
        return n  # x_j → h_j → … → h_i: i − j + 1 edges, largest for (j, i) = (0, n − 1)
    if kind == "convolution":
        return math.ceil((n - 1) / (KERNEL - 1)) if n > 1 else 1
    if kind == "dilated convolution":
        return max(1, math.ceil(math.log(n, DILATED_KERNEL) - 1e-12))
    return math.ceil((n - 1) / ((WINDOW - 1) // 2)) if n > 1 else 1


@register("vaswani-table1", "constant-path-length", "measurement", claims=("constant-path-length", "paper-tables"))
def vaswani_table1(profile: str, out_dir, seed: int = CI_SEED, attention_window: int | None = None) -> MeasurementResult:
    """Vaswani Table 1 measured: complexity per layer, sequential operations, maximum path length, n = 4 … 128 (512).

    Passes if every layer's three measured columns fall in the paper's growth
    classes (:func:`~attnclaims.measurements.stats.select_growth` over n, separated from every smaller
    class; :data:`EXPECTED_CLASSES`), every measured
    path length equals its closed form (self-attention 1, recurrent n,
    convolution ⌈(n−1)/(k−1)⌉, dilated ⌈log_k n⌉, restricted ⌈(n−1)/⌊(r−1)/2⌋⌉),
    also across kernel sizes k = 2 … 9 (dilated: 2 … 4) and windows r = 3 … 17 at
    fixed n (the k and r of O(n/k), O(log_k n), O(n/r)), and, for n ≤ 64, the explicitly stacked
    graph confirms the layer count (and the recurrent layer's whole-sequence
    Jacobian sparsity is the transitive closure of its step graph).

    Control ``attention_window=3``: the "self-attention" row built with a local
    window has a path length growing with n, so "constant" fails.
    """
    # every input position of every layer is perturbed separately (n evaluations of an O(n²) layer), so the
    # attention rows cost O(n³): the CI sweep stops at 128, the thorough one goes to 512
    n_values = sizes(profile, dev=[4, 6, 8, 12, 16, 24, 32, 48, 64], ci=[4, 6, 8, 12, 16, 24, 32, 48, 64, 128],
                     thorough=[4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512])
    d, d_macs = 4, 64
    r = rng(seed)
    kinds = list(PAPER_TABLE1)
    cols = {kind: {"macs": [], "sequential": [], "path": [], "exact_path": [], "stack_check": []} for kind in kinds}
    for n in n_values:
        x = r.standard_normal((n, d))
        layers = _layers(r, d, n)
        if attention_window is not None:
            wq, wk, wv = (r.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))
            layers["self-attention"] = lambda xx: restricted_attention(xx @ wq, xx @ wk, xx @ wv, attention_window)
        for kind in ("self-attention", "convolution", "restricted self-attention"):
            dep = dependency_matrix(layers[kind], x, r)
            causal = kind == "convolution"
            path = _layers_needed_identical(dep, causal)
            check = None
            if n <= 64:
                ok_l, longest = _stack_connects([dep] * path, causal)
                ok_short = _stack_connects([dep] * (path - 1), causal)[0] if path > 1 else False
                check = bool(ok_l and longest == path and not ok_short)
            dag = (attention_graph(n) if kind == "self-attention" and attention_window is None
                   else attention_graph(n, window=attention_window or WINDOW) if kind != "convolution"
                   else _dag_from_dependencies(dep))
            c = cols[kind]
            c["macs"].append(_macs(kind, n, d_macs, int(dep.sum())))
            c["sequential"].append(critical_path(dag))
            c["path"].append(path)
            c["exact_path"].append(_exact_path(kind, n) if attention_window is None or kind != "self-attention" else None)
            c["stack_check"].append(check)
        # dilated: layer ℓ has dilation k^ℓ, so the stack is built explicitly until it connects
        deps = []
        while True:
            deps.append(dependency_matrix(layers["dilated"](DILATED_KERNEL ** len(deps)), x, r))
            connected, longest = _stack_connects(deps, causal=True)
            if connected:
                break
        c = cols["dilated convolution"]
        c["macs"].append(_macs("dilated convolution", n, d_macs, int(deps[0].sum())))
        c["sequential"].append(critical_path(_dag_from_dependencies(deps[0])))
        c["path"].append(int(longest))
        c["exact_path"].append(_exact_path("dilated convolution", n))
        c["stack_check"].append(True)
        # recurrent: the step h_t = tanh(h_{t−1}W + x_tU) depends on both; the layer is the chain of steps
        w_rnn, u_rnn = layers["rnn"]
        h_prev, x_t = r.standard_normal(d), r.standard_normal(d)
        base = tanh_rnn_step(h_prev, x_t, w_rnn, u_rnn)
        dep_h = int(np.abs(tanh_rnn_step(h_prev + 0.1, x_t, w_rnn, u_rnn) - base).max() > 0)
        dep_x = int(np.abs(tanh_rnn_step(h_prev, x_t + 0.1, w_rnn, u_rnn) - base).max() > 0)
        src = np.concatenate([np.arange(n)] * dep_x + [n + np.arange(n - 1)] * dep_h)  # x_t → h_t, h_{t−1} → h_t
        dst = np.concatenate([n + np.arange(n)] * dep_x + [n + np.arange(1, n)] * dep_h)
        graph = csr_matrix((np.ones(src.size, np.int8), (src, dst)), shape=(2 * n, 2 * n))
        dist = csgraph.shortest_path(graph, directed=True, unweighted=True, indices=np.arange(n))[:, n:]
        layer_dep = dependency_matrix(lambda xx: tanh_rnn(xx, w_rnn, u_rnn), x, r) if n <= 64 else None
        c = cols["recurrent"]
        c["macs"].append(_macs("recurrent", n, d_macs, 0))
        c["sequential"].append(critical_path(rnn_graph(n)))
        c["path"].append(int(dist[_required(n, True)].max()))
        c["exact_path"].append(_exact_path("recurrent", n))
        # the whole layer's Jacobian sparsity is the transitive closure of the step graph: lower triangular
        c["stack_check"].append(None if layer_dep is None else bool(np.array_equal(layer_dep, np.isfinite(dist).T)))

    # the 1/k and 1/r in O(n/k), O(n/r): path length against the kernel / window size at fixed n
    n_k = n_values[-1] // 2
    x = r.standard_normal((n_k, d))
    k_sweep = []
    for k in (2, 3, 5, 9):
        w = r.standard_normal((k, d, d)) / math.sqrt(k * d)
        path = _layers_needed_identical(dependency_matrix(lambda xx: conv1d(xx, w), x, r), causal=True)
        k_sweep.append({"layer": "convolution", "size": k, "path": path, "closed_form": math.ceil((n_k - 1) / (k - 1))})
    for k in (2, 3, 4):  # dilated stacks: dilations 1, k, k², … until every pair is connected
        w = r.standard_normal((k, d, d)) / math.sqrt(k * d)
        deps = []
        while not (deps and _stack_connects(deps, causal=True)[0]):
            dil = k ** len(deps)
            deps.append(dependency_matrix(lambda xx, dil=dil: conv1d(xx, w, dilation=dil), x, r))
        k_sweep.append({"layer": "dilated convolution", "size": k, "path": len(deps),
                        "closed_form": math.ceil(math.log(n_k, k) - 1e-12)})
    wq, wk, wv = (r.standard_normal((d, d)) / math.sqrt(d) for _ in range(3))
    for window in (3, 5, 9, 17):
        dep = dependency_matrix(lambda xx: restricted_attention(xx @ wq, xx @ wk, xx @ wv, window), x, r)
        k_sweep.append({"layer": "restricted self-attention", "size": window, "path": _layers_needed_identical(dep, False),
                        "closed_form": math.ceil((n_k - 1) / ((window - 1) // 2))})

    ns = np.array(n_values, float)
    rows, problems = [], []
    if any(row["path"] != row["closed_form"] for row in k_sweep):
        problems.append("path length against k or r differs from ⌈(n−1)/(k−1)⌉, ⌈log_k n⌉ or ⌈(n−1)/⌊(r−1)/2⌋⌉")
    for kind in kinds:
        c = cols[kind]
        # exact counts; a path length carries one ceiling (⌈(n−1)/(k−1)⌉, ⌈log_k n⌉): ½ once the constant absorbs it
        fits = [select_growth(ns, c[key], abs_error=err)
                for key, err in (("macs", 0.0), ("sequential", 0.0), ("path", 0.5))]
        expected = EXPECTED_CLASSES[kind]
        classes_ok = [f.cls == e and f.separated for f, e in zip(fits, expected)]
        exact_ok = all(e is None or p == e for p, e in zip(c["path"], c["exact_path"]))
        stack_ok = all(s is None or s for s in c["stack_check"])
        if not all(classes_ok):
            problems.append(f"{kind}: " + ", ".join(f"{col} {f.big_o} (paper {p})" for col, f, p, ok in
                                                     zip(("complexity", "sequential", "path"), fits,
                                                         PAPER_TABLE1[kind], classes_ok) if not ok))
        if not exact_ok:
            problems.append(f"{kind}: path lengths {c['path']} != closed form {c['exact_path']}")
        if not stack_ok:
            problems.append(f"{kind}: explicit stack disagrees")
        rows.append({"layer": kind,
                     "complexity_paper": PAPER_TABLE1[kind][0], "complexity_measured": fits[0].big_o,
                     "sequential_paper": PAPER_TABLE1[kind][1], "sequential_measured": fits[1].big_o,
                     "path_paper": PAPER_TABLE1[kind][2], "path_measured": fits[2].big_o,
                     f"path_at_n={n_values[-1]}": c["path"][-1], f"sequential_at_n={n_values[-1]}": c["sequential"][-1],
                     "fits": {"complexity": fits[0].to_dict(), "sequential": fits[1].to_dict(), "path": fits[2].to_dict()}})
    passed = not problems
    label = "" if attention_window is None else f" [self-attention replaced by a window of {attention_window}]"
    decision = (("Table 1 reproduced" + label + ": every layer's complexity, sequential operations and maximum path "
                 f"length fall in the paper's class over n = {n_values[0]} … {n_values[-1]} (smallest separated class), path lengths equal "
                 f"their closed forms (self-attention 1, recurrent n, convolution ⌈(n−1)/{KERNEL - 1}⌉, dilated "
                 f"⌈log_{DILATED_KERNEL} n⌉, restricted ⌈(n−1)/{(WINDOW - 1) // 2}⌉), and at n = {n_k} the path length "
                 f"equals ⌈(n−1)/(k−1)⌉ for k = 2 … 9, ⌈log_k n⌉ (dilated) for k = 2 … 4 and ⌈(n−1)/⌊(r−1)/2⌋⌉ "
                 f"for r = 3 … 17 (the k and r of O(n/k), O(log_k n), O(n/r)); sequential operations counted as "
                 f"the paper does, one operation per softmax row (on the scalar-level graph self-attention's are "
                 f"O(log n): rnn-sequential)")
                if passed else "Table 1 NOT reproduced" + label + ": " + "; ".join(problems))
    data = {"n": n_values, "d_for_macs": d_macs, "kernel": KERNEL, "dilated_kernel": DILATED_KERNEL, "window": WINDOW,
            "columns": cols,
            "size_sweep": {"n": n_k, "rows": k_sweep},
            "method": "dependency graphs from perturbing each input position of the reference layers; "
                      "shortest paths with scipy.sparse.csgraph; BIC growth selection"}
    table = [{k: v for k, v in row.items() if k != "fits"} for row in rows]
    data["fits"] = {row["layer"]: row["fits"] for row in rows}
    figures = [_plot_table1(cols, n_values, out_dir, "vaswani_table1" + suffix({"window": attention_window}))]
    return MeasurementResult("constant-path-length", "vaswani-table1", "measurement", passed, decision, None, data,
                             figures, table=table, claims=("constant-path-length", "paper-tables"), seed=seed)


control("vaswani-table1:windowed-attention", "vaswani-table1",
        "self-attention restricted to a window of 3 has a path length growing with n", attention_window=3)


def _plot_table1(cols, n_values, out_dir, stem):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.9))
    titles = (("macs", "complexity per layer (multiply-adds, d = 64)"), ("sequential", "sequential operations"),
              ("path", "maximum path length"))
    markers, styles, sizes_ = "o^sDv", ["-", "-", "--", "-.", ":"], [7, 5, 6, 3.5, 3]  # overlapping rows stay visible
    for ax, (key, title) in zip(axes, titles):
        for i, (kind, c) in enumerate(cols.items()):
            ax.loglog(n_values, c[key], marker=markers[i], ls=styles[i], ms=sizes_[i], lw=1.2, label=kind,
                      mfc="none" if i in (2, 4) else None)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(title)
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Vaswani Table 1, measured on the reference layers (k = {KERNEL}, dilated k = {DILATED_KERNEL}, "
                 f"r = {WINDOW})", fontsize=10)
    return save(fig, out_dir, stem)


# ---------------------------------------------------------------- Table 3


VOCAB = 37000  # "a shared source-target vocabulary of about 37000 tokens" (Vaswani §5.1)

#: name, N, d_model, d_ff, h, d_k, d_v, paper params ×10⁶ (None: the paper leaves it blank = same as base)
TABLE3 = [
    ("base", 6, 512, 2048, 8, 64, 64, 65),
    ("(A) h=1", 6, 512, 2048, 1, 512, 512, None),
    ("(A) h=4", 6, 512, 2048, 4, 128, 128, None),
    ("(A) h=16", 6, 512, 2048, 16, 32, 32, None),
    ("(A) h=32", 6, 512, 2048, 32, 16, 16, None),
    ("(B) d_k=16", 6, 512, 2048, 8, 16, 64, 58),
    ("(B) d_k=32", 6, 512, 2048, 8, 32, 64, 60),
    ("(C) N=2", 2, 512, 2048, 8, 64, 64, 36),
    ("(C) N=4", 4, 512, 2048, 8, 64, 64, 50),
    ("(C) N=8", 8, 512, 2048, 8, 64, 64, 80),
    ("(C) d_model=256", 6, 256, 2048, 8, 32, 32, 28),
    ("(C) d_model=1024", 6, 1024, 2048, 8, 128, 128, 168),
    ("(C) d_ff=1024", 6, 512, 1024, 8, 64, 64, 53),
    ("(C) d_ff=4096", 6, 512, 4096, 8, 64, 64, 90),
    ("big", 6, 1024, 4096, 16, 64, 64, 213),
]


def mha_params(d_model: int, h: int, d_k: int, d_v: int) -> int:
    """W_Q, W_K: d_model × h·d_k; W_V: d_model × h·d_v; W_O: h·d_v × d_model; biases of each (Vaswani §3.2.2)."""
    return 2 * (d_model * h * d_k + h * d_k) + (d_model * h * d_v + h * d_v) + (h * d_v * d_model + d_model)


def transformer_params(n_layers, d_model, d_ff, h, d_k, d_v, vocab=VOCAB, tied=True) -> dict:
    """Parameters of the encoder–decoder Transformer (Post-LN, sinusoidal positions: no parameters).

    Encoder layer: self-attention + FFN (W₁, b₁, W₂, b₂) + 2 layer norms (γ, β);
    decoder layer: self- and cross-attention + FFN + 3 layer norms; embeddings:
    one vocab × d_model matrix shared by both inputs and the pre-softmax
    projection when ``tied`` (Vaswani §3.4), three otherwise.
    """
    ffn = 2 * d_model * d_ff + d_ff + d_model
    mha = mha_params(d_model, h, d_k, d_v)
    enc = mha + ffn + 2 * 2 * d_model
    dec = 2 * mha + ffn + 3 * 2 * d_model
    emb = vocab * d_model * (1 if tied else 3)
    return {"encoder": n_layers * enc, "decoder": n_layers * dec, "embedding": emb,
            "total": n_layers * (enc + dec) + emb, "per_mha": mha}


def _count_on_reference(d_model: int, d_ff: int, h: int) -> int:
    """Encoder + decoder layer parameters counted on the reference containers (zero-stride arrays: no memory)."""
    from attnclaims.reference.params import (
        DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams,
    )

    def z(*shape):
        return np.broadcast_to(np.zeros(()), shape)

    def mha():
        return MultiHeadParams(z(d_model, d_model), z(d_model, d_model), z(d_model, d_model), z(d_model, d_model),
                               z(d_model), z(d_model), z(d_model), z(d_model), num_heads=h)

    def ln():
        return LayerNormParams(z(d_model), z(d_model))

    ffn = FeedForwardParams(z(d_model, d_ff), z(d_ff), z(d_ff, d_model), z(d_model))
    enc = EncoderLayerParams(mha(), ffn, ln(), ln())
    dec = DecoderLayerParams(mha(), mha(), ffn, ln(), ln(), ln())

    def size(obj):
        total = 0
        for name in obj.__dataclass_fields__:
            value = getattr(obj, name)
            if isinstance(value, np.ndarray):
                total += value.size
            elif hasattr(value, "__dataclass_fields__"):
                total += size(value)
        return total

    return size(enc) + size(dec)


@register("vaswani-table3", "paper-tables", "measurement")
def vaswani_table3(profile: str, out_dir, seed: int = 0, tied: bool = True) -> MeasurementResult:
    """Vaswani Table 3's parameter counts recounted from the architecture, and the multi-head cost identity.

    Rule: base and big within 5% of 65M and 213M, and every row's difference
    from base within 3M + 1M of the paper's (the paper prints whole millions,
    so each of its differences carries up to ±1M of rounding). Rows (A) (h heads
    of width d_model/h) must count exactly as base, and so must their projection
    and score multiply-adds (4nd_model² and 2n²d_model for any h). The counts
    of rows with d_k = d_model/h are checked against the reference's own
    parameter containers. Control ``tied=False`` (three separate 37k × d_model
    embedding matrices) misses base by far.
    """
    base = transformer_params(*TABLE3[0][1:7], tied=tied)["total"]
    rows, problems = [], []
    for name, n_layers, d_model, d_ff, h, d_k, d_v, paper in TABLE3:
        counts = transformer_params(n_layers, d_model, d_ff, h, d_k, d_v, tied=tied)
        ours = counts["total"]
        if d_k * h == d_model and d_v * h == d_model:
            ref = _count_on_reference(d_model, d_ff, h) * n_layers + counts["embedding"]
            if ref != ours:
                problems.append(f"{name}: formula {ours} != reference containers {ref}")
        delta, paper_delta = (ours - base) / 1e6, None if paper is None else paper - TABLE3[0][7]
        row = {"row": name, "N": n_layers, "d_model": d_model, "d_ff": d_ff, "h": h, "d_k": d_k, "d_v": d_v,
               "params_M": round(ours / 1e6, 2), "paper_M": paper,
               "relative_difference": None if paper is None else round(ours / 1e6 / paper - 1, 4),
               "delta_from_base_M": round(delta, 2), "paper_delta_M": paper_delta,
               "implied_vocab": None if paper is None else round((paper * 1e6 - ours + counts["embedding"])
                                                                 / (d_model * (1 if tied else 3)))}
        rows.append(row)
        if paper is None:
            if ours != base:
                problems.append(f"{name}: {ours} != base {base} although only h changes")
        else:
            if abs(delta - paper_delta) > 4.0:
                problems.append(f"{name}: Δ from base {delta:.2f}M vs paper {paper_delta}M")
            if name in ("base", "big") and abs(ours / 1e6 / paper - 1) > 0.05:
                problems.append(f"{name}: {ours / 1e6:.2f}M vs paper {paper}M (> 5%)")
    n = 100
    identity = [{"h": h, "projection_macs": 4 * n * 512 * 512, "score_macs": h * n * n * (512 // h),
                 "weighted_sum_macs": h * n * n * (512 // h), "params": mha_params(512, h, 512 // h, 512 // h)}
                for h in (1, 2, 4, 8, 16, 32)]
    identity_ok = len({(row["projection_macs"], row["score_macs"], row["params"]) for row in identity}) == 1
    if not identity_ok:
        problems.append("multi-head cost identity fails")
    passed = not problems
    big = next(row for row in rows if row["row"] == "big")
    decision = (f"Table 3 recounted ({'tied' if tied else 'untied'} embeddings, vocab {VOCAB}): base "
                f"{rows[0]['params_M']}M (paper 65M, {rows[0]['relative_difference']:+.1%}), big {big['params_M']}M "
                f"(paper 213M, {big['relative_difference']:+.1%}); all row differences within 3M + 1M rounding "
                f"(largest {max(abs(r['delta_from_base_M'] - r['paper_delta_M']) for r in rows if r['paper_M']):.2f}M); "
                "(A) rows equal base, h heads cost as one full head"
                if passed else "Table 3 NOT matched: " + "; ".join(problems))
    data = {"rows": rows, "vocab": VOCAB, "tied": tied, "multihead_identity": identity,
            "rule": "base, big within 5%; |Δ_ours − Δ_paper| ≤ 3M + 1M (paper rounds to 1M) for every row"}
    figures = [_plot_table3(rows, out_dir, "vaswani_table3" + suffix({"untied": (not tied) or None}))]
    return MeasurementResult("paper-tables", "vaswani-table3", "measurement", passed, decision, None, data, figures,
                             table=rows, seed=seed)


control("vaswani-table3:untied", "vaswani-table3", "three separate embedding matrices miss the paper's counts",
        tied=False)


def _plot_table3(rows, out_dir, stem):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 3.8))
    shown = [row for row in rows if row["paper_M"] is not None]
    x = np.arange(len(shown))
    ax.bar(x - 0.2, [row["paper_M"] for row in shown], 0.4, label="paper (Table 3)", color="C7")
    ax.bar(x + 0.2, [row["params_M"] for row in shown], 0.4, label="recounted", color="C0")
    for xi, row in zip(x, shown):
        ax.annotate(f"{row['relative_difference']:+.1%}", (xi + 0.2, row["params_M"]), ha="center", va="bottom",
                    fontsize=7)
    ax.set_xticks(x, [row["row"] for row in shown], rotation=30, ha="right")
    ax.set_xlabel("Table 3 row (unlisted rows (A) equal base: h heads of width d_model/h)")
    ax.set_ylabel("parameters (millions)")
    ax.set_title("Vaswani Table 3: parameter counts, paper vs recount (shared 37k vocabulary, tied embeddings)")
    ax.legend()
    return save(fig, out_dir, stem)
