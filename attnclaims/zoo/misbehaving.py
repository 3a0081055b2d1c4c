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
RaisingProperty    is a property whose lookup raises ValueError          looking up the capability raised
=================  ====================================================  ============================

Use them as ``--attn-impl attnclaims.zoo.misbehaving:Hangs`` (the class is the
factory); :data:`MISBEHAVING` lists them all.

:data:`PROCESS_LEVEL` lists the ones that misbehave towards the *process* rather than the call, each
with what a run must do about it (``outcome``): finish with every check passing although a thread
that is not a daemon never ends (``ThreadInMethod``, ``ThreadInConstructor``); end within a bound
derived from the per-call limit although the call never releases the GIL, the check failing with
the call named (``HoldsGIL``); be scored as partial, never as passed, when the call stops the test
session (``Interrupts``: KeyboardInterrupt) or the process (``ExitsProcess``: ``os._exit(0)``).
What happens at import time (a thread, ``sys.exit``, ``os.chdir``, a hang) needs a module of its
own; the meta tests write those into a temporary folder.

:data:`BUYS_A_VERDICT` lists the ones that try to pass checks they should fail by reaching what the
test computes its expected value from, or by keeping state between calls (tests/run/test_hostile_implementations.py):
``ChangesItsParams`` sets a field of its frozen params (``object.__setattr__(params, "eps", 0.5)``) and
computes with the changed object, ``ChangesParamsLater`` keeps the params it was given and changes them
during its next call, ``KeepsItsOwnCache`` has a ``decoder_block_step`` that ignores the cache it is
handed and uses the keys and values it kept itself (right whenever one sequence is decoded in order).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time

import numpy as np

from attnclaims.reference.impl import Reference

__all__ = ["Raises", "WrongShape", "WrongDtype", "ReturnsNaN", "ReturnsList", "MutatesInput",
           "Nondeterministic", "Hangs", "RaisingProperty", "MISBEHAVING", "ThreadInMethod", "ThreadInConstructor",
           "HoldsGIL", "Interrupts", "ExitsProcess", "PROCESS_LEVEL", "ChangesItsParams", "ChangesParamsLater",
           "KeepsItsOwnCache", "BUYS_A_VERDICT"]


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


class RaisingProperty(_Misbehaving):
    """``attention`` is a property whose lookup raises (anything but AttributeError): the capability is
    declared, its checks fail with the lookup's error, and every other result is still written."""

    name = "misbehaving-raising-property"
    expected = "looking up the capability raised ValueError: deliberate failure"

    @property
    def attention(self):
        raise ValueError("deliberate failure (attnclaims/zoo/misbehaving.py: RaisingProperty)")


#: class name -> class, in the order of the table above
MISBEHAVING: dict[str, type[_Misbehaving]] = {
    cls.__name__: cls for cls in (Raises, WrongShape, WrongDtype, ReturnsNaN, ReturnsList, MutatesInput,
                                  Nondeterministic, Hangs, RaisingProperty)
}


def _sleeper() -> threading.Thread:
    """A thread that is not a daemon and sleeps for ~11 days: interpreter shutdown would wait for it."""
    thread = threading.Thread(target=time.sleep, args=(1e6,), name="misbehaving-sleeper", daemon=False)
    thread.start()
    return thread


class ThreadInMethod(_Misbehaving):
    """``attention`` returns the right result and starts a thread that is not a daemon and never ends."""

    name = "misbehaving-thread-in-method"
    outcome = "every check passes and the run ends"

    def _misbehave(self, compute, q, k, v):
        _sleeper()
        return compute()


class ThreadInConstructor(_Misbehaving):
    """The constructor starts a thread that is not a daemon and never ends; every method is correct."""

    name = "misbehaving-thread-in-constructor"
    outcome = "every check passes and the run ends"

    def __init__(self):
        self._thread = _sleeper()


