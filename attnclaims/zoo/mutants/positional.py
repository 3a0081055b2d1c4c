"""Mutants of the sinusoidal positional encoding and of rotary embeddings (RoPE).
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)

ROPE = ["positional-encoding"]


# ---------------------------------------------------------------------------------------------
# Sinusoidal encoding
# ---------------------------------------------------------------------------------------------

def _pe(n_positions, d_model, *, base=10000.0, exponent=None, first=np.sin, second=np.cos, start=0):
    """The sinusoidal table with one knob turned (each mutant turns one)."""
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    omega = base ** (-(two_i if exponent is None else exponent(two_i)) / d_model)
    angles = np.arange(start, start + n_positions, dtype=np.float64)[:, None] * omega[None, :]
    pe = np.empty((n_positions, d_model))
    pe[:, 0::2] = first(angles)
    pe[:, 1::2] = second(angles[:, : d_model // 2])
    return pe


@mutant("pe_sin_cos_swapped", "positional_encoding", ["positional-encoding"],
        "cos on the even columns and sin on the odd ones")
class _PeSwapped(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, first=np.cos, second=np.sin)


@mutant("pe_wrong_exponent", "positional_encoding", ["positional-encoding"],
        "frequency exponent uses the column index: ω = 10000^(−2·(2i)/d) instead of 10000^(−2i/d)")
class _PeWrongExponent(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, exponent=lambda two_i: 2 * two_i)


@mutant("pe_wrong_base", "positional_encoding", ["positional-encoding"],
        "base 1000 instead of 10000")
class _PeWrongBase(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, base=1000.0)


@mutant("pe_positions_from_one", "positional_encoding", ["positional-encoding"],
        "positions counted from 1 (PE of pos 0 is missing)")
class _PeFromOne(Composed):
    def positional_encoding(self, n_positions, d_model):
        return _pe(n_positions, d_model, start=1)


@mutant("pe_halves_layout", "positional_encoding", ["positional-encoding"],
        "sines in the first half of the columns and cosines in the second (tensor2tensor's layout)")
class _PeHalves(Composed):
    def positional_encoding(self, n_positions, d_model):
        pe = _pe(n_positions, d_model)
        return np.concatenate([pe[:, 0::2], pe[:, 1::2]], axis=1)


# ---------------------------------------------------------------------------------------------
# Rotary embeddings
# ---------------------------------------------------------------------------------------------

@mutant("rope_wrong_layout", "rotary_embedding", ROPE,
        "RoPE with the other pair layout: rotate-half pairs (i, i + d/2) where interleaved (2i, 2i + 1) "
        "were asked for, and the reverse (identical for d = 2)")
class _RopeWrongLayout(Composed):
    def _rope_pairs(self, d, layout):
        return super()._rope_pairs(d, "half" if layout == "interleaved" else "interleaved")


@mutant("rope_frequency_exponent", "rotary_embedding", ROPE,
        "ω_i = base^(−i/d) instead of base^(−2i/d) (the pair index used as the feature index)")
class _RopeFrequencyExponent(Composed):
    def _rope_frequencies(self, d, base):
        return 1.0 / base ** (np.arange(d // 2, dtype=np.float64) / d)


@mutant("rope_transposed_rotation", "rotary_embedding", ROPE,
        "each pair rotated by −mω_i (sin with the wrong sign): scores still depend on the offset only, "
        "but on m − n, and the output is not the library's")
class _RopeTransposedRotation(Composed):
    def _rope_angles(self, positions, d, base):
        return -super()._rope_angles(positions, d, base)


@mutant("rope_in_place_update", "rotary_embedding", ROPE,
        "the second member of each pair is computed from the already rotated first one (an in-place update "
        "x_a ← …; x_b ← x_a sin + x_b cos): no longer a rotation, norms and relative positions are lost")
class _RopeInPlaceUpdate(Composed):
    def rotary_embedding(self, x, positions, base=10000.0, layout="interleaved"):
        x = np.array(x, dtype=np.float64)
        theta = self._rope_angles(positions, x.shape[-1], float(base))
        a, b = self._rope_pairs(x.shape[-1], layout)
        x[..., a] = x[..., a] * np.cos(theta) - x[..., b] * np.sin(theta)
        x[..., b] = x[..., a] * np.sin(theta) + x[..., b] * np.cos(theta)  # reads the updated x_a
        return x


@mutant("rope_positions_ignored", "rotary_embedding", ROPE + ["permutation-equivariance"],
        "the positions argument is dropped and every row is rotated as position 0 (the identity)")
class _RopePositionsIgnored(Composed):
    def _rope_angles(self, positions, d, base):
        return 0.0 * super()._rope_angles(positions, d, base)


@mutant("rope_table_cached_by_length", "rotary_embedding", ROPE,
        "the cos/sin table is cached by the sequence length alone (as a module that builds its table once per "
        "length): a later call of the same length at other positions is rotated by the first call's angles")
class _RopeTableCachedByLength(Composed):
    def _rope_angles(self, positions, d, base):
        tables = self.__dict__.setdefault("_tables", {})
        key = (len(positions), d, base)
        if key not in tables:
            tables[key] = super()._rope_angles(positions, d, base)
        return tables[key]
