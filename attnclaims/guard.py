"""Guarded calls into an implementation under test.

Every call goes through :class:`GuardedImplementation`, which turns the ways an
implementation can misbehave into a failed check with a clear one-line
message instead of a crash or a hang:

* an exception                      -> ``attention raised ZeroDivisionError: ...``
* a result that is not an ndarray   -> ``attention returned list, but should be numpy.ndarray``
* a wrong shape or dtype            -> ``out.shape=(2, 3), but should be (2, 4)``
* NaN or inf where finite is needed -> ``out has 3 non-finite values (first at index (0, 1): nan) for inputs
  of shapes (1, 3, 1), (1,), (1,)``
* an input modified in place        -> ``modified its input 'q' in place``
  (every array and every field of every params object: the implementation is handed private
  copies, so the test's own inputs, and the expected values computed from them, cannot change)
* different outputs for one input   -> ``returned different outputs for the same input``
* no answer within the time limit   -> ``did not return within 20 s`` (a call that holds the GIL
  past it ends the process: :class:`Watchdog`)
* a capability whose lookup raises  -> ``looking up the capability raised ValueError: ...``
* numpy, scipy or math functions replaced (a "fast exp" patched into ``np.exp``, a profiler's
  wrappers), during a call or when the implementation was imported or constructed
                                    -> ``replaced numpy.exp during the call (…); the originals are restored``

The last one protects the golden results: the reference oracle runs in the same process, after
the implementation's call, and would otherwise compute with the implementation's functions.
:class:`LibraryGuard` snapshots the public callables of :data:`WATCHED_MODULES` when this module
is imported (before any implementation is), compares after every call (a dictionary comparison,
~15 µs), puts the originals back and fails the check, naming what was replaced.

A capability the implementation lacks raises :class:`NotApplicable`, which
the pytest plugin reports as "not applicable: <impl> has no <capability>"; so does a method that
raises ``NotImplementedError`` or :class:`NotApplicable` itself (with its message: a method may
support only some inputs). Messages are capped at :data:`attnclaims.evidence.MESSAGE_CAP`
characters, with the full size noted.
"""
from __future__ import annotations

import copy
import dataclasses
import faulthandler
import os
import queue
import signal
import sys
import threading
from collections import deque
from typing import Any

import numpy as np

from attnclaims import declines
from attnclaims.evidence import cap_text, plain
from attnclaims.protocol import CAPABILITIES, STRUCTURED_OUTPUTS, expected_shape

#: The limit of one guarded call into an implementation, seconds (``--attn-call-timeout``; the kill
#: matrix's per-mutant limit is :data:`attnclaims.mutants.MUTANT_TIMEOUT_S`).
CALL_TIMEOUT_S = 20.0
#: Determinism is checked on the first two calls of each capability and then on every 8th:
#: a bug that adds noise shows on the first call, and the check costs ~15% of the calls.
DETERMINISM_EVERY = 8
_REPRO_MAX_CHARS = 40_000


class CheckFailure(AssertionError):
    """A failed check. ``measured``/``bound`` are set by tolerance checks (the report shows
    the measured error, the bound and so the smallest tolerance that would have passed)."""

    def __init__(self, message: str, *, capability: str | None = None, measured: float | None = None,
                 bound: float | None = None):
        super().__init__(message)
        self.capability = capability
        self.measured = measured
        self.bound = bound


class NotApplicable(Exception):
    """The check does not apply to the implementation: it lacks a capability the check needs, or
    (``reason=``, a free one-line message) a variant or input the check needs, e.g.
    ``NotApplicable(name, reason="not applicable (variant norm_first=True): X declares norm_first=(False,)")``.
    The message always starts with "not applicable"."""

    def __init__(self, implementation: str, capability: str | None = None, *, reason: str | None = None):
        if reason is None:
            message = f"not applicable: {implementation} has no {capability}"
        else:
            reason = " ".join(str(reason).split())
            message = reason if reason.startswith("not applicable") else f"not applicable: {reason}"
        super().__init__(cap_text(message))
        self.implementation = implementation
        self.capability = capability
        self.reason = reason


#: Modules whose public callables an implementation must not replace (the reference and the
#: golden results use them). Only those that import are watched.
WATCHED_MODULES = ("numpy", "numpy.linalg", "numpy.fft", "math", "cmath", "scipy.special", "scipy.linalg")