class HoldsGIL(_Misbehaving):
    """``attention`` never returns and never releases the GIL (a C-level loop, as a C/C++/Rust extension
    that does not release it would): the thread-based time limit cannot see it, the watchdog must."""

    name = "misbehaving-holds-gil"
    outcome = "the run ends within the call limit plus the watchdog's grace; the check fails naming the call"
    expected = "never released the interpreter (GIL)"

    def _misbehave(self, compute, q, k, v):
        sum(itertools.repeat(1))  # a loop inside sum(): no bytecode boundary, the GIL is never released
        return compute()


class Interrupts(_Misbehaving):
    """``attention`` raises KeyboardInterrupt, which makes pytest stop the whole session."""

    name = "misbehaving-interrupts"
    outcome = "the run is partial: claims with tests that did not run are errors, never passes"

    def _misbehave(self, compute, q, k, v):
        raise KeyboardInterrupt("deliberate interrupt (attnclaims/zoo/misbehaving.py: Interrupts)")


class ExitsProcess(_Misbehaving):
    """``attention`` ends its process with status 0 (``os._exit(0)``): no exception, no pytest summary."""

    name = "misbehaving-exits-process"
    outcome = "the run is partial: claims with tests that did not run are errors, never passes"

    def _misbehave(self, compute, q, k, v):
        os._exit(0)


#: class name -> class: misbehaviour towards the process (see the module's docstring)
PROCESS_LEVEL: dict[str, type[_Misbehaving]] = {
    cls.__name__: cls for cls in (ThreadInMethod, ThreadInConstructor, HoldsGIL, Interrupts, ExitsProcess)
}


# -- implementations that try to buy a verdict ------------------------------------------------------

class ChangesItsParams(Reference):
    """``encoder_layer`` sets ``params.eps`` to 0.5 on the (frozen) params it is given and computes with it: if
    the test computed its expected value from the same object afterwards, the wrong layer would match."""

    name = "misbehaving-changes-its-params"
    affected = ("encoder_layer",)
    expected = "modified its input #2 in place: eps was "

    def encoder_layer(self, x, params, mask=None):
        object.__setattr__(params, "eps", 0.5)
        return Reference.encoder_layer(self, x, params, mask=mask)


class ChangesParamsLater(Reference):
    """``encoder_layer`` keeps the params of each call and, during the next call, sets ``eps`` of the kept one
    to 0.5 — after the guard compared that call's inputs — then computes with ε = 0.5 throughout."""

    name = "misbehaving-changes-params-later"
    affected = ("encoder_layer",)

    def __init__(self):
        self._kept = None

    def encoder_layer(self, x, params, mask=None):
        if self._kept is not None:
            object.__setattr__(self._kept, "eps", 0.5)
        self._kept = params
        return Reference.encoder_layer(self, x, dataclasses.replace(params, eps=0.5), mask=mask)


class KeepsItsOwnCache(Reference):
    """``decoder_block_step`` ignores the cache it is handed: it keeps the keys and values it computed, cut at
    ``position`` (so one sequence decoded in order, and a call repeated with the same inputs, give the right
    outputs and caches), and steps against those. Two sequences decoded in turn, or a step replayed from an
    earlier cache with other tokens, expose it."""

    name = "misbehaving-keeps-its-own-cache"
    affected = ("decoder_block_step",)

    def __init__(self):
        self._kv = None

    def decoder_block_step(self, x_t, cache, params, position):
        from attnclaims.reference.layers import KVCache

        own = None
        if position and self._kv is not None and self._kv[0].shape[-2] >= position:
            own = KVCache(self._kv[0][..., :position, :], self._kv[1][..., :position, :])
        elif position:
            own = cache  # nothing kept that long yet (a new test case): start from the one handed
        y, new = Reference.decoder_block_step(self, x_t, own, params, position)
        self._kv = (new.k, new.v)
        return y, new


#: class name -> class: implementations that try to buy a verdict (see the module's docstring)
BUYS_A_VERDICT: dict[str, type] = {
    cls.__name__: cls for cls in (ChangesItsParams, ChangesParamsLater, KeepsItsOwnCache)
}
