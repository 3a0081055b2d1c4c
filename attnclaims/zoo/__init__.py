"""The zoo: implementations that are not the reference. Three correct styles written independently
(einsum, explicit loops, log-domain), single-bug mutants of them, and misbehaving implementations
(hangs, crashes, wrong types) that the harness must survive. Used by the meta tests, the negative
controls of the claim suite and ``attnclaims mutants``.

* ``einsum_style.py``, ``loops_style.py``, ``logsumexp_style.py``: one file per correct style, holding its
  whole implementation (forward, backward, the modern components); ``reduced_precision.py``: the einsum
  style rounded once to float16 / bfloat16 (the correct 16-bit style);
* ``layer_backward.py``: the layers' and the decoder block's vjps composed by the chain rule from an
  implementation's own sub-layer vjps, shared by the styles and the backward mutants;
* ``mutants/``: the mutant zoo, a module per component (its ``__init__`` builds the catalogue ``MUTANTS``);
* ``broken.py``: the smallest changes a single property test must reject; ``misbehaving.py``: what the
  harness must survive."""
