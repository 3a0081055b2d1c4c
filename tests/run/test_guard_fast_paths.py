"""The guard's cheap paths (attnclaims/guard.py) check as much as the plain ones did.

* :meth:`Watchdog.arm` rewrites the label with one ``pwrite`` when it has the previous label's length and
  cuts the file only when the new label is shorter: after any sequence of labels the file holds exactly the
  last one, and a dump written where faulthandler writes (the descriptor's offset) reads back with it.
* :class:`_Worker` hands calls over through a ``SimpleQueue`` and a plain lock: results, exceptions and the
  time limit come back as before.
* :func:`_copy_array` skips the offset arithmetic for an array that owns its memory: the copy is still at
  offset 0 with the original's strides, and views of it in the same call still reach the implementation as
  views of the one copy, so writing through either is caught.
* The library check still runs after every call: a function replaced on the second call is caught too.
"""
from __future__ import annotations

import faulthandler
import signal
import time

import numpy as np
import pytest

from attnclaims.guard import CheckFailure, GuardedImplementation, Watchdog, _Timeout, _Worker
from attnclaims.reference import attention as reference_attention


@pytest.fixture
def watchdog(tmp_path):
    dog = Watchdog(str(tmp_path / "watchdog"), grace=1.0)
    yield dog
    dog.disarm()
    if dog._alarm:
        faulthandler.unregister(signal.SIGALRM)
    dog._file.close()


LABELS = [
    "claim-1 · test_long_name_of_a_test · reference · attention",  # first: written from the start
    "claim-1 · test_long_name_of_a_test · reference · attention",  # the same: one pwrite
    "claim-1 · test_long_name_of_a_test · reference · softmaxxx",  # the same length, other text: one pwrite
    "c · t · r · softmax",                                          # shorter: the file is cut
    "c · t · r · softmax",
    "claim-22 · a much longer test name than the one before · reference · rms_norm",  # longer
    "é · ü · ∑",                                                    # shorter, not ASCII
]


@pytest.mark.parametrize("upto", range(1, len(LABELS) + 1))
def test_after_any_sequence_of_labels_the_file_holds_exactly_the_last(watchdog, upto):
    for label in LABELS[:upto]:
        watchdog.arm(label, 30.0)
        watchdog.disarm()
    with open(watchdog.path, "rb") as fh:
        assert fh.read() == f"call: {LABELS[upto - 1]}\nlimit: 30\n".encode()


@pytest.mark.parametrize("upto", range(1, len(LABELS) + 1))
def test_a_dump_after_the_last_label_reads_back_with_that_label(watchdog, upto):
    """faulthandler writes at the descriptor's offset: it must stand right after the label, also when
    the label was rewritten with pwrite (which does not move it) or cut short."""
    for label in LABELS[:upto]:
        watchdog.arm(label, 30.0)
    faulthandler.dump_traceback(file=watchdog._file, all_threads=True)  # what the timer writes when it fires
    watchdog.disarm()
    fired = Watchdog.read(watchdog.path)
    assert fired is not None
    assert fired["call"] == LABELS[upto - 1]
    assert fired["limit"] == "30"
    assert "test_a_dump_after_the_last_label" in fired["traceback"]


def test_the_worker_returns_results_raises_exceptions_and_keeps_the_limit():
    worker = _Worker()
    assert worker.run(lambda: 42, 5.0) == 42
    with pytest.raises(ZeroDivisionError):
        worker.run(lambda: 1 / 0, 5.0)
    with pytest.raises(KeyboardInterrupt):  # a BaseException comes back as it is, too
        worker.run(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), 5.0)
    start = time.monotonic()
    with pytest.raises(_Timeout):
        worker.run(lambda: time.sleep(3.0), 0.2)
    assert time.monotonic() - start < 2.0
    assert _Worker().run(lambda: "next", 5.0) == "next"  # a fresh worker, as the guard makes after a timeout


def test_a_slow_call_fails_with_the_limit_and_the_next_one_is_not_run():
    class Slow:
        name = "slow"
        dtype = np.float64
        calls = 0

        def softmax(self, x):
            Slow.calls += 1
            time.sleep(2.0)
            return x

    guard = GuardedImplementation(Slow(), timeout=0.2)
    for _ in range(2):
        with pytest.raises(CheckFailure, match=r"^slow · softmax: did not return within 0.2 s$"):
            guard.softmax(np.zeros((2, 3)))
    assert Slow.calls == 1


class _Writes:
    """Writes into one of its inputs (``which``) and reports what it was handed."""

    name = "writes"
    dtype = np.float64

    def __init__(self, which):
        self.which = which
        self.seen = None

    def attention(self, q, k, v):
        self.seen = (q, k, v)
        if self.which is not None:
            (q, k, v)[self.which][..., 0] += 1.0
        return reference_attention(q, k, v)


@pytest.mark.parametrize("order", ["C", "F"])
def test_an_owning_array_and_its_views_reach_the_implementation_as_one_copy(order):
    root = np.asarray(np.random.default_rng(0).normal(size=(2, 8, 4)), order=order)
    assert root.base is None
    k, v = root[:, 1:5], root[:, ::2]
    impl = _Writes(None)
    GuardedImplementation(impl, timeout=None).attention(root, k, v)
    q_in, k_in, v_in = impl.seen
    for given, original in [(q_in, root), (k_in, k), (v_in, v)]:
        assert given.strides == original.strides
        assert np.array_equal(given, original)
        assert not np.shares_memory(given, root)
    assert np.shares_memory(q_in, k_in) and np.shares_memory(q_in, v_in)
    # each at its offset inside the one copy: a write through the root shows in the views
    q_in[0, 1, 0] = 123.0
    assert k_in[0, 0, 0] == 123.0


@pytest.mark.parametrize("which", [0, 1, 2])
def test_writing_through_the_root_or_a_view_of_it_is_caught(which):
    """A write through the view ``k`` changes the copy of ``root`` too: the first input named is #1
    (they share memory, as the test's own arrays do)."""
    root = np.random.default_rng(1).normal(size=(1, 6, 4))
    k, v = root[:, 1:5], root[:, 2:6]
    kept = root.copy()
    guard = GuardedImplementation(_Writes(which), timeout=None)
    with pytest.raises(CheckFailure, match=r"writes · attention: modified its input #1 in place$"):
        guard.attention(root, k, v)
    assert np.array_equal(root, kept)  # the test's own arrays are untouched


def test_a_read_only_owning_array_stays_read_only():
    q = np.random.default_rng(2).normal(size=(1, 3, 4))
    q.flags.writeable = False
    impl = _Writes(None)
    GuardedImplementation(impl, timeout=None).attention(q, q.copy(), q.copy())
    assert not impl.seen[0].flags.writeable
    assert impl.seen[1].flags.writeable


def test_a_function_replaced_on_a_later_call_is_caught_and_restored_each_time():
    original = np.exp

    class Patches:
        name = "patches"
        dtype = np.float64
        calls = 0

        def softmax(self, x):
            Patches.calls += 1
            if Patches.calls >= 3:
                np.exp = lambda a: original(a)
            z = original(x - x.max(axis=-1, keepdims=True))
            return z / z.sum(axis=-1, keepdims=True)

    guard = GuardedImplementation(Patches(), timeout=5.0)
    x = np.zeros((2, 3))
    guard.softmax(x)  # the first call (and its determinism repeat, which patches) ...
    assert np.exp is original
    assert Patches.calls == 2
    for _ in range(2):
        Patches.calls = 5
        with pytest.raises(CheckFailure, match=r"replaced numpy\.exp during the call"):
            guard.softmax(x)
        assert np.exp is original
