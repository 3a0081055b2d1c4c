"""Implementations that misbehave on purpose, to show that a run survives them (docs/design.md, "Calls
into an implementation are guarded").

Each class is the numpy reference with exactly one misbehaviour, in the capabilities listed in
its ``affected`` attribute (``attention``); every other capability is the reference's and must
keep passing. Against each, a run must finish, fail the checks of the affected claims with a
message that says what happened (``expected``, a fragment of the guard's message), leave the
other claims' results intact and still write its results.

=================  ====================================================  ============================
class              what ``attention`` does                               the guard says
=================  ====================================================  ============================
Raises             raises RuntimeError                                   raised RuntimeError
WrongShape         returns one output column too many                    out.shape=…, but should be …
WrongDtype         returns float32 (declared dtype: float64)             out.dtype=float32
ReturnsNaN         puts NaN in the first output entry                    non-finite values
ReturnsList        returns a nested Python list                          returned builtins.list
MutatesInput       adds 1 to q (or k, v) in place; the result is right   modified its input
Nondeterministic   adds +1e-9 and -1e-9 on alternate calls               different outputs for one input
Hangs              sleeps for an hour                                    did not return within
=================  ====================================================  ============================

Use them as ``--attn-impl attnclaims.zoo.misbehaving:Hangs`` (the class is the
factory); :data:`MISBEHAVING` lists them all.
"""
from __future__ import annotations

import itertools
import time

import numpy as np

from attnclaims.reference.impl import Reference

__all__ = ["Raises", "WrongShape", "WrongDtype", "ReturnsNaN", "ReturnsList", "MutatesInput",
           "Nondeterministic", "Hangs", "MISBEHAVING"]


class _Misbehaving(Reference):
    """The reference whose ``attention`` goes through :meth:`_misbehave`."""

    affected: tuple[str, ...] = ("attention",)
    expected: str = ""

    def _misbehave(self, compute, q, k, v):
        """``compute()`` gives the correct result; return what the misbehaving implementation returns."""
        return compute()

    def attention(self, q, k, v, mask=None, scale=None):
        return self._misbehave(lambda: Reference.attention(self, q, k, v, mask=mask, scale=scale), q, k, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Raises(_Misbehaving):
    """``attention`` raises instead of returning."""

    name = "misbehaving-raises"
    expected = "raised RuntimeError: deliberate failure"

    def _misbehave(self, compute, q, k, v):
        raise RuntimeError("deliberate failure (attnclaims/zoo/misbehaving.py: Raises)")


class WrongShape(_Misbehaving):
    """``attention`` returns (..., n_q, d_v + 1): the first value column once more."""

    name = "misbehaving-wrong-shape"
    expected = "out.shape="

    def _misbehave(self, compute, q, k, v):
        out = compute()
        return np.concatenate([out, out[..., :1]], axis=-1)  # (..., n_q, d_v + 1)


class WrongDtype(_Misbehaving):
    """``attention`` returns float32 while the implementation declares float64."""

    name = "misbehaving-wrong-dtype"
    expected = "out.dtype=float32, but should be float64"

    def _misbehave(self, compute, q, k, v):
        return compute().astype(np.float32)


class ReturnsNaN(_Misbehaving):
    """``attention`` returns NaN in its first entry."""

    name = "misbehaving-nan"
    expected = "non-finite values"

    def _misbehave(self, compute, q, k, v):
        out = np.array(compute())
        out.flat[:1] = np.nan
        return out


class ReturnsList(_Misbehaving):
    """``attention`` returns a nested Python list instead of an ndarray."""

    name = "misbehaving-list"
    expected = "returned builtins.list, but should be numpy.ndarray"

    def _misbehave(self, compute, q, k, v):
        return compute().tolist()


class MutatesInput(_Misbehaving):
    """``attention`` returns the right result but adds 1 in place to its first writable input (q, k or v)."""

    name = "misbehaving-mutates-input"
    expected = "modified its input"

    def _misbehave(self, compute, q, k, v):
        out = compute()
        for a in (q, k, v):
            if isinstance(a, np.ndarray) and a.flags.writeable and a.size:
                a += 1.0
                return out
        # read-only views cannot be modified: fail loudly rather than pass silently
        raise RuntimeError("MutatesInput got only read-only inputs and could not modify them")


class Nondeterministic(_Misbehaving):
    """``attention`` adds +1e-9 and −1e-9 on alternate calls, so two calls on one input differ."""

    name = "misbehaving-nondeterministic"
    expected = "returned different outputs for the same input"

    def __init__(self):
        self._signs = itertools.cycle((1.0, -1.0))

    def _misbehave(self, compute, q, k, v):
        return compute() + next(self._signs) * 1e-9


class Hangs(_Misbehaving):
    """``attention`` never returns (sleeps for an hour); the guard's per-call time limit cuts it off."""

    name = "misbehaving-hangs"
    expected = "did not return within"

    def _misbehave(self, compute, q, k, v):
        time.sleep(3600)
        return compute()


#: class name -> class, in the order of the table above
MISBEHAVING: dict[str, type[_Misbehaving]] = {
    cls.__name__: cls for cls in (Raises, WrongShape, WrongDtype, ReturnsNaN, ReturnsList, MutatesInput,
                                  Nondeterministic, Hangs)
}
