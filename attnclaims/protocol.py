"""The implementation protocol (docs/design.md): capability names and the output each must return.

An implementation is any object with a ``name``, a ``dtype`` and some of the
capability methods below. Arrays in and out are numpy arrays. A capability it
lacks makes the tests that need it "not applicable", reported by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: capability -> one-line signature, shown in messages and in the README.
CAPABILITIES: dict[str, str] = {
    "softmax": "softmax(x, axis=-1) -> same shape as x",
    "attention": "attention(q, k, v, mask=None, scale=None) -> (..., n_q, d_v)",
    "multi_head_attention": "multi_head_attention(x_q, x_kv, params, mask=None) -> (batch, n_q, d_model)",
    "positional_encoding": "positional_encoding(n_positions, d_model) -> (n_positions, d_model)",
    "layer_norm": "layer_norm(x, gamma, beta, eps) -> same shape as x",
    "feed_forward": "feed_forward(x, params) -> same shape as x",
    "encoder_layer": "encoder_layer(x, params, mask=None) -> (batch, n, d_model)",
    "decoder_layer": "decoder_layer(y, memory, params, self_mask=None, memory_mask=None) -> (batch, n_t, d_model)",
}


def _arg(args: tuple, kwargs: dict, index: int, name: str):
    if name in kwargs:
        return kwargs[name]
    if len(args) > index:
        return args[index]
    return None


def _shape(a) -> tuple[int, ...]:
    return tuple(np.shape(a))


def expected_shape(capability: str, args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    """The output shape the protocol requires for this call, or None when it cannot be stated."""
    if capability in ("softmax", "layer_norm", "feed_forward"):
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "attention":
        q, k, v = (_arg(args, kwargs, i, n) for i, n in enumerate(("q", "k", "v")))
        batch = np.broadcast_shapes(_shape(q)[:-2], _shape(k)[:-2], _shape(v)[:-2])
        return tuple(batch) + (_shape(q)[-2], _shape(v)[-1])
    if capability == "multi_head_attention":
        x_q = _arg(args, kwargs, 0, "x_q")
        return _shape(x_q)
    if capability == "positional_encoding":
        return (int(_arg(args, kwargs, 0, "n_positions")), int(_arg(args, kwargs, 1, "d_model")))
    if capability == "encoder_layer":
        return _shape(_arg(args, kwargs, 0, "x"))
    if capability == "decoder_layer":
        return _shape(_arg(args, kwargs, 0, "y"))
    return None


# --- declared variants --------------------------------------------------------------------------
# An implementation may carry ``variants = {...}``: what it supports where real implementations
# legitimately differ (a Post-LN-only layer, a self-attention-only module, even head dimensions
# only). The strategies draw only supported configurations, and a test that needs an unsupported
# one is "not applicable (variant ...)" for it, never a failure. A key it does not declare takes
# the default, which is the most general behaviour the protocol describes.

@dataclass(frozen=True)
class Variant:
    """One declarable variant: its default and the values an implementation may declare."""

    default: Any
    doc: str
    choices: tuple = ()          # allowed values (for tuple-valued variants: allowed members)
    multi: bool = False          # the value is a tuple of supported members (e.g. norm_first)

    def validate(self, key: str, value: Any) -> Any:
        if self.multi:
            values = tuple(value) if isinstance(value, (tuple, list, set, frozenset)) else (value,)
            bad = [v for v in values if v not in self.choices]
            if bad or not values:
                raise ValueError(f"variants[{key!r}]={value!r}, but should be a non-empty tuple of {self.choices}")
            return values
        if value not in self.choices:
            raise ValueError(f"variants[{key!r}]={value!r}, but should be one of {self.choices}")
        return value


VARIANTS: dict[str, Variant] = {
    "norm_first": Variant((False, True), "layer placements the encoder/decoder layers support: False = Post-LN "
                          "LN(x + Sublayer(x)), the article's; True = Pre-LN x + Sublayer(LN(x))",
                          choices=(False, True), multi=True),
    "cross_attention": Variant(True, "multi_head_attention accepts x_kv different from x_q (False: "
                               "self-attention only; it is called with x_kv is x_q)", choices=(True, False)),
    "head_dim": Variant("any", "head dimensions d_k = d_model / num_heads it accepts", choices=("any", "even")),
}


def declared_variants(impl) -> dict[str, Any]:
    """Every variant of :data:`VARIANTS` for ``impl``: its declaration, validated, or the default.

    Raises ValueError (one line) for a key that is not a variant or a value it cannot take."""
    declared = getattr(impl, "variants", None) or {}
    if not isinstance(declared, dict):
        raise ValueError(f"variants={declared!r}, but should be a dict (keys: {', '.join(VARIANTS)})")
    unknown = sorted(set(declared) - set(VARIANTS))
    if unknown:
        raise ValueError(f"variants has unknown key(s) {unknown}; known: {', '.join(VARIANTS)}")
    return {k: (spec.validate(k, declared[k]) if k in declared else spec.default) for k, spec in VARIANTS.items()}
