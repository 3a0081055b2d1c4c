"""The claim registry (``attnclaims/spec/claims.toml``) and its loader (``attnclaims.registry``).

Two halves: the shipped registry matches the claims catalogue (written out below) —
ids, order, verdicts, verbatim quotes, dependency graph, integrity notes — and
the loader rejects each kind of bad registry with one line naming the file,
the claim and the field. These tests are about the harness, not evidence for
any claim, so they carry no claim marker.
"""
from __future__ import annotations

import json
from graphlib import TopologicalSorter
from pathlib import Path

import pytest

from attnclaims.registry import METHODS, REGISTRY_ENV, VERDICTS, RegistryError, load_registry, parse_registry
from attnclaims.spec import ARTICLE_PATH, CLAIMS_PATH

# The catalogue: every claim id in article order, with the verdict
# the catalogue expects. The registry must match it exactly.
CATALOGUE = {
    "seq2seq-bottleneck": "qualified",
    "attention-history": "historical",
    "score-functions": "verified",
    "scaling-variance": "qualified",
    "softmax-saturation": "qualified",  # its statistical half rests on scaling-variance's independence condition
    "softmax-distribution": "proven",
    "convex-combination": "verified",
    "alignment-example": "illustrative",
    "interpretability": "qualified",
    "self-attention": "verified",
    "rnn-sequential": "qualified",
    "rnn-gradients": "proven",
    "no-recurrence": "qualified",
    "transformer-history": "historical",
    "multihead-structure": "proven",
    "multihead-expressivity": "verified",
    "permutation-equivariance": "qualified",
    "positional-encoding": "verified",  # the "adding breaks equivariance" part is tested, not derived
    "layer-norm": "proven",
    "residual-gradient": "qualified",
    "position-wise-ffn": "verified",
    "encoder-structure": "verified",
    "decoder-masking": "verified",
    "cross-attention": "verified",
    "parallel-training": "verified",
    "constant-path-length": "verified",
    "paper-tables": "verified",
    "attention-lipschitz": "verified",
}

ROOT = "softmax-distribution"
# Claims that do not rest on softmax-distribution although they are not
# historical: their objects contain no softmax. scaling-variance is about the
# scores q·k before any softmax (the softmax consequence is softmax-saturation);
# rnn-gradients is about a plain RNN; layer-norm and position-wise-ffn are the
# LN and FFN sub-layers on their own. Every other non-historical claim must
# reach softmax-distribution through depends_on, so that a softmax failure
# shows downstream as "blocked by".
INDEPENDENT_OF_ROOT = {ROOT, "scaling-variance", "rnn-gradients", "layer-norm", "position-wise-ffn"}

SECTION_ORDER = ["2", "3.1", "3.2", "5", "6.1", "6.2", "6.3", "6.4", "7", "beyond"]
ELLIPSIS = "…"


@pytest.fixture(scope="module")
def registry():
    return load_registry(CLAIMS_PATH)


@pytest.fixture(scope="module")
def article() -> str:
    return ARTICLE_PATH.read_text(encoding="utf-8")


# ── the shipped registry ────────────────────────────────────────────────────


def test_shipped_registry_loads(registry):
    assert len(registry) == len(CATALOGUE)
    assert registry.source_title == "从注意力机制到 Transformer"


def test_default_registry_is_the_shipped_one(registry):
    assert load_registry().order() == registry.order()


def test_ids_are_the_catalogue_in_article_order(registry):
    assert registry.order() == list(CATALOGUE)


def test_verdicts_are_the_catalogue_verdicts(registry):
    got = {c.id: c.expected_verdict for c in registry}
    assert got == CATALOGUE


def test_sections_follow_the_article(registry):
    sections = [c.section for c in registry]
    unknown = [s for s in sections if s not in SECTION_ORDER]
    assert not unknown, f"sections {unknown} not in {SECTION_ORDER}"
    ranks = [SECTION_ORDER.index(s) for s in sections]
    assert ranks == sorted(ranks), f"sections out of article order: {sections}"


