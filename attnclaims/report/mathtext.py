"""Registry texts with math: ``$…$`` spans, written once, shown properly by every renderer.

The markup: inside a registry text (title, statement, precise statement,
assumptions, qualification, notes, integrity notes, and their Chinese
versions), ``$…$`` holds a formula in a small TeX subset — ``^{…}``, ``_{…}``,
``\\sqrt{…}``, ``\\frac{…}{…}``, ``\\mathbb{R}``, ``\\operatorname{…}``,
``\\text{…}``, ``\\left( … \\right)``, Greek and relation macros — where plain
Unicode symbols (Δ, ‖, ≤, ∈, ·) may also be used; ``\\$`` is a literal dollar.
The registry loader checks that every span is closed.

* :func:`to_html`: presentation MathML (``latex2mathml``), rebuilt from an
  allow-list of MathML elements and attributes (no ``href``, no event handler,
  nothing that fetches); the text around it escaped.
* :func:`to_markdown`: GitHub math, ``$`…`$`` (the backtick form: Markdown
  punctuation inside the formula cannot turn into emphasis).
* :func:`to_plain`: Unicode text for the terminal and for HTML attributes
  (``√d_k``, ``e^(−Δ)``, ``1/2``).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html import escape, unescape
from typing import Callable

MATHML_NS = "http://www.w3.org/1998/Math/MathML"
_SPAN = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$", re.S)
_ALLOWED = {
    "math", "mrow", "mi", "mn", "mo", "mtext", "mspace", "ms", "msup", "msub", "msubsup", "mfrac", "msqrt",
    "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom",
    "menclose", "semantics", "annotation", "mfenced",
}
_ATTRS = {"display", "mathvariant", "stretchy", "fence", "separator", "lspace", "rspace", "accent",
          "accentunder", "linethickness", "columnalign", "rowalign", "columnspacing", "rowspacing", "width",
          "height", "depth", "minsize", "maxsize", "symmetric", "largeop", "movablelimits", "form", "notation",
          "open", "close", "separators", "scriptlevel", "displaystyle", "mathsize", "encoding", "bevelled"}
_XML_ENTITIES = {"lt", "gt", "amp", "quot", "apos"}


def segments(text: str) -> list[tuple[str, str]]:
    """``[("text", …), ("math", tex), …]``; ``\\$`` becomes a literal ``$`` in text segments."""
    out: list[tuple[str, str]] = []
    pos = 0
    s = str(text or "")
    for m in _SPAN.finditer(s):
        if m.start() > pos:
            out.append(("text", s[pos:m.start()].replace("\\$", "$")))
        out.append(("math", m.group(1).strip()))
        pos = m.end()
    if pos < len(s):
        out.append(("text", s[pos:].replace("\\$", "$")))
    return out


def has_math(text: str) -> bool:
    return any(kind == "math" for kind, _ in segments(text))


def sanitize_mathml(markup: str) -> str | None:
    """``markup`` (a MathML fragment or ``<math>`` element) rebuilt from the allow-list, or None when
    it is not well-formed. HTML named entities (``&ExponentialE;``) are decoded first."""
    def entity(m: re.Match) -> str:
        name = m.group(1)
        if name in _XML_ENTITIES:
            return m.group(0)
        ch = unescape(m.group(0))
        return escape(ch) if ch != m.group(0) else "?"

    text = re.sub(r"&([A-Za-z][A-Za-z0-9]*);", entity, markup)
    text = re.sub(r"(&#x[0-9A-Fa-f]+|&#[0-9]+)(?![0-9A-Fa-f;])", r"\1;", text)  # sympy omits some ';'

    if not text.lstrip().startswith("<math"):
        text = f'<math xmlns="{MATHML_NS}">{text}</math>'
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return None

    def local(tag: str) -> str:
        return tag.rsplit("}", 1)[-1] if "}" in tag else tag

    def clean(el: ET.Element) -> None:
        el.tag = local(el.tag)
        for child in list(el):
            if not isinstance(child.tag, str) or local(child.tag) not in _ALLOWED:
                el.remove(child)
                continue
            clean(child)
        for name in list(el.attrib):
            value = el.attrib[name]
            if local(name) not in _ATTRS or not re.fullmatch(r"[A-Za-z0-9 .\-#%]*", value):
                del el.attrib[name]
            elif local(name) != name:
                del el.attrib[name]
                el.attrib[local(name)] = value

    if local(root.tag) != "math":
        return None
    clean(root)
    body = "".join(ET.tostring(child, encoding="unicode", short_empty_elements=False) for child in root)
    if root.text:
        body = escape(root.text) + body
    display = root.attrib.get("display", "inline")
    return f'<math display="{escape(display)}">{body}</math>'


def tex_to_mathml(tex: str, display: str = "inline") -> str:
    """One formula as sanitized MathML; the escaped TeX in ``<code>`` when it cannot be converted."""
    try:
        from latex2mathml.converter import convert
    except ImportError:  # the dependency is declared; without it the formula stays readable
        return f'<code class="tex">{escape(tex)}</code>'
    try:
        mathml = convert(tex, display=display)
    except Exception:
        return f'<code class="tex">{escape(tex)}</code>'
    clean = sanitize_mathml(mathml)
    return clean if clean is not None else f'<code class="tex">{escape(tex)}</code>'


#: formulas longer than this (TeX characters) go in a box that scrolls sideways on a narrow screen
#: (a formula does not break across lines)
WIDE_TEX = 28


def to_html(text: str) -> str:
    """``text`` as HTML: text segments escaped, ``$…$`` as inline MathML (a long one in a
    ``<span class="wide-math">`` box, which the page's CSS lets scroll on a phone)."""
    out = []
    for kind, s in segments(text):
        if kind == "text":
            out.append(escape(s, quote=True))
        elif len(s) > WIDE_TEX:
            out.append(f'<span class="wide-math">{tex_to_mathml(s)}</span>')
        else:
            out.append(tex_to_mathml(s))
    return "".join(out)


def _md_math(tex: str) -> str:
    # HTML-significant characters as TeX commands, so the formula cannot carry markup
    tex = tex.replace("&", r"\&").replace("<", r"\lt ").replace(">", r"\gt ").replace("`", "'")
    return f"$`{tex}`$"


def to_markdown(text: str, escape_text: Callable[[str], str]) -> str:
    """``text`` as Markdown: text segments through ``escape_text``, ``$…$`` as GitHub math ``$`…`$``."""
    return "".join(escape_text(s) if kind == "text" else _md_math(s) for kind, s in segments(text))


_NUM = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
_MEASURE = re.compile(rf"^(≥ )?({_NUM})(?: \(({_NUM}) × the bound\))?$")


def _num(text: str) -> str:
    if "e" not in text:
        return text
    mant, exp = text.split("e")
    return f"{mant} \\times 10^{{{int(exp)}}}"


def number_tex(value: str) -> str | None:
    """A number as the report prints it (``3.000e-03``, ``≥ 0.003 (6.82e+12 × the bound)``) as TeX
    (``3.000 \\times 10^{-3}``); None when it is not in one of those forms."""
    m = _MEASURE.match(str(value).strip())
    if not m:
        return None
    ge, number, ratio = m.groups()
    tex = (r"\ge " if ge else "") + _num(number)
    if ratio:
        tex += r"\ \left(" + _num(ratio) + r" \times \text{the bound}\right)"
    return tex


# --- plain Unicode -----------------------------------------------------------------------------

_MACROS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "lambda": "λ",
    "mu": "μ", "sigma": "σ", "rho": "ρ", "omega": "ω", "pi": "π", "tau": "τ", "theta": "θ", "phi": "φ",
    "Delta": "Δ", "Sigma": "Σ", "Pi": "Π", "Gamma": "Γ", "Omega": "Ω", "sum": "Σ", "prod": "Π",
    "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠", "approx": "≈", "sim": "~",
    "in": "∈", "notin": "∉", "to": "→", "mapsto": "↦", "infty": "∞", "cdot": "·", "times": "×", "pm": "±",
    "odot": "⊙", "ldots": "…", "cdots": "⋯", "dots": "…", "partial": "∂", "nabla": "∇", "|": "‖", "lVert": "‖",
    "rVert": "‖", "langle": "⟨", "rangle": "⟩", "lceil": "⌈", "rceil": "⌉", "lfloor": "⌊", "rfloor": "⌋",
    "top": "ᵀ", "prime": "′", "ln": "ln", "log": "log", "exp": "exp", "max": "max", "min": "min", "sup": "sup",
    "sin": "sin", "cos": "cos", "tanh": "tanh", "det": "det", "tr": "tr", "quad": " ", "qquad": "  ",
    ",": " ", ";": " ", "!": "", " ": " ", "{": "{", "}": "}", "lt": "<", "gt": ">", "&": "&", "%": "%",
    "mid": "|", "land": "∧", "forall": "∀", "exists": "∃", "subset": "⊂", "cup": "∪", "cap": "∩",
}
_BB = {"R": "ℝ", "N": "ℕ", "Z": "ℤ", "E": "𝔼", "C": "ℂ", "Q": "ℚ"}
_SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
_SUP = str.maketrans("0123456789+-−()nᵀ", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁻⁽⁾ⁿᵀ")


def _group(tex: str, i: int) -> tuple[str, int]:
    """The argument starting at ``tex[i]``: a braced group (without braces) or one character/macro."""
    while i < len(tex) and tex[i] == " ":
        i += 1
    if i >= len(tex):
        return "", i
    if tex[i] == "{":
        depth, j = 0, i
        while j < len(tex):
            if tex[j] == "{" and (j == 0 or tex[j - 1] != "\\"):
                depth += 1
            elif tex[j] == "}" and tex[j - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return tex[i + 1:j], j + 1
            j += 1
        return tex[i + 1:], len(tex)
    if tex[i] == "\\":
        m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
        return m.group(0), i + len(m.group(0))
    return tex[i], i + 1


def _simple(s: str) -> bool:
    return bool(re.fullmatch(r"√?(?:[\w′ᵀ.²³⁻¹ⁿ]+|[\w]+_[\w]+)", s))


def tex_to_plain(tex: str) -> str:
    """A TeX-subset formula as readable Unicode (``\\sqrt{d_k}`` -> ``√d_k``)."""
    out: list[str] = []
    i = 0
    while i < len(tex):
        ch = tex[i]
        if ch == "\\":
            m = re.match(r"\\([A-Za-z]+|.)", tex[i:])
            name = m.group(1)
            i += len(m.group(0))
            if name in ("left", "right", "big", "Big", "bigl", "bigr", "displaystyle"):
                continue
            if name == "sqrt":
                arg, i = _group(tex, i)
                inner = tex_to_plain(arg)
                out.append("√" + inner if _simple(inner) else f"√({inner})")
            elif name in ("frac", "tfrac", "dfrac"):
                a, i = _group(tex, i)
                b, i = _group(tex, i)
                pa, pb = tex_to_plain(a), tex_to_plain(b)
                out.append(f"{pa if _simple(pa) else '(' + pa + ')'}/{pb if _simple(pb) else '(' + pb + ')'}")
            elif name == "mathbb":
                a, i = _group(tex, i)
                out.append(_BB.get(a, a))
            elif name in ("operatorname", "text", "mathrm", "mathbf", "mathit", "boldsymbol", "mathcal"):
                a, i = _group(tex, i)
                out.append(tex_to_plain(a) if name != "text" else a)
            elif name in ("hat", "bar", "tilde", "vec"):
                a, i = _group(tex, i)
                out.append(tex_to_plain(a) + {"hat": "̂", "bar": "̄", "tilde": "̃", "vec": "⃗"}[name])
            else:
                out.append(_MACROS.get(name, name))
        elif ch in "^_":
            arg, i = _group(tex, i + 1)
            inner = tex_to_plain(arg)
            if ch == "^":
                if inner and all(c in "0123456789+-−()nᵀ" for c in inner):
                    out.append(inner.translate(_SUP))
                else:
                    out.append("^" + (inner if len(inner) == 1 else f"({inner})"))
            elif inner.isdigit():
                out.append(inner.translate(_SUB))
            else:
                out.append("_" + (inner if _simple(inner) or len(inner) == 1 else f"({inner})"))
        elif ch in "{}":
            i += 1
        elif ch == "~":
            out.append(" ")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def to_plain(text: str) -> str:
    """``text`` with every ``$…$`` span as readable Unicode (terminal, HTML attributes, titles)."""
    return "".join(s if kind == "text" else tex_to_plain(s).replace("-", "−") for kind, s in segments(text))


__all__ = ["segments", "has_math", "sanitize_mathml", "tex_to_mathml", "to_html", "to_markdown", "to_plain",
           "tex_to_plain"]
