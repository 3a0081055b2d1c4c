"""docs/adapters.md tells implementers what the tests feed them ("What the tests feed your implementation");
these tests keep those tables and the strategies in agreement.

The sizes of the built-in shape menu and of the edge cases are choices, but once published they are promises:
an implementer prepares a fixed-shape build for the menu, and a reviewer reads a failure on ``huge-scores``
by looking its input up in the table. A change to either side without the other fails here (the
mutation run of attnclaims/checks/strategies/ showed that nothing else noticed a changed menu size or mask pattern).
Behaviour behind the prose numbers (the d_ff range, the mask switch, no subnormals, the length mixture) is
tested in tests/checks/test_strategies_draws.py; here only that the numbers the page states are the code's.
About the suite, not the article: no claim marker.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from attnclaims.profiles import _LIMITS
from attnclaims.checks import bounds as SP
from attnclaims.checks import strategies as S


def _docs_page() -> str:
    """docs/adapters.md of the checkout this module lives in (the package installed from PyPI has no docs)."""
    for parent in Path(__file__).resolve().parents:
        page = parent / "docs" / "adapters.md"
        if page.is_file():
            return page.read_text(encoding="utf-8")
    pytest.skip("docs/adapters.md is not next to this installed copy of the tests (it ships with the repository)")


def _table(page: str, header_start: str) -> list[dict[str, str]]:
    """The Markdown table whose header row starts with ``header_start``: one dict per row, cells stripped of
    backticks."""
    lines = page.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header_start)]
    assert len(starts) == 1, f"docs/adapters.md: expected one table starting {header_start!r}, found {len(starts)}"
    cells = lambda line: [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
    header = cells(lines[starts[0]])
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        assert len(row) == len(header), f"docs/adapters.md: row {line!r} has {len(row)} cells, header {len(header)}"
        rows.append(dict(zip(header, row)))
    assert rows, f"docs/adapters.md: the table starting {header_start!r} has no rows"
    return rows


def test_the_page_is_parsed_as_written():
    """The parser itself: a table is read cell by cell, and a missing table is an error, not an empty pass."""
    page = "text\n| a | b |\n|---|---|\n| `1` | x y |\n| 2 | z |\nafter\n"
    assert _table(page, "| a |") == [{"a": "1", "b": "x y"}, {"a": "2", "b": "z"}]
    with pytest.raises(AssertionError, match="expected one table"):
        _table(page, "| c |")
    with pytest.raises(AssertionError, match="has 1 cells"):
        _table("| a | b |\n|---|---|\n| 1 |\n", "| a |")


def test_profile_sizes_are_those_of_the_page():
    rows = _table(_docs_page(), "| profile |")
    assert [r["profile"] for r in rows] == list(_LIMITS)
    for row in rows:
        lim = _LIMITS[row["profile"]]
        assert (int(row["max_seq"]), int(row["max_dim"]), int(row["max_batch"]), int(row["long_seq"])) == (
            lim.max_seq, lim.max_dim, lim.max_batch, lim.long_seq), row
        assert int(row["layer max_seq"]) == min(lim.max_seq, S.LAYER_MAX_SEQ), row


def test_the_numbers_in_the_drawing_rules_are_the_codes():
    page = _docs_page()
    said = lambda pattern: [int(x) for x in re.findall(pattern, page)]
    assert said(r"short lengths 1 … (\d+)") == [S.SHORT_SEQ]
    assert said(r"min\(`max_seq`, (\d+)\)") == [S.LAYER_MAX_SEQ]
    assert said(r"heads: 1 … min\((\d+), `max_dim`\)") == [inspect.signature(S.dims).parameters["max_heads"].default]
    assert said(r"Arrays of up to (\d+) entries are drawn entry by entry") == [S.ELEMENTWISE_LIMIT]
    assert said(r"Masks of up to (\d+) entries") == [4 * S.ELEMENTWISE_LIMIT]
    assert "d_ff: 1 … 2·`max_dim`" in page and "**No array contains a subnormal number**" in page
    assert "with density 0.1, 0.5 or 0.9" in page and "with density 0.1, 0.5 or 0.9" in inspect.getdoc(S.masks)
    # The per-case measured bound of whole layers (docs/adapters.md, "The built-in adapters").
    assert said(r"in (\d+) evaluation orders") == [SP.ORDERS]


def test_the_built_in_shape_menu_is_the_published_one():
    rows = _table(_docs_page(), "| batch | n_q |")
    published = [{key: ast.literal_eval(value) for key, value in row.items()} for row in rows]
    assert published == [dict(m) for m in S.FIXED_SHAPES]


def _shape(text: str, n: int) -> tuple[int, ...]:
    return tuple(ast.literal_eval(text.replace("n", str(n))))


def _mask(text: str) -> np.ndarray | None:
    """``0111 0111; 1000 1000`` → bool array (2, 2, 4); ``—`` → None."""
    if text == "—":
        return None
    elements = [[[c == "1" for c in row] for row in element.split()] for element in text.split(";")]
    return np.array(elements[0] if len(elements) == 1 else elements, dtype=bool)


def _scale(text: str) -> float | None:
    return None if text == "1/√d_k" else float(text)


def test_the_edge_cases_are_exactly_the_published_ones():
    """Names, shapes, masks, scales and the entries' seeding rule, as docs/adapters.md states them."""
    rows = _table(_docs_page(), "| name | q |")
    assert [r["name"] for r in rows] == list(S.EDGE)
    n = S.limits().long_seq
    for row in rows:
        name = row["name"]
        case = S.edge_attention_case(name)
        rng = np.random.default_rng(sum(ord(c) for c in name))
        want = {axis: rng.uniform(-1.0, 1.0, size=_shape(row[axis], n)) for axis in ("q", "k", "v")}
        for axis in ("q", "k", "v"):
            got = getattr(case, axis)
            assert got.shape == want[axis].shape and np.array_equal(got, want[axis]), f"{name}: {axis} differs"
        mask = _mask(row["mask"])
        assert (case.mask is None) == (mask is None), f"{name}: mask {case.mask} vs page {row['mask']}"
        if mask is not None:
            assert case.mask.dtype == np.bool_ and np.array_equal(case.mask, mask), f"{name}: {case.mask}"
        assert case.scale == _scale(row["scale"]), f"{name}: scale {case.scale} vs page {row['scale']}"
        assert case.label == name and row["what it catches"], name


