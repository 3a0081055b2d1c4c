"""Computation graphs and their critical paths (claims rnn-sequential, parallel-training, constant-path-length).

A computation graph here is a DAG with one node per operation and an edge per
data dependency; input nodes are not operations. Its *critical path* — the
largest number of operations on any path — is the number of sequential steps
on a machine with unbounded parallelism (Blelloch 1990's "depth"; Vaswani
Table 1's "sequential operations").

Two granularities:

* position level (Vaswani's counting): one node per vector-valued operation on
  one position or one pair of positions (a projection x_i W, a score q_i·k_j,
  a row softmax, an RNN step); a sum over positions counts as one operation;
* scalar level: one node per scalar multiply, add, exp, max or divide, with
  fan-in 2 — sums and maxima over m terms become balanced binary trees of depth
  ⌈log₂ m⌉. At this level a softmax over n keys has depth O(log n).

Builders return a :class:`DAG`; :func:`critical_path` measures it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["DAG", "critical_path", "rnn_graph", "scan_graph", "attention_graph", "scalar_attention_graph",
           "scalar_rnn_graph", "scalar_decoding_graph"]


@dataclass
class DAG:
    """Nodes 0 … size−1; ``is_op[v]`` False for inputs (and constants); edges ``src[e] → dst[e]``."""

    is_op: list = field(default_factory=list)
    src: list = field(default_factory=list)
    dst: list = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(a) for a in self.is_op)

    def add(self, count, parents=(), op=True) -> np.ndarray:
        """Add ``count`` nodes (an int or a shape); ``parents`` is a list of id arrays broadcasting to that shape.

        Returns the new ids with that shape. Every new node gets an edge from the
        matching entry of every parent array.
        """
        shape = (count,) if isinstance(count, (int, np.integer)) else tuple(count)
        start = self.size
        ids = np.arange(start, start + int(np.prod(shape)), dtype=np.int64).reshape(shape)
        self.is_op.append(np.full(ids.size, op, dtype=bool))
        for parent in parents:
            p, c = np.broadcast_arrays(np.asarray(parent, dtype=np.int64), ids)
            self.src.append(p.ravel().copy())  # a copy: the caller may reuse the parent array
            self.dst.append(c.ravel().copy())
        return ids

    def arrays(self):
        is_op = np.concatenate(self.is_op) if self.is_op else np.zeros(0, bool)
        src = np.concatenate(self.src) if self.src else np.zeros(0, np.int64)
        dst = np.concatenate(self.dst) if self.dst else np.zeros(0, np.int64)
        return is_op, src, dst

    @property
    def n_edges(self) -> int:
        return sum(len(a) for a in self.src)


def critical_path(dag: DAG) -> int:
    """The largest number of operation nodes on a path (inputs count 0).

    depth(v) = [v is an op] + max over parents u of depth(u), found by
    relaxing all edges at once until nothing changes (Bellman–Ford on a DAG
    with weights −1, vectorised; the number of sweeps is the depth + 1).
    Raises ValueError on a cycle (no fixed point within size + 1 sweeps).
    """
    is_op, src, dst = dag.arrays()
    n = is_op.size
    if n == 0:
        return 0
    # group edges by destination (CSR of the transpose) so that each sweep is one reduceat
    order = np.argsort(dst, kind="stable")
    src_sorted, dst_sorted = src[order], dst[order]
    has_parent, first = np.unique(dst_sorted, return_index=True)
    weight = is_op.astype(np.int64)
    depth = weight.copy()
    for _ in range(n + 1):
        best = np.maximum.reduceat(depth[src_sorted], first) if src_sorted.size else np.zeros(0, np.int64)
        new = weight.copy()
        new[has_parent] += best
        if np.array_equal(new, depth):
            return int(depth.max())
        depth = new
    raise ValueError("the graph has a cycle")


# ---------------------------------------------------------------- position level


def rnn_graph(n: int) -> DAG:
    """h_t = f(h_{t−1}, x_t), t = 1 … n: one step operation per position, chained. Critical path n."""
    g = DAG()
    x = g.add(n, op=False)
    prev = None
    for t in range(n):
        prev = g.add(1, [x[t:t + 1]] + ([prev] if prev is not None else []))
    return g


def scan_graph(rounds, n: int) -> DAG:
    """The dataflow of :func:`attnclaims.reference.baselines.linear_rnn_scan`, rebuilt from its ``rounds``.

    Each position first forms its element e_t = (A_t, x_t B) (one operation).
    The rounds follow the scan: the up-sweep rounds and the last (inclusive)
    round combine (left, right) into a new value at ``right``; a down-sweep
    round moves the parent's prefix to ``left`` (a copy, not an operation) and
    combines prefix ∘ left block at ``right``. The down-sweep starts from the
    identity at the root (a constant). Critical path = the scan's depth + 1.
    """
    rounds = list(rounds)
    levels = (len(rounds) - 1) // 2
    size = 2 ** levels
    g = DAG()
    x = g.add(n, op=False)
    elements = g.add(n, [x])
    pad = g.add(size - n, op=False) if size > n else np.zeros(0, np.int64)  # identity padding
    current = np.concatenate([elements, pad])
    for r, pairs in enumerate(rounds):
        left, right = pairs[:, 0], pairs[:, 1]
        if r < levels:  # up-sweep
            current[right] = g.add(len(right), [current[left], current[right]])
        elif r < 2 * levels:  # down-sweep
            if r == levels:
                current[size - 1] = g.add(1, op=False)[0]  # the identity prefix of the root
            block = current[left].copy()
            current[left] = current[right]
            current[right] = g.add(len(right), [current[right], block])
        else:  # inclusive prefixes P_t ∘ e_t
            current[:n] = g.add(n, [current[:n], elements])
    return g


def attention_graph(n: int, causal: bool = False, autoregressive: bool = False, window: int | None = None) -> DAG:
    """Self-attention over n positions at position level (one layer, single head).

    Operations: q_i, k_i, v_i = projections of x_i (one per position); s_ij = q_i·k_j
    for every allowed pair; a_i = softmax of row i; out_i = Σ_j a_ij v_j.
    ``causal``: only j ≤ i; ``window``: only the neighbourhood of
    :func:`~attnclaims.reference.baselines.window_mask`. Critical path 4, whatever n.

    ``autoregressive=True`` is decoding at inference: the input of position
    i + 1 is computed from the output of position i (one more operation, e.g.
    the embedding of the sampled token), so positions cannot run in parallel
    and the critical path grows linearly with n (the negative control).
    """
    from attnclaims.reference.baselines import window_mask

    g = DAG()
    allowed = np.ones((n, n), bool)
    if causal or autoregressive:
        allowed &= np.tril(np.ones((n, n), bool))
    if window is not None:
        allowed &= window_mask(n, window)
    if not autoregressive:
        x = g.add(n, op=False)
        qkv = g.add(n, [x])
        i, j = np.nonzero(allowed)
        s = g.add(len(i), [qkv[i], qkv[j]])
        a = g.add(n)
        g.src.append(s)
        g.dst.append(a[i])
        out = g.add(n, [a])
        g.src.append(qkv[j])
        g.dst.append(out[i])
        return g
    x0 = g.add(1, op=False)
    qkv_ids = []
    for t in range(n):
        x_t = x0 if t == 0 else g.add(1, [out_prev])  # noqa: F821 - out_prev is set at the end of iteration t - 1
        qkv_t = g.add(1, [x_t])
        qkv_ids.append(qkv_t[0])
        keys = np.array(qkv_ids)
        s = g.add(len(keys), [qkv_t, keys])
        a = g.add(1)
        g.src.append(s)
        g.dst.append(np.repeat(a, len(s)))
        out_prev = g.add(1, [a])
        g.src.append(keys)
        g.dst.append(np.repeat(out_prev, len(keys)))
    return g


# ---------------------------------------------------------------- scalar level


def _tree_reduce(g: DAG, ids: np.ndarray) -> np.ndarray:
    """Reduce the last axis of ``ids`` by a balanced binary tree of 2-input operations; -> ids.shape[:-1]."""
    while ids.shape[-1] > 1:
        m = ids.shape[-1]
        pairs = m // 2
        combined = g.add(ids.shape[:-1] + (pairs,), [ids[..., 0:2 * pairs:2], ids[..., 1:2 * pairs:2]])
        ids = np.concatenate([combined, ids[..., 2 * pairs:]], axis=-1) if m % 2 else combined
    return ids[..., 0]


def scalar_attention_graph(n: int, d: int = 2) -> DAG:
    """softmax(QKᵀ/√d)V over n positions with every scalar operation a node (fan-in 2).

    q, k, v entries: d-term dot products with the input (d multiplies, a tree of
    adds); s_ij: d multiplies, a tree of adds, one scale; row max: a tree over n;
    e_ij = exp(s_ij − max): subtract, exp; row sum: a tree over n; a_ij: divide;
    out_ic: n multiplies, a tree over n. Critical path O(log d + log n).
    """
    g = DAG()
    x = g.add((n, d), op=False)
    proj = []
    for _ in range(3):  # q, k, v = x W: (n, d_out=d, d_in=d) products, then sum over d_in
        prod = g.add((n, d, d), [x[:, None, :]])
        proj.append(_tree_reduce(g, prod))
    q, k, v = proj  # (n, d) each
    prod = g.add((n, n, d), [q[:, None, :], k[None, :, :]])
    s = g.add((n, n), [_tree_reduce(g, prod)])  # the scale 1/√d
    row_max = _tree_reduce(g, s)  # (n,)
    shifted = g.add((n, n), [s, row_max[:, None]])
    e = g.add((n, n), [shifted])
    total = _tree_reduce(g, e)
    a = g.add((n, n), [e, total[:, None]])
    prod = g.add((n, d, n), [a[:, None, :], v.T[None, :, :]])  # a_ij · v_jc, indexed (i, c, j)
    _tree_reduce(g, prod)
    return g


def scalar_rnn_graph(n: int, d: int = 2) -> DAG:
    """h_t = tanh(h_{t−1} W + x_t U) with scalar nodes: per step 2d products per output, a tree, tanh.

    Critical path n·(⌈log₂ 2d⌉ + 2): linear in n.
    """
    g = DAG()
    x = g.add((n, d), op=False)
    h = None
    for t in range(n):
        terms = [g.add((d, d), [x[t][None, :]])]  # x_t[j]·U[j, c], indexed (c, j)
        if h is not None:
            terms.append(g.add((d, d), [h[None, :]]))  # h_{t−1}[j]·W[j, c]
        pre = _tree_reduce(g, np.concatenate(terms, axis=1))
        h = g.add(d, [pre])
    return g


def scalar_decoding_graph(n: int, d: int = 2) -> DAG:
    """Autoregressive decoding with scalar nodes: position t's input is computed from position t − 1's output.

    Each step is the scalar graph of one query attending to the keys 0 … t (projections, d-term dot
    products, a max tree, exp, a sum tree, a divide, a weighted-sum tree over t + 1 keys); its output
    feeds the next position's projections. Critical path Σ_t (c + 3⌈log₂(t + 1)⌉) = Θ(n log n): the
    negative control of :func:`scalar_attention_graph`.
    """
    g = DAG()
    x = g.add(d, op=False)
    keys, values = [], []
    for _ in range(n):
        proj = [_tree_reduce(g, g.add((d, d), [x[None, :]])) for _ in range(3)]  # q, k, v of this position
        keys.append(proj[1])
        values.append(proj[2])
        k, v = np.stack(keys), np.stack(values)  # (t + 1, d)
        s = g.add(len(keys), [_tree_reduce(g, g.add(k.shape, [proj[0][None, :], k]))])
        row_max = _tree_reduce(g, s)
        e = g.add(len(keys), [g.add(len(keys), [s, row_max])])
        a = g.add(len(keys), [e, _tree_reduce(g, e)])
        out = _tree_reduce(g, g.add((d, len(keys)), [a[None, :], v.T]))  # (d,)
        x = g.add(d, [out])  # the next position's input (e.g. the embedding of the sampled token)
    return g