@pytest.mark.parametrize("claim_id", list(CATALOGUE))
def test_quote_is_verbatim(registry, article, claim_id):
    quote = registry.get(claim_id).quote
    fragments = [f.strip() for f in quote.split(ELLIPSIS)]
    assert all(fragments), f"{claim_id}: empty fragment in quote {quote!r}"
    missing = [f for f in fragments if f not in article]
    assert not missing, f"{claim_id}: quote fragments {missing} are not substrings of {ARTICLE_PATH.name}"


def test_beyond_the_text_claims_say_so(registry):
    for claim in registry:
        if claim.section == "beyond":
            assert "beyond the text" in claim.notes.lower(), f"{claim.id}: notes={claim.notes!r}"


def test_qualified_claims_have_a_qualification(registry):
    for claim in registry:
        if claim.expected_verdict == "qualified":
            assert claim.qualification.strip(), f"{claim.id}: qualified without a qualification"


def test_methods_and_verdicts_are_known_words(registry):
    for claim in registry:
        assert claim.expected_verdict in VERDICTS
        assert claim.methods and set(claim.methods) <= set(METHODS), f"{claim.id}: methods={claim.methods}"


def test_historical_claims_are_cited_not_tested(registry):
    for claim in registry:
        historical = claim.expected_verdict == "historical"
        assert historical == claim.is_historical, f"{claim.id}: verdict={claim.expected_verdict} methods={claim.methods}"
        if historical:
            assert claim.methods == ("citation",)
            assert claim.citations, f"{claim.id}: historical claim without a citation"
            assert claim.depends_on == (), f"{claim.id}: historical claim depends on {claim.depends_on}"


def test_every_claim_cites_something(registry):
    uncited = [c.id for c in registry if not c.citations]
    assert not uncited


def test_formulas_are_written_in_the_math_markup(registry):
    """Formulas are ``$…$`` spans (a TeX subset, rendered as MathML and GitHub math); outside them the
    text is plain (no stray TeX), and every span converts to MathML (not the escaped-TeX fallback)."""
    from attnclaims.report.mathtext import segments, tex_to_mathml

    for claim in registry:
        texts = {name: getattr(claim, name) for name in ("title", "statement", "precise", "qualification", "notes")}
        texts.update({f"assumptions[{i}]": a for i, a in enumerate(claim.assumptions)})
        texts.update({f"{k}_zh": v for k, v in claim.zh.items() if isinstance(v, str)})
        for name, text in texts.items():
            for kind, part in segments(text):
                if kind == "text":
                    assert "\\" not in part, f"{claim.id}: field {name!r} has TeX outside $…$: {part[:80]!r}"
                else:  # converted (not the <code> fallback), and no macro left unknown (\\foo shown as text)
                    mathml = tex_to_mathml(part)
                    assert mathml.startswith("<math") and "\\" not in mathml, f"{claim.id}: {name!r}: ${part}$"


def test_dependencies_are_acyclic(registry):
    order = list(TopologicalSorter({c.id: c.depends_on for c in registry}).static_order())
    assert sorted(order) == sorted(CATALOGUE)
    for claim in registry:
        assert claim.id not in registry.dependencies(claim.id)


def test_root_and_historical_claims_rest_on_nothing(registry):
    assert registry.get(ROOT).depends_on == ()
    for claim in registry:
        for dep in claim.depends_on:
            assert not registry.get(dep).is_historical, f"{claim.id} depends on historical claim {dep}"


@pytest.mark.parametrize("claim_id", list(CATALOGUE))
def test_rests_on_softmax_distribution_unless_independent(registry, claim_id):
    claim = registry.get(claim_id)
    rests = ROOT in registry.dependencies(claim_id)
    if claim.is_historical or claim_id in INDEPENDENT_OF_ROOT:
        assert not rests, f"{claim_id} is listed as independent of {ROOT} but depends on it"
    else:
        assert rests, f"{claim_id} does not rest on {ROOT}: dependencies={registry.dependencies(claim_id)}"


