"""The check library the claim suite is built from: hypothesis strategies, derived tolerances,
per-case measured bounds. Product code, installed with the package; the claim tests in
``attnclaims.suite`` import it, it never imports them."""