class LibraryGuard:
    """A snapshot of the public callables of :data:`WATCHED_MODULES`; :meth:`restore` puts back any
    that were replaced and names them."""

    def __init__(self):
        import importlib

        self._modules = {}
        for name in WATCHED_MODULES:
            try:
                self._modules[name] = importlib.import_module(name)
            except ImportError:  # scipy is a dependency, but a trimmed environment may lack a submodule
                continue
        self._callables = {name: {k: v for k, v in vars(mod).items() if not k.startswith("_") and callable(v)}
                           for name, mod in self._modules.items()}
        self._dicts = {name: dict(vars(mod)) for name, mod in self._modules.items()}

    def _unchanged(self) -> bool:
        try:
            return all(vars(mod) == self._dicts[name] for name, mod in self._modules.items())
        except Exception:  # a replacement whose == raises (an array): look closer
            return False

    def restore(self) -> list[str]:
        """The replaced functions (``numpy.exp``, ...), each put back; [] when none was replaced."""
        if self._unchanged():
            return []
        replaced = []
        for name, mod in self._modules.items():
            current = vars(mod)
            for attr, original in self._callables[name].items():
                if current.get(attr, original) is not original or attr not in current:
                    replaced.append(f"{name}.{attr}")
                    setattr(mod, attr, original)
        if not replaced:  # a harmless change (a submodule loaded lazily): remember it, skip the slow path
            self._dicts = {name: dict(vars(mod)) for name, mod in self._modules.items()}
        return replaced


def _replaced_message(replaced: list[str], when: str) -> str:
    shown = ", ".join(replaced[:8]) + (f" and {len(replaced) - 8} more" if len(replaced) > 8 else "")
    return (f"replaced {shown} {when}: an implementation must not patch numpy, scipy or math (the golden "
            f"results computed in this process would use its functions); the originals are restored")


#: The largest per-call limit accepted (a week): every timer the guard arms takes it.
MAX_CALL_TIMEOUT = 7 * 24 * 3600.0


