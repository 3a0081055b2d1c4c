"""The Chinese texts of the derivations (:mod:`attnclaims.proofs`) for the Chinese edition of the report.

The derivations are written in English in their modules: titles, statements, assumptions, sources and
the reason of every step and lemma. :data:`TEXTS` gives each one in Chinese, keyed by its English text
with every run of digits written ``{N}``; :func:`translate` fills the numbers of the text asked for
back in, in order, so one entry serves every fixed-size instance of a derivation ("n = 2", "n = 3", …).
Formulas stay in the plain notation the English uses (Unicode, no sympy syntax, no TeX); the typeset
steps themselves are MathML in both editions. A text without an entry is shown in English, and
``tests/report/test_report_zh.py`` fails on it for the recorded reference run.
"""
from __future__ import annotations

import re

_DIGITS = re.compile(r"\d+")
PLACEHOLDER = "{N}"

#: the sympy assumptions of a derivation's symbols ("d: integer, positive")
SYMBOLS = {
    "integer, positive": "正整数", "integer, nonnegative": "非负整数", "integer": "整数", "real": "实数",
    "positive": "正数", "nonnegative": "非负数", "complex": "复数", "real, positive": "正实数",
    "real, nonnegative": "非负实数", "integer, negative": "负整数", "negative": "负数",
}

