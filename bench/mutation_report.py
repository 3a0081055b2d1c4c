"""Summarise mutmut runs of bench/mutation.sh into the tables of docs/mutation.md.

    ~/.cache/attnclaims-mutmut/bin/python bench/mutation_report.py WORKDIR[:FILE,FILE] [WORKDIR ...] > /tmp/mutation-tables.md

A WORKDIR may be limited to some of its files (when another run covers the rest).

Reads each run's ``.mutmut-cache`` (mutmut 2's SQLite cache) and prints, per
mutated file, the number of mutants killed, surviving, timed out, suspicious
and untested, the score killed / (total − untested), and every surviving
mutant as its source line before and after, with the reason it survives when
:data:`REASONS` knows it (matched on the file and the mutated line's text, so
it stays valid when mutant ids change). The mutants of repeated lines that mutmut
leaves untested and ``bench/mutation_untested.py`` tests by hand at the end of a run
(the run's ``untested.txt``) count as mutmut's own results would. Timeouts count as
killed. Run it with mutmut's python (``~/.cache/attnclaims-mutmut/bin/python``).
"""
from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

MUTMUT = Path.home() / ".cache/attnclaims-mutmut/bin/mutmut"

#: (file, a fragment of the mutated line, why no test can kill it (equivalent) or why it is left).
SQUARE_W = "w is checked to be square (d_h, d_h) just before, so shape[0] = shape[1]."
SQUARE_A = "a is checked to be (d_h, d_h) or (n, d_h, d_h), so every one of these indices gives d_h."
REASONS: list[tuple[str, str, str]] = [
    ("attnclaims/reference/attention.py", "(x >= -np.inf)", "A −inf score stays 'allowed', but exp(−inf − max) = 0 gives it weight 0 anyway; a row of only −inf gets max −inf, shift 0, weights 0 — as before."),
    ("attnclaims/reference/attention.py", "row_max == +np.inf", "row_max is never +inf (+inf at an allowed position is rejected above); a fully masked row keeps max −inf, its shifted entries are set to −inf by the where(), exp gives 0: the same zero row."),
    ("attnclaims/reference/attention.py", "row_max == -np.inf, 1.0", "Any finite shift serves a fully masked row: all its shifted entries are −inf and every weight is 0."),
    ("attnclaims/reference/attention.py", "where=denom > 1)", "The row's max term is exp(0)·(1 + 0) = 1 exactly (x − max is exact there, so its TwoSum remainder is 0), so a row with anything allowed has denom ≥ 1; where denom = 1 the division by 1 is the identity, and denom = 0 rows are left as they are either way."),
    ("attnclaims/reference/attention.py", '"XXscoresXX"), v', "The name appears only in the NaN/+inf message of `_softmax`, which cannot be raised here: `_attention_weights` checks the scores' finiteness at unmasked positions, with its own message, just before."),
    ("attnclaims/reference/_validate.py", "copy=True", "A copy instead of the very array when the input is already float64: the reference never writes into it, so only memory use differs."),
    ("attnclaims/reference/_validate.py", "ok = None", "None is falsy like False; only `if not ok` reads it."),
    ("attnclaims/reference/params.py", "d = w_q.shape[1]", "w_q is checked square two lines above."),
    ("attnclaims/reference/params.py", "return self.w_q.shape[1]", "w_q is square (checked on construction)."),
    ("attnclaims/reference/baselines.py", '"w.shape[0]", w.shape[1])', SQUARE_W),
    ("attnclaims/reference/baselines.py", "d_h = w.shape[1]", SQUARE_W),
    ("attnclaims/reference/baselines.py", "np.eye(w.shape[1])", SQUARE_W),
    ("attnclaims/reference/baselines.py", "a.shape[+1]", SQUARE_A),
    ("attnclaims/reference/baselines.py", "a.shape[-2]", SQUARE_A),
    ("attnclaims/reference/baselines.py", "a_t.shape[+1]", SQUARE_A),
    ("attnclaims/reference/baselines.py", "a_t.shape[-2]", SQUARE_A),
    ("attnclaims/reference/baselines.py", "np.zeros(x.shape[:-3] + (d_h,))", "The zero initial state broadcasts against the batch in the first step anyway: the same states, the same shape."),
    ("attnclaims/reference/baselines.py", "h_t.shape[:-2] + w.shape", "The broadcast copy of Wᵀ only has to broadcast against the batch in the matmul that follows, which it also does with one leading axis fewer."),
    ("attnclaims/reference/baselines.py", "if n > 1 else 0", "For n = 1, ⌈log₂ 1⌉ = 0 as well."),
    ("attnclaims/reference/baselines.py", "size = 2 ** levels if n >= 0 else 0", "Only n = 0 differs: one padding identity that no round reads; states, depth and combines are unchanged."),
    ("attnclaims/reference/baselines.py", "size = 2 ** levels if n > 0 else 1", "Only n = 0 differs: one padding identity that no round reads; states, depth and combines are unchanged."),
    ("attnclaims/reference/baselines.py", "np.log(norm) if norm >= 0", "log(0) = −inf, the value of the other branch."),
    ("attnclaims/reference/baselines.py", 'first = 1 if padding == "causal"', "`first` is read only in the `same` branch; causal taps shift by −m·δ."),
    ("attnclaims/reference/baselines.py", 'first = 0 if padding == "XXcausalXX"', "`first` is read only in the `same` branch: for causal padding it now takes the `same` value, which nothing reads."),
    ("attnclaims/reference/baselines.py", "if lo <= hi:", "lo = hi is an empty slice: adding it changes nothing."),
    ("attnclaims/reference/masks.py", "-((window - 1) / 2)", "Offsets are integers: j − i ≥ −(r − 1)/2 ⟺ j − i ≥ −⌊(r − 1)/2⌋."),
    ("attnclaims/reference/baselines.py", "if mask is  None:", "l2_attention validates the mask with as_mask only as a courtesy: attention_from_scores validates it again under the same name against the same shape, so the result and the message are the same either way."),
    ("attnclaims/reference/masks.py", "(offset <= window / 2)", "Offsets are integers: j − i ≤ r/2 ⟺ j − i ≤ ⌊r/2⌋."),
    ("attnclaims/checks/bounds/common.py", "_target(", "Only the value handed to hypothesis.target() changes: it steers the search towards large errors, no verdict depends on it."),
    ("attnclaims/checks/bounds/common.py", 'detail = "XXXX"', "Never shown: a failing check always has an index (or a single element), which replaces the empty detail."),
    ("attnclaims/checks/bounds/common.py", "detail = None", "Never shown: a failing check always has an index (or a single element), which replaces the empty detail."),
    ("attnclaims/checks/bounds/common.py", "np.where(scale >= 0, scale, 1.0)", "Equivalent: the outer where() discards the inner quotient wherever scale ≤ 0; only a division-by-zero warning (suppressed) differs."),
    ("attnclaims/checks/bounds/common.py", "np.where(scale > 0, scale, 2.0)", "Equivalent: the outer where() discards the inner quotient wherever scale ≤ 0."),
    # attnclaims/checks/strategies/ (docs/mutation_strategies.md)
    ("attnclaims/checks/strategies/common.py", "d_head == 2 or", "Equivalent: the branch is entered only with d_head odd, and for d_head = 1 the other branch gives d_head = 0, which the `while` loop below raises to 2 — the guard's value — for every min_d_model ≥ 1."),
    ("attnclaims/checks/strategies/common.py", "d_head == 1 and num_heads", "Equivalent in what can be drawn: an odd head width is rounded down instead of up when it would fit; every even width up to max_dim // heads is still drawn directly, so the same Dims can come, only how often differs."),
    ("attnclaims/checks/strategies/common.py", "(d_head + 2) <= top_dim", "Equivalent in what can be drawn: an odd head width is rounded down instead of up when it would fit; every even width up to max_dim // heads is still drawn directly, so the same Dims can come, only how often differs."),
    ("attnclaims/checks/strategies/common.py", "(d_head + 1) < top_dim", "Equivalent in what can be drawn: an odd head width is rounded down instead of up when it would fit; every even width up to max_dim // heads is still drawn directly, so the same Dims can come, only how often differs."),
    ("attnclaims/checks/strategies/common.py", "itemsize <= 5", "Equivalent: no numpy floating dtype has an itemsize of 5 (2, 4, 8, and 10–16 for long double), so the same width is chosen for every dtype."),
    ("attnclaims/checks/strategies/common.py", "(offset - scale * base)", "Equivalent as a strategy: −U[−1, 1] is U[−1, 1] and the element-wise draw's domain [−1, 1] is symmetric, so the same arrays can be drawn with the same probabilities; only which seed or choice sequence gives which array changes, and arrays() reports no seed."),
    ("attnclaims/checks/strategies/attention.py", "random(shape) <= draw(", "Equivalent in practice: `random()` returns a multiple of 2⁻⁵³, equal to 0.1, 0.5 or 0.9 with probability ~2⁻⁵³ per entry; no seed of the 2³² is known to hit one."),
    ("attnclaims/checks/strategies/attention.py", "np.ndarray & None", "Equivalent: `from __future__ import annotations` keeps annotations as strings that nothing evaluates."),
    ("attnclaims/checks/strategies/attention.py", "float & None", "Equivalent: `from __future__ import annotations` keeps annotations as strings that nothing evaluates."),
    ("attnclaims/checks/strategies/attention.py", "] = None", "Equivalent: numpy stores None as False in a bool array, the value assigned before."),
    ("attnclaims/checks/strategies/attention.py", "/ 17))", "Equivalent: ⌊log₁₀(max/17)⌋ = ⌊log₁₀(max/16)⌋ = 37 for float32 (2.0·10³⁷ vs 2.1·10³⁷); float64 takes the other branch."),
    ("attnclaims/checks/strategies/attention.py", "if x.size else 1", "Equivalent: x is never empty (n ≥ 1 and batch sizes ≥ 1), so the else is never taken."),
    ("attnclaims/checks/strategies/norms.py", "1.0, 1e2, 1e4, 1e6])", "Equivalent in what can be drawn: the offsets {0, 1, 10², 10⁴, 10⁶} stay the same set; only how often μ = 0 comes changes."),
    ("attnclaims/checks/bounds/attention.py", "m = np.where(np.isfinite(m), m, 1.0)", "Equivalent. The row maximum is non-finite only for a row with no allowed key (every t is then set to −inf by the next line whatever m is) or when an allowed score overflowed (the row's total is inf or NaN either way, and the shifted scores that differ are read only where a > 0, which no entry of that row is): docs/mutation_tolerances.md."),
    ("attnclaims/checks/bounds/attention.py", "np.where(allowed, t, 1.0)", "Equivalent. The shifts of masked entries are read only through `r_round = np.where(a > 0, u·η(t), 0)`, and a masked entry has a = 0."),
    ("attnclaims/checks/bounds/attention.py", "r_score = np.where(a >= 0", "Equivalent. Every use of r_score is itself under `np.where(a > 0, …, 0)` (a is never negative; a NaN weight fails both tests)."),
    ("attnclaims/checks/bounds/attention.py", "np.expm1(ds + e_row), 1.0)", "Equivalent: the value of r_score at a = 0 is never read (every use is under `np.where(a > 0, …)`)."),
    ("attnclaims/checks/bounds/attention.py", "r_round = np.where(a >= 0", "Equivalent: r_round, like r_score, is read only under `np.where(a > 0, …)`."),
    ("attnclaims/checks/bounds/attention.py", "a.shape[-1]), 1.0)", "Equivalent: the value of r_round at a = 0 is never read (every use is under `np.where(a > 0, …)`)."),
    ("attnclaims/checks/bounds/attention.py", "return np.where(a >= 0, np.minimum(a * r, 1.0), 0.0)", "Equivalent. The entries that change branch have a = 0, where r_score = r_round = 0, so r = 0 and min(0·0, 1) = 0, the value of the other branch."),
    ("attnclaims/checks/bounds/attention.py", "w_score = np.where(a >= 0", "Equivalent: at a = 0, r_score = 0, so min(0·0, 1) = 0."),
    ("attnclaims/checks/bounds/attention.py", "w_round = np.where(a >= 0", "Equivalent: at a = 0, r_score = r_round = 0, so the product is 0·1·0 = 0."),
    ("attnclaims/checks/bounds/attention.py", "xs[j] -= sign * h", "Equivalent: the loop visits sign = +1 and −1, so the same 2n rows x ± h e_j are evaluated (in another order), and their maximum is the same."),
    # attnclaims/checks/bounds/, the measured bound of whole layers (docs/mutation.md)
    ("attnclaims/checks/bounds/common.py", "if u > GOLDEN_MARGIN", "Equivalent: the two sides are equal only for a dtype with u = 2¹¹ · 2⁻⁵³ = 2⁻⁴²; numpy's float dtypes have u = 2⁻¹¹, 2⁻²⁴, 2⁻⁵³ and (long double) 2⁻⁵³, 2⁻⁶⁴ or 2⁻¹¹³, so every comparison has the same outcome."),
    ("attnclaims/checks/bounds/common.py", "float(np.finfo(np.longdouble).eps) / 3", "Equivalent on every platform numpy runs on: long double is float64 (2⁻⁵³ ≥ 2¹¹·2⁻⁵²/3 is false, as 2⁻⁵³ ≥ 2¹¹·2⁻⁵³ is), x86's 80-bit (both true: 2⁻⁵³ ≥ 2¹¹·2⁻⁶⁴ and ≥ 2¹¹·2⁻⁶³/3) or IEEE quad (both true); only a long double between those would tell them apart."),
    ("attnclaims/checks/bounds/common.py", "n_mem=1):", "Equivalent: n_mem is passed explicitly for decoders; for encoders the memory permutation ρ is never used, and `rng.permutation(1)` draws nothing from the generator (checked), so the later orders are the same."),
    ("attnclaims/checks/bounds/layers.py", "n_mem=1):", "Equivalent: n_mem is passed explicitly for decoders; for encoders the memory permutation ρ is never used, and `rng.permutation(1)` draws nothing from the generator (checked), so the later orders are the same."),
]