def call_timeout_arg(text: str) -> float:
    """``--attn-call-timeout``: a finite number of seconds > 0 (at most :data:`MAX_CALL_TIMEOUT`), or 0 for
    no per-call limit. Raises ``argparse.ArgumentTypeError`` (one line) for anything else."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_CALL_TIMEOUT):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of seconds > 0 and "
                                         f"<= {MAX_CALL_TIMEOUT:g} (0 = no per-call limit)")
    return value


#: The state of the watched modules before any implementation was imported.
LIBRARIES = LibraryGuard()


class _Timeout(Exception):
    pass


class Watchdog:
    """Ends the process when one call runs past its limit while holding the interpreter.

    The thread-based time limit (:class:`_Worker`) needs the GIL to notice that a call is late; a
    call into code that never releases it (a C/C++/Rust extension, ``sum(itertools.repeat(1))``)
    would keep it waiting for ever. So each guarded call also arms a C-level timer that needs no GIL:
    ``faulthandler.dump_traceback_later(limit + grace, exit=True)``, which writes the tracebacks and
    exits the process with status 1 when it fires. Before arming, the call's label (test,
    implementation, capability) is written at the start of ``path``, so whoever reads the file
    afterwards (the orchestrator) can say which call it was; the timer is cancelled as soon as the call
    returns. ``path=None`` writes the tracebacks to ``stream`` (stderr), without a label (a plain
    ``pytest --attn-impl`` run).

    With a ``path`` on POSIX the timer is the process's real-time interval timer instead
    (``setitimer(ITIMER_REAL)``), whose SIGALRM faulthandler answers in C (``faulthandler.register``:
    the same tracebacks into the same file, then SIGALRM's default action ends the process): arming and
    cancelling it are one system call each, where ``dump_traceback_later`` starts a thread at every
    arming and joins it at every cancel — about 0.2 ms of CPU per guarded call, some 4 s of a reference
    check's 20,000 calls (bench/README.md, "1. Speed of a verdict"). Only when SIGALRM still has its default
    disposition (nothing else in the process uses it); otherwise, and without a ``path``, the thread.
    """

    def __init__(self, path: str | None, grace: float, stream=None):
        self.path = path
        self.grace = grace
        # kept open for the life of the process: faulthandler writes to its descriptor when it fires
        self._file = open(path, "w+b", buffering=0) if path else (stream or sys.stderr)
        self._length = 0  # of the label in the file (and so the descriptor's offset), after the last arm
        self._alarm = bool(path) and _alarm_free()
        if self._alarm:
            faulthandler.register(signal.SIGALRM, file=self._file, all_threads=True, chain=True)

    @staticmethod
    def grace_for(timeout: float) -> float:
        """Seconds past the limit before the watchdog fires: the thread-based limit answers first
        whenever the GIL is free (it is checked every 5 ms), so this only needs to cover a busy machine."""
        return 2.0 + 0.5 * timeout

    def arm(self, label: str, timeout: float) -> None:
        if self.path:
            # The file holds exactly the label, and the descriptor's offset (where faulthandler writes)
            # stands at its end. A label of the previous one's length (the calls of one test) is one
            # pwrite over it, the offset already in place; otherwise written from the start and, when
            # shorter, the file cut to it (ftruncate is the costly call: ~10 µs on this machine's disk).
            text = f"call: {label}\nlimit: {timeout:g}\n".encode("utf-8", "replace")
            fd = self._file.fileno()
            if len(text) == self._length:
                os.pwrite(fd, text, 0)
            else:
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, text)
                if len(text) < self._length:
                    os.ftruncate(fd, len(text))
                self._length = len(text)
        if self._alarm:
            signal.setitimer(signal.ITIMER_REAL, timeout + self.grace)
        else:
            faulthandler.dump_traceback_later(timeout + self.grace, exit=True, file=self._file)

    def disarm(self) -> None:
        if self._alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
        else:
            faulthandler.cancel_dump_traceback_later()

    #: how faulthandler's tracebacks start: the timer thread's "Timeout (0:00:32)!", or the thread list of
    #: a SIGALRM dump ("Current thread 0x…" / "Thread 0x…", all threads)
    FIRED = ("Timeout (", "Current thread 0x", "Thread 0x")

    @staticmethod
    def read(path: str) -> dict | None:
        """``{"call", "limit", "traceback"}`` when the watchdog fired into ``path``, else None: tracebacks right
        after the label's last line (``limit: …``)."""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return None
        head, sep, rest = text.rpartition("\nlimit: ")
        limit, _, tb = rest.partition("\n")
        if not sep or not tb.startswith(Watchdog.FIRED):
            return None
        call = head.partition("call: ")[2] if head.startswith("call: ") else ""
        return {"call": call, "limit": limit, "traceback": tb}


def _alarm_free() -> bool:
    """Whether the interval timer can serve the watchdog: POSIX ``setitimer`` and SIGALRM's default
    disposition (so that, after faulthandler's tracebacks, the signal ends the process)."""
    if not hasattr(signal, "setitimer"):
        return False
    try:
        return signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    except (ValueError, OSError):
        return False


class _Worker:
    """One daemon thread that runs calls, so that a call that never returns can be abandoned.

    The jobs go through a ``queue.SimpleQueue`` and each call's end is a plain lock released by the
    thread (the caller waits on it with the limit, as ``threading.Event.wait`` would, without the
    Python-level condition around it): ~15 µs of CPU per call instead of ~22 µs."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, daemon=True, name="attnclaims-call").start()

    def _loop(self):
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            done.release()

    def run(self, fn, timeout: float, label: str = "", watchdog: Watchdog | None = None):
        box: list = []
        done = threading.Lock()
        done.acquire()  # released by the thread when the call has ended
        if watchdog is not None:
            watchdog.arm(label, timeout)
        try:
            self._jobs.put((fn, box, done))
            if not done.acquire(True, timeout):
                raise _Timeout
        finally:
            if watchdog is not None:
                watchdog.disarm()
        ok, value = box[0]
        if ok:
            return value
        raise value


def _copy_array(a: np.ndarray, memo: dict) -> np.ndarray:
    """A copy of ``a`` with its dtype, shape, strides and writeability; arrays that are views of one array
    in the test's inputs are views of one copy in the implementation's (``memo``: the copied roots), so a
    strided view reaches the implementation as a strided view and two arguments that alias still alias.
    One array passed twice (self-attention: ``x_kv is x_q``) is one copy passed twice: identity is part of
    the call (an implementation may rely on it to tell self- from cross-attention)."""
    same = memo.get(("object", id(a)))
    if same is not None:
        return same[1]
    out = _copy_array_once(a, memo)
    memo[("object", id(a))] = (a, out)  # the original kept alive with its copy, so its id is not reused
    return out


def _copy_array_once(a: np.ndarray, memo: dict) -> np.ndarray:
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if (type(a) is not np.ndarray or a.dtype.hasobject or a.size == 0 or root.base is not None
            or not (root.flags.c_contiguous or root.flags.f_contiguous)):
        return a.copy(order="K")  # a subclass, objects, a foreign buffer: a plain copy
    entry = memo.get(id(root))
    if entry is None:
        entry = memo[id(root)] = (root, root.ravel(order="K").copy())  # memory order: byte offsets carry over
    flat = entry[1]
    offset = 0 if root is a else a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    out = np.ndarray(a.shape, dtype=a.dtype, buffer=flat, offset=offset, strides=a.strides)
    if not a.flags.writeable:
        out.flags.writeable = False
    return out


def _private(value, memo: dict | None = None):
    """What the implementation is handed instead of ``value``: arrays copied (:func:`_copy_array`),
    dataclasses (params, ``KVCache``), lists, tuples and dicts rebuilt around private copies of their
    fields, anything else (numbers, strings, None) as it is. The test's own objects never reach the
    implementation, so nothing it does to its inputs — now or after the call — changes what the test
    computes its expected value from; :func:`_difference` compares the copy with the original afterwards."""
    memo = {} if memo is None else memo
    if isinstance(value, np.ndarray):
        return _copy_array(value, memo)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            try:
                out = copy.copy(value)
            except Exception:  # a frozen dataclass with __slots__: copy's setattr raises; fill a bare instance
                out = object.__new__(type(value))
            for f in dataclasses.fields(value):
                object.__setattr__(out, f.name, _private(getattr(value, f.name), memo))
        except Exception:  # a dataclass that cannot be copied at all: handed over as it is
            return value
        return out
    if type(value) in (list, tuple):
        return type(value)(_private(v, memo) for v in value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)._make(_private(v, memo) for v in value)
    if type(value) is dict:
        return {k: _private(v, memo) for k, v in value.items()}
    return value


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal(a, b, equal_nan=True)`` (plain ``array_equal`` where NaN means nothing: strings), with
    a fast path: the same dtype and shape and identical bytes are equal (one comparison in C, ~0.5 µs, where
    ``array_equal`` takes ~15 µs on a small array; the guard compares every input and params field after
    every call). Only when the bytes differ (−0.0 and 0.0, NaNs of other payloads, another dtype) does the
    elementwise comparison decide, as before."""
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and not a.dtype.hasobject and a.tobytes() == b.tobytes():
        return True
    try:  # NaN = NaN in every floating dtype (bfloat16's kind is "V")
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # strings, objects: no NaN
        return bool(np.array_equal(a, b))


def _same_vjp_output(a, b) -> bool:
    """Equal outputs of a ``*_vjp`` call: arrays bit for bit (NaN = NaN), tuples and dataclasses field by field."""
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and _equal(a, b)
    if dataclasses.is_dataclass(b) and not isinstance(b, type):
        return type(a) is type(b) and all(_same_vjp_output(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(b))
    if isinstance(b, (list, tuple)):
        return isinstance(a, type(b)) and len(a) == len(b) and all(_same_vjp_output(x, y) for x, y in zip(a, b))
    return a == b


def _short(value) -> str:
    text = " ".join(plain(value).split())  # a numpy scalar as its number (1e-05, not np.float64(1e-05))
    return text if len(text) <= 60 else text[:57] + "..."


def _difference(original, given, path: str = "") -> str | None:
    """None when ``given`` (the implementation's copy, after the call) still equals ``original`` (the test's
    object) in every array, field and element, types included; else where and how it differs ("" for a
    top-level array). Arrays bit for bit (NaN = NaN); other leaves (eps, num_heads, norm_first, the RoPE
    base and layout) by type and ``==``."""
    where = path or "it"
    if isinstance(original, np.ndarray):
        if not isinstance(given, np.ndarray):
            return f"{where} was replaced by {type(given).__qualname__}"
        if given.shape != original.shape or given.dtype != original.dtype:
            return f"{where} changed from {original.dtype}{list(original.shape)} to {given.dtype}{list(given.shape)}"
        return None if _equal(original, given) else (f"the values of {path} changed" if path else "")
    if type(given) is not type(original):
        return f"{where} was {_short(original)}, is {type(given).__qualname__} {_short(given)}"
    if dataclasses.is_dataclass(original) and not isinstance(original, type):
        for f in dataclasses.fields(original):
            try:
                now = getattr(given, f.name)
            except Exception as exc:  # deleted with object.__delattr__, or a property that raises
                return f"{path}.{f.name} can no longer be read ({type(exc).__name__})".lstrip(".")
            found = _difference(getattr(original, f.name), now, f"{path}.{f.name}".lstrip("."))
            if found is not None:
                return found
        return None
    if isinstance(original, (list, tuple)):
        if len(given) != len(original):
            return f"{where} had {len(original)} items, has {len(given)}"
        for i, (o, g) in enumerate(zip(original, given)):
            found = _difference(o, g, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(original, dict):
        if set(given) != set(original):
            return f"{where} had the keys {sorted(map(str, original))}, has {sorted(map(str, given))}"
        for k in original:
            found = _difference(original[k], given[k], f"{path}[{k!r}]")
            if found is not None:
                return found
        return None
    if given is original:
        return None
    try:
        same = bool(original == given) or (original != original and given != given)  # NaN = NaN
    except Exception:  # an object whose == raises
        same = False
    return None if same else f"{where} was {_short(original)}, is {_short(given)}"


def _input_shapes(args: tuple, kwargs: dict) -> str:
    """The shapes of a call's array arguments, in order: ``(1, 3, 1), (1,), (1,)``."""
    return ", ".join(str(tuple(a.shape)) for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray))


def format_call(capability: str, args: tuple, kwargs: dict) -> str:
    """Python source that makes this call on ``impl``: exact floats (shortest round-trip repr)."""
    with np.printoptions(precision=17, floatmode="unique", threshold=sys.maxsize, linewidth=120):
        parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"impl.{capability}({', '.join(parts)})"


class GuardedImplementation:
    """Wraps an implementation object; capability methods are reached as attributes.

    ``guarded.attention(q, k, v)`` requires a finite result; ``guarded.call("attention", q, k, v,
    finite=False)`` allows NaN/inf (used by the convention probes).
    """

    def __init__(self, impl: Any, *, spec: str | None = None, timeout: float | None = CALL_TIMEOUT_S):
        self.impl = impl
        self.name = str(getattr(impl, "name", type(impl).__name__))
        self.spec = spec or self.name  # what resolves it again: "reference", "torch", "pkg.mod:attr"
        self.dtype = np.dtype(getattr(impl, "dtype", np.float64))
        self.timeout = timeout
        self.calls = 0
        # (capability, args, kwargs) of the last calls, formatted only when a repro is asked for: formatting
        # every call's arrays eagerly cost more than the calls themselves. Arrays are the pre-call copies.
        self.recent: deque[tuple[str, tuple, dict]] = deque(maxlen=3)
        self.context = ""  # set by the pytest plugin: the claim ids of the running test
        self._per_capability: dict[str, int] = {}
        self._hung: set[str] = set()
        self._worker = _Worker() if timeout else None
        # An implementation that patched numpy/scipy/math when it was imported or constructed: the
        # originals are back now, and every call fails with this message (its checks cannot be trusted).
        replaced = LIBRARIES.restore()
        self.patched = _replaced_message(replaced, "when it was imported or constructed") if replaced else ""

    def __repr__(self) -> str:
        return f"<implementation {self.name!r}>"

    # -- capabilities -------------------------------------------------------------------------
    def has(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r} (expected one of {', '.join(CAPABILITIES)})")
        try:
            return callable(getattr(self.impl, capability, None))
        except Exception:  # a property that raises: the capability is declared; calling it fails the check
            return True

    def require(self, *capabilities: str) -> None:
        for cap in capabilities:
            if not self.has(cap):
                raise NotApplicable(self.name, cap)

    def __getattr__(self, capability: str):
        if capability in CAPABILITIES:
            return lambda *args, **kwargs: self.call(capability, *args, **kwargs)
        raise AttributeError(capability)

    def begin_test(self, context: str) -> None:
        self.context = context
        self.calls = 0
        self.recent.clear()

    def repro(self) -> str | None:
        """A few lines of Python that re-run the last calls of the failing (shrunk) example."""
        if not self.recent:
            return None
        lines = [
            "import numpy as np",
            "from numpy import array, float64, float32, int64",
            "from attnclaims.reference.params import *",
            "from attnclaims.reference.layers import KVCache",
            "from attnclaims.impls import resolve",
            f"impl = resolve({self.spec!r})",
        ]
        for capability, args, kwargs in self.recent:
            text = format_call(capability, args, kwargs)
            lines.append(f"print({text})" if len(text) <= _REPRO_MAX_CHARS
                         else f"# input too large to inline ({len(text)} characters)")
        return "\n".join(lines)

    # -- the guarded call ---------------------------------------------------------------------
    def _fail(self, capability: str, msg: str, **extra) -> CheckFailure:
        where = f"{self.context} · " if self.context else ""
        return CheckFailure(cap_text(f"{where}{self.name} · {capability}: {msg}"), capability=capability, **extra)

    def _watched(self, capability: str, fn, args, kwargs):
        """:meth:`_invoke`, then the library check (replaced numpy/scipy/math functions are put back
        and fail the check); a method that raised NotImplementedError or NotApplicable is not applicable."""
        if self.patched:
            raise self._fail(capability, self.patched)
        try:
            out = self._invoke(capability, fn, args, kwargs)
            declines.returned()
        except CheckFailure as exc:
            replaced = LIBRARIES.restore()
            if replaced:
                raise self._fail(capability, _replaced_message(replaced, "during the call")) from None
            cause = exc.__cause__
            declined = None
            if isinstance(cause, NotApplicable):
                declined = NotApplicable(self.name, capability, reason=str(cause))
            elif isinstance(cause, NotImplementedError):
                detail = " ".join(str(cause).split())
                declined = NotApplicable(self.name, capability, reason=(
                    f"not applicable: {self.name} · {capability} raised NotImplementedError"
                    + (f": {detail}" if detail else "")))
            if declined is not None:
                # inside a hypothesis example: counted and rejected, the test goes on (attnclaims.declines)
                declines.decline(str(declined))
                raise declined from None
            raise
        replaced = LIBRARIES.restore()
        if replaced:
            raise self._fail(capability, _replaced_message(replaced, "during the call"))
        return out

    def _invoke(self, capability: str, fn, args, kwargs):
        problem, cause = "", None
        if capability in self._hung:  # fail the same way as the first time, so hypothesis sees one bug
            problem = f"did not return within {self.timeout:g} s"
        elif self._worker is None:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                problem, cause = f"raised {type(exc).__name__}: {exc}", exc
        else:
            try:
                return self._worker.run(lambda: fn(*args, **kwargs), self.timeout,
                                        label=f"{self.context} · {self.name} · {capability}".lstrip(" ·"),
                                        watchdog=getattr(self, "watchdog", None))
            except _Timeout:
                self._hung.add(capability)
                self._worker = _Worker()  # the old thread stays blocked; it is a daemon
                problem = f"did not return within {self.timeout:g} s"
            except Exception as exc:
                problem, cause = f"raised {type(exc).__name__}: {exc}", exc
        raise self._fail(capability, problem) from cause

    def call(self, capability: str, *args, finite: bool = True, **kwargs) -> np.ndarray:
        self.require(capability)
        try:
            fn = getattr(self.impl, capability)
        except Exception as exc:  # a capability defined as a property that raises
            raise self._fail(capability, f"looking up the capability raised {type(exc).__name__}: {exc}") from exc
        self.calls += 1
        count = self._per_capability[capability] = self._per_capability.get(capability, 0) + 1
        # the repro keeps the inputs as they were (a test may reuse its arrays afterwards)
        self.recent.append((capability, tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args),
                            {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}))

        out = self._handed(capability, fn, args, kwargs)
        try:
            self._check_output(capability, out, args, kwargs, finite)
        except CheckFailure as exc:
            shapes = _input_shapes(args, kwargs)
            if "non-finite values" not in str(exc) or not shapes:
                raise
            # NaN or inf is often the side effect of a degenerate draw (one feature, one key): say which
            raise CheckFailure(cap_text(f"{exc} for inputs of shapes {shapes}"), capability=exc.capability) from None

        if count <= 2 or count % DETERMINISM_EVERY == 0:
            again = self._handed(capability, fn, args, kwargs)
            if not (_same_vjp_output(again, out) if capability in STRUCTURED_OUTPUTS else (
                    isinstance(again, np.ndarray) and isinstance(out, np.ndarray) and _equal(again, out))):
                diff = ""
                if isinstance(again, np.ndarray) and again.shape == out.shape:
                    with np.errstate(invalid="ignore"):
                        diff = f" (max abs difference {np.nanmax(np.abs(again - out)):.3g})"
                raise self._fail(capability, f"returned different outputs for the same input{diff}")
        return out

    def _handed(self, capability: str, fn, args: tuple, kwargs: dict):
        """:meth:`_watched` on private copies of the inputs (:func:`_private`: every array, every field of
        every params object); a copy that changed during the call fails the check, naming the input and,
        inside it, the field (``modified its input #3 in place: eps was 1e-05, is 0.5``). The test's own
        objects never reach the implementation: what it computes the expected value from is what it drew."""
        memo: dict = {}  # one for the whole call: inputs that share memory share it in the copies too
        given_args = tuple(_private(a, memo) for a in args)
        given_kwargs = {k: _private(v, memo) for k, v in kwargs.items()}
        out = self._watched(capability, fn, given_args, given_kwargs)
        labels = [(f"#{i + 1}", a, g) for i, (a, g) in enumerate(zip(args, given_args))]
        labels += [(repr(k), kwargs[k], given_kwargs[k]) for k in kwargs]
        for label, original, given in labels:
            found = _difference(original, given)
            if found is not None:
                raise self._fail(capability, f"modified its input {label} in place" + (f": {found}" if found else ""))
        return out

    def _check_vjp_output(self, capability, out, args, kwargs, finite):
        """The output of a ``*_vjp`` call (protocol.VJP_OUTPUTS): a tuple of the protocol's arity (dx
        alone for softmax_vjp), each gradient an ndarray of the declared dtype, its input's shape and
        finite, and dparams the params' dataclass with every array field of the field's shape and
        dtype and finite, its other fields (num_heads, norm_first, eps) equal to the params'."""
        from attnclaims.protocol import vjp_expected

        try:
            expected = vjp_expected(capability, args, kwargs)
        except (TypeError, ValueError, IndexError):  # a malformed call the implementation accepted
            return
        parts = (out,) if len(expected) == 1 else out
        if len(expected) > 1 and not (isinstance(out, tuple) and len(out) == len(expected)):
            got = f"a tuple of {len(out)}" if isinstance(out, tuple) else f"{type(out).__module__}.{type(out).__qualname__}"
            raise self._fail(capability, f"returned {got}, but should be a tuple of {len(expected)} "
                                         f"({', '.join(n for n, _ in expected)})")
        for (name, want), got in zip(expected, parts):
            if name != "dparams":
                self._check_gradient(capability, name, got, want, finite)
                continue
            if type(got) is not type(want) or not dataclasses.is_dataclass(got):
                raise self._fail(capability, f"{name} is {type(got).__qualname__}, but should be "
                                             f"{type(want).__qualname__} (the structure of params)")
            self._check_params_gradient(capability, name, got, want, finite)

    def _check_params_gradient(self, capability, prefix, got, want, finite):
        for f in dataclasses.fields(want):
            g, w = getattr(got, f.name), getattr(want, f.name)
            label = f"{prefix}.{f.name}"
            if isinstance(w, np.ndarray):
                self._check_gradient(capability, label, g, w.shape, finite)
            elif dataclasses.is_dataclass(w):
                if type(g) is not type(w):
                    raise self._fail(capability, f"{label} is {type(g).__qualname__}, but should be {type(w).__qualname__}")
                self._check_params_gradient(capability, label, g, w, finite)
            elif not (g == w or (g is None and w is None)):
                raise self._fail(capability, f"{label}={plain(g)}, but should be {plain(w)} (copied from params)")

    def _check_gradient(self, capability, name, got, shape, finite):
        self._check_array(capability, name, got, shape, finite, "its input's shape")

    def _check_step_output(self, capability, out, args, kwargs, finite):
        """The output of ``decoder_block_step(x_t, cache, params, position)`` (protocol.step_expected): a
        tuple (y_t, cache), y_t an ndarray of x_t's shape, the cache an ``attnclaims.reference.KVCache`` whose
        k and v are ndarrays (..., num_kv_heads, position + n_t, d_k); all of the declared dtype and finite."""
        from attnclaims.protocol import step_expected
        from attnclaims.reference.layers import KVCache

        if not (isinstance(out, tuple) and len(out) == 2):
            got = f"a tuple of {len(out)}" if isinstance(out, tuple) else f"{type(out).__module__}.{type(out).__qualname__}"
            raise self._fail(capability, f"returned {got}, but should be a tuple (y_t, cache)")
        try:
            y_shape, kv_shape = step_expected(args, kwargs)
        except (TypeError, ValueError, IndexError, AttributeError):  # a malformed call the implementation accepted
            y_shape = kv_shape = None
        y, cache = out
        self._check_array(capability, "y_t", y, y_shape, finite, "x_t's shape")
        if not isinstance(cache, KVCache):
            raise self._fail(capability, f"the returned cache is {type(cache).__module__}.{type(cache).__qualname__}, "
                                         "but should be attnclaims.reference.KVCache(k, v)")
        why = None if kv_shape is None else (f"num_kv_heads={kv_shape[-3]}, length position + n_t = {kv_shape[-2]}, "
                                             f"d_k={kv_shape[-1]}")
        self._check_array(capability, "cache.k", cache.k, kv_shape, finite, why)
        self._check_array(capability, "cache.v", cache.v, kv_shape, finite, why)

    def _check_lse_output(self, capability, out, args, kwargs, finite):
        """The output of ``attention_lse(q, k, v, ...)`` (protocol.lse_expected): a tuple (out, lse), out of
        attention's shape, lse (batch..., n_q); both ndarrays of the declared dtype and finite."""
        from attnclaims.protocol import lse_expected

        if not (isinstance(out, tuple) and len(out) == 2):
            got = f"a tuple of {len(out)}" if isinstance(out, tuple) else f"{type(out).__module__}.{type(out).__qualname__}"
            raise self._fail(capability, f"returned {got}, but should be a tuple (out, lse)")
        try:
            out_shape, lse_shape = lse_expected(args, kwargs)
        except (TypeError, ValueError, IndexError):  # a malformed call the implementation accepted
            out_shape = lse_shape = None
        self._check_array(capability, "out", out[0], out_shape, finite, "attention's output")
        self._check_array(capability, "lse", out[1], lse_shape, finite, "one per query: the batch axes and n_q")

    def _check_array(self, capability, name, got, shape, finite, why=None, *, returned=False):
        """``got`` is an ndarray of the declared dtype, of ``shape`` (unless None; a function is called once
        the dtype is right; ``why`` says where the shape comes from) and, when ``finite``, without NaN or
        inf. ``returned``: ``got`` is the whole result (``returned list, …`` rather than ``out is list, …``).
        Every array an implementation returns is checked here."""
        if not isinstance(got, np.ndarray):
            what = "returned" if returned else f"{name} is"
            raise self._fail(capability, f"{what} {type(got).__module__}.{type(got).__qualname__}, "
                                         "but should be numpy.ndarray")
        if got.dtype != self.dtype:
            raise self._fail(capability, f"{name}.dtype={got.dtype}, but should be {self.dtype} "
                                         f"(the implementation's declared dtype)")
        if callable(shape):
            shape = shape()
        if shape is not None and got.shape != tuple(shape):
            raise self._fail(capability, f"{name}.shape={got.shape}, but should be {tuple(shape)}"
                                         + (f" ({why})" if why else ""))
        if finite and got.dtype.kind in "fc":
            bad = ~np.isfinite(got)
            if bad.any():
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                raise self._fail(capability, f"{name} has {int(bad.sum())} non-finite values "
                                             f"(first at index {first}: {plain(got[first])})")

    def _check_output(self, capability, out, args, kwargs, finite):
        if capability.endswith("_vjp"):
            return self._check_vjp_output(capability, out, args, kwargs, finite)
        if capability == "decoder_block_step":
            return self._check_step_output(capability, out, args, kwargs, finite)
        if capability == "attention_lse":
            return self._check_lse_output(capability, out, args, kwargs, finite)
        def want():
            try:
                return expected_shape(capability, args, kwargs)
            except (TypeError, ValueError):  # the call itself was malformed; the implementation accepted it
                return None

        self._check_array(capability, "out", out, want, finite, returned=True)

