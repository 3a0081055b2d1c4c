"""The guard's checks of ``decoder_block_step`` (attnclaims/guard.py, ``_check_step_output``): every way a
step can return the wrong thing — not a tuple, a cache that is not a ``KVCache``, a cache of the wrong
length, dtype or head count, NaN in the cache, an input cache modified in place, a step that keeps hidden
state — is a failed check with a one-line message naming what came, never a traceback; the reference's
step passes.
"""
from __future__ import annotations

import numpy as np
import pytest

from attnclaims.guard import CheckFailure, GuardedImplementation
from attnclaims.reference.layers import KVCache, cached_decode, decoder_block, decoder_block_step
from attnclaims.reference.params import RotaryParams, init_decoder_block

PARAMS = init_decoder_block(3, 8, 4, 6, num_kv_heads=2, rope=RotaryParams(100.0, "half"))
X = np.random.default_rng(0).normal(size=(2, 5, 8))


class _Step:
    """The reference's step with one thing changed (``bug``)."""

    name = "step-under-test"
    dtype = np.float64

    def __init__(self, bug: str):
        self.bug = bug
        self.calls = 0

    def decoder_block_step(self, x_t, cache, params, position):
        self.calls += 1
        y, new = decoder_block_step(x_t, cache, params, position)
        if self.bug == "list":
            return [y, new]
        if self.bug == "triple":
            return y, new, position
        if self.bug == "dict-cache":
            return y, {"k": new.k, "v": new.v}
        if self.bug == "stale-cache":
            return y, (cache if cache is not None else new)
        if self.bug == "doubled-cache":
            return y, KVCache(np.concatenate([new.k, new.k], axis=-2), np.concatenate([new.v, new.v], axis=-2))
        if self.bug == "repeated-heads":
            return y, KVCache(np.repeat(new.k, 2, axis=-3), np.repeat(new.v, 2, axis=-3))
        if self.bug == "float32-cache":
            return y, KVCache(new.k.astype(np.float32), new.v.astype(np.float32))
        if self.bug == "nan-cache":
            k = new.k.copy()
            k[..., -1, 0] = np.nan
            return y, KVCache(k, new.v)
        if self.bug == "y-list":
            return y.tolist(), new
        if self.bug == "mutates-cache" and cache is not None:
            cache.k[...] = 0.0  # a frozen dataclass, but its arrays are writable
        if self.bug == "hidden-state":
            return y + 1e-3 * self.calls, new
        return y, new


def _decode(impl):
    return cached_decode(impl.decoder_block_step, X, PARAMS, 2, 2)


def test_the_reference_step_passes_the_guard():
    guard = GuardedImplementation(_Step("none"), timeout=None)
    np.testing.assert_allclose(_decode(guard), decoder_block(X, PARAMS), rtol=0, atol=1e-12)


@pytest.mark.parametrize("bug, message", [
    ("list", "returned builtins.list, but should be a tuple (y_t, cache)"),
    ("triple", "returned a tuple of 3, but should be a tuple (y_t, cache)"),
    ("dict-cache", "the returned cache is builtins.dict, but should be attnclaims.reference.KVCache(k, v)"),
    ("stale-cache", "cache.k.shape=(2, 2, 2, 2), but should be (2, 2, 4, 2) (num_kv_heads=2, length position + "
                    "n_t = 4, d_k=2)"),
    ("doubled-cache", "cache.k.shape=(2, 2, 4, 2), but should be (2, 2, 2, 2)"),
    ("repeated-heads", "cache.k.shape=(2, 4, 2, 2), but should be (2, 2, 2, 2)"),
    ("float32-cache", "cache.k.dtype=float32, but should be float64"),
    ("nan-cache", "cache.k has 4 non-finite values"),
    ("y-list", "y_t is builtins.list, but should be numpy.ndarray"),
    ("mutates-cache", "modified its input #2 in place"),
    ("hidden-state", "returned different outputs for the same input"),
])
def test_a_wrong_step_is_a_clear_failed_check(bug, message):
    guard = GuardedImplementation(_Step(bug), timeout=None)
    with pytest.raises(CheckFailure) as info:
        _decode(guard)
    text = str(info.value)
    assert message in text, text
    assert "\n" not in text and "decoder_block_step" in text, text