def reason_for(filename: str, before: str, after: str) -> str:
    for file, fragment, why in REASONS:
        if file == filename and fragment in after:
            return why
    return ""


def survivors(work: Path, files: set[str] | None = None) -> list[tuple[int, str, int, str, str]]:
    """(id, file, line number, before, after) of every surviving mutant of the run in ``work``."""
    con = sqlite3.connect(work / ".mutmut-cache")
    rows = con.execute(
        "select m.id, sf.filename, l.line_number, l.line from Mutant m join Line l on m.line = l.id "
        "join SourceFile sf on l.sourcefile = sf.id where m.status = 'bad_survived' order by m.id").fetchall()
    out = []
    for mid, filename, number, line in rows:
        if files and filename not in files:
            continue
        diff = subprocess.run([str(MUTMUT), "show", str(mid)], cwd=work, capture_output=True, text=True).stdout
        minus = [d[1:].strip() for d in diff.splitlines() if d.startswith("-") and not d.startswith("---")]
        plus = [d[1:].strip() for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++")]
        out.append((mid, filename, number + 1, " ".join(minus) or line.strip(), " ".join(plus)))
    return out


def counts(work: Path) -> dict[str, Counter]:
    con = sqlite3.connect(work / ".mutmut-cache")
    rows = con.execute("select sf.filename, m.status, count(*) from Mutant m join Line l on m.line = l.id "
                       "join SourceFile sf on l.sourcefile = sf.id group by sf.filename, m.status").fetchall()
    per: dict[str, Counter] = {}
    for filename, status, n in rows:
        per.setdefault(filename, Counter())[status] += n
    return per


def by_hand(work: Path, files: set[str] | None = None) -> list[tuple[str, str, int, str]]:
    """(status, file, line number, mutated line) of the mutants bench/mutation_untested.py tested by hand
    (the "untested" ones of repeated lines), from the run's untested.txt; [] when it has none."""
    out = []
    path = work / "untested.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        m = re.match(r"(killed|SURVIVED) +([^:]+):(\d+): (.*)$", line)
        if m and (files is None or m.group(2) in files):
            out.append((m.group(1), m.group(2), int(m.group(3)), m.group(4)))
    return out


def main(argv: list[str]) -> int:
    per: dict[str, Counter] = {}
    found = []
    for arg in argv:
        path, _, only = arg.partition(":")
        work, files = Path(path), set(only.split(",")) if only else None
        run = {filename: c for filename, c in counts(work).items() if files is None or filename in files}
        # Mutants of repeated lines stay "untested" in mutmut's cache; bench/mutation_untested.py tests them by
        # hand at the end of a run: their results count here like mutmut's own.
        for status, filename, number, after in by_hand(work, files):
            c = run.get(filename)
            if c is None or c["untested"] == 0:
                continue
            c["untested"] -= 1
            if status == "killed":
                c["ok_killed"] += 1
            else:
                c["bad_survived"] += 1
                lines = (work / filename).read_text().splitlines()
                before = lines[number - 1].strip() if number <= len(lines) else "?"
                found.append((0, filename, number, before, after))
        for filename, c in run.items():
            per.setdefault(filename, Counter()).update(c)
        found += survivors(work, files)
    print("| file | mutants | killed | survived | timeout | suspicious | untested | score |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    total = Counter()
    for filename in sorted(per):
        c = per[filename]
        total.update(c)
        tested = sum(c.values()) - c["untested"]
        killed = c["ok_killed"] + c["ok_suspicious"] + c["bad_timeout"]
        score = f"{100 * killed / tested:.1f}%" if tested else "-"
        print(f"| `{filename}` | {sum(c.values())} | {c['ok_killed']} | {c['bad_survived']} | {c['bad_timeout']} "
              f"| {c['ok_suspicious']} | {c['untested']} | {score} |")
    tested = sum(total.values()) - total["untested"]
    killed = total["ok_killed"] + total["ok_suspicious"] + total["bad_timeout"]
    print(f"| **all** | {sum(total.values())} | {total['ok_killed']} | {total['bad_survived']} | {total['bad_timeout']} "
          f"| {total['ok_suspicious']} | {total['untested']} | **{100 * killed / max(tested, 1):.1f}%** |")
    print()
    print("| file:line | original | mutant | why it survives |")
    print("|---|---|---|---|")
    for _mid, filename, number, before, after in found:
        esc = lambda s: s.replace("|", "\\|")
        print(f"| `{filename}:{number}` | `{esc(before)}` | `{esc(after)}` | {reason_for(filename, before, after) or '**?**'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
