"""The one renderer of derivations: sympy objects -> one-line text, LaTeX and presentation MathML.

Used by the claim report (``report.md`` shows the LaTeX as ``$$…$$``, ``index.html``
the MathML, which browsers lay out natively) and by ``attnclaims explain`` (the text).

Rendering is bounded by the size of what is shown, so nothing can run for minutes:

* an expression whose printed tree exceeds :data:`MAX_TREE` nodes (counted on the DAG,
  in linear time: the symbolic encoder layer of permutation-equivariance is a small DAG
  whose tree is astronomically large) or whose :func:`sympy.count_ops` exceeds
  :data:`MAX_OPS` is not printed but summarized (its size and free symbols);
* an explicit matrix with more than :data:`MAX_ENTRIES` entries is shown by its shape and
  its first entries (``3×3 matrix, entries (1,1): …, (1,2): …``), never entry by entry.

Families of derivations: ``softmax-jacobian-n2`` … ``-n5`` are fixed-size instances of
``softmax-jacobian-index`` (symbolic n); :func:`order_derivations` puts each general
derivation first and marks the instances it folds (``instance_of``, ``instance_label``).

What a derivation establishes (stable API for the report and ``explain``): :func:`render_derivation`
returns ``proof_status`` (``"general"``, ``"instance"`` or ``"instance+cited"``, as
:meth:`Derivation.proof_status` and ``ProofResult.status``), ``cited`` (``"lemma (source)"`` strings),
``instance`` (``"n = 3"`` or ``""``), ``extension`` (``""`` for the claim as stated) and
``proof_label``, the words to show: :func:`proof_label` (``"general proof"``, ``"instance (n = 3)"``,
``"instance + cited lemma (Popoviciu's inequality …)"``). Only a general proof may make a claim proven.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import sympy as sp

#: nodes of the printed tree above which an expression is summarized, not printed
MAX_TREE = 600
#: sympy.count_ops above which an expression is summarized, not printed
MAX_OPS = 120
#: entries of an explicit matrix above which it is summarized (2×2 is shown in full)
MAX_ENTRIES = 4

REL_TEXT = {"=": "=", "<=": "≤", "<": "<", ">=": "≥", ">": ">", "~": "~"}
REL_LATEX = {"=": "=", "<=": r"\le", "<": "<", ">=": r"\ge", ">": ">", "~": r"\sim"}
REL_MATHML = {"=": "=", "<=": "&#x2264;", "<": "&lt;", ">=": "&#x2265;", ">": "&gt;", "~": "&#x223C;"}


def tree_size(expr) -> int:
    """Number of nodes of ``expr`` printed as a tree, counted on the DAG (linear time)."""
    memo: dict = {}

    def size(e) -> int:
        if not isinstance(e, sp.Basic):
            return 1
        try:
            return memo[e]
        except KeyError:
            pass
        n = 1 + sum(size(a) for a in e.args)
        memo[e] = n
        return n

    if isinstance(expr, sp.MatrixBase):
        return sum(size(x) for x in expr)
    return size(expr)


def _xml_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _latex_text(s: str) -> str:
    for ch, rep in (("\\", r"\backslash "), ("{", r"\{"), ("}", r"\}"), ("$", r"\$"), ("%", r"\%"),
                    ("#", r"\#"), ("&", r"\&"), ("_", r"\_"), ("^", r"\^{}"), ("~", r"\sim ")):
        s = s.replace(ch, rep)
    return r"\text{" + s + "}"


def _summary(expr, nodes: int, ops: int | None) -> dict:
    """A too-large expression: its kind, size and free symbols, in the three forms."""
    kind = f"{expr.shape[0]}×{expr.shape[1]} matrix expression" if getattr(expr, "shape", None) else "expression"
    size = f"{ops} operations" if ops is not None else f"{nodes:.2g} nodes as a tree"
    try:
        syms = sorted({s.name for s in _symbols_on_dag(expr)})[:8]
    except Exception:  # a summary must never fail
        syms = []
    of = f" in {', '.join(syms)}" if syms else ""
    text = f"⟨{kind} of {size}{of}: not printed⟩"
    return {"text": text, "latex": r"\langle " + _latex_text(text.strip("⟨⟩")) + r"\rangle",
            "mathml": f"<mrow><mo>&#x27E8;</mo><mtext>{_xml_text(text.strip('⟨⟩'))}</mtext><mo>&#x27E9;</mo></mrow>",
            "summarized": True}


def _symbols_on_dag(expr) -> set:
    seen: set = set()
    out: set = set()
    stack = list(expr) if isinstance(expr, sp.MatrixBase) else [expr]
    while stack:
        x = stack.pop()
        if not isinstance(x, sp.Basic) or x in seen:
            continue
        seen.add(x)
        if isinstance(x, sp.Symbol):
            out.add(x)
        stack.extend(x.args)
    return out


_MATHML_PRINTER = None


def _mathml_printer():
    """sympy's presentation-MathML printer with the notation of the derivations: e (not ⅇ),
    δ_ij for KroneckerDelta, ‖A‖₂ for Norm2, LN(X)/softmax(X) for opaque matrix maps."""
    global _MATHML_PRINTER
    if _MATHML_PRINTER is not None:
        return _MATHML_PRINTER
    from sympy.printing.mathml import MathMLPresentationPrinter

    class Printer(MathMLPresentationPrinter):
        def _el(self, tag, text=None, *children):
            el = self.dom.createElement(tag)
            if text is not None:
                el.appendChild(self.dom.createTextNode(text))
            for c in children:
                el.appendChild(c)
            return el

        def _print_Function(self, e):
            # an undefined function keeps its name as written (sympy lowercases it: E(x) -> e(x))
            if isinstance(type(e), sp.core.function.UndefinedFunction):
                name = self._el("mi", e.func.__name__)
                if len(e.func.__name__) > 1:
                    name.setAttribute("mathvariant", "normal")
                return self._el("mrow", None, name, self._paren_comma_separated(*e.args))
            return super()._print_Function(e)

        def _print_Exp1(self, e):
            return self._el("mi", "e")

        def _print_KroneckerDelta(self, e):
            row = self._el("mrow", None, *[self._print(a) for a in e.args])
            return self._el("msub", None, self._el("mi", "δ"), row)

        def _fenced(self, open_, body, close):
            return self._el("mrow", None, self._el("mo", open_), body, self._el("mo", close))

        def _print_Norm2(self, e):
            return self._el("msub", None, self._fenced("‖", self._print(e.args[0]), "‖"), self._el("mn", "2"))

        def _print_MatFn(self, e):
            name = self._el("mi", str(e.args[0]))
            name.setAttribute("mathvariant", "normal")
            return self._el("mrow", None, name, self._fenced("(", self._print(e.args[1]), ")"))

    _MATHML_PRINTER = Printer({})
    return _MATHML_PRINTER


def _printers(expr) -> dict:
    try:
        text = sp.sstr(expr)
    except Exception:
        text = str(expr)
    try:
        latex = sp.latex(expr)
    except Exception:
        latex = _latex_text(text)
    try:
        mathml = _mathml_printer().doprint(expr)
    except Exception:
        mathml = f"<mtext>{_xml_text(text)}</mtext>"
    return {"text": text, "latex": latex, "mathml": mathml, "summarized": False}


def render_expr(expr: Any) -> dict:
    """``{"text", "latex", "mathml", "summarized"}`` of one expression, bounded (module docstring).
    ``mathml`` is a presentation-MathML fragment (no ``<math>`` wrapper)."""
    if isinstance(expr, (list, tuple)):
        expr = sp.Matrix(expr)
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        expr = sp.sympify(expr)
    if not isinstance(expr, (sp.Basic, sp.MatrixBase)):
        s = str(expr)
        return {"text": s, "latex": _latex_text(s), "mathml": f"<mtext>{_xml_text(s)}</mtext>", "summarized": False}
    if isinstance(expr, sp.MatrixBase) and expr.rows * expr.cols > MAX_ENTRIES:
        return _matrix_summary(expr)
    nodes = tree_size(expr)
    if nodes > MAX_TREE:
        return _summary(expr, nodes, None)
    try:
        ops = int(sp.count_ops(expr)) if not isinstance(expr, sp.MatrixBase) else \
            sum(int(sp.count_ops(x)) for x in expr)
    except Exception:
        ops = 0
    if ops > MAX_OPS:
        return _summary(expr, nodes, ops)
    return _printers(expr)


def _matrix_summary(m) -> dict:
    """A large explicit matrix: its shape and its first entries (row 1), each rendered bounded."""
    r, c = m.shape
    picks = [(0, j) for j in range(min(c, 2))] if r * c > 1 else [(0, 0)]
    if r > 1 and len(picks) < 2:
        picks.append((1, 0))
    entries = [(i, j, render_expr(m[i, j])) for i, j in picks]
    head = f"{r}×{c} matrix"
    text = head + ", entries " + ", ".join(f"({i + 1},{j + 1}): {e['text']}" for i, j, e in entries) + ", …"
    latex = (r"\text{" + head + r", entries } " +
             ",\\ ".join(f"M_{{{i + 1}{j + 1}}} = {e['latex']}" for i, j, e in entries) + r",\ \ldots")
    mathml = ("<mrow><mtext>" + head + ", entries&#xA0;</mtext>" +
              "<mo>,</mo>".join(f"<msub><mi>M</mi><mn>{i + 1}{j + 1}</mn></msub><mo>=</mo>{e['mathml']}"
                                for i, j, e in entries) + "<mo>,</mo><mi>&#x2026;</mi></mrow>")
    return {"text": text, "latex": latex, "mathml": mathml, "summarized": True}


def render_relation(lhs, rel: str, rhs, first: bool = False) -> dict:
    """One step: ``lhs REL rhs``; ``REL rhs`` continuing a chain (``lhs`` None); ``rhs`` alone when
    ``first`` (a chain's starting expression). ``mathml`` is a complete ``<math display="block">``."""
    right = render_expr(rhs)
    left = render_expr(lhs) if lhs is not None else None
    show_rel = not (lhs is None and first)
    rt, rl, rm = REL_TEXT.get(rel, rel), REL_LATEX.get(rel, rel), REL_MATHML.get(rel, _xml_text(rel))
    text = ((left["text"] + " ") if left else "") + ((rt + " ") if show_rel else "") + right["text"]
    latex = ((left["latex"] + " ") if left else "") + ((rl + " ") if show_rel else "") + right["latex"]
    inner = (left["mathml"] if left else "") + (f"<mo>{rm}</mo>" if show_rel else "") + right["mathml"]
    mathml = f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><mrow>{inner}</mrow></math>'
    return {"text": text, "latex": latex, "mathml": mathml,
            "summarized": bool(right["summarized"] or (left and left["summarized"]))}


def render_lemma(lem) -> dict:
    r = render_relation(lem.lhs, lem.rel, lem.rhs)
    return {"text": r["text"], "latex": r["latex"], "mathml": r["mathml"].replace('display="block"', 'display="inline"'),
            "why": lem.why, "cited": bool(lem.cited), "basis": lem.basis}


#: the words for each proof status (English; the report translates them by these keys)
PROOF_STATUS_TEXT = {"general": "general proof", "instance": "instance", "instance+cited": "instance + cited lemma"}


def proof_label(status: str, cited: Sequence[str] = (), instance: str = "") -> str:
    """What a derivation shows, in words: ``"general proof"``, ``"instance (n = 3)"`` or
    ``"instance + cited lemma (source; source)"`` (the sources are the cited lemmas' ``why``, the text
    in the last parentheses of each ``"lemma (source)"`` string)."""
    if status == "general":
        return PROOF_STATUS_TEXT["general"]
    if status == "instance":
        return f"instance ({instance})" if instance else "instance"
    sources = []
    for c in cited:
        src = c[c.rfind("(") + 1:].rstrip(")") if c.endswith(")") and "(" in c else c
        if src not in sources:
            sources.append(src)
    return PROOF_STATUS_TEXT["instance+cited"] + (f" ({'; '.join(sources)})" if sources else "")


def render_derivation(derivation) -> dict:
    """The static rendering of a derivation (no statuses: those come from a run's ProofResult)."""
    steps = []
    for i, step in enumerate(derivation.get_steps()):
        lhs = step.lhs if step.standalone else None
        first = lhs is None and (i == 0 or step.start)
        r = render_relation(lhs, step.rel, step.expr, first)
        steps.append({"index": i, "relation": step.rel, "text": r["text"], "latex": r["latex"],
                      "mathml": r["mathml"], "summarized": r["summarized"], "why": step.why, "first": first,
                      "method": step.method or "", "lemmas": [render_lemma(lem) for lem in step.lemmas]})
    try:
        symbols = derivation.symbols_declared()
    except Exception:
        symbols = []
    status = derivation.proof_status()
    cited = derivation.cited_lemmas()
    instance = getattr(derivation, "instance", "")
    return {"name": derivation.name, "title": derivation.title, "statement": derivation.statement,
            "assumptions": derivation.assumptions, "symbols": symbols, "source": getattr(derivation, "source", ""),
            "steps": steps, "proof_status": status, "cited": cited, "instance": instance,
            "extension": getattr(derivation, "extension", ""), "proof_label": proof_label(status, cited, instance)}


def text_lines(rendered: Mapping, statuses: Mapping | None = None, mark: Mapping | None = None) -> list[str]:
    """A rendered derivation as terminal lines (``explain``); ``statuses``: step index -> status dict."""
    lines = []
    for s in rendered["steps"]:
        st = (statuses or {}).get(s["index"], {})
        status = st.get("status", "given" if s.get("first") else "")
        tag = f"{(mark or {}).get(status, '')} {status}".strip()
        lines.append(f"      {s['text']}")
        lines.append(f"    ({s['index']}) {tag + ': ' if tag else ''}{s['why']}"
                     + (f" [{st['detail']}]" if st.get("detail") and status in ("failed", "error") else ""))
        for lem in s["lemmas"]:
            tag = "cited" if lem["cited"] else {"definition": "definition", "hypothesis": "hypothesis"}.get(
                lem.get("basis", ""), "lemma")
            lines.append(f"        {tag}: {lem['text']} ({lem['why']})")
    return lines


# ---------------------------------------------------------------------------------------------
# Families: the general derivation first, its fixed-size instances folded under it
# ---------------------------------------------------------------------------------------------

_INSTANCE = re.compile(r"-([A-Za-z]+)-?(\d+)(?=-|$)")
_GENERAL_WORDS = ("index", "general", "induction", "symbolic", "dimension", "form")


def instance_key(name: str) -> tuple[str, str] | None:
    """(family, "n = 2") for a fixed-size instance name such as ``softmax-jacobian-n2``,
    ``pe-dmodel-4`` or ``equivariance-n3-all-permutations``; None for other names."""
    m = _INSTANCE.search(name)
    if not m:
        return None
    param = {"dmodel": "d_model", "d": "d", "L": "L", "h": "h", "n": "n"}.get(m.group(1), m.group(1))
    family = (name[: m.start()] + name[m.end():]).strip("-")
    return family, f"{param} = {m.group(2)}"


def order_derivations(rendered: Sequence[dict]) -> list[dict]:
    """``rendered`` (dicts with ``name``) reordered: each general derivation, then the instances it
    folds (each marked ``instance_of`` = the general's name and ``instance_label`` = ``"n = 2"``).
    An instance family without a general one is led by its first instance."""
    names = [d["name"] for d in rendered]
    keys = {d["name"]: instance_key(d["name"]) for d in rendered}
    generals = [n for n in names if keys[n] is None]
    leader: dict[str, str] = {}
    for n in names:
        k = keys[n]
        if k is None:
            continue
        fam = k[0].split("-")
        best, score = None, (0, 0)
        for g in generals:
            parts = g.split("-")
            common = 0
            while common < min(len(parts), len(fam)) and parts[common] == fam[common]:
                common += 1
            sc = (common, int(any(w in parts for w in _GENERAL_WORDS)))
            if common and sc > score:
                best, score = g, sc
        leader[n] = best or next(m for m in names if keys[m] and keys[m][0] == k[0])
    out: list[dict] = []
    placed: set = set()
    by_name = {d["name"]: d for d in rendered}
    for n in names:
        if n in placed or (keys[n] is not None and leader[n] != n and leader[n] in by_name):
            continue
        out.append(dict(by_name[n], instance_of=None, instance_label=keys[n][1] if keys[n] else ""))
        placed.add(n)
        for m in names:
            if m != n and m not in placed and keys[m] is not None and leader[m] == n:
                out.append(dict(by_name[m], instance_of=n, instance_label=keys[m][1]))
                placed.add(m)
    return out


def folded(derivations: Iterable[Mapping]) -> list[tuple[Mapping, list[Mapping]]]:
    """(general, [its instances]) pairs from an :func:`order_derivations` list."""
    out: list[tuple[Mapping, list[Mapping]]] = []
    for d in derivations:
        if d.get("instance_of") and out and out[-1][0]["name"] == d["instance_of"]:
            out[-1][1].append(d)
        else:
            out.append((d, []))
    return out


def instances_label(instances: Sequence[Mapping]) -> str:
    """"n = 2, 3, 4, 5" for instances labelled n = 2 … n = 5."""
    labels = [d.get("instance_label", "") for d in instances]
    params = {lab.split(" = ")[0] for lab in labels if " = " in lab}
    if len(params) == 1 and all(" = " in lab for lab in labels):
        return f"{params.pop()} = " + ", ".join(lab.split(" = ")[1] for lab in labels)
    return "; ".join(lab or d["name"] for lab, d in zip(labels, instances))


# ---------------------------------------------------------------------------------------------
# A cache of renderings on disk (``explain`` shows a claim without building its derivations)
# ---------------------------------------------------------------------------------------------

RENDER_CACHE = "rendered-derivations.json"


def cache_dir():
    """Where attnclaims keeps its caches: ``$ATTNCLAIMS_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnclaims``
    or ``~/.cache/attnclaims``."""
    import os
    from pathlib import Path

    env = os.environ.get("ATTNCLAIMS_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnclaims"


def _render_key() -> str:
    """Changes when a proof module, this renderer or sympy changes."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256(sp.__version__.encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        h.update(f"{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def cached_renderings(claim_id: str) -> list[dict] | None:
    """The renderings of ``claim_id``'s derivations stored by an earlier run, None when absent or stale."""
    import json

    try:
        data = json.loads((cache_dir() / RENDER_CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != _render_key():
        return None
    got = data.get("claims", {}).get(claim_id)
    return got if isinstance(got, list) else None


def store_renderings(renderings: Mapping[str, list]) -> None:
    """Add ``{claim id: renderings}`` to the cache (best effort: an unwritable cache is skipped)."""
    import json
    import os

    path = cache_dir() / RENDER_CACHE
    key = _render_key()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("key") != key:
            data = {}
    except (OSError, ValueError):
        data = {}
    data["key"] = key
    data.setdefault("claims", {}).update(renderings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def renderings_for(claim_id: str, derivations) -> list[dict]:
    """The static renderings of ``claim_id``'s derivations: from the cache, else rendered now and stored.
    ``derivations`` is their list, or a function that builds it (called only on a cache miss; for a claim
    with no derivation it raises KeyError, as ``attnclaims.proofs.derivations_for`` does). The renderer
    does not look derivations up itself: the registry of proof modules imports the checker, which imports
    the renderer."""
    got = cached_renderings(claim_id)
    if got is not None:
        return got
    if callable(derivations):
        derivations = derivations()
    out = [render_derivation(d) for d in derivations]
    store_renderings({claim_id: out})
    return out


__all__ = ["MAX_TREE", "MAX_OPS", "MAX_ENTRIES", "PROOF_STATUS_TEXT", "proof_label", "tree_size", "render_expr",
           "render_relation", "render_lemma",
           "render_derivation", "text_lines", "instance_key", "order_derivations", "folded", "instances_label",
           "cache_dir", "cached_renderings", "store_renderings", "renderings_for"]
