"""Mutants of packed (varlen) and paged attention: a query that sees across a sequence boundary, cu_seqlens read
as lengths, the causal mask aligned top-left inside a sequence, the last sequence dropped; pages read in
physical order (the block table ignored), a last partial page read whole, a block index off by one.

Each is invisible on the easy inputs: one sequence (a boundary leak has no next sequence, cumulative lengths and
lengths agree, the last sequence is the only one), n_q = n_k (both alignments agree), pages in their physical
order, sequence lengths that fill their last page.
"""
from __future__ import annotations

import numpy as np

from attnclaims.zoo.mutants.base import Composed
from attnclaims.zoo.mutants.catalogue import mutant

__all__: list[str] = []  # the mutants are reached through attnclaims.zoo.mutants (MUTANTS and its attributes)


# ---------------------------------------------------------------------------------------------
# Packed variable-length sequences
# ---------------------------------------------------------------------------------------------

@mutant("varlen_boundary_leak", "varlen_attention", ["decoder-masking"],
        "a sequence's queries also see the first key of the next sequence (its key range ends one too late)")
class _VarlenBoundaryLeak(Composed):
    def _varlen_keys(self, k0, k1):
        return k0, k1 + 1


@mutant("varlen_cu_seqlens_as_lengths", "varlen_attention", ["decoder-masking"],
        "cu_seqlens read as the lengths: sequence b spans cu[b] … cu[b] + cu[b+1] (right for one sequence)")
class _VarlenCuSeqlensAsLengths(Composed):
    def _varlen_sequences(self, cu_q, cu_k):
        cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
        return list(zip(zip(cu_q[:-1], np.minimum(cu_q[:-1] + cu_q[1:], cu_q[-1])),
                        zip(cu_k[:-1], np.minimum(cu_k[:-1] + cu_k[1:], cu_k[-1]))))


@mutant("varlen_causal_top_left", "varlen_attention", ["decoder-masking"],
        "the causal mask inside a packed sequence aligned top-left, not bottom-right (right when n_q = n_k)")
class _VarlenCausalTopLeft(Composed):
    def _varlen_mask(self, n_q, n_k):
        return self._causal_mask(n_q, n_k, "top-left")


@mutant("varlen_last_sequence_dropped", "varlen_attention", ["decoder-masking"],
        "the loop over the packed sequences stops one short: the last sequence's rows stay zero")
class _VarlenLastSequenceDropped(Composed):
    def _varlen_sequences(self, cu_q, cu_k):
        cu_q, cu_k = np.asarray(cu_q), np.asarray(cu_k)
        return list(zip(zip(cu_q[:-2], cu_q[1:-1]), zip(cu_k[:-2], cu_k[1:-1])))


# ---------------------------------------------------------------------------------------------
# Paged KV cache
# ---------------------------------------------------------------------------------------------

@mutant("paged_block_table_ignored", "paged_attention", ["decoder-masking"],
        "pages read in physical order: logical page p of every sequence from physical page p (the table ignored)")
class _PagedBlockTableIgnored(Composed):
    def _physical_page(self, table_row, p):
        return p


@mutant("paged_last_page_read_whole", "paged_attention", ["decoder-masking"],
        "the last, partial page read whole: its slots past the sequence's length are attended to")
class _PagedLastPageReadWhole(Composed):
    def _visible_length(self, seq_len, block_size):
        return -(-seq_len // block_size) * block_size


@mutant("paged_block_index_off_by_one", "paged_attention", ["decoder-masking"],
        "block ids taken as 1-based: page table[p] − 1 is read (numpy's index −1 wraps to the last page)")
class _PagedBlockIndexOffByOne(Composed):
    def _physical_page(self, table_row, p):
        return int(table_row[p]) - 1
