"""Sympy derivations, one module per claim (docs/design.md, "Data flow").

Every module has ``CLAIM = "<claim id>"`` and ``derivations()`` returning its
:class:`~attnclaims.proofs.core.Derivation` objects; ``check()`` on each gives
a :class:`~attnclaims.proofs.core.ProofResult`.
"""

from __future__ import annotations

import importlib

from .core import Derivation, Lemma, ProofResult, Step, StepResult

MODULES = (
    "scaling_variance",
    "softmax_saturation",
    "softmax_distribution",
    "convex_combination",
    "interpretability",
    "seq2seq_bottleneck",
    "rnn_gradients",
    "rnn_sequential",
    "multihead_structure",
    "permutation_equivariance",
    "positional_encoding",
    "layer_norm",
    "residual_gradient",
    "paper_tables",
)


#: Modules whose derivations extend an existing claim to a component the article predates (their
#: ``CLAIM`` is that claim's id, their name the extension's): grouped-query attention
#: (multihead-structure), rotary position embeddings and ALiBi (positional-encoding), and the split-KV
#: combine by the returned log-sum-exp (softmax-distribution).
EXTENSION_MODULES = (
    "gqa",
    "rope",
    "alibi",
    "split_kv",
)


def modules():
    """The proof modules, imported (sympy is loaded on first use)."""
    return [importlib.import_module(f"{__name__}.{m}") for m in MODULES]


def extension_modules():
    """The extension modules (:data:`EXTENSION_MODULES`), imported."""
    return [importlib.import_module(f"{__name__}.{m}") for m in EXTENSION_MODULES]


def all_derivations() -> list[Derivation]:
    """Every derivation of every proof module, in module order, then those of the extension modules."""
    return [d for mod in modules() + extension_modules() for d in mod.derivations()]


def claims() -> list[str]:
    """Claim ids that have a derivation."""
    return [mod.CLAIM for mod in modules()]


def derivations_for(claim_id: str) -> list[Derivation]:
    """The derivations backing ``claim_id`` (KeyError if no module proves it)."""
    name = claim_id.replace("-", "_")  # module name = claim id with '-' -> '_'
    if name in MODULES:
        mod = importlib.import_module(f"{__name__}.{name}")
        if mod.CLAIM == claim_id:
            return list(mod.derivations()) + [d for ext in extension_modules() if ext.CLAIM == claim_id
                                              for d in ext.derivations()]
    raise KeyError(f"no derivation for claim {claim_id!r}; claims with derivations: {claims()}")


__all__ = [
    "Derivation",
    "Lemma",
    "ProofResult",
    "Step",
    "StepResult",
    "MODULES",
    "EXTENSION_MODULES",
    "modules",
    "extension_modules",
    "all_derivations",
    "claims",
    "derivations_for",
]
