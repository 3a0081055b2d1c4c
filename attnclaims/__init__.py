"""attnclaims: verify the claims of "从注意力机制到 Transformer" and validate
attention implementations against them.

Layout (see docs/design.md): ``attnclaims.spec`` holds the claim registry,
``attnclaims.reference`` the numpy float64 reference implementation,
``attnclaims.proofs`` the sympy derivations, ``attnclaims.suite`` the
hypothesis property tests, and this package the harness (registry loader,
guarded implementation calls, pytest plugin, runner, verdicts, report, CLI).
"""
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("attnclaims")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0.0.0+checkout"

__all__ = ["__version__"]