def test_integrity_notes(registry):
    notes = {n.section: n.note for n in registry.integrity}
    assert len(registry.integrity) == 3
    assert set(notes) == {"3.1", "3.2", "4"}
    assert "三个步骤四个步骤" in notes["3.1"]
    assert "WQ、WK、WV" in notes["3.2"]
    assert "3" in notes["4"] and "5" in notes["4"]


# ── the loader's errors ─────────────────────────────────────────────────────


_DROP = object()  # an override that removes the field


def _claim(cid: str, **overrides) -> dict:
    base = {
        "id": cid,
        "section": "3.1",
        "title": f"claim {cid}",
        "quote": "softmax 归一化",
        "statement": "a statement",
        "precise": "a precise statement",
        "methods": ["property"],
        "expected_verdict": "verified",
        "citations": ["Vaswani et al. 2017"],
        "depends_on": [],
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not _DROP}


def _toml_value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _toml(*claims: dict, header: str = '[source]\ntitle = "t"\n') -> str:
    parts = [header]
    for claim in claims:
        parts.append("[[claims]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in claim.items()))
    return "\n".join(parts)


BAD = Path("bad.toml")

# (case, registry text, where, field): the message must start with
# "bad.toml: <where>:" and name "field '<field>'" (where a field is to blame).
# A claim is named as "claim '<id>'"; a dependency cycle may be reported from
# either end, so its `where` is a tuple of alternatives.
LOADER_ERRORS = [
    ("missing field", _toml(_claim("a"), _claim("b", precise=_DROP)), "claim 'b'", "precise"),
    ("empty field", _toml(_claim("a", title="   ")), "claim 'a'", "title"),
    ("wrong type", _toml(_claim("a", section=3.1)), "claim 'a'", "section"),
    ("wrong list type", _toml(_claim("a", methods="property")), "claim 'a'", "methods"),
    ("empty methods", _toml(_claim("a", methods=[])), "claim 'a'", "methods"),
    ("unknown field", _toml(_claim("a", colour="blue")), "claim 'a'", "colour"),
    ("duplicate id", _toml(_claim("a"), _claim("a")), "claim 'a'", "id"),
    ("unknown verdict", _toml(_claim("a", expected_verdict="true")), "claim 'a'", "expected_verdict"),
    ("unknown method", _toml(_claim("a", methods=["property", "magic"])), "claim 'a'", "methods"),
    ("unknown dependency", _toml(_claim("a", depends_on=["zzz"])), "claim 'a'", "depends_on"),
    ("self-dependency", _toml(_claim("a"), _claim("b", depends_on=["b"])), "claim 'b'", "depends_on"),
    ("dependency cycle", _toml(_claim("a", depends_on=["b"]), _claim("b", depends_on=["a"])),
     ("claim 'a'", "claim 'b'"), "depends_on"),
    ("qualified without qualification", _toml(_claim("a", expected_verdict="qualified")), "claim 'a'", "qualification"),
    ("missing id", _toml(_claim("a"), _claim("b", id=_DROP)), "claims[1]", "id"),
    ("invalid TOML", _toml(_claim("a")) + "\nthis is = = not toml\n", "not valid TOML", None),
    ("no claims", _toml(), "top level", "claims"),
    ("claims not tables", 'claims = ["a"]\n', "claims[0]", None),
]


def test_the_base_registry_text_is_valid():
    """The mutations below start from this text; it must load, or they prove nothing."""
    reg = parse_registry(_toml(_claim("a"), _claim("b", depends_on=["a"])), BAD)
    assert reg.order() == ["a", "b"]
    assert reg.dependencies("b") == ["a"]


@pytest.mark.parametrize(
    "text, where, field", [case[1:] for case in LOADER_ERRORS], ids=[case[0] for case in LOADER_ERRORS]
)
def test_loader_error(text, where, field):
    with pytest.raises(RegistryError) as info:
        parse_registry(text, BAD)
    msg = str(info.value)
    assert "\n" not in msg, f"message is not one line: {msg!r}"
    alternatives = where if isinstance(where, tuple) else (where,)
    assert any(msg.startswith(f"bad.toml: {w}:") for w in alternatives), msg
    if field is not None:
        assert f"field {field!r}" in msg, msg
    if isinstance(where, tuple):
        assert "cycle" in msg and all(w.split()[1].strip("'") in msg.split("cycle", 1)[1] for w in where), msg


def test_load_registry_on_a_missing_file(tmp_path):
    missing = tmp_path / "nowhere" / "claims.toml"
    with pytest.raises(RegistryError) as info:
        load_registry(missing)
    msg = str(info.value)
    assert "\n" not in msg and str(missing) in msg, msg


def test_a_registry_that_is_not_utf8_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "claims.toml"
    bad.write_bytes(_toml(_claim("a")).encode("utf-8").replace(b"claim a", b"claim caf\xe9"))
    with pytest.raises(RegistryError) as info:
        load_registry(bad)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{bad}: not UTF-8 text (byte 0xe9 at line "), msg


def test_the_registry_environment_variable_points_the_loader_at_another_file(tmp_path, monkeypatch):
    other = tmp_path / "mine.toml"
    other.write_text(_toml(_claim("a"), _claim("b", depends_on=["a"])), encoding="utf-8")
    monkeypatch.setenv(REGISTRY_ENV, str(other))
    assert load_registry().order() == ["a", "b"]
    other.write_text(_toml(_claim("c")), encoding="utf-8")  # a changed file is read again
    assert load_registry().order() == ["c"]
    monkeypatch.delenv(REGISTRY_ENV)
    assert load_registry().order() == list(CATALOGUE)


def test_a_non_utf8_registry_is_one_line_on_the_command_line(tmp_path):
    import os
    import subprocess
    import sys

    bad = tmp_path / "claims.toml"
    bad.write_bytes(b'[[claims]]\nid = "caf\xe9"\n')
    env = {**os.environ, REGISTRY_ENV: str(bad)}
    for argv in (["list"], ["check", "--claim", "softmax-distribution"]):
        proc = subprocess.run([sys.executable, "-m", "attnclaims", *argv], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"attnclaims: the claim registry is broken: {bad}: not UTF-8 text (byte 0xe9 at line 2, offset 20); "
            "the registry must be UTF-8"]


def test_the_claims_that_have_halves_list_their_parts(registry):
    """Claims whose precise statement has halves that need different evidence (a capability, a recount, a
    statistical assumption) list them, so no column reads proven or verified with a half unchecked."""
    parts = {c.id: [p.id for p in c.parts] for c in registry}
    assert parts["softmax-saturation"] == ["jacobian", "default-scale", "statistics"]
    assert parts["scaling-variance"] == ["variance", "typical-size"]
    assert parts["positional-encoding"] == ["sinusoid", "added"]
    assert parts["permutation-equivariance"] == ["equivariance", "causal-position"]
    assert parts["paper-tables"] == ["table1", "table3"]
    assert registry.get("softmax-saturation").parts[1].needs == ("attention",)
    assert registry.get("positional-encoding").parts[0].needs == ("positional_encoding",)
    for claim in registry:
        for part in claim.parts:
            assert part.statement_zh and part.label_zh, (claim.id, part.id)


def test_a_part_without_its_chinese_text_is_one_line(tmp_path):
    text = CLAIMS_PATH.read_text(encoding="utf-8")
    broken = text.replace('label_zh = "默认缩放"\n', "", 1)
    assert broken != text
    with pytest.raises(RegistryError) as info:
        parse_registry(broken, Path("claims.toml"))
    message = str(info.value)
    assert "claim 'softmax-saturation'" in message and "'default-scale'" in message and "label_zh" in message
    assert "\n" not in message