#: English text (digits as {N}) -> Chinese text (the same numbers, as {N}, in the same order)
TEXTS: dict[str, str] = {
    "a fixed-length linear context cannot be injective when n·m > d":
        "当 n·m > d 时，定长的线性上下文不可能是单射",
    "For a linear encoder E: ℝ^{n·m} → ℝ^d with n·m > d, dim ker E ≥ n·m − d ≥ {N}: distinct inputs x, x + t·w share a context.":
        "对线性编码器 E: ℝ^{n·m} → ℝ^d（n·m > d），dim ker E ≥ n·m − d ≥ {N}：不同的输入 x 与 x + t·w 得到同一个上下文。",
    "n, m, d positive integers with n·m > d":
        "n、m、d 为正整数，且 n·m > d",
    "dim ker E = n·m − rank E (rank–nullity)":
        "dim ker E = n·m − rank E（秩–零化度定理）",
    "rank E ≤ d, the number of rows":
        "rank E ≤ d，即行数",
    "the rank of a d×(n·m) matrix is at most d":
        "d×(n·m) 矩阵的秩至多为 d",
    "n·m ≥ d + {N}":
        "n·m ≥ d + {N}",
    "n·m > d":
        "n·m > d",
    "explicit kernel vector for n·m = {N} > d = {N}: w = E₁ × E₂":
        "n·m = {N} > d = {N} 时核中的显式向量：w = E₁ × E₂",
    "x and x + t·w have the same context vector":
        "x 与 x + t·w 的上下文向量相同",
    "‖w‖² = ‖E₁‖²‖E₂‖² − (E₁·E₂)² (Lagrange identity), > {N} when the rows are independent":
        "‖w‖² = ‖E₁‖²‖E₂‖² − (E₁·E₂)²（拉格朗日恒等式），行线性无关时 > {N}",
    "∂h_n/∂x_{N} = W^(n−{N}) U for the linear RNN encoder":
        "线性 RNN 编码器的 ∂h_n/∂x_{N} = W^(n−{N}) U",
    "For h_t = W h_{t−{N}} + U x_t, h_{N} = {N}: ∂h_n/∂x_{N} = W^{n−{N}}U.":
        "对 h_t = W h_{t−{N}} + U x_t，h_{N} = {N}：∂h_n/∂x_{N} = W^{n−{N}}U。",
    "n a positive integer":
        "n 为正整数",
    "unroll h_{N} from h_{N} = {N} ({N}×{N}, n = {N})":
        "展开 h_{N}，从 h_{N} = {N} 起（{N}×{N}，n = {N}）",
    "∂h_n/∂x_{N} = (∂h_n/∂h_{N})(∂h_{N}/∂x_{N}) = W^{n−{N}} U for every n":
        "对每个 n，∂h_n/∂x_{N} = (∂h_n/∂h_{N})(∂h_{N}/∂x_{N}) = W^{n−{N}} U",
    "∂h_n/∂h_{N} = W^{n−{N}} (rnn-gradients, linear-rnn-jacobian)":
        "∂h_n/∂h_{N} = W^{n−{N}}（rnn-gradients，linear-rnn-jacobian）",
    "‖∂h_n/∂x_{N}‖₂ ≤ ‖W‖₂^(n−{N}) ‖U‖₂ for the tanh RNN encoder":
        "tanh RNN 编码器的 ‖∂h_n/∂x_{N}‖₂ ≤ ‖W‖₂^(n−{N}) ‖U‖₂",
    "For h_t = tanh(W h_{t−{N}} + U x_t): ‖∂h_n/∂x_{N}‖₂ ≤ ‖W‖₂^{n−{N}}‖U‖₂; with ‖W‖₂ < {N} the first token's influence decays exponentially in n.":
        "对 h_t = tanh(W h_{t−{N}} + U x_t)：‖∂h_n/∂x_{N}‖₂ ≤ ‖W‖₂^{n−{N}}‖U‖₂；当 ‖W‖₂ < {N} 时，第一个词元的影响随 n 指数衰减。",
    "Pascanu, Mikolov, Bengio {N}":
        "Pascanu、Mikolov、Bengio {N}",
    "d tanh(u)/du = {N} − tanh²(u)":
        "d tanh(u)/du = {N} − tanh²(u)",
    "tanh² ≥ {N}":
        "tanh² ≥ {N}",
    "{N} − tanh² = sech²":
        "{N} − tanh² = sech²",
    "cosh(u) ≥ {N} > {N}":
        "cosh(u) ≥ {N} > {N}",
    "∂h_n/∂x_{N} = (∂h_n/∂h_{N}) D_{N} U, h_{N} = tanh(W h_{N} + U x_{N})":
        "∂h_n/∂x_{N} = (∂h_n/∂h_{N}) D_{N} U，h_{N} = tanh(W h_{N} + U x_{N})",
    "submultiplicativity":
        "次可乘性",
    "‖AB‖₂ ≤ ‖A‖₂‖B‖₂ (submultiplicativity of the operator norm)":
        "‖AB‖₂ ≤ ‖A‖₂‖B‖₂（算子范数的次可乘性）",
    "‖D_{N}‖₂ ≤ {N}":
        "‖D_{N}‖₂ ≤ {N}",
    "the norm of a diagonal matrix is its largest |entry|; entries in ({N}, {N}] (steps {N}-{N})":
        "对角矩阵的范数是其绝对值最大的元素；元素属于 ({N}, {N}]（第 {N}-{N} 步）",
    "‖∂h_n/∂h_{N}‖₂ ≤ ‖W‖₂^{n−{N}} (rnn-gradients, tanh-rnn-gradient-bound)":
        "‖∂h_n/∂h_{N}‖₂ ≤ ‖W‖₂^{n−{N}}（rnn-gradients，tanh-rnn-gradient-bound）",
    "rnn-gradients: tanh-rnn-gradient-bound":
        "rnn-gradients：tanh-rnn-gradient-bound",
    "E[q·k] = {N}, Var[q·k] = d_k":
        "E[q·k] = {N}，Var[q·k] = d_k",
    "E[q·k] = {N} and Var[q·k] = d_k for every d_k ≥ {N}.":
        "E[q·k] = {N} 且 Var[q·k] = d_k，对每个 d_k ≥ {N} 成立。",
    "q_{N}..q_d, k_{N}..k_d independent, each with mean {N} and variance {N}; d_k a positive integer":
        "q_{N}..q_d、k_{N}..k_d 相互独立，均值均为 {N}、方差均为 {N}；d_k 为正整数",
    "Vaswani et al. {N}, footnote {N}":
        "Vaswani 等 {N}，脚注 {N}",
    "E[q·k], q·k = Σ_i q_i k_i":
        "E[q·k]，q·k = Σ_i q_i k_i",
    "linearity of expectation":
        "期望的线性",
    "linearity of E":
        "E 的线性",
    "q_i and k_i are independent":
        "q_i 与 k_i 相互独立",
    "independence of the components: E[XY] = E[X]E[Y]":
        "分量相互独立：E[XY] = E[X]E[Y]",
    "E[q_i] = E[k_i] = {N}":
        "E[q_i] = E[k_i] = {N}",
    "mean {N}":
        "均值为 {N}",
    "variance {N} and mean {N}":
        "方差为 {N}、均值为 {N}",
    "Var Y = E[Y²] − (E Y)²":
        "Var Y = E[Y²] − (E Y)²",
    "definition of variance":
        "方差的定义",
    "moments {N} and {N}":
        "{N} 阶矩与 {N} 阶矩",
    "Cov(Y, Z) = E[YZ] − E[Y]E[Z], i ≠ j":
        "Cov(Y, Z) = E[YZ] − E[Y]E[Z]，i ≠ j",
    "definition of covariance":
        "协方差的定义",
    "q_i, q_j, k_i, k_j are independent for i ≠ j":
        "i ≠ j 时 q_i、q_j、k_i、k_j 相互独立",
    "the two products are equal: Cov = {N} whatever the moments":
        "两个乘积相等：无论各阶矩如何，Cov = {N}",
    "C(i, j) = Cov(q_i k_i, q_j k_j), which is Var(q_i k_i) when i = j":
        "C(i, j) = Cov(q_i k_i, q_j k_j)，i = j 时即 Var(q_i k_i)",
    "C names the covariance of the terms; Cov(Y, Y) = Var Y":
        "C 表示各项的协方差；Cov(Y, Y) = Var Y",
    "Var(q_i k_i) = {N} (steps {N}-{N}), Cov = {N} for i ≠ j (steps {N}-{N})":
        "Var(q_i k_i) = {N}（第 {N}-{N} 步），i ≠ j 时 Cov = {N}（第 {N}-{N} 步）",
    "steps {N}-{N}":
        "第 {N}-{N} 步",
    "{N} if i = j, else {N}: the Kronecker delta":
        "i = j 时为 {N}，否则为 {N}：克罗内克 δ",
    "Var(cY) = c² Var Y and Var(Σ Y_i) = Σ_i Σ_j Cov(Y_i, Y_j)":
        "Var(cY) = c² Var Y 且 Var(Σ Y_i) = Σ_i Σ_j Cov(Y_i, Y_j)",
    "bilinearity of covariance (expand the square, linearity of E)":
        "协方差的双线性（展开平方，E 的线性）",
    "C(i, j) = δ_ij (steps {N}-{N})":
        "C(i, j) = δ_ij（第 {N}-{N} 步）",
    "Σ_j δ_ij = {N} for {N} ≤ i ≤ d_k":
        "Σ_j δ_ij = {N}，对 {N} ≤ i ≤ d_k",
    "Σ_{i={N}}^{d_k} {N} = d_k":
        "Σ_{i={N}}^{d_k} {N} = d_k",
    "cross-check with sympy.stats at d_k = {N}":
        "在 d_k = {N} 时用 sympy.stats 交叉核对",
    "For Gaussian q, k ∈ ℝ²: E[q·k] = {N}, Var[q·k] = {N}, Var[q·k/√{N}] = {N}.":
        "对高斯分布的 q, k ∈ ℝ²：E[q·k] = {N}，Var[q·k] = {N}，Var[q·k/√{N}] = {N}。",
    "independent standard normal components":
        "各分量相互独立，服从标准正态分布",
    "sympy.stats expectation, Gaussian components, d_k = {N}":
        "sympy.stats 求期望，高斯分量，d_k = {N}",
    "sympy.stats variance = d_k":
        "sympy.stats 求得方差 = d_k",
    "after scaling by {N}/√d_k":
        "按 {N}/√d_k 缩放之后",
    "Var[q·k/√d_k] = {N} for every d_k":
        "对每个 d_k，Var[q·k/√d_k] = {N}",
    "E[q·k] = {N} and Var[{N}/sqrt(d_k)·q·k] = {N} for every d_k ≥ {N}.":
        "E[q·k] = {N} 且 Var[({N}/√d_k)·q·k] = {N}，对每个 d_k ≥ {N} 成立。",
    "E|q·k| ~ √({N} d_k/π): the typical size grows like √d_k":
        "E|q·k| ~ √({N} d_k/π)：典型大小按 √d_k 增长",
    "For standard Gaussian q, k ∈ ℝ^{d_k}: E|q·k| = ({N}/√π)Γ((d_k+{N})/{N})/Γ(d_k/{N}) ~ √({N} d_k/π).":
        "对标准高斯分布的 q, k ∈ ℝ^{d_k}：E|q·k| = ({N}/√π)Γ((d_k+{N})/{N})/Γ(d_k/{N}) ~ √({N} d_k/π)。",
    "independent standard normal components; d_k a positive integer":
        "各分量相互独立，服从标准正态分布；d_k 为正整数",
    "chi distribution mean; checked numerically against Monte Carlo in the tests":
        "卡方（chi）分布的均值；测试中用蒙特卡洛做了数值核对",
    "E|q·k|, with s = q·k":
        "E|q·k|，其中 s = q·k",
    "given k, s ~ N({N}, ‖k‖²), so E[|s| | k] = √({N}/π)‖k‖; R = ‖k‖":
        "给定 k，s ~ N({N}, ‖k‖²)，故 E[|s| | k] = √({N}/π)‖k‖；R = ‖k‖",
    "tower rule; a Gaussian linear combination; E|Z| = √({N}/π) for Z ~ N({N}, {N})":
        "全期望公式；高斯变量的线性组合；E|Z| = √({N}/π)，其中 Z ~ N({N}, {N})",
    "‖k‖ is chi-distributed with d_k degrees of freedom: E R = √{N} Γ((d_k+{N})/{N})/Γ(d_k/{N})":
        "‖k‖ 服从自由度为 d_k 的 chi 分布：E R = √{N} Γ((d_k+{N})/{N})/Γ(d_k/{N})",
    "the density of R is ∝ r^(d_k−{N}) exp(−r²/{N}); its mean, by sympy integrate":
        "R 的密度 ∝ r^(d_k−{N}) exp(−r²/{N})；其均值由 sympy 积分求得",
    "Γ((d+{N})/{N})/Γ(d/{N}) ~ √(d/{N}) as d → ∞":
        "d → ∞ 时 Γ((d+{N})/{N})/Γ(d/{N}) ~ √(d/{N})",
    "softmax Jacobian in index form (symbolic n)":
        "softmax 雅可比矩阵的下标形式（符号 n）",
    "For every n: J_ij = ∂p_i/∂z_j = p_i δ_ij − p_i p_j, Σ_j J_ij = {N}, tr J = {N} − Σ p_i² ≤ {N}({N} − max p).":
        "对每个 n：J_ij = ∂p_i/∂z_j = p_i δ_ij − p_i p_j，Σ_j J_ij = {N}，tr J = {N} − Σ p_i² ≤ {N}({N} − max p)。",
    "n a positive integer; {N} ≤ i, j ≤ n; scores real; weights real with Σ p = {N}; p_{N} the largest":
        "n 为正整数；{N} ≤ i, j ≤ n；分数为实数；权重为实数且 Σ p = {N}；p_{N} 为最大者",
    "∂/∂z_j of exp(z_i)/Σ_k exp(z_k), {N} ≤ i, j ≤ n":
        "对 z_j 求 exp(z_i)/Σ_k exp(z_k) 的偏导，{N} ≤ i, j ≤ n",
    "J_ij = p_i δ_ij − p_i p_j, i.e. J = diag(p) − ppᵀ":
        "J_ij = p_i δ_ij − p_i p_j，即 J = diag(p) − ppᵀ",
    "row sum (J·{N})_i":
        "行和 (J·{N})_i",
    "Σ_j p_j = {N}, so J·{N} = {N}":
        "Σ_j p_j = {N}，故 J·{N} = {N}",
    "the weights sum to {N} (softmax-distribution)":
        "权重之和为 {N}（softmax-distribution）",
    "tr J = Σ_i J_ii":
        "tr J = Σ_i J_ii",
    "Σ_i p_i = {N}":
        "Σ_i p_i = {N}",
    "the weights sum to {N}":
        "权重之和为 {N}",
    "split off the largest weight, numbered p_{N}":
        "把最大的权重单独拿出来，记为 p_{N}",
    "a sum of squares is ≥ {N}":
        "平方和 ≥ {N}",
    "{N}({N} − p_{N}) − ({N} − p_{N}²) = ({N} − p_{N})² ≥ {N}":
        "{N}({N} − p_{N}) − ({N} − p_{N}²) = ({N} − p_{N})² ≥ {N}",
    "softmax Jacobian diag(p) − ppᵀ and its trace bound (n = {N})":
        "softmax 雅可比矩阵 diag(p) − ppᵀ 及其迹的界（n = {N}）",
    "For n = {N}: ∂softmax(z)/∂z = diag(p) − ppᵀ; J symmetric, J·{N} = {N}, J ⪰ {N}, tr J = {N} − Σ p_i² ≤ {N}({N} − p_i) for every i, in particular for the largest weight.":
        "对 n = {N}：∂softmax(z)/∂z = diag(p) − ppᵀ；J 对称，J·{N} = {N}，J ⪰ {N}，对每个 i 有 tr J = {N} − Σ p_i² ≤ {N}({N} − p_i)，对最大权重亦然。",
    "scores real; weights p_i > {N} with Σ p_i = {N}":
        "分数为实数；权重 p_i > {N} 且 Σ p_i = {N}",
    "quotient rule: ∂p_i/∂z_j = p_i δ_ij − p_i p_j":
        "商的求导法则：∂p_i/∂z_j = p_i δ_ij − p_i p_j",
    "J is symmetric: (ppᵀ)ᵀ = ppᵀ":
        "J 对称：(ppᵀ)ᵀ = ppᵀ",
    "J·{N} = p − p (Σ p_j) = {N}":
        "J·{N} = p − p (Σ p_j) = {N}",
    "tr J = Σ p_i − Σ p_i²":
        "tr J = Σ p_i − Σ p_i²",
    "xᵀJx = Σ p_i x_i² − (Σ p_i x_i)² is the variance of x under p":
        "xᵀJx = Σ p_i x_i² − (Σ p_i x_i)² 是 x 在分布 p 下的方差",
    "a positive combination of squares: J is positive semidefinite":
        "平方的正系数组合：J 半正定",
    "tr J (as above), towards the bound for p_{N}":
        "tr J（同上），推向关于 p_{N} 的界",
    "drop the squares of the other weights":
        "去掉其他权重的平方",
    "difference of squares":
        "平方差",
    "{N} + p ≤ {N}, since {N}({N} − p) − ({N} − p)({N} + p) = ({N} − p)²":
        "{N} + p ≤ {N}，因为 {N}({N} − p) − ({N} − p)({N} + p) = ({N} − p)²",
    "diag(p) − ppᵀ is positive semidefinite (symbolic n)":
        "diag(p) − ppᵀ 半正定（符号 n）",
    "For every n and p in the open simplex: xᵀ(diag(p) − ppᵀ)x = Σ_i p_i (x_i − m)² ≥ {N}, m = Σ_j p_j x_j.":
        "对每个 n 及开单纯形中的 p：xᵀ(diag(p) − ppᵀ)x = Σ_i p_i (x_i − m)² ≥ {N}，m = Σ_j p_j x_j。",
    "n a positive integer; p_i > {N} with Σ p_i = {N}; x real":
        "n 为正整数；p_i > {N} 且 Σ p_i = {N}；x 为实数",
    "xᵀJx = Σ_i Σ_j x_i J_ij x_j with J_ij = p_i δ_ij − p_i p_j, {N} ≤ i, j ≤ n":
        "xᵀJx = Σ_i Σ_j x_i J_ij x_j，其中 J_ij = p_i δ_ij − p_i p_j，{N} ≤ i, j ≤ n",
    "Σ_j δ_ij x_j = x_i":
        "Σ_j δ_ij x_j = x_i",
    "the double sum of a product is the product of the sums":
        "乘积的二重和等于和的乘积",
    "m = Σ_j p_j x_j":
        "m = Σ_j p_j x_j",
    "m names the weighted mean Σ_j p_j x_j":
        "m 表示加权均值 Σ_j p_j x_j",
    "with c = m":
        "取 c = m",
    "expand the square; linearity of the sum":
        "展开平方；求和的线性",
    "Σ_i p_i x_i = m and Σ_i p_i = {N}":
        "Σ_i p_i x_i = m 且 Σ_i p_i = {N}",
    "m names the weighted mean Σ_i p_i x_i":
        "m 表示加权均值 Σ_i p_i x_i",
    "xᵀJx again":
        "再次写出 xᵀJx",
    "steps {N}-{N} and, with c = m, steps {N}-{N}":
        "第 {N}-{N} 步，以及取 c = m 的第 {N}-{N} 步",
    "{N} − max p ≤ (n − {N})e^(−Δ) (symbolic n)":
        "{N} − max p ≤ (n − {N})e^(−Δ)（符号 n）",
    "For every n ≥ {N}: {N} − max softmax(z) ≤ (n − {N})e^(−Δ), Δ the gap between the two largest scores.":
        "对每个 n ≥ {N}：{N} − max softmax(z) ≤ (n − {N})e^(−Δ)，Δ 为最大的两个分数之差。",
    "n a positive integer; z_{N} = a the largest score; z_j = a − Δ − t_j, Δ ≥ {N}, t_j ≥ {N}, t_{N} = {N}":
        "n 为正整数；z_{N} = a 为最大分数；z_j = a − Δ − t_j，Δ ≥ {N}，t_j ≥ {N}，t_{N} = {N}",
    "{N} − p_{N}, scores z_{N} = a, z_j = a − Δ − t_j (t_{N} = {N}) for {N} ≤ j ≤ n":
        "{N} − p_{N}，分数 z_{N} = a，z_j = a − Δ − t_j（t_{N} = {N}），{N} ≤ j ≤ n",
    "Σ p = {N}":
        "Σ p = {N}",
    "keep only exp(a) in the denominator":
        "分母中只保留 exp(a)",
    "exp(a − Δ − t_j)/exp(a) = exp(−Δ − t_j)":
        "exp(a − Δ − t_j)/exp(a) = exp(−Δ − t_j)",
    "exp(−Δ − t_j) ≤ exp(−Δ) for t_j ≥ {N}":
        "t_j ≥ {N} 时 exp(−Δ − t_j) ≤ exp(−Δ)",
    "n − {N} equal terms":
        "n − {N} 个相同的项",
    "{N} − max p ≤ (n − {N})e^(−Δ) (n = {N})":
        "{N} − max p ≤ (n − {N})e^(−Δ)（n = {N}）",
    "For n = {N}, scores with largest a and gap Δ to the next: {N} − max softmax ≤ (n − {N})e^(−Δ).":
        "对 n = {N}，最大分数为 a、与次大分数之差为 Δ：{N} − max softmax ≤ (n − {N})e^(−Δ)。",
    "scores real: z_{N} = a, z_{N} = a − Δ, z_j = a − Δ − t_j with Δ, t_j ≥ {N}":
        "分数为实数：z_{N} = a，z_{N} = a − Δ，z_j = a − Δ − t_j，其中 Δ, t_j ≥ {N}",
    "{N} − p_max, the largest score z_{N} = a":
        "{N} − p_max，最大分数 z_{N} = a",
    "Σ p = {N}: the other weights":
        "Σ p = {N}：其余的权重",
    "z_j − a = −Δ − t_j":
        "z_j − a = −Δ − t_j",
    "each exp(−Δ − t_j) ≤ exp(−Δ)":
        "每个 exp(−Δ − t_j) ≤ exp(−Δ)",
    "exp(−t{N}) ≤ {N} since t{N} ≥ {N} (exp increasing)":
        "exp(−t{N}) ≤ {N}，因为 t{N} ≥ {N}（exp 单调递增）",
    "sup ‖diag(p) − ppᵀ‖₂ = {N}/{N}, attained at n = {N}, p = (½, ½)":
        "sup ‖diag(p) − ppᵀ‖₂ = {N}/{N}，在 n = {N}、p = (½, ½) 时取到",
    "‖J‖₂ = max over unit x of xᵀJx ≤ {N}/{N} for every n and p (the identity for symbolic n; the bound on the weighted spread cited); at n = {N}, p = (½, ½) it equals {N}/{N}.":
        "对每个 n 和 p，‖J‖₂ = 单位向量 x 上 xᵀJx 的最大值 ≤ {N}/{N}（符号 n 下的恒等式；加权离散度的界为引用）；在 n = {N}、p = (½, ½) 时等于 {N}/{N}。",
    "p in the open simplex; x a unit vector with largest coordinate M and smallest m":
        "p 属于开单纯形；x 为单位向量，最大坐标为 M，最小坐标为 m",
    "Popoviciu's inequality on variances":
        "Popoviciu 方差不等式",
    "with c = M/{N} + m_/{N}":
        "取 c = M/{N} + m_/{N}",
    "n = {N}, p = (p, {N} − p)":
        "n = {N}，p = (p, {N} − p)",
    "({N}, −{N}) is an eigenvector, eigenvalue {N}p({N} − p)":
        "({N}, −{N}) 是特征向量，特征值为 {N}p({N} − p)",
    "{N} is an eigenvector, eigenvalue {N}":
        "{N} 是特征向量，特征值为 {N}",
    "‖J‖₂ = {N}p({N} − p) ≤ {N}/{N}: the slack is {N}(p − {N}/{N})²":
        "‖J‖₂ = {N}p({N} − p) ≤ {N}/{N}：差额为 {N}(p − {N}/{N})²",
    "equality at p = {N}/{N}: the supremum is attained":
        "p = {N}/{N} 时取等：上确界可以取到",
    "xᵀJx, for every n":
        "对每个 n 写出 xᵀJx",
    "= Σ p_i (x_i − c)² − (m − c)², c = (M + m)/{N}: steps {N}-{N} and {N}-{N}":
        "= Σ p_i (x_i − c)² − (m − c)²，c = (M + m)/{N}：第 {N}-{N} 步与第 {N}-{N} 步",
    "drop −(m − c)²":
        "去掉 −(m − c)²",
    "|x_i − c| ≤ (M − m)/{N}; a weighted mean is at most the largest term":
        "|x_i − c| ≤ (M − m)/{N}；加权平均至多为最大的项",
    "Σ p_i (x_i − c)² ≤ max_i (x_i − c)² ≤ ((M − m)/{N})² for weights summing to {N}, m ≤ x_i ≤ M (Popoviciu's inequality)":
        "Σ p_i (x_i − c)² ≤ max_i (x_i − c)² ≤ ((M − m)/{N})²，其中权重之和为 {N}，m ≤ x_i ≤ M（Popoviciu 不等式）",
    "(M² + m²)/{N} − (M − m)²/{N} = (M + m)²/{N} ≥ {N}":
        "(M² + m²)/{N} − (M − m)²/{N} = (M + m)²/{N} ≥ {N}",
    "M² + m² ≤ ‖x‖² = {N} for a unit vector x":
        "对单位向量 x，M² + m² ≤ ‖x‖² = {N}",
    "M² + m² ≤ ‖x‖² = {N}: two coordinates of a unit vector":
        "M² + m² ≤ ‖x‖² = {N}：单位向量的两个坐标",
    "softmax is a distribution, shift invariant (symbolic n)":
        "softmax 是概率分布，且平移不变（符号 n）",
    "For every n ≥ {N} and real z: Σ_i softmax(z)_i = {N}, softmax(z)_i > {N}, softmax(z + c·{N}) = softmax(z).":
        "对每个 n ≥ {N} 及实数 z：Σ_i softmax(z)_i = {N}，softmax(z)_i > {N}，softmax(z + c·{N}) = softmax(z)。",
    "n a positive integer, scores real, c real":
        "n 为正整数，分数为实数，c 为实数",
    "Σ_i softmax(z)_i":
        "Σ_i softmax(z)_i",
    "the denominator does not depend on i":
        "分母与 i 无关",
    "rename the summation index: numerator = denominator":
        "更换求和下标：分子 = 分母",
    "a positive number over a sum of positive numbers":
        "正数除以若干正数之和",
    "exp(z + c) = exp(c) exp(z); exp(c) leaves the sum":
        "exp(z + c) = exp(c) exp(z)；exp(c) 可提到求和号外",
    "exp(c) > {N} cancels":
        "exp(c) > {N} 约去",
    "softmax is a distribution, shift invariant (n = {N})":
        "softmax 是概率分布，且平移不变（n = {N}）",
    "For real z_{N}..z_{N}: Σ softmax(z) = {N}, softmax(z)_i > {N}, softmax(z + c·{N}) = softmax(z).":
        "对实数 z_{N}..z_{N}：Σ softmax(z) = {N}，softmax(z)_i > {N}，softmax(z + c·{N}) = softmax(z)。",
    "scores real, c real":
        "分数为实数，c 为实数",
    "common denominator Σ_k exp(z_k)":
        "通分，公分母 Σ_k exp(z_k)",
    "numerator equals denominator":
        "分子等于分母",
    "exp(z_{N}) > {N} and the denominator is a sum of exponentials":
        "exp(z_{N}) > {N}，且分母是若干指数之和",
    "exp(z_i + c) = exp(c) exp(z_i)":
        "exp(z_i + c) = exp(c) exp(z_i)",
    "same for weight {N}":
        "权重 {N} 同理",
    "attention output inside the value rows' range (symbolic n)":
        "注意力输出落在值向量各行的范围内（符号 n）",
    "For every n, a_j ≥ {N} with Σ a_j = {N}: min_j v_j ≤ Σ_j a_j v_j ≤ max_j v_j in every coordinate.":
        "对每个 n 及 a_j ≥ {N}、Σ a_j = {N}：每个坐标上 min_j v_j ≤ Σ_j a_j v_j ≤ max_j v_j。",
    "a_j ≥ {N} with Σ a_j = {N}; m ≤ v_j ≤ M for {N} ≤ j ≤ n":
        "a_j ≥ {N} 且 Σ a_j = {N}；对 {N} ≤ j ≤ n 有 m ≤ v_j ≤ M",
    "one output coordinate Σ_j a_j v_j":
        "输出的一个坐标 Σ_j a_j v_j",
    "v_j ≥ m and a_j ≥ {N} for every j":
        "对每个 j 有 v_j ≥ m 且 a_j ≥ {N}",
    "v_j ≥ m, the column minimum":
        "v_j ≥ m，即该列的最小值",
    "m does not depend on j":
        "m 与 j 无关",
    "Σ a_j = {N}":
        "Σ a_j = {N}",
    "v_j ≤ M and a_j ≥ {N} for every j":
        "对每个 j 有 v_j ≤ M 且 a_j ≥ {N}",
    "v_j ≤ M, the column maximum":
        "v_j ≤ M，即该列的最大值",
    "M does not depend on j":
        "M 与 j 无关",
    "attention output inside the value rows' range (n = {N})":
        "注意力输出落在值向量各行的范围内（n = {N}）",
    "For a_j ≥ {N}, Σ a_j = {N} (n = {N}): min_j v_j ≤ Σ a_j v_j ≤ max_j v_j in every coordinate; one-hot a returns its row.":
        "对 a_j ≥ {N}、Σ a_j = {N}（n = {N}）：每个坐标上 min_j v_j ≤ Σ a_j v_j ≤ max_j v_j；独热的 a 返回对应的那一行。",
    "a_j ≥ {N} with Σ a_j = {N}; m ≤ v_j ≤ M for all j":
        "a_j ≥ {N} 且 Σ a_j = {N}；对所有 j 有 m ≤ v_j ≤ M",
    "each v_j ≥ m and a_j ≥ {N}":
        "每个 v_j ≥ m 且 a_j ≥ {N}",
    "v{N} ≥ m, the column minimum":
        "v{N} ≥ m，即该列的最小值",
    "factor m":
        "提出因子 m",
    "each v_j ≤ M and a_j ≥ {N}":
        "每个 v_j ≤ M 且 a_j ≥ {N}",
    "v{N} ≤ M, the column maximum":
        "v{N} ≤ M，即该列的最大值",
    "factor M":
        "提出因子 M",
    "one-hot weight on row {N}":
        "独热权重落在第 {N} 行",
    "for n > d_v + {N} the map a ↦ (aV, Σa) has a non-trivial kernel":
        "当 n > d_v + {N} 时，映射 a ↦ (aV, Σa) 的核非平凡",
    "dim ker(a ↦ (aV, a·{N})) ≥ n − d_v − {N} ≥ {N} when n > d_v + {N}.":
        "dim ker(a ↦ (aV, a·{N})) ≥ n − d_v − {N} ≥ {N}，只要 n > d_v + {N}。",
    "V ∈ ℝ^{n×d_v}; n, d_v positive integers with n > d_v + {N}":
        "V ∈ ℝ^{n×d_v}；n、d_v 为正整数且 n > d_v + {N}",
    "Brunner et al. {N}, On Identifiability in Transformers":
        "Brunner 等 {N}，《On Identifiability in Transformers》",
    "dim ker = n − rank (rank–nullity)":
        "dim ker = n − rank（秩–零化度定理）",
    "rank ≤ number of columns d_v + {N} of [V | {N}]":
        "秩 ≤ 列数 d_v + {N}（[V | {N}] 的列数）",
    "the rank of an n×(d_v+{N}) matrix is at most d_v + {N}":
        "n×(d_v+{N}) 矩阵的秩至多为 d_v + {N}",
    "n ≥ d_v + {N} (n > d_v + {N}, integers)":
        "n ≥ d_v + {N}（n > d_v + {N}，均为整数）",
    "n > d_v + {N}":
        "n > d_v + {N}",
    "two weight vectors, one output (n = {N}, d_v = {N}, symbolic V)":
        "两个权重向量，一个输出（n = {N}，d_v = {N}，符号 V）",
    "For any V ∈ ℝ^{{N}×{N}} with distinct values and a in the open simplex, a + t·w (small t ≠ {N}) is a different distribution with the same output.":
        "对任意取值互不相同的 V ∈ ℝ^{{N}×{N}} 及开单纯形中的 a，a + t·w（t ≠ {N} 且很小）是另一个分布，输出却相同。",
    "values real; a_j > {N}; t small enough that a + t·w ≥ {N}":
        "取值为实数；a_j > {N}；t 足够小，使 a + t·w ≥ {N}",
    "w·V = {N} (n = {N}, d_v = {N})":
        "w·V = {N}（n = {N}，d_v = {N}）",
    "w·{N} = {N}":
        "w·{N} = {N}",
    "a and a + t·w give the same output":
        "a 与 a + t·w 给出相同的输出",
    "a + t·w still sums to Σ a = {N}":
        "a + t·w 之和仍为 Σ a = {N}",
    "‖w‖² > {N} unless all values are equal, so a + t·w ≠ a for t ≠ {N}":
        "除非所有取值相等，否则 ‖w‖² > {N}，故 t ≠ {N} 时 a + t·w ≠ a",
    "smallest counterexample: n = {N} keys, d_v = {N}":
        "最小的反例：n = {N} 个键，d_v = {N}",
    "a = (⅓, ⅓, ⅓) and a' = (½, {N}, ½) on V = ({N}, {N}, {N})ᵀ: same output {N}, different weights.":
        "a = (⅓, ⅓, ⅓) 与 a' = (½, {N}, ½)，作用于 V = ({N}, {N}, {N})ᵀ：输出同为 {N}，权重不同。",
    "uniform weights and weights (½, {N}, ½) on V = ({N}, {N}, {N})ᵀ both give {N}":
        "均匀权重与权重 (½, {N}, ½) 作用于 V = ({N}, {N}, {N})ᵀ，都给出 {N}",
    "both sum to {N}":
        "两者之和都为 {N}",
    "the two weight vectors differ (squared distance {N}/{N})":
        "两个权重向量不同（距离的平方为 {N}/{N}）",
    "(A, b) ∘ (A', b') = (AA', Ab' + b) is associative":
        "(A, b) ∘ (A', b') = (AA', Ab' + b) 满足结合律",
    "Affine maps h ↦ Ah + b compose by (A, b) ∘ (A', b') = (AA', Ab' + b), and this operation is associative.":
        "仿射映射 h ↦ Ah + b 按 (A, b) ∘ (A', b') = (AA', Ab' + b) 复合，这一运算满足结合律。",
    "A, A', A'' ∈ ℝ^{d×d}; b, b', b'' ∈ ℝ^d; symbolic d":
        "A, A', A'' ∈ ℝ^{d×d}；b, b', b'' ∈ ℝ^d；符号 d",
    "Blelloch {N}, Prefix sums and their applications":
        "Blelloch {N}，《Prefix sums and their applications》",
    "f(g(h)) = A(A'h + b') + b = (AA')h + (Ab' + b)":
        "f(g(h)) = A(A'h + b') + b = (AA')h + (Ab' + b)",
    "associativity, matrix part: (AA')A'' = A(A'A'')":
        "结合律，矩阵部分：(AA')A'' = A(A'A'')",
    "associativity, vector part: AA'b'' + Ab' + b both ways":
        "结合律，向量部分：两种结合方式都得到 AA'b'' + Ab' + b",
    "a linear recurrence computed by a tree of compositions equals the loop (n = {N})":
        "用复合树计算的线性递推与循环相同（n = {N}）",
    "For h_t = A_t h_{t−{N}} + b_t, n = {N}: the loop and the scan tree (f{N}∘f{N})∘(f{N}∘f{N}) give the same h_{N}; in general the tree has depth ⌈log₂ n⌉.":
        "对 h_t = A_t h_{t−{N}} + b_t，n = {N}：循环与扫描树 (f{N}∘f{N})∘(f{N}∘f{N}) 给出相同的 h_{N}；一般地，树的深度为 ⌈log₂ n⌉。",
    "A_t ∈ ℝ^{d×d}, b_t ∈ ℝ^d, symbolic d":
        "A_t ∈ ℝ^{d×d}，b_t ∈ ℝ^d，符号 d",
    "Martin & Cundy {N}, Parallelizing Linear Recurrent Neural Nets Over Sequence Length":
        "Martin 与 Cundy {N}，《Parallelizing Linear Recurrent Neural Nets Over Sequence Length》",
    "sequential loop = balanced tree (f{N}∘f{N})∘(f{N}∘f{N}) applied to h_{N}":
        "顺序循环 = 平衡树 (f{N}∘f{N})∘(f{N}∘f{N}) 作用于 h_{N}",
    "any bracketing gives the same map (associativity)":
        "任何加括号方式都给出同一个映射（结合律）",
    "the scan's prefix h_{N} equals the loop's":
        "扫描的前缀 h_{N} 与循环的相同",
    "∂h_T/∂h_{N} = W^(T−{N}) for the linear RNN":
        "线性 RNN 的 ∂h_T/∂h_{N} = W^(T−{N})",
    "For h_t = W h_{t−{N}} + U x_t: ∂h_T/∂h_{N} = W^{T−{N}} for every T ≥ {N}.":
        "对 h_t = W h_{t−{N}} + U x_t：∂h_T/∂h_{N} = W^{T−{N}}，对每个 T ≥ {N} 成立。",
    "W ∈ ℝ^{d_h×d_h}; T a positive integer":
        "W ∈ ℝ^{d_h×d_h}；T 为正整数",
    "unroll h_{N} = W(W(W h_{N} + U x_{N}) + U x_{N}) + U x_{N} ({N}×{N}, T = {N})":
        "展开 h_{N} = W(W(W h_{N} + U x_{N}) + U x_{N}) + U x_{N}（{N}×{N}，T = {N}）",
    "induction: h_{T+{N}} = W h_T + U x_{T+{N}}, so ∂h_{T+{N}}/∂h_{N} = W·W^{T−{N}}":
        "归纳：h_{T+{N}} = W h_T + U x_{T+{N}}，故 ∂h_{T+{N}}/∂h_{N} = W·W^{T−{N}}",
    "induction hypothesis ∂h_T/∂h_{N} = W^{T−{N}}":
        "归纳假设 ∂h_T/∂h_{N} = W^{T−{N}}",
    "W^k → {N} if ρ(W) < {N}, unbounded if ρ(W) > {N} (diagonalizable W)":
        "W^k → {N}（若 ρ(W) < {N}），无界（若 ρ(W) > {N}）（W 可对角化）",
    "For diagonalizable W = SΛS⁻¹: W^k = SΛ^kS⁻¹; W^k → {N} when every |λ_i| < {N}; ‖W^k‖ → ∞ when some |λ_i| > {N}.":
        "对可对角化的 W = SΛS⁻¹：W^k = SΛ^kS⁻¹；W^k → {N}，当所有 |λ_i| < {N}；‖W^k‖ → ∞，当某个 |λ_i| > {N}。",
    "W diagonalizable with invertible S; k a non-negative integer; s, s{N}, s{N} > {N}":
        "W 可对角化，S 可逆；k 为非负整数；s, s{N}, s{N} > {N}",
    "W^{k+{N}} = W^k W: S⁻¹S = I cancels (W = SΛS⁻¹ diagonalizable)":
        "W^{k+{N}} = W^k W：S⁻¹S = I 约去（W = SΛS⁻¹ 可对角化）",
    "|λ^k| = |λ|^k for λ = ρe^{iθ}":
        "对 λ = ρe^{iθ}，|λ^k| = |λ|^k",
    "|λ| = {N}/({N} + s) < {N}: |λ|^k → {N}":
        "|λ| = {N}/({N} + s) < {N}：|λ|^k → {N}",
    "|λ| = {N} + s > {N}: |λ|^k → ∞":
        "|λ| = {N} + s > {N}：|λ|^k → ∞",
    "ρ(W) < {N}: every entry of W^k = SΛ^kS⁻¹ tends to {N} ({N}×{N}, real eigenvalues shown)":
        "ρ(W) < {N}：W^k = SΛ^kS⁻¹ 的每个元素都趋于 {N}（{N}×{N}，展示实特征值情形）",
    "ρ(W) > {N}: W^k maps the eigenvector S e_{N} ≠ {N} to λ_{N}^k S e_{N}, unbounded":
        "ρ(W) > {N}：W^k 把特征向量 S e_{N} ≠ {N} 映为 λ_{N}^k S e_{N}，无界",
    "‖∂h_T/∂h_{N}‖₂ ≤ ‖W‖₂^(T−{N}) for the tanh RNN":
        "tanh RNN 的 ‖∂h_T/∂h_{N}‖₂ ≤ ‖W‖₂^(T−{N})",
    "For h_t = tanh(W h_{t−{N}} + U x_t): ∂h_t/∂h_{t−{N}} = D_t W with {N} < (D_t)_ii ≤ {N}, hence ‖∂h_T/∂h_{N}‖₂ ≤ ‖W‖₂^{T−{N}} (induction on T; T = {N} gives ‖I‖₂ = {N}).":
        "对 h_t = tanh(W h_{t−{N}} + U x_t)：∂h_t/∂h_{t−{N}} = D_t W，其中 {N} < (D_t)_ii ≤ {N}，因此 ‖∂h_T/∂h_{N}‖₂ ≤ ‖W‖₂^{T−{N}}（对 T 归纳；T = {N} 时为 ‖I‖₂ = {N}）。",
    "W, U real; T a positive integer":
        "W、U 为实矩阵；T 为正整数",
    "one step h_t = tanh(W h_{t−{N}} + U x_t): ∂h_t/∂h_{t−{N}} = D_t W ({N}×{N} shown)":
        "一步 h_t = tanh(W h_{t−{N}} + U x_t)：∂h_t/∂h_{t−{N}} = D_t W（展示 {N}×{N} 情形）",
    "∂h_{T+{N}}/∂h_{N} = D_{T+{N}} W ∂h_T/∂h_{N}, with J = ∂h_T/∂h_{N}":
        "∂h_{T+{N}}/∂h_{N} = D_{T+{N}} W ∂h_T/∂h_{N}，记 J = ∂h_T/∂h_{N}",
    "‖D‖₂ = max_i |{N} − tanh²(a_i)| ≤ {N}":
        "‖D‖₂ = max_i |{N} − tanh²(a_i)| ≤ {N}",
    "the norm of a diagonal matrix is its largest |entry|; entries in ({N}, {N}] (entry steps)":
        "对角矩阵的范数是其绝对值最大的元素；元素属于 ({N}, {N}]（逐元素的步骤）",
    "induction hypothesis ‖J‖₂ ≤ ‖W‖₂^{T−{N}}":
        "归纳假设 ‖J‖₂ ≤ ‖W‖₂^{T−{N}}",
    "induction hypothesis":
        "归纳假设",
    "collect powers":
        "合并幂次",
    "Concat(head_{N}..head_{N}) W_O = Σ_i head_i W_O^(i)":
        "Concat(head_{N}..head_{N}) W_O = Σ_i head_i W_O^(i)",
    "For h = {N} heads of shape (n, d_v) and W_O of shape ({N}·d_v, d_model): Concat(heads) W_O = Σ_i head_i W_O^(i).":
        "对 h = {N} 个形状为 (n, d_v) 的头及形状为 ({N}·d_v, d_model) 的 W_O：Concat(heads) W_O = Σ_i head_i W_O^(i)。",
    "n, d_v, d_model symbolic positive integers":
        "n、d_v、d_model 为符号正整数",
    "Vaswani et al. {N}, §{N}.{N}.{N}":
        "Vaswani 等 {N}，§{N}.{N}.{N}",
    "Concat(head_{N}..head_{N}) W_O, W_O stacked from row blocks W_O^(i) of d_v rows":
        "Concat(head_{N}..head_{N}) W_O，W_O 由各含 d_v 行的行块 W_O^(i) 堆叠而成",
    "block multiplication: row of blocks times column of blocks":
        "分块乘法：一行块乘一列块",
    "h = {N} reduces to single-head attention with an output projection":
        "h = {N} 时退化为带输出投影的单头注意力",
    "With h = {N}, MultiHead(Q, K, V) = Attention(Q W_Q, K W_K, V W_V) W_O with d_k = d_model.":
        "h = {N} 时，MultiHead(Q, K, V) = Attention(Q W_Q, K W_K, V W_V) W_O，且 d_k = d_model。",
    "n, d_model symbolic":
        "n、d_model 为符号",
    "h = {N}: Concat of one head is the head; W_O is one block":
        "h = {N}：一个头的 Concat 就是这个头；W_O 只有一块",
    "d_k = d_model/h = d_model: the head has the full width":
        "d_k = d_model/h = d_model：该头具有全部宽度",
    "a single head":
        "只有一个头",
    "parameters {N}·d_model² + {N}·d_model and FLOPs independent of h":
        "参数量 {N}·d_model² + {N}·d_model 与浮点运算量都与 h 无关",
    "With d_k = d_v = d_model/h: #params = {N}·d_model² + {N}·d_model for every h; projection, score and AV FLOPs equal those of one head of width d_model.":
        "设 d_k = d_v = d_model/h：对每个 h，参数个数 = {N}·d_model² + {N}·d_model；投影、分数与 AV 的浮点运算量都等于宽度为 d_model 的单个头。",
    "h divides d_model; n queries, m keys":
        "h 整除 d_model；n 个查询，m 个键",
    "Vaswani et al. {N}, §{N}.{N}.{N} ('the total computational cost is similar to that of single-head attention with full dimensionality')":
        "Vaswani 等 {N}，§{N}.{N}.{N}（“总计算量与全维度的单头注意力相近”）",
    "h heads: W_Q^i, W_K^i, W_V^i of d_model×d_k with biases; W_O of (h·d_k)×d_model with bias":
        "h 个头：W_Q^i、W_K^i、W_V^i 为 d_model×d_k，带偏置；W_O 为 (h·d_k)×d_model，带偏置",
    "d_k = d_model/h: the h cancels":
        "d_k = d_model/h：h 被约去",
    "projection FLOPs = one full-width head ({N} FLOPs per multiply-add)":
        "投影的浮点运算量 = 一个全宽度的头（每次乘加计 {N} 次浮点运算）",
    "score FLOPs QKᵀ = one full-width head":
        "分数 QKᵀ 的浮点运算量 = 一个全宽度的头",
    "weighted-sum FLOPs AV = one full-width head":
        "加权求和 AV 的浮点运算量 = 一个全宽度的头",
    "grouped-query attention, h = {N}, h_kv = {N}: multi-head attention with each K/V head repeated for its group":
        "分组查询注意力，h = {N}，h_kv = {N}：每个 K/V 头在其组内重复的多头注意力",
    "h = {N} query heads, h_kv = {N} K/V heads (r = {N}): (X W_K)E = [K_⌊i/{N}⌋]_i, so MultiHead(X; W_Q, W_K E, W_V E, W_O) = GQA(X; W_Q, W_K, W_V, W_O).":
        "h = {N} 个查询头，h_kv = {N} 个 K/V 头（r = {N}）：(X W_K)E = [K_⌊i/{N}⌋]_i，故 MultiHead(X; W_Q, W_K E, W_V E, W_O) = GQA(X; W_Q, W_K, W_V, W_O)。",
    "n, d_k, d_model symbolic positive integers; E the repeat_interleave selection":
        "n、d_k、d_model 为符号正整数；E 为 repeat_interleave 选择矩阵",
    "Ainslie et al. {N} (arXiv:{N}.{N}), §{N}.{N}; Shazeer {N} (arXiv:{N}.{N})":
        "Ainslie 等 {N}（arXiv:{N}.{N}），§{N}.{N}；Shazeer {N}（arXiv:{N}.{N}）",
    "head block {N} of (X W_K) E = Σ_g K_g E_(g,{N}) = K_{N}: query head {N} gets K/V head ⌊{N}/{N}⌋ (repeat_interleave)":
        "(X W_K) E 的第 {N} 个头块 = Σ_g K_g E_(g,{N}) = K_{N}：查询头 {N} 取 K/V 头 ⌊{N}/{N}⌋（repeat_interleave）",
    "MultiHead with W_K' = W_K E, W_V' = W_V E: Σ_i Attention(Q_i, K'_i, V'_i) W_O^(i) (concat-projection), K'_i, V'_i the head blocks of X W_K E, X W_V E":
        "取 W_K' = W_K E、W_V' = W_V E 的 MultiHead：Σ_i Attention(Q_i, K'_i, V'_i) W_O^(i)（拼接后投影），K'_i、V'_i 为 X W_K E、X W_V E 的头块",
    "each block reduces to K_⌊i/{N}⌋, V_⌊i/{N}⌋ (the steps above): GQA's heads":
        "每一块都化为 K_⌊i/{N}⌋、V_⌊i/{N}⌋（见上面的步骤）：即 GQA 的各头",
    "ordinary multi-head (E = I) attention, h = {N}, h_kv = {N}: multi-head attention with each K/V head repeated for its group":
        "普通多头注意力（E = I），h = {N}，h_kv = {N}：每个 K/V 头在其组内重复的多头注意力",
    "multi-query attention, h = {N}, h_kv = {N}: multi-head attention with each K/V head repeated for its group":
        "多查询注意力，h = {N}，h_kv = {N}：每个 K/V 头在其组内重复的多头注意力",
    "Enc(PX) = P Enc(X) for every n (general argument)":
        "对每个 n，Enc(PX) = P Enc(X)（一般性论证）",
    "For every permutation matrix P and symbolic n, d: attention(PX) = P attention(X) (the softmax step proved entry by entry) and the encoder layer satisfies Enc(PX) = P Enc(X) (row-wise maps cited).":
        "对每个置换矩阵 P 及符号 n、d：attention(PX) = P attention(X)（softmax 一步逐元素证明），且编码器层满足 Enc(PX) = P Enc(X)（逐行映射为引用）。",
    "P a permutation matrix, P_ab = δ_σ(a)b; no positional encoding; no mask":
        "P 为置换矩阵，P_ab = δ_σ(a)b；无位置编码；无掩码",
    "Lee et al. {N} (Set Transformer), Yun et al. {N}":
        "Lee 等 {N}（《Set Transformer》），Yun 等 {N}",
    "softmax(PSPᵀ)_ab, with (PSPᵀ)_ab = S_σ(a)σ(b)":
        "softmax(PSPᵀ)_ab，其中 (PSPᵀ)_ab = S_σ(a)σ(b)",
    "reindex the row sum by j ↦ σ⁻¹(j), a bijection of {N}..n: = softmax(S)_σ(a)σ(b) = (P softmax(S) Pᵀ)_ab":
        "按 j ↦ σ⁻¹(j)（{N}..n 上的双射）重排行和的下标：= softmax(S)_σ(a)σ(b) = (P softmax(S) Pᵀ)_ab",
    "attention(PX): its scores (PXW_Q)(PXW_K)ᵀ/√d are P S Pᵀ (sympy's matrix algebra builds them so)":
        "attention(PX)：其分数 (PXW_Q)(PXW_K)ᵀ/√d 即 P S Pᵀ（sympy 的矩阵代数如此构造）",
    "softmax(PSPᵀ) = P softmax(S) Pᵀ (steps {N}-{N})":
        "softmax(PSPᵀ) = P softmax(S) Pᵀ（第 {N}-{N} 步）",
    "steps {N}-{N}, entry by entry, for every score matrix S":
        "第 {N}-{N} 步，逐元素，对每个分数矩阵 S 成立",
    "PᵀP = I":
        "PᵀP = I",
    "P is a permutation matrix: PᵀP = I":
        "P 是置换矩阵：PᵀP = I",
    "Enc(PX)":
        "Enc(PX)",
    "MHA(PX) = P MHA(X): every head is attention (steps {N}-{N}), Concat and W_O act on rows":
        "MHA(PX) = P MHA(X)：每个头都是注意力（第 {N}-{N} 步），Concat 与 W_O 按行作用",
    "each head as in steps {N}-{N}; Concat(head_i)W_O acts on rows":
        "每个头如第 {N}-{N} 步；Concat(head_i)W_O 按行作用",
    "residual: PX + P·MHA(X) = P(X + MHA(X))":
        "残差：PX + P·MHA(X) = P(X + MHA(X))",
    "LayerNorm is row-wise":
        "LayerNorm 逐行作用",
    "a map applied to each row separately commutes with permuting the rows (n = {N}: equivariance-n{N}-all-permutations)":
        "对每一行分别作用的映射与行的置换可交换（n = {N}：equivariance-n{N}-all-permutations）",
    "FFN is row-wise; residual":
        "FFN 逐行作用；残差",
    "LayerNorm is row-wise: = P Enc(X)":
        "LayerNorm 逐行作用：= P Enc(X)",
    "attention and the encoder layer are permutation equivariant (n = {N}, every non-identity permutation)":
        "注意力与编码器层具有置换等变性（n = {N}，每个非恒等置换）",
    "For n = {N}, d = {N}, symbolic X, S and weights, and each of the {N} permutations other than the identity: (PX)W = P(XW), softmax(PSPᵀ) = P softmax(S)Pᵀ, attention(PX) = P attention(X), Enc(PX) = P Enc(X).":
        "对 n = {N}、d = {N}、符号 X、S 与权重，以及除恒等置换外的 {N} 个置换中的每一个：(PX)W = P(XW)，softmax(PSPᵀ) = P softmax(S)Pᵀ，attention(PX) = P attention(X)，Enc(PX) = P Enc(X)。",
    "real entries; ε > {N}; no positional encoding; no mask":
        "元素为实数；ε > {N}；无位置编码；无掩码",
    "PᵀP = I, π = ({N}, {N}, {N})":
        "PᵀP = I，π = ({N}, {N}, {N})",
    "(PX)W = P(XW), π = ({N}, {N}, {N})":
        "(PX)W = P(XW)，π = ({N}, {N}, {N})",
    "softmax(PSPᵀ) = P softmax(S) Pᵀ: each row sum is the same terms reordered, π = ({N}, {N}, {N})":
        "softmax(PSPᵀ) = P softmax(S) Pᵀ：每个行和都是同样的项重新排列，π = ({N}, {N}, {N})",
    "attention(PX) = P attention(X), π = ({N}, {N}, {N})":
        "attention(PX) = P attention(X)，π = ({N}, {N}, {N})",
    "encoder layer (Post-LN, FFN with elementwise φ) Enc(PX) = P Enc(X), π = ({N}, {N}, {N})":
        "编码器层（Post-LN，FFN 使用逐元素的 φ）Enc(PX) = P Enc(X)，π = ({N}, {N}, {N})",
    "one frequency pair: rotation by ω k, dot product cos(ω k)":
        "一个频率对：旋转 ω k，点积 cos(ω k)",
    "For any ω > {N}: (sin ω(p+k), cos ω(p+k)) = R(ωk)(sin ωp, cos ωp), R independent of p; the pair's dot product is cos(ωk); its norm is {N}.":
        "对任意 ω > {N}：(sin ω(p+k), cos ω(p+k)) = R(ωk)(sin ωp, cos ωp)，R 与 p 无关；该对的点积为 cos(ωk)；其范数为 {N}。",
    "pos, k real; ω > {N}":
        "pos、k 为实数；ω > {N}",
    "Vaswani et al. {N}, §{N}.{N}":
        "Vaswani 等 {N}，§{N}.{N}",
    "angle addition: one frequency pair is rotated by ω k":
        "和角公式：一个频率对被旋转 ω k",
    "R_k does not depend on pos":
        "R_k 与 pos 无关",
    "R_k is orthogonal":
        "R_k 是正交矩阵",
    "sin a sin b + cos a cos b = cos(b − a)":
        "sin a sin b + cos a cos b = cos(b − a)",
    "cos is even: the dot product does not see the direction of k":
        "cos 是偶函数：点积看不出 k 的方向",
    "sin² + cos² = {N}":
        "sin² + cos² = {N}",
    "dot product and norm of the sinusoidal encoding for symbolic d_model":
        "符号 d_model 下正弦位置编码的点积与范数",
    "For every even d_model and frequencies ω_i > {N}: PE(pos)·PE(pos+k) = Σ_i cos(ω_i k), even in k, and ‖PE(pos)‖² = d_model/{N}.":
        "对每个偶数 d_model 及频率 ω_i > {N}：PE(pos)·PE(pos+k) = Σ_i cos(ω_i k)，是 k 的偶函数，且 ‖PE(pos)‖² = d_model/{N}。",
    "d_model = {N}m, m a positive integer; pos, k real":
        "d_model = {N}m，m 为正整数；pos、k 为实数",
    "PE(pos)·PE(pos + k), d_model = {N}m, summed over the m frequency pairs":
        "PE(pos)·PE(pos + k)，d_model = {N}m，对 m 个频率对求和",
    "each pair gives cos(ω_i k) (pe-frequency-pair)":
        "每一对给出 cos(ω_i k)（pe-frequency-pair）",
    "even in k: PE(pos)·PE(pos − k) = PE(pos)·PE(pos + k)":
        "是 k 的偶函数：PE(pos)·PE(pos − k) = PE(pos)·PE(pos + k)",
    "‖PE(pos)‖²":
        "‖PE(pos)‖²",
    "m = d_model/{N} terms":
        "m = d_model/{N} 项",
    "sinusoidal encoding identities, d_model = {N}":
        "正弦位置编码的恒等式，d_model = {N}",
    "d_model = {N}, any frequencies ω_i > {N} (the paper's {N}^(−{N}i/d_model) included): PE(pos+k) = R_k PE(pos); PE(pos)·PE(pos+k) = Σ cos(ω_i k); ‖PE(pos)‖² = {N}.":
        "d_model = {N}，任意频率 ω_i > {N}（包括论文的 {N}^(−{N}i/d_model)）：PE(pos+k) = R_k PE(pos)；PE(pos)·PE(pos+k) = Σ cos(ω_i k)；‖PE(pos)‖² = {N}。",
    "pos, k real; ω_i > {N}":
        "pos、k 为实数；ω_i > {N}",
    "PE(pos + k) = R_k PE(pos), d_model = {N}":
        "PE(pos + k) = R_k PE(pos)，d_model = {N}",
    "PE(pos)·PE(pos + k) = Σ_i cos(ω_i k)":
        "PE(pos)·PE(pos + k) = Σ_i cos(ω_i k)",
    "‖PE(pos)‖² = d_model/{N} = {N}":
        "‖PE(pos)‖² = d_model/{N} = {N}",
    "one RoPE pair: R(mω)ᵀR(nω) = R((n − m)ω), R orthogonal":
        "一个 RoPE 对：R(mω)ᵀR(nω) = R((n − m)ω)，R 为正交矩阵",
    "For any ω > {N} and positions m, n: ⟨R(mω)q, R(nω)k⟩ = qᵀR((n − m)ω)k, a function of n − m; ‖R(θ)x‖ = ‖x‖.":
        "对任意 ω > {N} 及位置 m、n：⟨R(mω)q, R(nω)k⟩ = qᵀR((n − m)ω)k，只依赖于 n − m；‖R(θ)x‖ = ‖x‖。",
    "m, n, t real; ω > {N}":
        "m、n、t 为实数；ω > {N}",
    "Su et al. {N} (arXiv:{N}.{N}), §{N}.{N}.{N}, eq. {N}":
        "Su 等 {N}（arXiv:{N}.{N}），§{N}.{N}.{N}，式 {N}",
    "angle addition: R(mω)ᵀ R(nω) = R((n − m)ω)":
        "和角公式：R(mω)ᵀ R(nω) = R((n − m)ω)",
    "R(θ) is orthogonal: norms are kept":
        "R(θ) 是正交矩阵：范数保持不变",
    "shifting both positions by t leaves n − m, hence R_{n−m}, unchanged":
        "两个位置同时平移 t 时 n − m 不变，因而 R_{n−m} 不变",
    "RoPE, interleaved pairs (({N}, {N}), ({N}, {N})), d = {N}: scores depend on n − m only; norms kept":
        "RoPE，交错配对 (({N}, {N}), ({N}, {N}))，d = {N}：分数只依赖于 n − m；范数保持不变",
    "d = {N}, pairs ({N}, {N}), ({N}, {N}) rotated by mω_{N}, mω_{N} (any ω_i > {N}): R_mᵀR_n = R_(n−m), so ⟨R_{m+t}q, R_{n+t}k⟩ = ⟨R_m q, R_n k⟩ for every t, and R_m is orthogonal.":
        "d = {N}，对 ({N}, {N})、({N}, {N}) 分别旋转 mω_{N}、mω_{N}（任意 ω_i > {N}）：R_mᵀR_n = R_(n−m)，故对每个 t 有 ⟨R_{m+t}q, R_{n+t}k⟩ = ⟨R_m q, R_n k⟩，且 R_m 为正交矩阵。",
    "m, n, t real; ω_{N}, ω_{N} > {N}; q, k real vectors":
        "m、n、t 为实数；ω_{N}, ω_{N} > {N}；q、k 为实向量",
    "Su et al. {N} (arXiv:{N}.{N}), §{N}.{N}.{N} (interleaved); GPT-NeoX / Llama rotate_half (half)":
        "Su 等 {N}（arXiv:{N}.{N}），§{N}.{N}.{N}（交错配对）；GPT-NeoX / Llama 的 rotate_half（对半配对）",
    "interleaved pairs: R_mᵀ R_n = R_(n−m), pair by pair":
        "交错配对：逐对有 R_mᵀ R_n = R_(n−m)",
    "so shifting both positions by t leaves R_mᵀ R_n = R_(n−m), hence every score qᵀ R_(n−m) k, unchanged":
        "因此两个位置同时平移 t 时 R_mᵀ R_n = R_(n−m) 不变，从而每个分数 qᵀ R_(n−m) k 不变",
    "R_m is orthogonal: ‖R_m x‖ = ‖x‖":
        "R_m 是正交矩阵：‖R_m x‖ = ‖x‖",
    "RoPE, half pairs (({N}, {N}), ({N}, {N})), d = {N}: scores depend on n − m only; norms kept":
        "RoPE，对半配对 (({N}, {N}), ({N}, {N}))，d = {N}：分数只依赖于 n − m；范数保持不变",
    "half pairs: R_mᵀ R_n = R_(n−m), pair by pair":
        "对半配对：逐对有 R_mᵀ R_n = R_(n−m)",
    "LayerNorm output moments for symbolic width":
        "符号宽度下 LayerNorm 输出的矩",
    "For every width n ≥ {N}, γ = {N}, β = {N}: mean LN(x) = {N}, var LN(x) = σ²/(σ² + ε), = {N} at ε = {N}; LN(a·x + b) = LN(x) for a > {N}, ε = {N}.":
        "对每个宽度 n ≥ {N}，γ = {N}，β = {N}：mean LN(x) = {N}，var LN(x) = σ²/(σ² + ε)，= {N}（当 ε = {N}）；LN(a·x + b) = LN(x)（a > {N}，ε = {N}）。",
    "σ² > {N} (x not constant); ε ≥ {N}; a > {N}":
        "σ² > {N}（x 不是常数）；ε ≥ {N}；a > {N}",
    "mean of LN(x), width n":
        "LN(x) 的均值，宽度 n",
    "the denominator does not depend on i; Σ_i μ = nμ":
        "分母与 i 无关；Σ_i μ = nμ",
    "Σ x_i = nμ":
        "Σ x_i = nμ",
    "definition μ = ({N}/n)Σ x_i":
        "定义 μ = ({N}/n)Σ x_i",
    "variance of LN(x) (its mean is {N})":
        "LN(x) 的方差（其均值为 {N}）",
    "Σ (x_i − μ)² = nσ²":
        "Σ (x_i − μ)² = nσ²",
    "definition σ² = ({N}/n)Σ (x_i − μ)²":
        "定义 σ² = ({N}/n)Σ (x_i − μ)²",
    "ε = {N}: variance exactly {N}":
        "ε = {N}：方差恰为 {N}",
    "LN(a·x + b)_i with ε = {N}: μ → aμ + b, σ² → a²σ²":
        "ε = {N} 时的 LN(a·x + b)_i：μ → aμ + b，σ² → a²σ²",
    "a > {N} cancels: = LN(x)_i":
        "a > {N} 约去：= LN(x)_i",
    "LayerNorm output moments and affine invariance (width {N})":
        "LayerNorm 输出的矩与仿射不变性（宽度 {N}）",
    "For x ∈ ℝ^{N}, γ = {N}, β = {N}: mean LN(x) = {N}, var LN(x) = σ²/(σ² + ε) (= {N} at ε = {N}); LN(a·x + b) = LN(x) for a > {N}, ε = {N}.":
        "对 x ∈ ℝ^{N}，γ = {N}，β = {N}：mean LN(x) = {N}，var LN(x) = σ²/(σ² + ε)（= {N}，当 ε = {N}）；LN(a·x + b) = LN(x)（a > {N}，ε = {N}）。",
    "x real, not all equal (σ² > {N}); ε ≥ {N}; a > {N}, b real":
        "x 为实数且不全相等（σ² > {N}）；ε ≥ {N}；a > {N}，b 为实数",
    "mean of LN(x): Σ (x_i − μ) = {N}":
        "LN(x) 的均值：Σ (x_i − μ) = {N}",
    "variance of LN(x) (its mean is {N}): ({N}/d)Σ(x_i − μ)²/(σ² + ε) = σ²/(σ² + ε)":
        "LN(x) 的方差（其均值为 {N}）：({N}/d)Σ(x_i − μ)²/(σ² + ε) = σ²/(σ² + ε)",
    "ε = {N}: variance exactly {N} (σ² > {N})":
        "ε = {N}：方差恰为 {N}（σ² > {N}）",
    "LN(a·x + b)_{N} = LN(x)_{N}: μ → aμ + b, σ → aσ, a > {N}, ε = {N}":
        "LN(a·x + b)_{N} = LN(x)_{N}：μ → aμ + b，σ → aσ，a > {N}，ε = {N}",
    "mean and variance of a·x + b":
        "a·x + b 的均值与方差",
    "μ(a·x + b) = aμ + b and σ²(a·x + b) = a²σ² for every width n.":
        "对每个宽度 n，μ(a·x + b) = aμ + b 且 σ²(a·x + b) = a²σ²。",
    "a > {N}, b real":
        "a > {N}，b 为实数",
    "μ(a·x + b)":
        "μ(a·x + b)",
    "linearity of the sum":
        "求和的线性",
    "definition of μ":
        "μ 的定义",
    "σ²(a·x + b)":
        "σ²(a·x + b)",
    "(a x_i + b − aμ − b)² = a²(x_i − μ)²":
        "(a x_i + b − aμ − b)² = a²(x_i − μ)²",
    "definition of σ²":
        "σ² 的定义",
    "the Jacobian of x + F(x) is I + J_F":
        "x + F(x) 的雅可比矩阵是 I + J_F",
    "For any differentiable F: ℝ³ → ℝ³, ∂(x + F(x))/∂x = I + ∂F/∂x.":
        "对任意可微的 F: ℝ³ → ℝ³，∂(x + F(x))/∂x = I + ∂F/∂x。",
    "F{N}, F{N}, F{N} arbitrary differentiable functions":
        "F{N}、F{N}、F{N} 为任意可微函数",
    "∂(x + F(x))/∂x = I + J_F (width {N}, F arbitrary differentiable)":
        "∂(x + F(x))/∂x = I + J_F（宽度 {N}，F 为任意可微函数）",
    "the identity path survives every depth (induction on L)":
        "恒等路径在任意深度下都保留（对 L 归纳）",
    "If Π of L blocks = I + S_L + R_L (S_L = Σ J_l, R_L a sum of products of ≥ {N} J's), the same holds for L + {N}.":
        "若 L 个块的乘积 Π = I + S_L + R_L（S_L = Σ J_l，R_L 是至少 {N} 个 J 的乘积之和），则对 L + {N} 同样成立。",
    "symbolic d; J, S_L, R_L arbitrary d×d":
        "符号 d；J、S_L、R_L 为任意 d×d 矩阵",
    "(I + J)(I + S_L + R_L) = I + S_{L+{N}} + R_{L+{N}}, R_{L+{N}} = R_L + J S_L + J R_L: products of ≥ {N} J's":
        "(I + J)(I + S_L + R_L) = I + S_{L+{N}} + R_{L+{N}}，R_{L+{N}} = R_L + J S_L + J R_L：至少 {N} 个 J 的乘积",
    "induction hypothesis P_L = I + S_L + R_L":
        "归纳假设 P_L = I + S_L + R_L",
    "Π(I + J_l) = I + Σ J_l + … keeps the identity path (L = {N})":
        "Π(I + J_l) = I + Σ J_l + … 保留恒等路径（L = {N}）",
    "For L = {N} residual blocks: Π_l (I + J_l) = I + Σ_l J_l + (products of ≥ {N} Jacobians).":
        "对 L = {N} 个残差块：Π_l (I + J_l) = I + Σ_l J_l +（至少 {N} 个雅可比矩阵的乘积）。",
    "J_l ∈ ℝ^{d×d}, symbolic d, arbitrary (non-commuting)":
        "J_l ∈ ℝ^{d×d}，符号 d，任意（不可交换）",
    "chain rule through {N} residual blocks: Π_l (I + J_l), last block first":
        "经过 {N} 个残差块的链式法则：Π_l (I + J_l)，最后一块在最前",
    "distribute: one term per subset of blocks":
        "展开：块的每个子集对应一项",
    "the empty subset is the identity path; single blocks give Σ J_l":
        "空子集是恒等路径；单个块给出 Σ J_l",
    "Table {N}, complexity per layer; self-attention cheaper than recurrence iff n < d":
        "表 {N}，每层的复杂度；当且仅当 n < d 时自注意力比循环更省",
    "Per-layer cost: self-attention Θ(n²d), recurrent Θ(nd²), convolution Θ(knd²), restricted Θ(rnd); n²d < nd² ⇔ n < d.":
        "每层代价：自注意力 Θ(n²d)，循环 Θ(nd²)，卷积 Θ(knd²)，受限自注意力 Θ(rnd)；n²d < nd² ⇔ n < d。",
    "n, d, k, r positive integers":
        "n、d、k、r 为正整数",
    "Vaswani et al. {N}, Table {N} and §{N}":
        "Vaswani 等 {N}，表 {N} 与 §{N}",
    "self-attention: QKᵀ is n×d times d×n, AV is n×n times n×d: n²d multiply-adds each":
        "自注意力：QKᵀ 是 n×d 乘 d×n，AV 是 n×n 乘 n×d：各需 n²d 次乘加",
    "recurrent: n sequential steps of W h, a d×d matrix times a vector":
        "循环：n 个顺序步骤，每步 W h 是 d×d 矩阵乘一个向量",
    "convolution: n outputs, each k inputs of width d mapped by d×d":
        "卷积：n 个输出，每个由 k 个宽度为 d 的输入经 d×d 映射得到",
    "restricted self-attention: each of n queries scores r keys of width d":
        "受限自注意力：n 个查询中的每一个为 r 个宽度为 d 的键打分",
    "n d² − n² d = n d (d − n)":
        "n d² − n² d = n d (d − n)",
    "if n < d (d = n + s, s ≥ {N}) self-attention is cheaper":
        "若 n < d（d = n + s，s ≥ {N}），自注意力更省",
    "n < d":
        "n < d",
    "if n ≥ d (n = d + s₀, s₀ ≥ {N}) it is not":
        "若 n ≥ d（n = d + s₀，s₀ ≥ {N}），则不然",
    "n ≥ d":
        "n ≥ d",
    "Table {N}, sequential operations and maximum path lengths":
        "表 {N}，顺序操作数与最大路径长度",
    "Sequential ops: recurrent n, others O({N}) (Table {N}'s constant {N}, not derived here). Max path length: self-attention {N}, recurrent n − {N}, contiguous convolution ⌈(n−{N})/(k−{N})⌉, dilated ⌈log_k n⌉, restricted ⌈(n−{N})/r⌉.":
        "顺序操作数：循环为 n，其余为 O({N})（表 {N} 的常数 {N}，此处不推导）。最大路径长度：自注意力 {N}，循环 n − {N}，连续卷积 ⌈(n−{N})/(k−{N})⌉，空洞卷积 ⌈log_k n⌉，受限自注意力 ⌈(n−{N})/r⌉。",
    "n ≥ {N}; kernel width k ≥ {N} (k − {N} > {N}); r ≥ {N}":
        "n ≥ {N}；卷积核宽度 k ≥ {N}（k − {N} > {N}）；r ≥ {N}",
    "Vaswani et al. {N}, Table {N}":
        "Vaswani 等 {N}，表 {N}",
    "recurrent: one step per position, h_t waits for h_{t−{N}}: Σ_{t={N}}^{n} {N} sequential steps":
        "循环：每个位置一步，h_t 要等待 h_{t−{N}}：Σ_{t={N}}^{n} {N} 个顺序步骤",
    "recurrent: x_{N} reaches h_n through one application of W per step t = {N}..n (∂h_n/∂h_{N} = W^{n−{N}})":
        "循环：x_{N} 经每步 t = {N}..n 各一次 W 的作用到达 h_n（∂h_n/∂h_{N} = W^{n−{N}}）",
    "the recurrent path length is Θ(n)":
        "循环的路径长度为 Θ(n)",
    "L = ⌈(n−{N})/(k−{N})⌉ stacked convolutions of width k ≥ {N} cover n positions":
        "L = ⌈(n−{N})/(k−{N})⌉ 层宽度 k ≥ {N} 的卷积堆叠覆盖 n 个位置",
    "L = ⌈(n−{N})/(k−{N})⌉ ≥ (n−{N})/(k−{N})":
        "L = ⌈(n−{N})/(k−{N})⌉ ≥ (n−{N})/(k−{N})",
    "and L − {N} layers do not: the ceiling is the least such L":
        "而 L − {N} 层不能：上取整是满足条件的最小 L",
    "L − {N} < (n−{N})/(k−{N}) by the ceiling":
        "由上取整，L − {N} < (n−{N})/(k−{N})",
    "kernel width k ≥ {N}":
        "卷积核宽度 k ≥ {N}",
    "L = ⌈log_k n⌉ dilated layers: receptive field k^L ≥ n":
        "L = ⌈log_k n⌉ 层空洞卷积：感受野 k^L ≥ n",
    "k^⌈log_k n⌉ ≥ k^{log_k n} = n (k^x increasing for k ≥ {N})":
        "k^⌈log_k n⌉ ≥ k^{log_k n} = n（k ≥ {N} 时 k^x 单调递增）",
    "L = ⌈(n−{N})/r⌉ restricted layers, r positions each, cover distance n − {N}":
        "L = ⌈(n−{N})/r⌉ 层受限自注意力，每层 r 个位置，覆盖距离 n − {N}",
    "L = ⌈(n−{N})/r⌉ ≥ (n−{N})/r":
        "L = ⌈(n−{N})/r⌉ ≥ (n−{N})/r",
    "self-attention is the restricted layer with neighbourhood r = n − {N} (every query scores every key): ⌈(n−{N})/(n−{N})⌉ = {N}":
        "自注意力就是邻域 r = n − {N} 的受限层（每个查询为每个键打分）：⌈(n−{N})/(n−{N})⌉ = {N}",
    # the split-KV combine by log-sum-exps (attnclaims/proofs/split_kv.py)
    "merging two key parts by their log-sum-exps gives the whole (n = {N}, split {N} + {N})":
        "按各自的对数和指数（lse）合并两部分键，得到整体的结果（n = {N}，拆分为 {N} + {N}）",
    "For real scores s_{N}…s_{N} and values v_{N}…v_{N}, parts A = {N}…{N}, B = {N}…{N}: log(e^(lse_A) + e^(lse_B)) = lse and e^(lse_A − L) o_A + e^(lse_B − L) o_B = o.":
        "对实数分数 s_{N}…s_{N} 与值 v_{N}…v_{N}，两部分 A = {N}…{N}，B = {N}…{N}：log(e^(lse_A) + e^(lse_B)) = lse，且 e^(lse_A − L) o_A + e^(lse_B − L) o_B = o。",
    "scores and values real":
        "分数与值均为实数",
    "Dao {N} (arXiv:{N}.{N}), §{N}.{N}; Flash-Decoding (Dao, Haziza, Massa, Sizov {N})":
        "Dao {N}（arXiv:{N}.{N}），§{N}.{N}；Flash-Decoding（Dao 等 {N}）",
    "n = {N}, split {N} + {N}":
        "n = {N}，拆分为 {N} + {N}",
    "L = log(e^(lse_A) + e^(lse_B)), A = keys {N}…{N}, B = keys {N}…{N}":
        "L = log(e^(lse_A) + e^(lse_B))，A 为第 {N}…{N} 个键，B 为第 {N}…{N} 个键",
    "e^(lse_A) = Σ_A exp(s_j), e^(lse_B) = Σ_B exp(s_j): L is the lse of all the keys":
        "e^(lse_A) = Σ_A exp(s_j)，e^(lse_B) = Σ_B exp(s_j)：L 就是全部键的 lse",
    "the combine e^(lse_A − L) o_A + e^(lse_B − L) o_B":
        "合并结果 e^(lse_A − L) o_A + e^(lse_B − L) o_B",
    "e^(lse_A − L) o_A = Σ_A exp(s_j) v_j / Σ_j exp(s_j), and likewise for B: their sum is attention over all the keys":
        "e^(lse_A − L) o_A = Σ_A exp(s_j) v_j / Σ_j exp(s_j)，B 同理：二者之和就是对全部键的注意力",
    # ALiBi's two bias forms (attnclaims/proofs/alibi.py)
    "ALiBi's bias −m(p − j) and m·j give the same weights (n = {N})":
        "ALiBi 的偏置 −m(p − j) 与 m·j 给出相同的权重（n = {N}）",
    "For real scores s_{N}…s_{N}, a slope m > {N} and a query position p: softmax_j(s_j − m(p − j)) = softmax_j(s_j + m·j).":
        "对实数分数 s_{N}…s_{N}、斜率 m > {N} 与查询位置 p：softmax_j(s_j − m(p − j)) = softmax_j(s_j + m·j)。",
    "scores and p real, m > {N}":
        "分数与 p 为实数，m > {N}",
    "Press, Smith, Lewis {N} (arXiv:{N}.{N}), §{N}; BigScience Bloom's build_alibi_tensor":
        "Press 等 {N}（arXiv:{N}.{N}），§{N}；BigScience Bloom 的 build_alibi_tensor",
    "n = {N}":
        "n = {N}",
    "exp(s_{N} − m(p − {N})) = exp(−m p)·exp(s_{N} + {N}·m), in every term of the sum":
        "exp(s_{N} − m(p − {N})) = exp(−m p)·exp(s_{N} + {N}·m)，和式的每一项都如此",
    "exp(−m p) > {N} cancels":
        "exp(−m p) > {N}，可约去",

}


def key_of(text: str) -> str:
    """The key of ``text`` in :data:`TEXTS`: every run of digits replaced by ``{N}``."""
    return _DIGITS.sub(PLACEHOLDER, text)


def translate(text: str) -> str | None:
    """``text`` (a derivation's English text) in Chinese, its numbers filled in; None without an entry."""
    template = TEXTS.get(key_of(text))
    if template is None:
        return None
    numbers = _DIGITS.findall(text)
    pieces = template.split(PLACEHOLDER)
    if len(pieces) != len(numbers) + 1:  # an entry whose numbers do not match is not used
        return None
    return "".join(p + n for p, n in zip(pieces, numbers)) + pieces[-1]


def symbol(text: str) -> str | None:
    """A symbol line ("d: integer, positive") in Chinese ("d：正整数"); None when its assumptions are unknown."""
    name, _, assumptions = text.partition(": ")
    zh = SYMBOLS.get(assumptions)
    return f"{name}：{zh}" if zh else None


__all__ = ["TEXTS", "SYMBOLS", "translate", "symbol", "key_of"]
