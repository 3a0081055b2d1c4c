"""Text from an implementation or a file, made safe for the terminal.

Implementation names, messages, reasons, test names and registry texts are data, not
instructions to the terminal: :func:`safe_text` escapes control characters (an ANSI escape
``\\x1b[2J`` that would clear the screen is shown as the four characters ``\\x1b``, a carriage
return as ``\\r``; bidirectional overrides as ``\\u202e``), and with ``markup=True`` also rich
markup, so ``my-attn[/]`` or ``[link=https://x]x[/link]`` is printed as written instead of
being read as markup (or ending the run in a markup error). Every place the command line prints
such a string goes through this one function.

The files the report writes follow the same rule through :func:`escape_controls`: every finished
page (``report.md``, ``index.html``, ``article.html``) passes through it once, so an ESC or BEL in an
implementation's name, an exception message or a registry text shows as ``\\x1b`` / ``\\x07`` instead
of reaching the terminal of whoever runs ``cat report.md``; line breaks and tabs, the only control
characters a page's own layout uses, are kept (a Windows line end ``\\r\\n`` becomes ``\\n``).
"""
from __future__ import annotations

import re

__all__ = ["safe_text", "escape_controls"]

# C0 and C1 control characters and DEL, and the Unicode format characters that reorder or hide
# text (bidirectional embeddings, overrides and isolates; zero-width joiners are left alone).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(value: object, *, markup: bool = False, newlines: bool = False) -> str:
    """``str(value)`` with control characters escaped; ``markup=True``: rich markup escaped too (for
    text placed inside a markup string); ``newlines=True`` keeps line breaks (multi-line text)."""
    text = str(value)
    if newlines:
        text = "\n".join(_CONTROL.sub(_escape, line) for line in text.split("\n"))
    else:
        text = _CONTROL.sub(_escape, text)
    if markup:
        from rich.markup import escape

        text = escape(text)
    return text


def escape_controls(text: str) -> str:
    """``text`` with every control character except line feed and tab escaped visibly (``\\x1b``,
    ``\\x07``, ``\\x9b``, ``\\u202e``); ``\\r\\n`` line ends become ``\\n`` first. For whole documents
    whose own markup uses no other control character."""
    text = text.replace("\r\n", "\n")
    return _DOC_CONTROL.sub(_escape, text)


# the same characters as _CONTROL, less the two a document's layout uses
_DOC_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
