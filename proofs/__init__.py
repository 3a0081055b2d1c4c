"""Sympy derivations (being written)."""