def test_the_mask_notation_reads_batches_and_rows():
    assert _mask("—") is None
    assert np.array_equal(_mask("01 10"), [[False, True], [True, False]])
    assert _mask("0111 0111; 1000 1000; 1111 1101").shape == (3, 2, 4)
    assert _shape("(n, 3)", 128) == (128, 3) and _scale("1e300") == 1e300 and _scale("1/√d_k") is None


def test_the_variants_table_is_the_protocols():
    """Every row of the page's variants table is a key of protocol.VARIANTS with its default and values; the
    keys of the 2017 architecture are all there (the modern components' keys are documented in their section)."""
    from attnclaims.protocol import VARIANTS

    rows = _table(_docs_page(), "| key | default |")
    keys = [r["key"] for r in rows]
    assert {"norm_first", "cross_attention", "head_dim", "scale", "flush_to_zero"} <= set(keys)
    for row in rows:
        spec = VARIANTS[row["key"]]
        assert row["default"] == repr(spec.default).replace("'", '"'), row
        for choice in spec.choices:
            assert repr(choice).replace("'", '"') in row["values"], (row["key"], choice)


def test_the_explicit_scales_are_the_published_ones():
    """The scale values the page lists (0, negative, 1e300 and 1e-300 included) are S.EXPLICIT_SCALES, and the
    positive-only list is what an implementation declaring scale='positive' gets."""
    page = _docs_page()
    line = next(p for p in page.split("\n* ") if p.startswith("Explicit scales"))
    listed = re.search(r"s ∈ \{([^}]*)\}", line).group(1)
    numbers = [float(x.replace("10⁶", "1e6").replace("10³⁰⁰", "1e300").replace("10⁻³⁰⁰", "1e-300").replace("−", "-"))
               for x in re.sub(r"\s+", " ", listed).split(", ")]
    assert numbers == list(S.EXPLICIT_SCALES)
    positive = re.search(r"gets only (.*)\.\s*$", re.sub(r"\s+", " ", line.split("\n\n")[0])).group(1)
    got = [float(x.replace("10⁶", "1e6").replace("10³⁰⁰", "1e300").replace("10⁻³⁰⁰", "1e-300"))
           for x in positive.replace(" and ", ", ").split(", ")]
    assert got == [s for s in S.EXPLICIT_SCALES if s > 0]


def test_the_tile_crossing_numbers_of_the_page_are_the_codes():
    """docs/adapters.md, "Tile sizes": how many examples of a marked test cross tiles per profile, the share, the
    widest d_model, the head widths and the default tiles are those of the strategies."""
    from hypothesis import settings

    from attnclaims.checks.strategies import common as SC
    from attnclaims.checks.strategies.multihead import TILE_MAX_D_MODEL

    page = _docs_page()
    section = " ".join(page[page.index("## Tile sizes"):].split())  # as read, whatever the line breaks
    said = re.search(r"one in `TILE_SHARE` = (\d+), rounded: (\d+) of the `ci` profile's (\d+), (\d+) of\s+`dev`'s "
                     r"(\d+), (\d+) \(at most `TILE_MAX_EXAMPLES`\) of `thorough`'s (\d+)", section)
    assert said, "docs/adapters.md, Tile sizes: the sentence with the crossing examples per profile"
    share, ci_k, ci_n, dev_k, dev_n, th_k, th_n = (int(x) for x in said.groups())
    assert share == SC.TILE_SHARE and th_k == SC.TILE_MAX_EXAMPLES
    for profile, k, n in (("ci", ci_k, ci_n), ("dev", dev_k, dev_n), ("thorough", th_k, th_n)):
        assert settings.get_profile(profile).max_examples == n and SC.tile_examples(n) == k, profile
    assert f"heads · d_head ≤ {TILE_MAX_D_MODEL}" in section
    assert "head widths 7, 23, 37, 17 or 64" in section and SC.TILE_HEAD_WIDTHS == (7, 23, 37, 17, 64)
    assert "The default tiles are 16, 32, 64 and 128" in section and SC.DEFAULT_TILE_SIZES == (16, 32, 64, 128)
    assert "the primes 113, 157 and 257" in section and SC.TILE_PRIME_LENGTHS == (113, 157, 257)
