"""The mutant zoo: correct implementations with exactly one realistic bug each.

Every mutant is a small subclass of :class:`Composed` (:mod:`attnclaims.zoo.mutants.base`), which is the
reference (:class:`attnclaims.reference.impl.Reference`) rebuilt so that each capability calls the lower ones
*of the same object*: the encoder layer calls ``self.multi_head_attention``, ``self.layer_norm`` and
``self.feed_forward``, multi-head attention calls ``self.attention``, attention calls the masked softmax of
``self``. A bug planted in one place therefore travels upwards the way it does in a real code base, and each
mutant overrides one small method and changes one thing in it.

``MUTANTS`` maps a name to a :class:`Mutant`: its one-line description, the capability that holds the bug,
the claim ids whose tests should catch it, and its factory. Each mutant is also an attribute of this package
under its name, so the harness resolves it as ``attnclaims.zoo.mutants:<name>``.
``python -m attnclaims mutants`` (see :mod:`attnclaims.mutants`) runs the property tests against each one
and prints the kill matrix.

The package is built in one direction, with no module importing another to register:

* :mod:`~attnclaims.zoo.mutants.catalogue`: ``MUTANTS``, :class:`Mutant` and the decorator :func:`mutant`;
* :mod:`~attnclaims.zoo.mutants.base`: the correct base :class:`Composed` (with its modern part,
  :class:`~attnclaims.zoo.mutants.base.ModernComposition`);
* one module per component, each importing only the two above and holding the forward mutants of that
  component: :mod:`~attnclaims.zoo.mutants.attention` (scaling, scores, softmax, masks, causal alignment and
  windows, the contract, the protocol's edges), :mod:`~attnclaims.zoo.mutants.multihead` (heads,
  projections, grouped-query attention), :mod:`~attnclaims.zoo.mutants.norms` (layer norm, RMSNorm),
  :mod:`~attnclaims.zoo.mutants.ffn` (ReLU FFN, gated FFNs), :mod:`~attnclaims.zoo.mutants.positional`
  (sinusoidal encoding, RoPE), :mod:`~attnclaims.zoo.mutants.layers` (encoder and decoder layers,
  decoder-only blocks, KV-cache decoding), :mod:`~attnclaims.zoo.mutants.scores` (the kernel features: the
  returned log-sum-exp, logit soft-capping, ALiBi, softmax over several axes);
* :mod:`~attnclaims.zoo.mutants.packed`: packed (varlen) and paged attention's mutants (sequence boundaries,
  cu_seqlens, the causal alignment inside a sequence; the block table, partial last pages);
* :mod:`~attnclaims.zoo.mutants.tiled`: the block-tiled kernel's mutants, whose correct base is the tiled
  style :class:`attnclaims.zoo.tiled_style.TiledImplementation` instead of :class:`Composed` (it imports the
  catalogue and that style only);
* :mod:`~attnclaims.zoo.mutants.precision`: the 16-bit mutants (a bug of the reduced dtype, whatever the
  component);
* :mod:`~attnclaims.zoo.mutants.backward`: the backward passes' mutants of every component, on their own
  correct base (:class:`~attnclaims.zoo.mutants.backward.BackwardComposed`, which adds vjps composed through
  ``self``, and :class:`~attnclaims.zoo.mutants.backward.ModernBackwardComposed`), with the negative controls
  of the structural gradient tests.

This ``__init__`` imports the article's components (attention … layers), tiled, precision and backward, then
the kernel features (scores) and packed, so ``MUTANTS`` lists the mutants component by component.

The bugs are meant to be found the hard way: most are invisible on the easy inputs (one head, one batch
element, short sequences, square masks, γ = 1 and β = 0, scores of moderate size) and show only on the edge
cases the strategies are supposed to draw.
"""
from __future__ import annotations

from attnclaims.zoo.mutants.base import Composed, composed
from attnclaims.zoo.mutants.catalogue import MUTANTS, Mutant, mutant
from attnclaims.zoo.mutants import attention, multihead, norms, ffn, positional, layers, tiled, precision, backward
from attnclaims.zoo.mutants import scores, packed

__all__ = ["Mutant", "MUTANTS", "Composed", "composed", "mutant", "COMPONENTS"]

#: the modules that fill ``MUTANTS``, in the catalogue's order
COMPONENTS = (attention, multihead, norms, ffn, positional, layers, tiled, precision, backward, scores, packed)

_clashes = sorted(set(MUTANTS) & set(globals()))
if _clashes:
    raise ValueError(f"mutant names that are already attributes of {__name__}: {_clashes}")
# each mutant as an attribute of the package (``attnclaims.zoo.mutants:<name>``)
globals().update({name: m.factory for name, m in MUTANTS.items()})
del _clashes
