"""Tests that kill mutants of the reference which its own tests let survive (bench/mutation.sh).

mutmut (``bash bench/mutation.sh``) changes one thing at a time in ``reference/``
and runs the reference's tests; a change they do not notice is a *survivor*.
Each test here was added for a class of survivors; the ones that are
equivalent (no input can tell them apart) are listed with the reason in
``docs/mutation.md``. Reference mutants are not claim evidence: no claim marker.
"""
from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest

from attnclaims.reference import (
    additive_scores, add_positional_encoding, attention, attention_from_scores, attention_weights, causal_mask,
    combine_masks, decoder_layer, encoder_layer, feed_forward, frequencies, init_encoder_layer, init_decoder_layer,
    init_feed_forward, init_multi_head, layer_norm, learned_encoding, merge_heads, multi_head_attention,
    padding_mask, sinusoidal_encoding, sliding_window_mask, softmax, split_heads,
)
from attnclaims.reference._validate import check_count
from attnclaims.reference.attention import (
    _row_softmax, alibi_attention, alibi_bias, alibi_slopes, attention_lse, attention_vjp, causal_attention,
    causal_attention_vjp, dot_product_scores, softcap_attention, softcap_scores, softmax_axes, softmax_axes_vjp,
    softmax_vjp,
)
from attnclaims.reference.baselines import (
    conv1d, fixed_context_encoder, l2_attention, linear_rnn_scan, linear_rnn_sequential, restricted_attention,
    rnn_input_jacobian, rnn_log_jacobian_norms, rnn_state_jacobian, tanh_rnn, tanh_rnn_step, window_mask,
)
from attnclaims.reference import params as P
from attnclaims.reference import multihead as MH
from attnclaims.reference.layers import decoder, decoder_layer_vjp, encoder, encoder_layer_vjp
from attnclaims.reference.ffn import (
    feed_forward_vjp, ffn_activation, gated_activation, gated_feed_forward, gated_feed_forward_vjp,
)
from attnclaims.reference.multihead import multi_head_attention_vjp
from attnclaims.reference.norms import layer_norm_vjp, rms_norm, rms_norm_vjp
from attnclaims.reference.packed import (
    gather_pages, paged_attention, paged_mask, sequence_bounds, varlen_attention, varlen_mask,
)
from attnclaims.reference.positional import (
    rotary_angles, rotary_embedding, rotary_embedding_vjp, rotary_frequencies, rotary_pairs,
)
from attnclaims.reference.params import (
    DecoderLayerParams, EncoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams, init_layer_norm,
    xavier_uniform,
)

_rng = np.random.default_rng(23)
_q, _k, _v = _rng.normal(size=(2, 3, 8)), _rng.normal(size=(2, 5, 8)), _rng.normal(size=(2, 5, 4))
_mh = init_multi_head(0, 8, 2)
_enc = init_encoder_layer(0, 8, 2, 16)
_dec = init_decoder_layer(0, 8, 2, 16)
_x = _rng.normal(size=(2, 3, 8))
W, B = np.ones((4, 4)), np.zeros(4)


def _refused_with(call, message: str) -> None:
    """``call()`` raises ValueError whose message is exactly ``message``: a changed name, value or wording of
    any ``raise`` in the reference is caught, where a fragment match would let it pass."""
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == message


# ---------------------------------------------------------------------------------------------
# Every validation message, whole (the reference's own table checks a fragment of each)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: attention(_q, _k[..., :6], _v), 'q.shape[-1]=8 != k.shape[-1]=6', id="attention-dk"),
    pytest.param(lambda: attention(_q, _k, _v[..., :4, :]), 'k.shape[-2]=5 != v.shape[-2]=4', id="attention-nk"),
    pytest.param(lambda: attention(_q, _k, _v, mask=np.ones((3, 4), bool)),
                 'mask.shape=(3, 4) does not broadcast to (2, 3, 5)', id="attention-mask-shape"),
    pytest.param(lambda: attention(_q, _k, _v, mask=np.ones((3, 5))),
                 'mask.dtype=float64, but should be bool (True = may attend)', id="attention-mask-dtype"),
    pytest.param(lambda: attention(_q, _k, _v, scale=float("nan")),
                 'scale=nan, but should be finite', id="attention-scale-nan"),
    pytest.param(lambda: attention(_q, _k, _v, scale="1"),
                 "scale='1', but should be a finite real number or None", id="attention-scale-str"),
    pytest.param(lambda: attention(_q, _k, _v, scale=True),
                 'scale=True, but should be a finite real number or None', id="attention-scale-bool"),
    pytest.param(lambda: attention(_q[0, 0], _k, _v),
                 'q.ndim=1 (q.shape=(8,)), but should be >= 2', id="attention-ndim"),
    pytest.param(lambda: attention(_q.astype(complex), _k, _v),
                 'q.dtype=complex128, but should be a real floating or integer dtype', id="attention-complex"),
    pytest.param(lambda: attention(_q > 0, _k, _v),
                 'q.dtype=bool, but should be a real floating or integer dtype', id="attention-bool"),
    pytest.param(lambda: attention(_q, _k[:1].repeat(3, 0), _v),
                 'batch axes do not broadcast: q.shape[:-2]=(2,), k.shape[:-2]=(3,), v.shape[:-2]=(2,)', id="attention-batch"),
    pytest.param(lambda: attention(np.ones((3, 0)), np.ones((5, 0)), np.ones((5, 2))),
                 'q.shape[-1]=0, but should be >= 1 for the default scale 1/sqrt(d_k)', id="attention-dk0"),
    pytest.param(lambda: attention(np.full((1, 2), 1e200), np.full((1, 2), 1e200), np.ones((1, 1))),
                 'scores q·kᵀ·scale are not finite at 1 unmasked positions (NaN or inf in q or k, or overflow), but should be finite there', id="attention-overflow"),
    pytest.param(lambda: attention_weights(np.full((1, 2), np.nan), np.ones((1, 2))),
                 'scores q·kᵀ·scale are not finite at 1 unmasked positions (NaN or inf in q or k, or overflow), but should be finite there', id="weights-nan"),
    pytest.param(lambda: dot_product_scores(_q, _k[..., :6]), 'q.shape[-1]=8 != k.shape[-1]=6', id="scores-dk"),
    pytest.param(lambda: softmax(np.array([0.0, np.nan])),
                 'x has 1 NaN or +inf entries at unmasked positions, but should be finite there (-inf is allowed and gets weight 0)', id="softmax-nan"),
    pytest.param(lambda: softmax(np.ones((2, 3)), axis=2), 'axis=2 is out of range for x.ndim=2', id="softmax-axis"),
    pytest.param(lambda: softmax(np.ones((2, 3)), axis=-3),
                 'axis=-3 is out of range for x.ndim=2', id="softmax-axis-neg"),
    pytest.param(lambda: softmax(np.array(1.0)), 'x.ndim=0 (x.shape=()), but should be >= 1', id="softmax-0d"),
    pytest.param(lambda: softmax(np.ones((2, 3)), mask=np.ones((2, 4), bool)),
                 'mask.shape=(2, 4) does not broadcast to (2, 3)', id="softmax-mask"),
    pytest.param(lambda: attention_from_scores(np.ones((3, 5)), np.ones((4, 2))),
                 'scores.shape[-1]=5 != v.shape[-2]=4', id="from-scores"),
    pytest.param(lambda: attention_from_scores(np.array([[np.nan]]), np.ones((1, 2))),
                 'scores has 1 NaN or +inf entries at unmasked positions, but should be finite there (-inf is allowed and gets weight 0)', id="from-scores-nan"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((6, 3)), np.ones((8, 3)), np.ones(3)),
                 'q.shape[-1]=8 != w_q.shape[0]=6', id="additive-wq"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones(8), np.ones((8, 3)), np.ones(3)),
                 'w_q.shape=(8,), but should be (d_q, d_a)', id="additive-wq-ndim"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones(8), np.ones(3)),
                 'w_k.shape=(8,), but should be (d_k, d_a)', id="additive-wk-ndim"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((6, 3)), np.ones(3)),
                 'k.shape[-1]=8 != w_k.shape[0]=6', id="additive-wk"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 4)), np.ones(3)),
                 'w_q.shape[1]=3 != w_k.shape[1]=4', id="additive-da"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3)), np.ones(2)),
                 'w_q.shape[1]=3 != v_a.shape[0]=2', id="additive-va"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3)), np.ones((3, 1))),
                 'v_a.shape=(3, 1), but should be (d_a,)', id="additive-va-ndim"),
    pytest.param(lambda: causal_mask(-1), 'n_q=-1, but should be >= 0', id="causal-neg"),
    pytest.param(lambda: causal_mask(2.0), 'n_q=2.0, but should be an integer >= 0', id="causal-float"),
    pytest.param(lambda: causal_mask(True), 'n_q=True, but should be an integer >= 0', id="causal-bool"),
    pytest.param(lambda: causal_mask(2, -3), 'n_k=-3, but should be >= 0', id="causal-nk"),
    pytest.param(lambda: causal_mask(2, 3, alignment="top-right"),
                 "alignment='top-right', but should be one of ('top-left', 'bottom-right')", id="causal-align"),
    pytest.param(lambda: padding_mask([1, 4], 3),
                 'lengths=[1, 4], but each should be in [0, n_k=3]', id="padding-range"),
    pytest.param(lambda: padding_mask([-1, 2], 3),
                 'lengths=[-1, 2], but each should be in [0, n_k=3]', id="padding-neg"),
    pytest.param(lambda: padding_mask([[1]], 3), 'lengths.shape=(1, 1), but should be (batch,)', id="padding-shape"),
    pytest.param(lambda: padding_mask([1.5], 3),
                 'lengths.dtype=float64, but should be an integer dtype', id="padding-dtype"),
    pytest.param(lambda: padding_mask([1], -2), 'n_k=-2, but should be >= 0', id="padding-nk"),
    pytest.param(lambda: combine_masks(None, np.ones(3)),
                 'masks[1].dtype=float64, but should be bool (True = may attend)', id="combine-dtype"),
    pytest.param(lambda: combine_masks(np.ones(3, bool), np.ones(4, bool)),
                 'mask shapes [(3,), (4,)] do not broadcast together', id="combine-shape"),
    pytest.param(lambda: split_heads(np.ones((3, 10)), 4),
                 'd_model=10 is not divisible by num_heads=4', id="split-div"),
    pytest.param(lambda: split_heads(np.ones((3, 8)), 0), 'num_heads=0, but should be >= 1', id="split-zero"),
    pytest.param(lambda: split_heads(np.ones(8), 2), 'x.ndim=1 (x.shape=(8,)), but should be >= 2', id="split-ndim"),
    pytest.param(lambda: merge_heads(np.ones((3, 8))),
                 'x.ndim=2 (x.shape=(3, 8)), but should be >= 3', id="merge-ndim"),
    pytest.param(lambda: multi_head_attention(_x[..., :6], _x, _mh),
                 'x_q.shape[-1]=6 != params.d_model=8', id="mha-xq"),
    pytest.param(lambda: multi_head_attention(_x, _x[..., :6], _mh),
                 'x_kv.shape[-1]=6 != params.d_model=8', id="mha-xkv"),
    pytest.param(lambda: multi_head_attention(_x, _x, _enc),
                 'params is EncoderLayerParams, but should be MultiHeadParams', id="mha-params"),
    pytest.param(lambda: multi_head_attention(_x, _x, _mh, mask=np.ones((4, 3), bool)),
                 'mask.shape=(4, 3) does not broadcast to (2, 3, 3)', id="mha-mask"),
    pytest.param(lambda: multi_head_attention(_x, _x[:1].repeat(3, 0), _mh),
                 'batch axes do not broadcast: x_q.shape[:-2]=(2,), x_kv.shape[:-2]=(3,)', id="mha-batch"),
    pytest.param(lambda: sinusoidal_encoding(4, 0), 'd_model=0, but should be >= 1', id="pe-d0"),
    pytest.param(lambda: sinusoidal_encoding(-1, 4), 'n_positions=-1, but should be >= 0', id="pe-n"),
    pytest.param(lambda: frequencies(4, base=-2.0), 'base=-2.0, but should be a finite number > 0', id="pe-base"),
    pytest.param(lambda: frequencies(4, base=float("inf")),
                 'base=inf, but should be a finite number > 0', id="pe-base-inf"),
    pytest.param(lambda: frequencies(4, base="10"), "base='10', but should be a finite number > 0", id="pe-base-str"),
    pytest.param(lambda: frequencies(4, base=True), 'base=True, but should be a finite number > 0', id="pe-base-bool"),
    pytest.param(lambda: learned_encoding(0, 3, 4, std=0.0),
                 'std=0.0, but should be a finite number > 0', id="learned-std"),
    pytest.param(lambda: learned_encoding(0, 3, 4, std=float("inf")),
                 'std=inf, but should be a finite number > 0', id="learned-std-inf"),
    pytest.param(lambda: learned_encoding(0, -3, 4), 'n_positions=-3, but should be >= 0', id="learned-n"),
    pytest.param(lambda: learned_encoding(0, 3, 0), 'd_model=0, but should be >= 1', id="learned-d"),
    pytest.param(lambda: add_positional_encoding(np.ones((5, 4)), np.ones((3, 4))),
                 'pe.shape[0]=3 < x.shape[-2]=5: the table has fewer positions than x', id="add-pe-short"),
    pytest.param(lambda: add_positional_encoding(np.ones((5, 4)), np.ones((9, 6))),
                 'x.shape[-1]=4 != pe.shape[-1]=6', id="add-pe-width"),
    pytest.param(lambda: add_positional_encoding(np.ones((5, 4)), np.ones(4)),
                 'pe.shape=(4,), but should be (n_positions, d_model)', id="add-pe-ndim"),
    pytest.param(lambda: add_positional_encoding(np.ones(4), np.ones((5, 4))),
                 'x.ndim=1 (x.shape=(4,)), but should be >= 2', id="add-pe-x"),
    pytest.param(lambda: layer_norm(np.ones((2, 6)), np.ones(8), np.zeros(8), 1e-5),
                 'x.shape[-1]=6 != gamma.shape[0]=8', id="ln-width"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(7), 1e-5),
                 'beta.shape=(7,) != gamma.shape=(8,)', id="ln-beta"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones((8, 1)), np.zeros(8), 1e-5),
                 'gamma.shape=(8, 1), but should be (d,)', id="ln-gamma"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), -1.0),
                 'eps=-1.0, but should be a finite number >= 0', id="ln-eps"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), float("inf")),
                 'eps=inf, but should be a finite number >= 0', id="ln-eps-inf"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), "0.1"),
                 "eps='0.1', but should be a finite number >= 0", id="ln-eps-str"),
    pytest.param(lambda: layer_norm(np.ones((2, 8)), np.ones(8), np.zeros(8), True),
                 'eps=True, but should be a finite number >= 0', id="ln-eps-bool"),
    pytest.param(lambda: layer_norm(np.ones((2, 0)), np.ones(0), np.zeros(0), 1e-5),
                 'x.shape[-1]=0, but should be >= 1: there is nothing to normalise over', id="ln-empty"),
    pytest.param(lambda: feed_forward(_x[..., :6], _enc.ffn), 'x.shape[-1]=6 != params.d_model=8', id="ffn-width"),
    pytest.param(lambda: feed_forward(_x, _mh),
                 'params is MultiHeadParams, but should be FeedForwardParams', id="ffn-params"),
    pytest.param(lambda: encoder_layer(_x[..., :6], _enc), 'x.shape[-1]=6 != params.d_model=8', id="enc-width"),
    pytest.param(lambda: encoder_layer(_x[0, 0], _enc), 'x.ndim=1 (x.shape=(8,)), but should be >= 2', id="enc-ndim"),
    pytest.param(lambda: encoder_layer(_x, _dec),
                 'params is DecoderLayerParams, but should be EncoderLayerParams', id="enc-params"),
    pytest.param(lambda: encoder_layer(_x, _enc, mask=np.ones((3, 4), bool)),
                 'mask.shape=(3, 4) does not broadcast to (2, 3, 3)', id="enc-mask"),
    pytest.param(lambda: decoder_layer(_x, _x, _enc),
                 'params is EncoderLayerParams, but should be DecoderLayerParams', id="dec-params"),
    pytest.param(lambda: decoder_layer(_x, _x[..., :6], _dec),
                 'memory.shape[-1]=6 != params.d_model=8', id="dec-memory"),
    pytest.param(lambda: decoder_layer(_x, _x[0, 0], _dec),
                 'memory.ndim=1 (memory.shape=(8,)), but should be >= 2', id="dec-memory-ndim"),
    pytest.param(lambda: decoder_layer(_x, _x[:1].repeat(3, 0), _dec),
                 'batch axes do not broadcast: y.shape[:-2]=(2,), memory.shape[:-2]=(3,)', id="dec-batch"),
    pytest.param(lambda: decoder_layer(_x, _x, _dec, self_mask=np.ones((3, 4), bool)),
                 'self_mask.shape=(3, 4) does not broadcast to (2, 3, 3)', id="dec-self-mask"),
    pytest.param(lambda: decoder_layer(_x, _x[:, :2], _dec, memory_mask=np.ones((3, 3), bool)),
                 'memory_mask.shape=(3, 3) does not broadcast to (2, 3, 2)', id="dec-memory-mask"),
    pytest.param(lambda: encoder(_x, [_enc], final_norm=_enc.ffn),
                 'final_norm is FeedForwardParams, but should be LayerNormParams or None', id="encoder-final"),
    pytest.param(lambda: decoder(_x, _x, [_dec], final_norm=_enc.ffn),
                 'final_norm is FeedForwardParams, but should be LayerNormParams or None', id="decoder-final"),
    pytest.param(lambda: MultiHeadParams(np.ones((3, 4)), W, W, W, B, B, B, B, 1),
                 'w_q.shape=(3, 4), but should be (d_model, d_model)', id="mhp-square"),
    pytest.param(lambda: MultiHeadParams(np.ones(4), W, W, W, B, B, B, B, 1),
                 'w_q.shape=(4,), but should be (d_model, d_model)', id="mhp-1d"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, B, B, True),
                 'num_heads=True, but should be a positive integer', id="mhp-heads-bool"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, B, B, 2.0),
                 'num_heads=2.0, but should be a positive integer', id="mhp-heads-float"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, B, B, 0),
                 'num_heads=0, but should be a positive integer', id="mhp-heads-zero"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, B, B, 3),
                 'd_model=4 is not divisible by num_heads=3', id="mhp-div"),
    pytest.param(lambda: MultiHeadParams(W, np.ones((4, 3)), W, W, B, B, B, B, 1),
                 'w_k.shape=(4, 3), but should be (4, 4)', id="mhp-wk"),
    pytest.param(lambda: MultiHeadParams(W, W, np.ones((4, 3)), W, B, B, B, B, 1),
                 'w_v.shape=(4, 3), but should be (4, 4)', id="mhp-wv"),
    pytest.param(lambda: MultiHeadParams(W, W, W, np.ones((4, 3)), B, B, B, B, 1),
                 'w_o.shape=(4, 3), but should be (4, 4)', id="mhp-wo"),
    pytest.param(lambda: MultiHeadParams(np.ones((4, 4), int), W, W, W, B, B, B, B, 1),
                 'w_q.dtype=int64, but should be a floating dtype', id="mhp-wq-int"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, np.zeros(3), B, B, B, 1),
                 'b_q.shape=(3,), but should be (4,)', id="mhp-bq"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, np.zeros(3), B, B, 1),
                 'b_k.shape=(3,), but should be (4,)', id="mhp-bk"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, np.zeros(3), B, 1),
                 'b_v.shape=(3,), but should be (4,)', id="mhp-bv"),
    pytest.param(lambda: MultiHeadParams(W, W, W, W, B, B, B, np.zeros(3), 1),
                 'b_o.shape=(3,), but should be (4,)', id="mhp-bo"),
    pytest.param(lambda: _mh.head_columns(2), 'head index 2 is out of range for num_heads=2', id="mhp-head-col"),
    pytest.param(lambda: _mh.head_columns(-1), 'head index -1 is out of range for num_heads=2', id="mhp-head-col-neg"),
    pytest.param(lambda: FeedForwardParams(np.ones(4), np.zeros(6), np.ones((6, 4)), B),
                 'w1.shape=(4,), but should be (d_model, d_ff)', id="ffp-1d"),
    pytest.param(lambda: FeedForwardParams(np.ones((4, 6)), np.zeros(5), np.ones((6, 4)), B),
                 'b1.shape=(5,), but should be (6,)', id="ffp-b1"),
    pytest.param(lambda: FeedForwardParams(np.ones((4, 6)), np.zeros(6), np.ones((5, 4)), B),
                 'w2.shape=(5, 4), but should be (6, 4)', id="ffp-w2"),
    pytest.param(lambda: FeedForwardParams(np.ones((4, 6)), np.zeros(6), np.ones((6, 4)), np.zeros(3)),
                 'b2.shape=(3,), but should be (4,)', id="ffp-b2"),
    pytest.param(lambda: LayerNormParams(np.ones((4, 1)), np.zeros(4)),
                 'gamma.shape=(4, 1), but should be (d_model,)', id="lnp-gamma"),
    pytest.param(lambda: LayerNormParams(np.ones(4), np.zeros(3)),
                 'beta.shape=(3,), but should be (4,)', id="lnp-beta"),
    pytest.param(lambda: EncoderLayerParams(_mh, _enc.ffn, init_layer_norm(8), init_layer_norm(8), eps=-1.0),
                 'eps=-1.0, but should be a finite number >= 0', id="elp-eps"),
    pytest.param(lambda: EncoderLayerParams(_mh, _enc.ffn, init_layer_norm(8), init_layer_norm(8), eps="1"),
                 "eps='1', but should be a finite number >= 0", id="elp-eps-str"),
    pytest.param(lambda: EncoderLayerParams(_mh, _enc.ffn, init_layer_norm(6), init_layer_norm(8)),
                 'EncoderLayerParams.norm1.d_model=6 != self_attn.d_model=8', id="elp-width"),
    pytest.param(lambda: EncoderLayerParams(_mh, init_feed_forward(0, 6, 4), init_layer_norm(8), init_layer_norm(8)),
                 'EncoderLayerParams.ffn.d_model=6 != self_attn.d_model=8', id="elp-width-ffn"),
    pytest.param(lambda: EncoderLayerParams(_mh, _enc.ffn, init_layer_norm(8), init_layer_norm(6)),
                 'EncoderLayerParams.norm2.d_model=6 != self_attn.d_model=8', id="elp-width-norm2"),
    pytest.param(lambda: DecoderLayerParams(_mh, init_multi_head(0, 6, 2), _enc.ffn, init_layer_norm(8), init_layer_norm(8), init_layer_norm(8)),
                 'DecoderLayerParams.cross_attn.d_model=6 != self_attn.d_model=8', id="dlp-width"),
    pytest.param(lambda: DecoderLayerParams(_mh, _mh, _enc.ffn, init_layer_norm(8), init_layer_norm(8), init_layer_norm(6)),
                 'DecoderLayerParams.norm3.d_model=6 != self_attn.d_model=8', id="dlp-width-norm3"),
    pytest.param(lambda: DecoderLayerParams(_mh, _mh, _enc.ffn, init_layer_norm(8), init_layer_norm(8), init_layer_norm(8), eps=float("nan")),
                 'eps=nan, but should be a finite number >= 0', id="dlp-eps"),
    pytest.param(lambda: init_multi_head(0, 8, 3), 'd_model=8 is not divisible by num_heads=3', id="init-mh-div"),
    pytest.param(lambda: init_multi_head(0, 8, 0), 'd_model=8 is not divisible by num_heads=0', id="init-mh-zero"),
    pytest.param(lambda: check_count("n", 1, minimum=2), 'n=1, but should be >= 2', id="check-count"),
])
def test_invalid_input_gets_exactly_this_message(call, message):
    """docs/design.md "How we write" rule 4: the message says what came and what was expected, in one format — whole, so that a
    changed name, value or wording (a survivor of every ``raise`` in reference/) is caught."""
    _refused_with(call, message)


# ---------------------------------------------------------------------------------------------
# Parameter containers: what they store, not only what they reject
# ---------------------------------------------------------------------------------------------

def _lists(*arrays):
    return [a.tolist() for a in arrays]


def test_containers_store_arrays_even_when_given_lists():
    """The containers convert what they validate and store the result (``object.__setattr__`` on the
    frozen dataclass): a field left as the caller's list is a bug."""
    mh = MultiHeadParams(*_lists(W, 2 * W, 3 * W, 4 * W, B, B + 1, B + 2, B + 3), num_heads=np.int64(2))
    for name, value in [("w_q", W), ("w_k", 2 * W), ("w_v", 3 * W), ("w_o", 4 * W),
                        ("b_q", B), ("b_k", B + 1), ("b_v", B + 2), ("b_o", B + 3)]:
        stored = getattr(mh, name)
        assert isinstance(stored, np.ndarray) and np.array_equal(stored, value), name
    assert type(mh.num_heads) is int and mh.num_heads == 2
    ff = FeedForwardParams(*_lists(np.ones((4, 6)), np.zeros(6), 2 * np.ones((6, 4)), np.ones(4)))
    for name, value in [("w1", np.ones((4, 6))), ("b1", np.zeros(6)), ("w2", 2 * np.ones((6, 4))),
                        ("b2", np.ones(4))]:
        stored = getattr(ff, name)
        assert isinstance(stored, np.ndarray) and np.array_equal(stored, value), name
    ln = LayerNormParams(*_lists(np.full(4, 2.0), np.full(4, 3.0)))
    assert isinstance(ln.gamma, np.ndarray) and np.array_equal(ln.gamma, np.full(4, 2.0))
    assert isinstance(ln.beta, np.ndarray) and np.array_equal(ln.beta, np.full(4, 3.0))


def test_container_sizes():
    mh = init_multi_head(0, 12, 3)
    assert (mh.d_model, mh.d_k, mh.num_heads) == (12, 4, 3)
    assert [mh.head_columns(i) for i in range(3)] == [slice(0, 4), slice(4, 8), slice(8, 12)]
    ff = init_feed_forward(0, 6, 10)
    assert (ff.d_model, ff.d_ff) == (6, 10)
    assert init_layer_norm(5).d_model == 5
    assert _enc.d_model == 8 and _dec.d_model == 8
    assert (_enc.eps, _dec.eps, _enc.norm_first, _dec.norm_first) == (1e-5, 1e-5, False, False)
    assert type(EncoderLayerParams(_mh, _enc.ffn, _enc.norm1, _enc.norm2, eps=0).eps) is float


def test_integer_eps_and_counts_are_accepted():
    assert layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2), 0).tolist() == [[-1.0, 1.0]]
    assert check_count("n", np.int64(3)) == 3 and type(check_count("n", np.int64(3))) is int
    assert causal_mask(np.int32(2)).tolist() == [[True, False], [True, True]]


# ---------------------------------------------------------------------------------------------
# The tolerance module: its bounds are sound and stay close to the rounding they bound
# ---------------------------------------------------------------------------------------------
# A float32 evaluation of each operation (a correct implementation computing with u = 2⁻²⁴) must
# lie within the tolerance module's conformance bound of the float64 reference (sound), and the
# bound may not exceed the error actually observed by more than TIGHTNESS (docs/design.md asks for a
# detection threshold within about two orders of magnitude of the rounding floor; the worst-case
# bounds over the observed errors on these inputs sit at 10–5000). Mutants of attnclaims/checks/bounds/
# that shrink a bound below the real error, or inflate it by orders of magnitude, fail here.

from attnclaims.checks import bounds as T  # noqa: E402  (imported by the section that uses it)

TIGHTNESS = 1e5
#: Operations whose float32 bound is too loose to be held to TIGHTNESS: the encoder and decoder layer bounds
#: compound the sub-layers' first-order bounds through layer norm and reach 1e5–1e9 times the observed
#: float32 error (an absolute bound of 0.2 for the encoder and up to ~300 for the decoder on outputs of
#: size ~1 on these inputs). Reported in docs/mutation.md; only soundness is asserted for them.
LOOSE = {"encoder layer", "decoder layer"}
_F32 = np.float32


def _sm32(s, axis=-1):
    s = s.astype(_F32)
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _attn32(q, k, v, mask=None, scale=None):
    q, k, v = (a.astype(_F32) for a in (q, k, v))
    scale = _F32(1 / np.sqrt(q.shape[-1])) if scale is None else _F32(scale)
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        s = np.where(mask, s, _F32(-np.inf))
    return _sm32(s) @ v


def _ln32(x, gamma, beta, eps):
    x = x.astype(_F32)
    mu = x.mean(axis=-1, keepdims=True)
    c = x - mu
    return gamma.astype(_F32) * c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + _F32(eps)) + beta.astype(_F32)


def _ffn32(x, p):
    x = x.astype(_F32)
    return np.maximum(_F32(0), x @ p.w1.astype(_F32) + p.b1.astype(_F32)) @ p.w2.astype(_F32) + p.b2.astype(_F32)


def _mha32(x_q, x_kv, p, mask=None):
    f = lambda a: np.asarray(a).astype(_F32)
    q, k, v = (split_heads(x @ f(w) + f(b), p.num_heads).astype(_F32)
               for x, w, b in ((f(x_q), p.w_q, p.b_q), (f(x_kv), p.w_k, p.b_k), (f(x_kv), p.w_v, p.b_v)))
    heads = _attn32(q, k, v, None if mask is None else np.asarray(mask)[..., None, :, :])
    return merge_heads(heads).astype(_F32) @ f(p.w_o) + f(p.b_o)


def _enc32(x, p, mask=None):
    x = x.astype(_F32)
    x = _ln32(x + _mha32(x, x, p.self_attn, mask), p.norm1.gamma, p.norm1.beta, p.eps)
    return _ln32(x + _ffn32(x, p.ffn), p.norm2.gamma, p.norm2.beta, p.eps)


def _dec32(y, mem, p):
    y, n = y.astype(_F32), y.shape[-2]
    y = _ln32(y + _mha32(y, y, p.self_attn, causal_mask(n)), p.norm1.gamma, p.norm1.beta, p.eps)
    y = _ln32(y + _mha32(y, mem, p.cross_attn), p.norm2.gamma, p.norm2.beta, p.eps)
    return _ln32(y + _ffn32(y, p.ffn), p.norm3.gamma, p.norm3.beta, p.eps)


def _cases():
    """(name, float32 result, float64 reference, conformance bound) for each operation, several seeds."""
    from attnclaims.reference.impl import reference as ref

    for seed in range(4):
        rng = np.random.default_rng(seed)
        n, d = 5 + seed, 4
        q, k, v = rng.normal(size=(2, n, d)) * 2, rng.normal(size=(2, n + 1, d)) * 2, rng.normal(size=(2, n + 1, 3))
        mask = rng.random((2, n, n + 1)) < 0.7
        mask[..., 0] = True
        x = rng.normal(size=(2, n, 8)) * (1 + seed)
        s = rng.normal(size=(3, n)) * 5
        enc = init_encoder_layer(rng, 8, 2, 16, norm_spread=0.5)
        dec = init_decoder_layer(rng, 8, 2, 16, norm_spread=0.5)
        g, b = 1 + rng.uniform(-0.5, 0.5, 8), rng.uniform(-0.5, 0.5, 8)
        f32 = _F32
        yield ("softmax", _sm32(s), ref.softmax(s.astype(f32)), T.conformance(T.softmax_error, s, -1, dtype=f32))
        for m in (None, mask):
            args = tuple(a.astype(f32) for a in (q, k, v))
            yield ("attention", _attn32(*args, m), ref.attention(*args, mask=m),
                   T.conformance(T.attention_error, *args, m, dtype=f32))
            yield ("attention weights", _attn32(args[0], args[1], np.eye(n + 1, dtype=f32), m),
                   ref.attention(args[0], args[1], np.eye(n + 1), mask=m),
                   T.conformance(T.attention_weights_error, args[0], args[1], m, dtype=f32))
        x32 = x.astype(f32)
        yield ("linear", x32 @ enc.ffn.w1.astype(f32) + enc.ffn.b1.astype(f32), x32 @ enc.ffn.w1 + enc.ffn.b1,
               T.conformance(T.linear_error, x32, enc.ffn.w1, enc.ffn.b1, dtype=f32))
        yield ("layer norm", _ln32(x32, g, b, 1e-5), ref.layer_norm(x32, g, b, 1e-5),
               T.conformance(T.layer_norm_error, x32, g, b, 1e-5, dtype=f32))
        yield ("feed forward", _ffn32(x32, enc.ffn), ref.feed_forward(x32, enc.ffn),
               T.conformance(T.feed_forward_error, x32, enc.ffn, dtype=f32))
        yield ("multi-head", _mha32(x32, x32, enc.self_attn, causal_mask(n)),
               ref.multi_head_attention(x32, x32, enc.self_attn, causal_mask(n)),
               T.conformance(T.multi_head_error, x32, x32, enc.self_attn, causal_mask(n), dtype=f32))
        yield ("encoder layer", _enc32(x32, enc), ref.encoder_layer(x32, enc),
               T.conformance(T.encoder_layer_error, x32, enc, dtype=f32))
        yield ("decoder layer", _dec32(x32, x32[:, :3], dec), ref.decoder_layer(x32, x32[:, :3], dec),
               T.conformance(T.decoder_layer_error, x32, x32[:, :3], dec, dtype=f32))
        pe32 = sinusoidal_encoding(40, 8).astype(f32)  # the definition, rounded once to float32
        yield ("positional encoding", pe32, sinusoidal_encoding(40, 8),
               T.conformance(T.positional_encoding_error, 40, 8, dtype=f32))


@pytest.mark.parametrize("what", ["softmax", "attention", "attention weights", "linear", "layer norm",
                                  "feed forward", "multi-head", "encoder layer", "decoder layer",
                                  "positional encoding"])
def test_tolerance_bounds_are_sound_and_tight_for_a_float32_evaluation(what):
    worst_ratio, loosest = 0.0, 0.0
    for name, out32, ref64, bound in _cases():
        if name != what:
            continue
        err = np.abs(out32.astype(np.float64) - ref64)
        assert bound.abs.shape == err.shape or np.broadcast_shapes(bound.abs.shape, err.shape) == err.shape
        assert np.all(err <= bound.abs), f"{what}: float32 error {err.max():.3g} exceeds the bound"
        worst_ratio = max(worst_ratio, float(np.max(err / np.where(bound.abs > 0, bound.abs, np.inf))))
        loosest = max(loosest, float(np.max(bound.abs)) / max(float(np.max(err)), np.finfo(np.float32).tiny))
    if what not in LOOSE:
        assert loosest <= TIGHTNESS, f"{what}: the bound is {loosest:.3g} times the largest observed error"
    assert worst_ratio > 0, f"{what}: no rounding error observed at all (the float32 evaluation is not float32)"


def test_row_sum_and_hull_bounds():
    for n in (1, 2, 7, 64):
        u = T.unit_roundoff(np.float32)
        rows = np.random.default_rng(n).normal(size=(200, n)) * 4
        sums = _sm32(rows).astype(np.float64).sum(axis=-1)
        b = T.row_sum_bound(np.float32, n)
        assert b.tol == u and np.all(np.abs(sums - 1) <= b.abs)
        assert float(b.abs) <= 100 * n * u + 100 * u
        v = np.random.default_rng(n).normal(size=(n, 3))
        slack = T.hull_slack(v, None, 4, dtype=np.float32)
        assert slack.tol == u and slack.abs.shape == (4, 3)
        assert np.all(slack.abs >= u * np.abs(v).max(axis=0)) and np.all(slack.abs <= 200 * (n + 2) * u * np.abs(v).max(axis=0))
    assert T.unit_roundoff(np.float64) == 2.0 ** -53 and T.unit_roundoff(np.float32) == 2.0 ** -24


# ---------------------------------------------------------------------------------------------
# The baselines (negative controls): messages and the corners their own tests leave open
# ---------------------------------------------------------------------------------------------

_Xb, _Wb, _Ub, _Sb, _Cb = np.ones((3, 2)), np.eye(4) * 0.5, np.ones((2, 4)), np.ones((3, 4)) * 0.1, np.ones((3, 2, 5))


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: tanh_rnn(_Xb, _Wb.astype(complex), _Ub),
                 'w.dtype=complex128, but should be a real floating or integer dtype', id="rnn-w-dtype"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, _Ub.astype(complex)),
                 'u.dtype=complex128, but should be a real floating or integer dtype', id="rnn-u-dtype"),
    pytest.param(lambda: tanh_rnn(_Xb, np.ones((4, 3)), _Ub),
                 'w.shape=(4, 3), but should be (d_h, d_h)', id="rnn-w-shape"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, np.ones(4)), 'u.shape=(4,), but should be (d_in, d_h)', id="rnn-u-shape"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, np.ones((2, 3))), 'u.shape[1]=3 != w.shape[0]=4', id="rnn-u-width"),
    pytest.param(lambda: tanh_rnn(np.ones((3, 5)), _Wb, _Ub), 'x.shape[-1]=5 != u.shape[0]=2', id="rnn-x-width"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, _Ub, b=np.ones(4, complex)),
                 'b.dtype=complex128, but should be a real floating or integer dtype', id="rnn-b-dtype"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, _Ub, b=np.ones(3)), 'b.shape=(3,), but should be (4,)', id="rnn-b-shape"),
    pytest.param(lambda: tanh_rnn(_Xb, _Wb, _Ub, h0=np.ones(4, complex)),
                 'h0.dtype=complex128, but should be a real floating or integer dtype', id="rnn-h0-dtype"),
    pytest.param(lambda: tanh_rnn(np.ones((3, 3, 2)), _Wb, _Ub, h0=np.ones((2, 4))),
                 'h0.shape[:-1]=(2,) does not broadcast with x.shape[:-2]=(3,)', id="rnn-h0-broadcast"),
    pytest.param(lambda: tanh_rnn(np.ones(2), _Wb, _Ub),
                 'x.ndim=1 (x.shape=(2,)), but should be >= 2', id="rnn-x-ndim"),
    pytest.param(lambda: tanh_rnn_step(np.zeros(4), np.array(1.0), _Wb, _Ub),
                 'x_t.ndim=0 (x_t.shape=()), but should be >= 1', id="step-x"),
    pytest.param(lambda: tanh_rnn_step(np.array(0.0), np.ones(2), _Wb, _Ub),
                 'h_prev.ndim=0 (h_prev.shape=()), but should be >= 1', id="step-h"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb.astype(complex), _Ub),
                 'a.dtype=complex128, but should be a real floating or integer dtype', id="lin-a-dtype"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb, _Ub.astype(complex)),
                 'b_mat.dtype=complex128, but should be a real floating or integer dtype', id="lin-bmat-dtype"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, np.ones((4, 3)), _Ub),
                 'a.shape=(4, 3), but should be (d_h, d_h) or (n, d_h, d_h)', id="lin-a-square"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, np.ones((3, 4, 3)), _Ub),
                 'a.shape=(3, 4, 3), but should be (d_h, d_h) or (n, d_h, d_h)', id="lin-a3-square"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, np.ones((2, 4, 4)), _Ub),
                 'a.shape[0]=2 != x.shape[-2]=3', id="lin-a3-n"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, np.ones(4), _Ub),
                 'a.shape=(4,), but should be (d_h, d_h) or (n, d_h, d_h)', id="lin-a-ndim"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb, np.ones(4)),
                 'b_mat.shape=(4,), but should be (d_in, d_h)', id="lin-bmat-shape"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb, np.ones((2, 3))),
                 'b_mat.shape[1]=3 != a.shape[-1]=4', id="lin-bmat-width"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb, _Ub, h0=np.ones(3)),
                 'h0.shape[-1]=3 != a.shape[-1]=4', id="lin-h0"),
    pytest.param(lambda: linear_rnn_sequential(_Xb, _Wb, _Ub, h0=np.ones(4, complex)),
                 'h0.dtype=complex128, but should be a real floating or integer dtype', id="lin-h0-dtype"),
    pytest.param(lambda: linear_rnn_sequential(np.ones(2), _Wb, _Ub),
                 'x.ndim=1 (x.shape=(2,)), but should be >= 2', id="lin-x"),
    pytest.param(lambda: linear_rnn_scan(np.ones(2), _Wb, _Ub),
                 'x.ndim=1 (x.shape=(2,)), but should be >= 2', id="scan-x"),
    pytest.param(lambda: linear_rnn_scan(_Xb.astype(complex), _Wb, _Ub),
                 'x.dtype=complex128, but should be a real floating or integer dtype', id="scan-x-dtype"),
    pytest.param(lambda: rnn_state_jacobian(np.ones(4), _Wb, 0, 1),
                 'states.ndim=1 (states.shape=(4,)), but should be >= 2', id="jac-states"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, np.ones((4, 3)), 0, 1),
                 'w.shape=(4, 3), but should be (d_h, d_h)', id="jac-w"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, _Wb.astype(complex), 0, 1),
                 'w.dtype=complex128, but should be a real floating or integer dtype', id="jac-w-dtype"),
    pytest.param(lambda: rnn_state_jacobian(_Sb.astype(complex), _Wb, 0, 1),
                 'states.dtype=complex128, but should be a real floating or integer dtype', id="jac-states-dtype"),
    pytest.param(lambda: rnn_state_jacobian(np.ones((3, 3)), _Wb, 0, 1),
                 'states.shape[-1]=3 != w.shape[0]=4', id="jac-width"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, _Wb, 2, 1),
                 't_from=2, t_to=1, but should satisfy 0 <= t_from <= t_to <= n=3', id="jac-range"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, _Wb, 0, 4),
                 't_from=0, t_to=4, but should satisfy 0 <= t_from <= t_to <= n=3', id="jac-range-n"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, _Wb, -1, 1), 't_from=-1, but should be >= 0', id="jac-from"),
    pytest.param(lambda: rnn_state_jacobian(_Sb, _Wb, 0, 1.5), 't_to=1.5, but should be an integer >= 0', id="jac-to"),
    pytest.param(lambda: rnn_input_jacobian(_Sb, _Wb, np.ones(4), 1),
                 'u.shape=(4,), but should be (d_in, d_h)', id="ijac-u"),
    pytest.param(lambda: rnn_input_jacobian(_Sb, _Wb, _Ub.astype(complex), 1),
                 'u.dtype=complex128, but should be a real floating or integer dtype', id="ijac-u-dtype"),
    pytest.param(lambda: rnn_input_jacobian(_Sb, _Wb, np.ones((2, 3)), 1),
                 'u.shape[1]=3 != w.shape[0]=4', id="ijac-u-width"),
    pytest.param(lambda: rnn_input_jacobian(_Sb, _Wb, _Ub, 4), 't_input=4, but should be <= n=3', id="ijac-t"),
    pytest.param(lambda: rnn_input_jacobian(_Sb, _Wb, _Ub, 0), 't_input=0, but should be >= 1', id="ijac-t0"),
    pytest.param(lambda: rnn_log_jacobian_norms(np.ones((2, 3, 4)), _Wb),
                 'states.shape=(2, 3, 4), but should be (n, d_h) (one sequence)', id="norms-states"),
    pytest.param(lambda: rnn_log_jacobian_norms(_Sb, _Wb, u=np.ones(4)),
                 'u.shape=(4,), but should be (d_in, d_h)', id="norms-u"),
    pytest.param(lambda: rnn_log_jacobian_norms(_Sb, _Wb, u=_Ub.astype(complex)),
                 'u.dtype=complex128, but should be a real floating or integer dtype', id="norms-u-dtype"),
    pytest.param(lambda: rnn_log_jacobian_norms(_Sb, _Wb, u=np.ones((2, 3))),
                 'u.shape[1]=3 != w.shape[0]=4', id="norms-u-width"),
    pytest.param(lambda: fixed_context_encoder(np.ones(6), np.ones((6, 2))),
                 'x.ndim=1 (x.shape=(6,)), but should be >= 2', id="ctx-x"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones((6, 2), complex)),
                 'w.dtype=complex128, but should be a real floating or integer dtype', id="ctx-w-dtype"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones(6)), 'w.shape=(6,), but should be (n*m, d)', id="ctx-w"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones((5, 2))),
                 'x.shape[-2]*x.shape[-1]=6 != w.shape[0]=5', id="ctx-w-rows"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones((6, 2)), b=np.ones(3)),
                 'b.shape[-1]=3 != w.shape[1]=2', id="ctx-b"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones((6, 1)), b=np.array(1.0)),
                 'b.shape[-1]=-1 != w.shape[1]=1', id="ctx-b-scalar"),
    pytest.param(lambda: fixed_context_encoder(_Xb, np.ones((6, 2)), b=np.ones(2, complex)),
                 'b.dtype=complex128, but should be a real floating or integer dtype', id="ctx-b-dtype"),
    pytest.param(lambda: conv1d(np.ones(2), np.ones((3, 2, 5))),
                 'x.ndim=1 (x.shape=(2,)), but should be >= 2', id="conv-x"),
    pytest.param(lambda: conv1d(_Xb, _Cb.astype(complex)),
                 'w.dtype=complex128, but should be a real floating or integer dtype', id="conv-w-dtype"),
    pytest.param(lambda: conv1d(_Xb, np.ones((2, 5))), 'w.shape=(2, 5), but should be (k, d_in, d_out)', id="conv-w"),
    pytest.param(lambda: conv1d(_Xb, np.ones((3, 4, 5))), 'x.shape[-1]=2 != w.shape[1]=4', id="conv-width"),
    pytest.param(lambda: conv1d(_Xb, _Cb, dilation=0), 'dilation=0, but should be >= 1', id="conv-dilation"),
    pytest.param(lambda: conv1d(_Xb, _Cb, padding="valid"),
                 "padding='valid', but should be one of ('causal', 'same')", id="conv-padding"),
    pytest.param(lambda: conv1d(_Xb, np.ones((0, 2, 5))),
                 'w.shape[0]=0, but should be >= 1 (the kernel size)', id="conv-k0"),
    pytest.param(lambda: conv1d(_Xb, _Cb, b=np.ones(4)), 'b.shape[-1]=4 != w.shape[2]=5', id="conv-b"),
    pytest.param(lambda: conv1d(_Xb, np.ones((3, 2, 1)), b=np.array(1.0)),
                 'b.shape[-1]=-1 != w.shape[2]=1', id="conv-b-scalar"),
    pytest.param(lambda: conv1d(_Xb, _Cb, b=np.ones(5, complex)),
                 'b.dtype=complex128, but should be a real floating or integer dtype', id="conv-b-dtype"),
    pytest.param(lambda: window_mask(-1, 2), 'n=-1, but should be >= 0', id="window-n"),
    pytest.param(lambda: window_mask(3, 0), 'window=0, but should be >= 1', id="window-r"),
    pytest.param(lambda: restricted_attention(np.ones(4), np.ones((3, 4)), np.ones((3, 2)), 2),
                 'q.ndim=1 (q.shape=(4,)), but should be >= 2', id="restricted-q"),
    pytest.param(lambda: restricted_attention(np.ones((3, 4)), np.ones(4), np.ones((3, 2)), 2),
                 'k.ndim=1 (k.shape=(4,)), but should be >= 2', id="restricted-k"),
    pytest.param(lambda: restricted_attention(np.ones((3, 4)), np.ones((2, 4)), np.ones((2, 2)), 2),
                 'q.shape[-2]=3 != k.shape[-2]=2', id="restricted-n"),
    pytest.param(lambda: l2_attention(np.ones(4), np.ones((4, 2))),
                 'x.ndim=1 (x.shape=(4,)), but should be >= 2', id="l2-x"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((2, 2), complex)),
                 'w_q.dtype=complex128, but should be a real floating or integer dtype', id="l2-wq-dtype"),
    pytest.param(lambda: l2_attention(_Xb, np.ones(2)), 'w_q.shape=(2,), but should be (d, d_k)', id="l2-wq"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((3, 2))), 'x.shape[-1]=2 != w_q.shape[0]=3', id="l2-wq-rows"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((2, 2)), w_v=np.ones(2)),
                 'w_v.shape=(2,), but should be (d, d_v)', id="l2-wv"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((2, 2)), w_v=np.ones((2, 2), complex)),
                 'w_v.dtype=complex128, but should be a real floating or integer dtype', id="l2-wv-dtype"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((2, 2)), w_v=np.ones((3, 2))),
                 'x.shape[-1]=2 != w_v.shape[0]=3', id="l2-wv-rows"),
    pytest.param(lambda: l2_attention(_Xb, np.ones((2, 2)), mask=np.ones((3, 2), bool)),
                 'mask.shape=(3, 2) does not broadcast to (3, 3)', id="l2-mask"),
])
def test_baselines_reject_invalid_input_with_exactly_this_message(call, message):
    _refused_with(call, message)


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: dot_product_scores(np.ones(3), _k), "q.ndim=1 (q.shape=(3,)), but should be >= 2", id="scores-q"),
    pytest.param(lambda: dot_product_scores(_q, np.ones(8)), "k.ndim=1 (k.shape=(8,)), but should be >= 2", id="scores-k"),
    pytest.param(lambda: additive_scores(np.ones(8), _k, np.ones((8, 3)), np.ones((8, 3)), np.ones(3)),
                 "q.ndim=1 (q.shape=(8,)), but should be >= 2", id="additive-q"),
    pytest.param(lambda: additive_scores(_q, np.ones(8), np.ones((8, 3)), np.ones((8, 3)), np.ones(3)),
                 "k.ndim=1 (k.shape=(8,)), but should be >= 2", id="additive-k"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3), complex), np.ones((8, 3)), np.ones(3)),
                 "w_q.dtype=complex128, but should be a real floating or integer dtype", id="additive-wq-dtype"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3), complex), np.ones(3)),
                 "w_k.dtype=complex128, but should be a real floating or integer dtype", id="additive-wk-dtype"),
    pytest.param(lambda: additive_scores(_q, _k, np.ones((8, 3)), np.ones((8, 3)), np.ones(3, complex)),
                 "v_a.dtype=complex128, but should be a real floating or integer dtype", id="additive-va-dtype"),
    pytest.param(lambda: FeedForwardParams(np.ones((4, 6), int), np.zeros(6), np.ones((6, 4)), B),
                 "w1.dtype=int64, but should be a floating dtype", id="ffp-w1-dtype"),
    pytest.param(lambda: LayerNormParams(np.ones(4, int), np.zeros(4)), "gamma.dtype=int64, but should be a floating dtype",
                 id="lnp-gamma-dtype"),
])
def test_more_messages(call, message):
    _refused_with(call, message)


@pytest.mark.parametrize("params", [_mh, _enc.ffn, _enc.norm1, _enc, _dec], ids=lambda p: type(p).__name__)
def test_parameter_containers_are_frozen(params):
    """docs/design.md "How we write" rule 2: parameters in frozen dataclasses (the guard's in-place check relies on it too)."""
    import dataclasses

    name = dataclasses.fields(params)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(params, name, getattr(params, name))


def test_default_scale_for_d_k_one_and_two_dimensional_additive_scores():
    q, k, v = _rng.normal(size=(3, 1)), _rng.normal(size=(4, 1)), _rng.normal(size=(4, 2))
    np.testing.assert_array_equal(attention(q, k, v), attention(q, k, v, scale=1.0))
    w_q, w_k, v_a = _rng.normal(size=(1, 3)), _rng.normal(size=(1, 3)), _rng.normal(size=3)
    scores = additive_scores(q, k, w_q, w_k, v_a)
    assert scores.shape == (3, 4)
    np.testing.assert_allclose(scores[2, 1], v_a @ np.tanh(q[2] @ w_q + k[1] @ w_k), rtol=1e-15)


def test_scan_of_an_empty_sequence():
    out = linear_rnn_scan(np.ones((0, 2)), _Wb, _Ub)
    assert out.states.shape == (0, 4) and out.combines == 0 and out.depth == 1


def test_log_jacobian_norms_of_a_zero_jacobian_are_minus_infinity():
    states = np.full((3, 4), 0.2)
    assert rnn_log_jacobian_norms(states, np.zeros((4, 4)), linear=True).tolist() == [-np.inf] * 3
    assert rnn_log_jacobian_norms(states, np.zeros((4, 4)), u=np.zeros((2, 4))).tolist() == [-np.inf] * 3


def test_rnn_jacobian_corners():
    states = _rng.normal(size=(2, 3, 4)) * 0.3  # two sequences
    w, u = _rng.normal(size=(4, 4)) * 0.5, _rng.normal(size=(2, 4))
    jac = rnn_state_jacobian(states, w, 2, 2)  # no step: the identity, for each sequence
    assert jac.shape == (2, 4, 4) and np.array_equal(jac, np.broadcast_to(np.eye(4), (2, 4, 4)))
    last = rnn_input_jacobian(states, w, u, 3)  # the last input acts through one step only
    np.testing.assert_allclose(last, (1 - states[:, 2, :, None] ** 2) * u.T, rtol=1e-15)
    h = tanh_rnn(np.ones((3, 5, 2)), _Wb, _Ub, h0=np.full(4, 0.1))  # one h0 for a batch of 3
    assert h.shape == (3, 5, 4)


# ---------------------------------------------------------------------------------------------
# The tolerance module's checks and Bound arithmetic (what every property test's verdict rests on)
# ---------------------------------------------------------------------------------------------

from attnclaims.guard import CheckFailure  # noqa: E402  (imported by the section that uses it)


def test_bound_arithmetic_and_the_two_comparison_bounds():
    a, b = T.Bound([1.0, 2.0], 0.5), T.Bound(np.array([3, 5]), 0.25)
    assert a.abs.dtype == np.float64 and b.abs.dtype == np.float64 and b.abs.tolist() == [3.0, 5.0]
    s = a + b
    assert s.abs.tolist() == [4.0, 7.0] and s.tol == 0.75
    for m in (a * 3, 3 * a):
        assert m.abs.tolist() == [3.0, 6.0] and m.tol == 1.5
    assert a.scale.tolist() == [2.0, 4.0]
    err = lambda x, *, u: u * np.asarray(x)
    u32, u64 = T.unit_roundoff(np.float32), T.U64
    c = T.conformance(err, [1.0, 2.0], dtype=np.float32)
    assert c.tol == u32 + u64 and c.abs.tolist() == [u32 + u64, 2 * (u32 + u64)]
    sc = T.self_consistency(err, [1.0, 2.0], dtype=np.float32)
    assert sc.tol == 2 * u32 and sc.abs.tolist() == [2 * u32, 4 * u32]


def test_assert_close_passes_within_and_reports_outside():
    bound = T.Bound([1e-3, 2e-3, 0.0], 1e-3)  # scale [1, 2, 0]
    assert T.assert_close([1.0, 2.0, 3.0], [1.0005, 2.001, 3.0], bound, "w") == pytest.approx(0.5e-3)
    assert T.assert_close([1.0, 2.0, 3.0], [1.001, 2.002, 3.0], bound, "w") == pytest.approx(1e-3)  # on the bound
    with pytest.raises(CheckFailure) as info:
        T.assert_close([1.0, 2.0, 3.0], [1.0, 2.0, 3.5], bound, "what", names=("a", "b"))
    assert str(info.value) == ("a is 14 % off b at index (2,): a = 3, b = 3.5, allowed |diff| <= 0 [what]; "
                               "max |a - b| / scale = inf > 0.001 (no finite tol passes)")
    assert info.value.measured == np.inf and info.value.bound == 1e-3
    with pytest.raises(CheckFailure) as info:
        T.assert_close([[1.0, 2.0]], [[1.0, 2.1]], T.Bound(1e-3, 1e-3), "w")
    assert str(info.value) == ("out is 4.8 % off the reference at index (0, 1): out = 2, ref = 2.1, allowed |diff| "
                               "<= 0.001 [w]; max |out - ref| / scale = 0.1 > 0.001 (the smallest tol that passes: 0.1)")
    assert info.value.measured == pytest.approx(0.1)
    with pytest.raises(CheckFailure) as info:
        T.assert_close(2.0, 2.5, T.Bound(1e-3, 1e-3), "w")
    assert str(info.value) == ("out is 20 % off the reference: out = 2, ref = 2.5, allowed |diff| <= 0.001 [w]; "
                               "max |out - ref| / scale = 0.5 > 0.001 (the smallest tol that passes: 0.5)")
    with pytest.raises(CheckFailure) as info:
        T.assert_close([1.0, np.nan], [1.0, 1.0], T.Bound(1.0, 1e-3), "w")
    assert info.value.measured == np.inf
    with pytest.raises(CheckFailure) as info:
        T.assert_close([1.0, 2.0], [1.0, 2.0, 3.0], T.Bound(1.0, 1.0), "w", names=("x", "y"))
    assert str(info.value) == "x.shape=(2,), but should be (3,) [w]"
    assert T.assert_close(np.zeros((0, 3)), np.zeros((0, 3)), T.Bound(1.0, 1.0), "w") == 0.0


def test_assert_within_and_exactly_zero_and_differs():
    bound = T.Bound(0.1, 0.1)  # scale 1
    assert T.assert_within([0.5, 1.05], [0.0, 0.0], [1.0, 1.0], bound, "w") == pytest.approx(0.05)
    assert T.assert_within([-0.05], [0.0], [1.0], bound, "w") == pytest.approx(0.05)
    with pytest.raises(CheckFailure) as info:
        T.assert_within([0.5, 1.5], [0.0, 0.0], [1.0, 1.0], bound, "w", name="y")
    assert str(info.value) == ("y is 0.5 outside [low, high] at index (1,): y = 1.5, [low, high] = [0, 1], allowed "
                               "excess <= 0.1 [w]; max |dist(y, [low, high]) - 0| / scale = 0.5 > 0.1 (the smallest "
                               "tol that passes: 0.5)")
    with pytest.raises(CheckFailure):
        T.assert_within([-0.5], [0.0], [1.0], bound, "w")
    with pytest.raises(CheckFailure) as info:
        T.assert_within([np.nan], [0.0], [1.0], bound, "w")
    assert info.value.measured == np.inf
    T.assert_exactly_zero(np.zeros((2, 2)), "w")
    with pytest.raises(CheckFailure) as info:
        T.assert_exactly_zero([[0.0, 0.0], [-3e-20, 2e-30]], "masked", name="a")
    assert str(info.value) == ("2 a should be exactly 0 but are not; max |a| = 3e-20 "
                               "(first at index (1, 0): -3e-20) [masked]")
    assert info.value.measured == 3e-20 and info.value.bound == 0.0
    with pytest.raises(CheckFailure) as info:
        T.assert_exactly_zero([np.nan], "w")
    assert info.value.measured == np.inf
    assert T.assert_differs([1.0, 2.0], [1.0, 2.5], bound, "w") == pytest.approx(0.5)
    assert T.assert_differs([1.0], [2.0], T.Bound(0.0, 0.1), "w") == np.inf  # zero scale: any difference
    with pytest.raises(CheckFailure) as info:
        T.assert_differs([1.0, 2.0], [1.0, 2.05], bound, "w")
    assert str(info.value) == "max |a - b| / scale = 0.05 <= 0.1: no difference beyond rounding [w]"
    assert info.value.measured == pytest.approx(0.05) and info.value.bound == 0.1


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: attention_from_scores(np.ones(3), np.ones((3, 2))),
                 "scores.ndim=1 (scores.shape=(3,)), but should be >= 2", id="from-scores-ndim"),
    pytest.param(lambda: attention_from_scores(np.ones((2, 3)), np.ones(3)), "v.ndim=1 (v.shape=(3,)), but should be >= 2",
                 id="from-scores-v"),
    pytest.param(lambda: attention_from_scores(np.ones((2, 3)), np.ones((3, 2)), mask=np.ones((2, 4), bool)),
                 "mask.shape=(2, 4) does not broadcast to (2, 3)", id="from-scores-mask"),
    pytest.param(lambda: attention(_q, _k, np.ones(5)), "v.ndim=1 (v.shape=(5,)), but should be >= 2", id="attention-v"),
    pytest.param(lambda: attention(_q, np.ones(8), _v), "k.ndim=1 (k.shape=(8,)), but should be >= 2", id="attention-k"),
])
def test_messages_of_attention_from_scores(call, message):
    _refused_with(call, message)


def test_attention_from_scores_normalises_the_last_axis_of_batched_scores():
    s, v = _rng.normal(size=(2, 3, 4)), _rng.normal(size=(2, 4, 5))
    out = attention_from_scores(s, v)
    for b in range(2):
        np.testing.assert_allclose(out[b], softmax(s[b]) @ v[b], rtol=1e-14)


def test_parameter_defaults_and_initialisation():
    """The documented defaults (Post-LN, eps 1e-5, γ = 1, β = 0) and the seeded Xavier / bias ranges."""
    enc = EncoderLayerParams(_mh, _enc.ffn, _enc.norm1, _enc.norm2)
    dec = DecoderLayerParams(_mh, _mh, _enc.ffn, _enc.norm1, _enc.norm2, _enc.norm1)
    for p in (enc, dec):
        assert p.norm_first is False and p.eps == 1e-5
    assert type(DecoderLayerParams(_mh, _mh, _enc.ffn, _enc.norm1, _enc.norm2, _enc.norm1, eps=0).eps) is float
    ln = init_layer_norm(6)
    assert ln.gamma.tolist() == [1.0] * 6 and ln.beta.tolist() == [0.0] * 6
    for layer in (init_encoder_layer(0, 8, 2, 16), init_decoder_layer(0, 8, 2, 16)):
        assert np.array_equal(layer.norm1.gamma, np.ones(8)) and np.array_equal(layer.norm2.beta, np.zeros(8))
    spread = init_layer_norm(5, 7, spread=0.5)
    draws = np.random.default_rng(7).uniform(-0.5, 0.5, size=10)
    np.testing.assert_array_equal(spread.gamma, 1.0 + draws[:5])
    np.testing.assert_array_equal(spread.beta, draws[5:])
    w = xavier_uniform(0, 300, 200)
    a = np.sqrt(6.0 / 500)
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.999 * a and w.min() < -0.999 * a
    mh, ff = init_multi_head(1, 64, 4), init_feed_forward(1, 64, 128)
    for b in (mh.b_q, mh.b_k, mh.b_v, mh.b_o, ff.b1, ff.b2):
        assert np.abs(b).max() <= 0.1 and b.max() > 0.08 and b.min() < -0.08
    for a_, b_ in ((init_encoder_layer(3, 8, 2, 16), init_encoder_layer(3, 8, 2, 16)),
                   (init_decoder_layer(3, 8, 2, 16), init_decoder_layer(3, 8, 2, 16))):
        assert np.array_equal(a_.self_attn.w_q, b_.self_attn.w_q) and np.array_equal(a_.ffn.w2, b_.ffn.w2)


def test_window_masks_and_a_three_dimensional_initial_state():
    rows = {r: window_mask(6, r)[3].astype(int).tolist() for r in range(1, 6)}
    assert rows == {1: [0, 0, 0, 1, 0, 0], 2: [0, 0, 0, 1, 1, 0], 3: [0, 0, 1, 1, 1, 0],
                    4: [0, 0, 1, 1, 1, 1], 5: [0, 1, 1, 1, 1, 1]}
    _refused_with(lambda: tanh_rnn(np.ones((3, 3, 2)), _Wb, _Ub, h0=np.ones((2, 2, 4))),
                  "h0.shape[:-1]=(2, 2) does not broadcast with x.shape[:-2]=(3,)")


# ---------------------------------------------------------------------------------------------
# The tolerance formulas are the ones their docstrings derive
# ---------------------------------------------------------------------------------------------
# A worst-case bound changed by a small factor stays sound and within the tightness window above,
# so it is pinned here against the formula its docstring states (a derivation and its code must
# not drift apart; changing a bound means changing both).

def test_softmax_bounds_follow_their_docstrings():
    t = np.array([0.0, -1.5, -4.0])
    for n in (1, 3, 10):
        assert np.array_equal(T.weight_relative_error(t, n), 2 * np.abs(t) + 8.0 * (n + 1) + 4.0 * np.log(n))
        u = T.unit_roundoff(np.float32)
        assert float(T.row_sum_bound(np.float32, n).abs) == u * (8.0 * (n + 1) + 6.0 * np.log(n)) + n * T.U64
    x = np.array([[1.0, 2.5, -0.5], [0.0, 0.0, 3.0]])
    u = 1e-8
    a = softmax(x)
    t = x - x.max(axis=-1, keepdims=True)
    want = a * u * (2 * np.abs(t) + 8.0 * 4 + 4.0 * np.log(3))
    np.testing.assert_allclose(T.softmax_error(x, u=u), want, rtol=1e-6)
    np.testing.assert_allclose(T.softmax_error(x.T, axis=0, u=u), want.T, rtol=1e-6)
    np.testing.assert_allclose(T.softmax_error(x.T, 0, u=u), want.T, rtol=1e-6)
    ex = np.array([[1e-9, 3e-9, 2e-9], [0.0, 1e-9, 0.0]])
    e_in = ex.max(axis=-1, keepdims=True)
    with_ex = a * ((1 + np.expm1(2 * e_in)) * (1 + u * (2 * np.abs(t) + 8.0 * 4 + 4.0 * np.log(3))) - 1)
    np.testing.assert_allclose(T.softmax_error(x, u=u, ex=ex), with_ex, rtol=1e-6)
    np.testing.assert_allclose(T.softmax_error(x.T, axis=0, u=u, ex=ex.T), with_ex.T, rtol=1e-6)
    assert T.softmax_error(np.array([0.0, -1e4]), u=u)[1] == 0.0  # an underflowed weight has bound 0
    assert T.softmax_error(np.array([0.0, 0.0]), u=0.5).max() == 1.0  # capped at 1


def test_score_and_linear_bounds_follow_their_docstrings():
    q, k = _rng.normal(size=(2, 3, 5)), _rng.normal(size=(2, 4, 5))
    eq, ek = np.full(q.shape, 1e-9), np.full(k.shape, 2e-9)
    u, s = 1e-8, 1 / np.sqrt(5)
    aq, ak = np.abs(q), np.abs(k)
    kt = lambda m: np.swapaxes(m, -1, -2)
    want = s * (u * (5 + 3) * (aq @ kt(ak)) + eq @ kt(ak) + aq @ kt(ek) + eq @ kt(ek))
    np.testing.assert_allclose(T.score_error(q, k, u=u, eq=eq, ek=ek), want, rtol=1e-12)
    np.testing.assert_allclose(T.score_error(q, k, 0.5, u=u), 0.5 * u * 8 * (aq @ kt(ak)), rtol=1e-12)
    x, w, b = _rng.normal(size=(3, 4)), _rng.normal(size=(4, 6)), _rng.normal(size=6)
    ex = np.full(x.shape, 1e-9)
    np.testing.assert_allclose(T.linear_error(x, w, b, u=u, ex=ex),
                               ex @ np.abs(w) + u * 5 * (np.abs(x) @ np.abs(w) + np.abs(b)), rtol=1e-12)
    np.testing.assert_allclose(T.linear_error(x, w, u=u), u * 5 * (np.abs(x) @ np.abs(w)), rtol=1e-12)
    v = _rng.normal(size=(4, 2))
    delta = float(T.row_sum_bound(np.float32, 4).abs)
    u32 = T.unit_roundoff(np.float32)
    np.testing.assert_allclose(T.hull_slack(v, None, 3, dtype=np.float32).abs,
                               np.broadcast_to((delta + u32 * 6) * np.abs(v).max(axis=0), (3, 2)), rtol=1e-12)


def test_check_boundaries_and_defaults():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        T.Bound(1.0, 1.0).tol = 2.0
    assert T.assert_close([1.0], [1.5], T.Bound(0.5, 0.5), "w") == 0.5  # measured == tol passes
    assert T.assert_close([1.0], [1.2], T.Bound(0.5, 1.0), "w") == pytest.approx(0.4)  # err 0.2 / scale 0.5
    with pytest.raises(CheckFailure) as info:
        T.assert_within([2.0], [0.0], [1.0], T.Bound(0.5, 0.5), "w")
    assert str(info.value).startswith("out is 1 outside [low, high] at index (0,): out = 2, [low, high] = [0, 1], allowed excess "
                                      "<= 0.5 [w]; max |dist(out, [low, high]) - 0| / scale = 1 > 0.5")
    with pytest.raises(CheckFailure):
        T.assert_differs([1.0, 2.0], [1.0, 2.0], T.Bound(0.0, 0.1), "w")  # zero scale, no difference
    with pytest.raises(CheckFailure):
        T.assert_differs(np.zeros(0), np.zeros(0), T.Bound(1.0, 0.1), "w")  # nothing to differ
    with pytest.raises(CheckFailure):
        T.assert_differs([1.0], [1.5], T.Bound(0.5, 0.5), "w")  # measured == tol: not beyond rounding
    assert T.assert_differs([1.0], [1.2], T.Bound(0.05, 0.1), "w") == pytest.approx(0.4)  # scale 0.5


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: multi_head_attention(np.ones(8), _x, _mh), "x_q.ndim=1 (x_q.shape=(8,)), but should be >= 2",
                 id="mha-xq-ndim"),
    pytest.param(lambda: multi_head_attention(_x, np.ones(8), _mh), "x_kv.ndim=1 (x_kv.shape=(8,)), but should be >= 2",
                 id="mha-xkv-ndim"),
    pytest.param(lambda: layer_norm(np.array(1.0), np.ones(1), np.zeros(1)), "x.ndim=0 (x.shape=()), but should be >= 1",
                 id="ln-x-ndim"),
    pytest.param(lambda: layer_norm(np.ones(2), np.ones(2, complex), np.zeros(2)),
                 "gamma.dtype=complex128, but should be a real floating or integer dtype", id="ln-gamma-dtype"),
    pytest.param(lambda: layer_norm(np.ones(2), np.ones(2), np.zeros(2, complex)),
                 "beta.dtype=complex128, but should be a real floating or integer dtype", id="ln-beta-dtype"),
    pytest.param(lambda: feed_forward(np.ones(8, complex), _enc.ffn),
                 "x.dtype=complex128, but should be a real floating or integer dtype", id="ffn-x-dtype"),
    pytest.param(lambda: decoder_layer(np.ones(8), _x, _dec), "y.ndim=1 (y.shape=(8,)), but should be >= 2", id="dec-y"),
    pytest.param(lambda: encoder(np.ones(8), []), "x.ndim=1 (x.shape=(8,)), but should be >= 2", id="encoder-x"),
    pytest.param(lambda: decoder(np.ones(8), _x, []), "y.ndim=1 (y.shape=(8,)), but should be >= 2", id="decoder-y"),
])
def test_messages_of_the_layers(call, message):
    _refused_with(call, message)


def test_layer_defaults_and_the_final_norm_eps():
    """eps defaults to 1e-5 (torch's LayerNorm); a stack's final norm takes the *last* layer's eps."""
    x = np.array([[1.0, 1.001, 0.999, 1.0005]])  # a tiny variance, where eps shows
    ln = init_layer_norm(4)
    np.testing.assert_array_equal(layer_norm(x, ln.gamma, ln.beta), layer_norm(x, ln.gamma, ln.beta, 1e-5))
    np.testing.assert_array_equal(encoder(x, [], final_norm=ln), layer_norm(x, ln.gamma, ln.beta, 1e-5))
    np.testing.assert_array_equal(encoder(x, []), x)
    np.testing.assert_array_equal(decoder(x, x, []), x)
    np.testing.assert_array_equal(feed_forward(x[0], init_feed_forward(0, 4, 6)),
                                  feed_forward(x, init_feed_forward(0, 4, 6))[0])
    from dataclasses import replace

    base = init_encoder_layer(0, 4, 2, 8)
    layers = [replace(base, eps=e) for e in (0.5, 0.25, 1e-5)]
    h = x
    for layer in layers:
        h = encoder_layer(h, layer)
    np.testing.assert_array_equal(encoder(x, layers, final_norm=ln), layer_norm(h, ln.gamma, ln.beta, 1e-5))
    one = encoder(x, layers[:1], final_norm=ln)
    np.testing.assert_array_equal(one, layer_norm(encoder_layer(x, layers[0]), ln.gamma, ln.beta, 0.5))


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: softmax(np.array(["1.0", "2.0"])), "x.dtype=<U3, but should be a real floating or integer dtype",
                 id="softmax-str"),
    pytest.param(lambda: frequencies(4, base=0.0), "base=0.0, but should be a finite number > 0", id="pe-base-zero"),
    pytest.param(lambda: add_positional_encoding(np.ones((5, 4)), np.ones((5, 4), complex)),
                 "pe.dtype=complex128, but should be a real floating or integer dtype", id="add-pe-dtype"),
])
def test_messages_of_inputs_and_encodings(call, message):
    _refused_with(call, message)


def test_encodings_edges_and_the_reference_object():
    from attnclaims.reference.impl import Reference

    np.testing.assert_allclose(frequencies(4, base=0.5), 0.5 ** (-np.array([0.0, 2.0]) / 4), rtol=1e-15)
    x, pe = np.ones((5, 4)), sinusoidal_encoding(5, 4)
    np.testing.assert_array_equal(add_positional_encoding(x, pe), x + pe)  # a table of exactly n rows
    table = learned_encoding(0, 2000, 4)
    assert abs(table.mean()) < 0.002 and 0.019 < table.std() < 0.021  # N(0, 0.02²)
    ref = Reference()
    assert (ref.default_scale, ref.decoder_causal, repr(ref)) == ("1/sqrt(d_k)", True, "Reference()")
    cube = _rng.normal(size=(2, 3, 4))
    np.testing.assert_array_equal(ref.softmax(cube), softmax(cube, axis=-1))


# ---------------------------------------------------------------------------------------------
# params: validation and shapes of the modern params (grouped-query heads, RMSNorm, gated FFN,
# rotary embeddings, decoder-only blocks, the activation menus, their init_* helpers)
# ---------------------------------------------------------------------------------------------
# Each test names the survivors of bench/mutation.sh it was written for; the equivalent ones are in
# docs/mutation.md. Messages are compared whole, defaults by their value and the seeded helpers
# draw for draw against the generator they are given.

_gqa = P.init_multi_head(0, 12, 6, num_kv_heads=3)  # d_k = 2, three K/V heads, two query heads each
_block = P.init_decoder_block(0, 8, 2, 16)
_gated = P.init_gated_feed_forward(0, 8, 16)
_rms = P.init_rms_norm(8)


def _mhp(num_heads=4, num_kv_heads=None, d=8, d_kv=8):
    w, b, w_kv, b_kv = np.ones((d, d)), np.zeros(d), np.ones((d, d_kv)), np.zeros(d_kv)
    return P.MultiHeadParams(w, w_kv, w_kv, w, b, b_kv, b_kv, b, num_heads=num_heads, num_kv_heads=num_kv_heads)


def _gffn(**change):
    parts = dict(w_gate=np.ones((4, 6)), b_gate=np.zeros(6), w_up=np.ones((4, 6)), b_up=np.zeros(6),
                 w_down=np.ones((6, 4)), b_down=np.zeros(4))
    parts.update(change)
    return P.GatedFeedForwardParams(**parts)


def _blockp(**change):
    parts = dict(self_attn=_block.self_attn, ffn=_block.ffn, norm1=_block.norm1, norm2=_block.norm2)
    parts.update(change)
    return P.DecoderBlockParams(**parts)


def _gelu_layer(init):
    from dataclasses import replace

    p = init(0, 4, 2, 6)
    return replace(p, ffn=replace(p.ffn, activation="gelu"))


_VJP_RELU_ONLY = ("{}: params.ffn.activation='gelu', but the encoder and decoder layers' backward passes take "
                  "the article's 'relu' FFN only")


@pytest.mark.parametrize("call, message", [
    # MultiHeadParams.num_kv_heads (35, 36, 38)
    pytest.param(lambda: _mhp(num_kv_heads=0), "num_kv_heads=0, but should be a positive integer or None",
                 id="gqa-kv-zero"),
    pytest.param(lambda: _mhp(num_kv_heads=True), "num_kv_heads=True, but should be a positive integer or None",
                 id="gqa-kv-bool"),
    pytest.param(lambda: _mhp(num_kv_heads="2"), "num_kv_heads='2', but should be a positive integer or None",
                 id="gqa-kv-str"),
    pytest.param(lambda: _mhp(num_kv_heads=3), "num_heads=4 is not divisible by num_kv_heads=3", id="gqa-kv-divides"),
    pytest.param(lambda: _gqa.kv_head_columns(3), "kv head index 3 is out of range for num_kv_heads=3",
                 id="gqa-kv-index-high"),
    pytest.param(lambda: _gqa.kv_head_columns(-1), "kv head index -1 is out of range for num_kv_heads=3",
                 id="gqa-kv-index-neg"),
    # init_multi_head (151, 153): num_kv_heads=0 must be refused before any `num_heads % 0`
    pytest.param(lambda: P.init_multi_head(0, 8, 4, num_kv_heads=3), "num_heads=4 is not divisible by num_kv_heads=3",
                 id="init-gqa-divides"),
    pytest.param(lambda: P.init_multi_head(0, 8, 4, num_kv_heads=0), "num_heads=4 is not divisible by num_kv_heads=0",
                 id="init-gqa-zero"),
    # FeedForwardParams.activation (81)
    pytest.param(lambda: P.FeedForwardParams(np.ones((4, 6)), np.zeros(6), np.ones((6, 4)), B, activation="tanh"),
                 "activation='tanh', but should be one of ('relu', 'gelu', 'gelu_tanh', 'silu')", id="ffp-activation"),
    # RMSNormParams (223, 225)
    pytest.param(lambda: P.RMSNormParams(np.ones((2, 2))), "gamma.shape=(2, 2), but should be (d_model,)",
                 id="rms-gamma-ndim"),
    pytest.param(lambda: P.RMSNormParams(np.ones(4, int)), "gamma.dtype=int64, but should be a floating dtype",
                 id="rms-gamma-dtype"),
    # GatedFeedForwardParams (235, 237, and the name in each field's message: 240 … 250)
    pytest.param(lambda: _gffn(w_gate=np.ones(4)), "w_gate.shape=(4,), but should be (d_model, d_ff)",
                 id="gated-w_gate-ndim"),
    pytest.param(lambda: _gffn(w_gate=np.ones((4, 6)), activation="relu"),
                 "activation='relu', but should be one of ('silu', 'gelu', 'gelu_tanh')", id="gated-activation"),
    *[pytest.param(lambda name=name, shape=shape: _gffn(**{name: np.ones(shape, int)}),
                   f"{name}.dtype=int64, but should be a floating dtype", id=f"gated-{name}-dtype")
      for name, shape in [("w_gate", (4, 6)), ("b_gate", 6), ("w_up", (4, 6)), ("b_up", 6), ("w_down", (6, 4)),
                          ("b_down", 4)]],
    *[pytest.param(lambda name=name, shape=shape: _gffn(**{name: np.ones(shape)}),
                   f"{name}.shape={shape}, but should be {want}", id=f"gated-{name}-shape")
      for name, shape, want in [("b_gate", (5,), (6,)), ("w_up", (4, 5), (4, 6)), ("b_up", (5,), (6,)),
                                ("w_down", (5, 4), (6, 4)), ("b_down", (5,), (4,))]],
    # RotaryParams (263 … 269): base > 1 exactly, finite, a real number
    pytest.param(lambda: P.RotaryParams(base=1), "base=1, but should be a finite number > 1", id="rope-base-one"),
    pytest.param(lambda: P.RotaryParams(base=0.5), "base=0.5, but should be a finite number > 1", id="rope-base-half"),
    pytest.param(lambda: P.RotaryParams(base=float("inf")), "base=inf, but should be a finite number > 1",
                 id="rope-base-inf"),
    pytest.param(lambda: P.RotaryParams(base="10"), "base='10', but should be a finite number > 1", id="rope-base-str"),
    pytest.param(lambda: P.RotaryParams(base=True), "base=True, but should be a finite number > 1", id="rope-base-bool"),
    pytest.param(lambda: P.RotaryParams(layout="pairs"), "layout='pairs', but should be one of ('interleaved', 'half')",
                 id="rope-layout"),
    # DecoderBlockParams (281 … 298)
    pytest.param(lambda: _blockp(self_attn=_block.ffn), "self_attn is FeedForwardParams, but should be MultiHeadParams",
                 id="block-self_attn"),
    pytest.param(lambda: _blockp(ffn=_block.norm1),
                 "ffn is LayerNormParams, but should be FeedForwardParams or GatedFeedForwardParams", id="block-ffn"),
    pytest.param(lambda: _blockp(norm2=_rms), "norm1 is LayerNormParams, norm2 is RMSNormParams, but should both be "
                 "LayerNormParams or both RMSNormParams", id="block-norms"),
    pytest.param(lambda: _blockp(rope="half"), "rope is str, but should be RotaryParams or None", id="block-rope-type"),
    pytest.param(lambda: _blockp(self_attn=P.init_multi_head(0, 6, 2), ffn=P.init_feed_forward(0, 6, 8),
                                 norm1=P.init_layer_norm(6), norm2=P.init_layer_norm(6), rope=P.RotaryParams()),
                 "rotary embeddings need an even head dimension, but d_k=3", id="block-rope-odd"),
    pytest.param(lambda: _blockp(ffn=P.init_feed_forward(0, 6, 8)),
                 "DecoderBlockParams.ffn.d_model=6 != self_attn.d_model=8", id="block-widths"),
    pytest.param(lambda: _blockp(eps=-1), "eps=-1, but should be a finite number >= 0", id="block-eps"),
    # init_decoder_block (332)
    pytest.param(lambda: P.init_decoder_block(0, 8, 2, 16, norm="batch"), "norm='batch', but should be 'layer' or 'rms'",
                 id="init-block-norm"),
    # the article's layers' backward passes refuse another activation, naming themselves
    pytest.param(lambda: encoder_layer_vjp(np.ones((2, 4)), _gelu_layer(P.init_encoder_layer), np.ones((2, 4))),
                 _VJP_RELU_ONLY.format("encoder_layer_vjp"), id="encoder-vjp-relu-only"),
])
def test_messages_of_the_modern_params(call, message):
    _refused_with(call, message)


def test_decoder_layer_takes_any_activation_and_its_vjp_only_relu():
    """The forward decoder layer takes every FFN activation (like the encoder layer); its vjp, whose FFN
    backward is ReLU's, refuses another one with its own name (never differentiates a GELU as a ReLU)."""
    p, y, mem = _gelu_layer(P.init_decoder_layer), np.ones((3, 4)), np.ones((2, 4))
    assert decoder_layer(y, mem, p).shape == (3, 4)
    _refused_with(lambda: decoder_layer_vjp(y, mem, p, np.ones((3, 4))),
                  _VJP_RELU_ONLY.format("decoder_layer_vjp"))


def test_grouped_query_heads_shapes_and_columns():
    """num_kv_heads narrows w_k, w_v, b_k, b_v to num_kv_heads·d_k; K/V head g owns columns [g·d_k, (g+1)·d_k)
    (21's twin and 53 are equivalent: w_q is square; 58 … 66 fall here)."""
    assert (_gqa.d_model, _gqa.d_k, _gqa.num_heads, _gqa.num_kv_heads, _gqa.group_size) == (12, 2, 6, 3, 2)
    assert _gqa.w_k.shape == _gqa.w_v.shape == (12, 6) and _gqa.b_k.shape == _gqa.b_v.shape == (6,)
    assert _gqa.w_q.shape == _gqa.w_o.shape == (12, 12) and _gqa.b_q.shape == _gqa.b_o.shape == (12,)
    assert [_gqa.kv_head_columns(g) for g in range(3)] == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert [_gqa.head_columns(i) for i in (0, 5)] == [slice(0, 2), slice(10, 12)]
    mh = _mhp(num_heads=np.int64(4), num_kv_heads=np.int64(2), d_kv=4)
    assert type(mh.num_kv_heads) is int and mh.num_kv_heads == 2 and mh.group_size == 2
    assert _mhp(num_heads=4).num_kv_heads == 4 and _mhp(num_heads=4).group_size == 1  # None: ordinary multi-head
    assert P.init_multi_head(0, 8, 4, num_kv_heads=1).w_k.shape == (8, 2)  # multi-query
    # a numpy integer head count: the shape a message names is plain integers, not ``np.int64(8)``
    with pytest.raises(ValueError, match=r"should be \(8, 8\)$"):
        _mhp(num_heads=np.int64(4), d_kv=3)


def test_modern_containers_store_arrays_defaults_and_properties():
    """Fields are stored converted (224, 239 … 249), the declared defaults hold (230, 231, 257, 270,
    273 … 279) and the properties are properties with their values (253, 254, 300 … 302)."""
    rms = P.RMSNormParams([2.0, 3.0])
    assert isinstance(rms.gamma, np.ndarray) and rms.gamma.tolist() == [2.0, 3.0] and rms.d_model == 2
    values = dict(w_gate=np.full((4, 6), 1.0), b_gate=np.full(6, 2.0), w_up=np.full((4, 6), 3.0), b_up=np.full(6, 4.0),
                  w_down=np.full((6, 4), 5.0), b_down=np.full(4, 6.0))
    g = P.GatedFeedForwardParams(**{n: v.tolist() for n, v in values.items()})
    for name, value in values.items():
        stored = getattr(g, name)
        assert isinstance(stored, np.ndarray) and np.array_equal(stored, value), name
    assert (g.d_model, g.d_ff, g.activation) == (4, 6, "silu")
    assert P.RotaryParams() == P.RotaryParams(base=10000.0, layout="half")
    assert P.RotaryParams().base == 10000.0 and type(P.RotaryParams(base=500).base) is float
    assert P.RotaryParams(base=1.5).base == 1.5 and P.RotaryParams(base=np.int64(2)).base == 2.0
    b = _blockp()
    assert (b.norm_first, b.eps, b.rope, b.d_model, b.norm) == (True, 1e-5, None, 8, "layer")
    assert type(_blockp(eps=0).eps) is float
    assert _blockp(norm1=_rms, norm2=P.init_rms_norm(8)).norm == "rms"
    assert _blockp(ffn=_gated, rope=P.RotaryParams()).rope == P.RotaryParams()


@pytest.mark.parametrize("params", [_rms, _gated, P.RotaryParams(), _block], ids=lambda p: type(p).__name__)
def test_modern_parameter_containers_are_frozen(params):
    """218, 228, 255, 271: like the article's containers (docs/design.md "How we write" rule 2)."""
    import dataclasses

    name = dataclasses.fields(params)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(params, name, getattr(params, name))


def test_bfloat16_weights_are_floating():
    """6: ml_dtypes' bfloat16 is not a numpy floating subtype, yet it is a floating dtype (the bfloat16 adapters'
    weights)."""
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    assert P.RMSNormParams(np.ones(4, bf16)).gamma.dtype == bf16
    assert P.init_multi_head(0, 8, 2, dtype=bf16).w_q.dtype == bf16


def test_activation_menus():
    """The menus are the documented ones (203 … 213); the protocol's copy of the non-gated menu agrees; each name
    builds its container."""
    from attnclaims import protocol

    assert P.FFN_ACTIVATIONS == protocol._FFN_ACTIVATIONS == ("relu", "gelu", "gelu_tanh", "silu")
    assert P.GATED_ACTIVATIONS == ("silu", "gelu")
    assert P.GATED_ACTIVATION_CHOICES == ("silu", "gelu", "gelu_tanh")
    assert P.ROPE_LAYOUTS == ("interleaved", "half")
    for a in P.FFN_ACTIVATIONS:
        assert P.init_feed_forward(0, 4, 6, activation=a).activation == a
    for a in P.GATED_ACTIVATION_CHOICES:
        assert P.init_gated_feed_forward(0, 4, 6, activation=a).activation == a


def test_modern_init_helpers_draw_from_the_given_generator():
    """init_rms_norm (303 … 306), init_gated_feed_forward (308 … 313) and init_decoder_block (316 … 326):
    defaults, and every draw in order from the generator they are handed."""
    assert P.init_rms_norm(5).gamma.tolist() == [1.0] * 5
    draws = np.random.default_rng(7).uniform(-0.5, 0.5, size=5)
    np.testing.assert_array_equal(P.init_rms_norm(5, 7, spread=0.5).gamma, 1.0 + draws)

    rng = np.random.default_rng(5)
    want = dict(w_gate=P.xavier_uniform(rng, 4, 6), b_gate=rng.uniform(-0.1, 0.1, 6),
                w_up=P.xavier_uniform(rng, 4, 6), b_up=rng.uniform(-0.1, 0.1, 6),
                w_down=P.xavier_uniform(rng, 6, 4), b_down=rng.uniform(-0.1, 0.1, 4))
    g = P.init_gated_feed_forward(5, 4, 6)
    assert g.activation == "silu"
    for name, value in want.items():
        np.testing.assert_array_equal(getattr(g, name), value, err_msg=name)

    b = P.init_decoder_block(3, 8, 2, 16)
    assert (b.norm_first, b.eps, b.rope, b.norm, b.ffn.activation) == (True, 1e-5, None, "layer", "relu")
    assert isinstance(b.ffn, P.FeedForwardParams)
    for ln in (b.norm1, b.norm2):
        assert ln.gamma.tolist() == [1.0] * 8 and ln.beta.tolist() == [0.0] * 8
    rng = np.random.default_rng(3)
    ffn, attn = P.init_feed_forward(rng, 8, 16), P.init_multi_head(rng, 8, 2)  # the FFN is drawn first
    np.testing.assert_array_equal(b.ffn.w1, ffn.w1)
    np.testing.assert_array_equal(b.self_attn.w_q, attn.w_q)
    np.testing.assert_array_equal(b.self_attn.b_o, attn.b_o)

    assert P.init_decoder_block(0, 8, 2, 16, ffn="mlp").ffn.activation == "relu"
    mlp = P.init_decoder_block(0, 8, 2, 16, ffn="mlp", activation="gelu").ffn
    assert isinstance(mlp, P.FeedForwardParams) and mlp.activation == "gelu"
    assert P.init_decoder_block(0, 8, 2, 16, ffn="relu", activation="gelu").ffn.activation == "relu"
    gated = P.init_decoder_block(0, 8, 2, 16, ffn="gelu_tanh").ffn
    assert isinstance(gated, P.GatedFeedForwardParams) and gated.activation == "gelu_tanh"
    rms = P.init_decoder_block(0, 8, 2, 16, norm="rms", num_kv_heads=1, rope=P.RotaryParams(layout="interleaved"))
    assert rms.norm == "rms" and rms.self_attn.num_kv_heads == 1 and rms.rope.layout == "interleaved"


def test_annotations_resolve():
    """The public annotations name what they say (typing.get_type_hints, as documentation tools and type checkers
    read them): 11, 277 (``X | None`` → ``X & None``) and wiring.py's aliases (336, 337)."""
    import typing
    from collections.abc import Callable

    from attnclaims.reference import wiring

    assert typing.get_type_hints(P.MultiHeadParams)["num_kv_heads"] == (int | None)
    assert typing.get_type_hints(P.DecoderBlockParams)["rope"] == (P.RotaryParams | None)
    hints = typing.get_type_hints(wiring.residual_sublayer)
    assert hints["x"] is np.ndarray and hints["return"] is np.ndarray
    assert hints["sublayer"] == hints["norm"] == Callable[[np.ndarray], np.ndarray]


# ---------------------------------------------------------------------------------------------
# attention.py: validation and corners of the modern functions (causal attention and its vjp, the
# softmax and attention vjps, the multi-head softmax, softmax over several axes, the returned
# log-sum-exp, logit soft-capping, ALiBi)
# ---------------------------------------------------------------------------------------------
# Each test names the survivors of bench/mutation.sh (lines of attnclaims/reference/attention.py) it
# was written for; the equivalent ones are in docs/mutation.md. The kernel features' own tests
# (tests/reference/test_reference_scores.py) are not among the tests bench/mutation.sh runs for this
# file, so their validation and corners are pinned here too.

_d_out = np.ones((2, 3, 4))  # the output's shape for _q, _k, _v


@pytest.mark.parametrize("call, message", [
    # causal_attention (271 … 274) and causal_attention_vjp (376 … 378)
    pytest.param(lambda: causal_attention(_q[0, 0], _k, _v), "q.ndim=1 (q.shape=(8,)), but should be >= 2",
                 id="causal-q"),
    pytest.param(lambda: causal_attention(_q, _k[0, 0], _v), "k.ndim=1 (k.shape=(8,)), but should be >= 2",
                 id="causal-k"),
    pytest.param(lambda: causal_attention(_q, _k, _v, alignment="center"),
                 "alignment='center', but should be one of ('top-left', 'bottom-right')", id="causal-alignment"),
    pytest.param(lambda: causal_attention_vjp(_q[0, 0], _k, _v, _d_out), "q.ndim=1 (q.shape=(8,)), but should be >= 2",
                 id="causal-vjp-q"),
    pytest.param(lambda: causal_attention_vjp(_q, _k[0, 0], _v, _d_out), "k.ndim=1 (k.shape=(8,)), but should be >= 2",
                 id="causal-vjp-k"),
    pytest.param(lambda: causal_attention_vjp(_q, _k, _v, _d_out, alignment="center"),
                 "alignment='center', but should be one of ('top-left', 'bottom-right')", id="causal-vjp-alignment"),
    # softmax_vjp (312 … 315)
    pytest.param(lambda: softmax_vjp(np.array(1.0), np.array(1.0)), "x.ndim=0 (x.shape=()), but should be >= 1",
                 id="softmax-vjp-x"),
    pytest.param(lambda: softmax_vjp(np.ones(3), np.ones(3, complex)),
                 "d_out.dtype=complex128, but should be a real floating or integer dtype", id="softmax-vjp-d-dtype"),
    pytest.param(lambda: softmax_vjp(np.ones(3), np.ones(4)), "d_out.shape=(4,), but should be x.shape=(3,)",
                 id="softmax-vjp-d-shape"),
    # attention_vjp (347 … 359)
    pytest.param(lambda: attention_vjp(_q[0, 0], _k, _v, _d_out), "q.ndim=1 (q.shape=(8,)), but should be >= 2",
                 id="attention-vjp-q"),
    pytest.param(lambda: attention_vjp(_q, _k[0, 0], _v, _d_out), "k.ndim=1 (k.shape=(8,)), but should be >= 2",
                 id="attention-vjp-k"),
    pytest.param(lambda: attention_vjp(_q, _k, _v[0, 0], _d_out), "v.ndim=1 (v.shape=(4,)), but should be >= 2",
                 id="attention-vjp-v"),
    pytest.param(lambda: attention_vjp(_q, _k[..., :6], _v, _d_out), "q.shape[-1]=8 != k.shape[-1]=6",
                 id="attention-vjp-dk"),
    pytest.param(lambda: attention_vjp(_q, _k, _v[..., :4, :], _d_out), "k.shape[-2]=5 != v.shape[-2]=4",
                 id="attention-vjp-nk"),
    pytest.param(lambda: attention_vjp(_q, _k, _v, _d_out[0, 0]), "d_out.ndim=1 (d_out.shape=(4,)), but should be >= 2",
                 id="attention-vjp-d-ndim"),
    pytest.param(lambda: attention_vjp(_q, _k, _v, _d_out[0]),
                 "d_out.shape=(3, 4), but should be (2, 3, 4) (the output's shape)", id="attention-vjp-d-shape"),
    pytest.param(lambda: attention_vjp(_q, _k, _v, _d_out, mask=np.ones((3, 5))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="attention-vjp-mask"),
    # softmax over several axes: _axes (402 … 413), softmax_axes and its vjp (435 … 450)
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=()), "axis=(), but should name at least one axis",
                 id="axes-empty"),
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=(0, 1.5)),
                 "axis=(0, 1.5), but should be an int or a tuple of ints", id="axes-float"),
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=(True,)),
                 "axis=(True,), but should be an int or a tuple of ints", id="axes-bool"),
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=(0, 2)), "axis=(0, 2) is out of range for x.ndim=2",
                 id="axes-high"),
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=(-3, 1)), "axis=(-3, 1) is out of range for x.ndim=2",
                 id="axes-low"),
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), axis=[1, -1]), "axis=[1, -1] names an axis twice",
                 id="axes-twice"),
    pytest.param(lambda: softmax_axes(np.array(1.0)), "x.ndim=0 (x.shape=()), but should be >= 1", id="axes-x"),
    *[pytest.param(call, "x has 1 NaN or +inf entries at unmasked positions, but should be finite there (-inf is "
                   "allowed and gets weight 0)", id=f"axes-nan-{name}") for name, call in [
        ("unmasked", lambda: softmax_axes(np.array([[0.0, np.nan], [1.0, 2.0]]))),
        ("masked", lambda: softmax_axes(np.array([[0.0, np.nan], [np.inf, 2.0]]), mask=np.array([[1, 1], [0, 1]], bool))),
        ("vjp", lambda: softmax_axes_vjp(np.array([[0.0, np.inf], [1.0, 2.0]]), np.ones((2, 2)))),
    ]],
    pytest.param(lambda: softmax_axes(np.ones((2, 3)), mask=np.ones((2, 3))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="axes-mask"),
    pytest.param(lambda: softmax_axes_vjp(np.array(1.0), np.array(1.0)), "x.ndim=0 (x.shape=()), but should be >= 1",
                 id="axes-vjp-x"),
    pytest.param(lambda: softmax_axes_vjp(np.ones((2, 3)), np.ones((2, 3), complex)),
                 "d_out.dtype=complex128, but should be a real floating or integer dtype", id="axes-vjp-d-dtype"),
    pytest.param(lambda: softmax_axes_vjp(np.ones((2, 3)), np.ones((3, 2))),
                 "d_out.shape=(3, 2), but should be x.shape=(2, 3)", id="axes-vjp-d-shape"),
    pytest.param(lambda: softmax_axes_vjp(np.ones((2, 3)), np.ones((2, 3)), axis=(0, 0)),
                 "axis=(0, 0) names an axis twice", id="axes-vjp-axis"),
    # attention_lse (468 … 474)
    pytest.param(lambda: attention_lse(_q, _k, _v, mask=np.ones((3, 5))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="lse-mask"),
    # softcap (490 … 505): a finite number > 0
    *[pytest.param(lambda cap=cap: softcap_scores(_q, _k, cap), f"softcap={cap!r}, but should be a finite number > 0",
                   id=f"softcap-{cap!r}") for cap in (0, -1.0, float("inf"), float("nan"), "1")],
    pytest.param(lambda: softcap_attention(_q, _k, _v, True), "softcap=True, but should be a finite number > 0",
                 id="softcap-bool"),
    # ALiBi (520 … 554)
    pytest.param(lambda: alibi_slopes(0), "num_heads=0, but should be >= 1", id="alibi-slopes-zero"),
    pytest.param(lambda: alibi_bias(2, 3, np.ones((1, 2))), "slopes.shape=(1, 2), but should be (num_heads,)",
                 id="alibi-bias-slopes"),
    pytest.param(lambda: alibi_bias(2, 3, np.ones(2, complex)),
                 "slopes.dtype=complex128, but should be a real floating or integer dtype", id="alibi-bias-dtype"),
    pytest.param(lambda: alibi_attention(_q[0], _k, _v, np.ones(2)), "q.ndim=2 (q.shape=(3, 8)), but should be >= 3",
                 id="alibi-q"),
    pytest.param(lambda: alibi_attention(_q, _k[0], _v, np.ones(2)), "k.ndim=2 (k.shape=(5, 8)), but should be >= 3",
                 id="alibi-k"),
    pytest.param(lambda: alibi_attention(_q, _k, _v[0], np.ones(2)), "v.ndim=2 (v.shape=(5, 4)), but should be >= 3",
                 id="alibi-v"),
    pytest.param(lambda: alibi_attention(_q, _k, _v, np.ones(3)),
                 "slopes.shape=(3,), but should be (2,) (one slope per head, axis -3)", id="alibi-slopes"),
    pytest.param(lambda: alibi_attention(_q, _k, _v, np.ones(2, complex)),
                 "slopes.dtype=complex128, but should be a real floating or integer dtype", id="alibi-slopes-dtype"),
    pytest.param(lambda: alibi_attention(_q, _k, _v[:, :4], np.ones(2)), "s.shape[-1]=5 != v.shape[-2]=4",
                 id="alibi-nk"),
    pytest.param(lambda: alibi_attention(_q, _k, _v, np.ones(2), mask=np.ones((2, 3, 5))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="alibi-mask"),
])
def test_messages_of_the_modern_attention(call, message):
    _refused_with(call, message)


def test_causal_attention_defaults_to_top_left_and_takes_two_dimensional_inputs():
    """causal_attention and its vjp default to the top-left alignment (265, 369) and take q, k of two axes
    (271, 272, 377, 378: min_ndim 2, not 3)."""
    q, k, v, d = _q[0], _k[0], _v[0], np.ones((3, 4))  # n_q = 3 < n_k = 5: the alignments differ
    mask = causal_mask(3, 5)
    np.testing.assert_array_equal(causal_attention(q, k, v), attention(q, k, v, mask=mask))
    for got, want in zip(causal_attention_vjp(q, k, v, d), attention_vjp(q, k, v, d, mask=mask)):
        np.testing.assert_array_equal(got, want)


def test_softmax_vjp_does_not_read_the_gradient_where_the_weight_is_zero():
    """dx = p ⊙ (d − ⟨p, d⟩) with d read only where p > 0 (297: ``p >= 0`` reads a NaN at a weight of 0 and
    poisons ⟨p, d⟩)."""
    dx = softmax_vjp(np.array([0.0, -np.inf, 0.0]), np.array([1.0, np.nan, 3.0]))
    assert dx.tolist() == [-0.5, 0.0, 0.5]  # p = (1/2, 0, 1/2), ⟨p, d⟩ = 2


def test_row_softmax_of_the_multi_head_backward_subtracts_the_max_and_zeroes_empty_rows():
    """The dtype-generic softmax of the multi-head and block backward passes: shifted by the row max (290: ``s + m``
    overflows for scores of 800) and a row with nothing allowed all zeros (292: ``total >= 0`` divides 0 by 0)."""
    s = np.array([[800.0, 800.0], [1.0, 2.0]])
    allowed = np.array([[True, True], [False, False]])
    assert _row_softmax(s, allowed).tolist() == [[0.5, 0.5], [0.0, 0.0]]
    assert _row_softmax(s[:1], None).tolist() == [[0.5, 0.5]]
    p = _row_softmax(np.array([[0.0, np.log(3.0)]], dtype=np.float32), None)
    assert p.dtype == np.float32 and np.allclose(p, [[0.25, 0.75]], rtol=1e-6, atol=0)


def _flat_softmax(f, x, axes, *others):
    """f over the last axis with ``axes`` moved to the end and flattened (an independent _over_axes)."""
    ends = tuple(range(-len(axes), 0))
    moved = [np.moveaxis(a, axes, ends) for a in (x,) + others]
    shape = moved[0].shape
    out = f(*[m.reshape(shape[:-len(axes)] + (-1,)) for m in moved]).reshape(shape)
    return np.moveaxis(out, ends, axes)


def test_softmax_over_axes_is_the_softmax_of_the_flattened_slice():
    """Every axis form (402 … 414: a tuple, a list, negative, unsorted, one int, a numpy int) and the masked and
    unmasked paths (436 … 440) against the flattened slice; the vjp likewise (446 … 451); softmax and softmax_vjp
    hand a tuple of axes on (115, 311)."""
    rng = np.random.default_rng(5)
    x, d = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    mask = rng.random((2, 3, 4)) < 0.7
    mask[:, 0, 0] = False  # the slice at axis 1 = 0 … and one with nothing allowed
    mask[:, 1, :] = False
    want = _flat_softmax(lambda a: softmax(a, -1), x, (0, 2))
    assert np.allclose(want.sum(axis=(0, 2)), 1.0, rtol=1e-15, atol=0)
    for axis in ((0, 2), [2, 0], (-3, -1), (0, np.int64(-1))):
        np.testing.assert_allclose(softmax_axes(x, axis), want, rtol=1e-15, atol=0, err_msg=str(axis))
    np.testing.assert_allclose(softmax(x, axis=(0, 2)), want, rtol=1e-15, atol=0)
    masked = _flat_softmax(lambda a, m: softmax(a, -1, mask=m), x, (0, 2), mask)
    assert (masked[:, 1, :] == 0.0).all() and (masked[:, 0, 0] == 0.0).all()
    np.testing.assert_allclose(softmax_axes(x, (2, 0), mask=mask), masked, rtol=1e-15, atol=0)
    np.testing.assert_allclose(softmax_axes(x, (1, 2)), _flat_softmax(lambda a: softmax(a, -1), x, (1, 2)),
                               rtol=1e-15, atol=0)
    for axis in (1, np.int64(-2)):
        np.testing.assert_allclose(softmax_axes(x, axis), softmax(x, axis=1), rtol=1e-15, atol=0)
    # one axis of three (the flattened slice keeps two other axes) and every axis (none is left), masked
    np.testing.assert_allclose(softmax_axes(x, (1,), mask=mask), softmax(x, axis=1, mask=mask), rtol=1e-15, atol=0)
    np.testing.assert_allclose(softmax_axes(x[0], (0, 1), mask=mask[0]).ravel(),
                               softmax(x[0].ravel(), mask=mask[0].ravel()), rtol=1e-15, atol=0)
    # the default axes are the last two, also for three axes (426, 440)
    np.testing.assert_allclose(softmax_axes(x), _flat_softmax(lambda a: softmax(a, -1), x, (1, 2)), rtol=1e-15, atol=0)
    np.testing.assert_allclose(softmax_axes_vjp(x, d), _flat_softmax(lambda a, g: softmax_vjp(a, g, -1), x, (1, 2), d),
                               rtol=1e-13, atol=1e-16)
    dx = _flat_softmax(lambda a, g: softmax_vjp(a, g, -1), x, (0, 2), d)
    np.testing.assert_allclose(softmax_axes_vjp(x, d, (0, 2)), dx, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(softmax_vjp(x, d, axis=[2, 0]), dx, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(softmax_axes_vjp(x[0], d[0]), _flat_softmax(lambda a, g: softmax_vjp(a, g, -1),
                               x[0], (0, 1), d[0]), rtol=1e-13, atol=1e-16)  # the default axes: the last two


def test_lse_corners():
    """lse = m + log Σ exp(s − m) over the allowed keys (476 … 487): log n for equal scores, the max plus log 2
    for two huge ones (no overflow), −inf for a query with nothing allowed; q of two axes (469 … 471: min_ndim 2);
    q's batch broadcast against k's (472, 473)."""
    q, k, v = np.zeros((2, 3, 4)), _k[:1, :, :4], _v[:1]
    mask = np.array([[True] * 5, [True, True, False, False, False], [False] * 5])
    out, lse = attention_lse(q, k, v, mask=mask)
    assert lse.shape == (2, 3) and lse.tolist() == [[math.log(5.0), math.log(2.0), -math.inf]] * 2
    np.testing.assert_array_equal(out, attention(q, k, v, mask=mask))
    for sign, scale in ((1.0, 1.0), (-1.0, 1.0), (1.0, 2.0)):
        out, lse = attention_lse(np.array([[sign * 1000.0]]), np.ones((2, 1)), np.array([[1.0], [3.0]]), scale=scale)
        assert lse.tolist() == [sign * 1000.0 * scale + math.log(2.0)] and out.tolist() == [[2.0]]
    _, lse = attention_lse(np.array([[1000.0]]), np.array([[1.0], [2.0]]), np.ones((2, 1)),
                           mask=np.array([[False, True]]))
    assert lse.tolist() == [2000.0]  # one allowed key: its score exactly (the default scale is 1 for d_k = 1)


def test_softcap_is_c_tanh_of_the_scaled_scores_over_c():
    """S' = c·tanh(S/c) after the scale (497 … 513), a cap of any real number type (490 … 494), attention over the
    capped scores with the mask."""
    s = dot_product_scores(_q, _k, 0.9)
    want = 2.5 * np.tanh(s / 2.5)
    np.testing.assert_array_equal(softcap_scores(_q, _k, 2.5, scale=0.9), want)
    mask = np.arange(5) < np.array([[1], [3], [5]])
    np.testing.assert_array_equal(softcap_attention(_q, _k, _v, 2.5, mask=mask, scale=0.9),
                                  attention_from_scores(want, _v, mask))
    for cap in (2, np.int64(2), np.float32(2.0), 2.0, 1, 0.5):  # any real number type, any size > 0
        c = float(cap)
        np.testing.assert_array_equal(softcap_scores(_q, _k, cap), c * np.tanh(dot_product_scores(_q, _k) / c))
    assert np.abs(softcap_scores(np.full((1, 1), 1e200), np.full((1, 1), 1e200), 3.0)).tolist() == [[3.0]]


def test_alibi_slopes_bias_and_attention_values():
    """Press et al.'s slopes (520 … 526) for powers of two and between them, the bias −m·(p_i − j) with
    bottom-right positions (533 … 538), and alibi_attention as attention over the biased scores under the
    bottom-right causal mask and the padding mask (548 … 562), heads broadcast from any of q, k, v (552), zero rows
    for n_q > n_k."""
    assert alibi_slopes(8).tolist() == [2.0 ** -e for e in range(1, 9)]
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    assert alibi_slopes(np.int64(2)).tolist() == [2.0 ** -4, 2.0 ** -8]
    assert alibi_slopes(3).tolist() == [2.0 ** -4, 2.0 ** -8, 2.0 ** -2]
    assert alibi_slopes(6).tolist() == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    bias = alibi_bias(2, 4, [1.0, 0.5])
    assert bias.shape == (2, 2, 4)
    assert bias.tolist() == [[[-2.0, -1.0, 0.0, 1.0], [-3.0, -2.0, -1.0, 0.0]],
                             [[-1.0, -0.5, 0.0, 0.5], [-1.5, -1.0, -0.5, 0.0]]]
    slopes = np.array([0.5, 0.25])
    pad = np.array([True, True, False, True, True])
    s = dot_product_scores(_q, _k, 0.7) + alibi_bias(3, 5, slopes)
    causal = np.arange(5) <= np.arange(3)[:, None] + 2  # bottom-right: query i sees keys 0 … i + 2
    np.testing.assert_array_equal(alibi_attention(_q, _k, _v, slopes, mask=pad, scale=0.7),
                                  attention_from_scores(s, _v, causal & pad))
    for which in range(3):  # the head count from whichever of q, k, v has two heads (the others broadcast one)
        qq, kk, vv = (t if i == which else t[:1] for i, t in enumerate((_q, _k, _v)))
        s = dot_product_scores(qq, kk) + alibi_bias(3, 5, slopes)
        np.testing.assert_array_equal(alibi_attention(qq, kk, vv, slopes), attention_from_scores(s, vv, causal))
    out = alibi_attention(_q[:, :3], _k[:, :2], _v[:, :2], slopes)  # n_q = 3 > n_k = 2
    assert (out[:, 0] == 0.0).all() and not (out[:, 1:] == 0.0).any()


# ---------------------------------------------------------------------------------------------
# norms.py: messages, and the first-order error bounds of the |·|-evaluation (attnclaims.checks) pinned
# against the formulas their docstrings state
# ---------------------------------------------------------------------------------------------
# The error helpers run only inside the checks' same-precision bounds, whose tests bench/mutation.sh does not
# run for the reference; each formula is restated here row by row and compared to rounding (rtol 1e-13 on
# terms that differ by orders of magnitude when a constant or an index changes). u = 2⁻¹⁰ keeps every
# u-term well above that rtol.

_U = 2.0 ** -10
# (2, 2, 3): rows of n = 3 under two batch axes of another size, so that axis 1 for -1 shows
_xn = np.array([[[1.0, -2.0, 3.5], [0.25, 0.0, -0.5]], [[-7.0, 6.0, 1.0], [2.0, 2.5, 3.0]]])
_ex = np.array([[[1e-3, 2e-3, 0.0], [0.0, 5e-4, 1e-4]], [[3e-3, 0.0, 1e-3], [2e-4, 2e-4, 0.0]]])


class _Widened(np.ndarray):
    """An output gradient that asks the backward cores for the |·|-evaluation's widened forward values."""

    forward_u = _U


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: rms_norm(np.ones((2, 3)), np.ones((1, 3))), "gamma.shape=(1, 3), but should be (d,)",
                 id="rms-gamma"),
    pytest.param(lambda: rms_norm(np.ones((2, 0)), np.ones(0)),
                 "x.shape[-1]=0, but should be >= 1: there is nothing to normalise over", id="rms-empty"),
    pytest.param(lambda: layer_norm_vjp(np.ones((2, 3)), np.ones(3), np.zeros(3), 1e-5, np.ones((3, 2))),
                 "d_out.shape=(3, 2), but should be x.shape=(2, 3)", id="ln-vjp-d"),
    pytest.param(lambda: rms_norm_vjp(np.ones((2, 3)), np.ones((1, 3)), 1e-6, np.ones((2, 3))),
                 "gamma.shape=(1, 3), but should be (d,)", id="rms-vjp-gamma"),
    pytest.param(lambda: rms_norm_vjp(np.ones((2, 3)), np.ones(3), 1e-6, np.ones((3, 2))),
                 "d_out.shape=(3, 2), but should be x.shape=(2, 3)", id="rms-vjp-d"),
    # the names in rms_norm's, layer_norm_vjp's and rms_norm_vjp's messages (87 … 91, 157 … 161, 260 … 265)
    pytest.param(lambda: rms_norm(np.array(1.0), np.ones(1)), "x.ndim=0 (x.shape=()), but should be >= 1", id="rms-x"),
    pytest.param(lambda: rms_norm(np.ones(3), np.ones(3, complex)),
                 "gamma.dtype=complex128, but should be a real floating or integer dtype", id="rms-gamma-dtype"),
    pytest.param(lambda: rms_norm(np.ones((2, 3)), np.ones(4)), "x.shape[-1]=3 != gamma.shape[0]=4", id="rms-width"),
    pytest.param(lambda: rms_norm_vjp(np.array(1.0), np.ones(1), 1e-6, np.array(1.0)),
                 "x.ndim=0 (x.shape=()), but should be >= 1", id="rms-vjp-x"),
    *[pytest.param(lambda name=name: rms_norm_vjp(**{**dict(x=np.ones(3), gamma=np.ones(3), eps=1e-6, d_out=np.ones(3)),
                                                   name: np.ones(3, complex)}),
                   f"{name}.dtype=complex128, but should be a real floating or integer dtype", id=f"rms-vjp-{name}-dtype")
      for name in ("gamma", "d_out")],
    pytest.param(lambda: rms_norm_vjp(np.ones((2, 3)), np.ones(4), 1e-6, np.ones((2, 3))),
                 "x.shape[-1]=3 != gamma.shape[0]=4", id="rms-vjp-width"),
    pytest.param(lambda: layer_norm_vjp(np.array(1.0), np.ones(1), np.ones(1), 1e-5, np.array(1.0)),
                 "x.ndim=0 (x.shape=()), but should be >= 1", id="ln-vjp-x"),
    *[pytest.param(lambda name=name: layer_norm_vjp(**{**dict(x=np.ones(3), gamma=np.ones(3), beta=np.ones(3), eps=1e-5,
                                                            d_out=np.ones(3)), name: np.ones(3, complex)}),
                   f"{name}.dtype=complex128, but should be a real floating or integer dtype", id=f"ln-vjp-{name}-dtype")
      for name in ("gamma", "beta", "d_out")],
    pytest.param(lambda: layer_norm_vjp(np.ones((2, 3)), np.ones(4), np.ones(4), 1e-5, np.ones((2, 3))),
                 "x.shape[-1]=3 != gamma.shape[0]=4", id="ln-vjp-width"),
    pytest.param(lambda: layer_norm_vjp(np.ones((2, 3)), np.ones((1, 3)), np.ones(3), 1e-5, np.ones((2, 3))),
                 "x.shape[-1]=3 != gamma.shape[0]=-1", id="ln-vjp-gamma-ndim"),  # a gamma of two axes never matches
])
def test_messages_of_the_norms(call, message):
    """norms.py 93, 96, 166, 266, 270."""
    _refused_with(call, message)


def test_norm_shapes_defaults_and_constant_rows():
    """rms_norm takes one axis (88: min_ndim 1) and an empty axis before the last (92: shape[-1], not [+1]), its
    default eps is 1e-6 (79); layer_norm_vjp takes one axis (157), sums dγ, dβ over every leading axis (165), and a
    constant row has x̂ = 0 exactly, so dγ = 0 (122: the shift by the first entry)."""
    np.testing.assert_allclose(rms_norm(np.array([1e-3, -1e-3]), np.ones(2)), np.array([1e-3, -1e-3]) / math.sqrt(2e-6),
                               rtol=1e-14)
    assert rms_norm(np.ones((2, 0, 3)), np.ones(3)).shape == (2, 0, 3)
    dx, dg, db = layer_norm_vjp(np.array([1.0, 2.0, 4.0]), np.ones(3), np.zeros(3), 1e-5, np.array([1.0, 0.0, 0.0]))
    assert dx.shape == dg.shape == db.shape == (3,) and db.tolist() == [1.0, 0.0, 0.0]
    x, d = _xn, _df
    dx, dg, db = layer_norm_vjp(x, np.ones(3), np.zeros(3), 1e-5, d)
    np.testing.assert_array_equal(db, d.sum(axis=(0, 1)))
    np.testing.assert_allclose(dg, (d * layer_norm(x, np.ones(3), np.zeros(3), 1e-5)).sum(axis=(0, 1)), rtol=1e-14)
    _, dg, _ = layer_norm_vjp(np.array([[0.1, 0.1, 0.1], [0.3, 0.3, 0.3]]), np.ones(3), np.zeros(3), 1e-5,
                              np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]]))
    assert dg.tolist() == [0.0, 0.0, 0.0]


def _per_row(f, a):
    """f of each row (last axis) of a, as a (..., 1) array."""
    a = np.asarray(a)
    return np.array([f(row.tolist()) for row in a.reshape(-1, a.shape[-1])]).reshape(a.shape[:-1] + (1,))


def _row_max(a):
    return _per_row(lambda row: max(abs(v) for v in row), a)


def _row_mean(a):
    return _per_row(lambda row: sum(row) / len(row), a)


def test_norm_error_helpers_follow_their_docstrings():
    """_widened_input (175, 176), _ln_forward_error (187 … 195), _ln_output_error (201 … 204) and
    _norm_output_error (286 … 296) as their docstrings state them, with and without an input error."""
    from attnclaims.reference import norms as N

    n, c_mean = 3, 2.0 * 4 + 4.0 * math.log(3) + 4.0  # 2(n + 1) + 4 ln n + 4
    np.testing.assert_allclose(N._widened_input(_xn, _U), np.abs(_xn) + _U * c_mean * _row_max(_xn), rtol=1e-13)
    xhat, r = N._normalized(_xn, 1e-5)
    for ex in (None, _ex):
        e = np.zeros(_xn.shape) if ex is None else ex
        uc = _U * np.abs(xhat) / r
        dc = uc + _U * c_mean * _row_max(_xn) + e + _row_mean(e)
        rho = r * _row_mean(np.abs(xhat) * (e + uc)) + (1.5 * (n + 2) + 4.0) * _U
        got_e, got_rho = N._ln_forward_error(_xn, xhat, r, ex, _U)
        np.testing.assert_allclose(got_rho, rho, rtol=1e-13)
        np.testing.assert_allclose(got_e, r * dc + np.abs(xhat) * rho, rtol=1e-13)
        gamma, beta = np.array([2.0, -1.0, 0.5]), np.array([0.1, 0.2, -3.0])
        want = np.abs(gamma) * got_e + _U * (np.abs(gamma * xhat) + np.abs(gamma * xhat + beta))
        np.testing.assert_allclose(N._ln_output_error(_xn, (gamma, beta), 1e-5, ex, _U), want, rtol=1e-13)
        ln = LayerNormParams(gamma, beta)
        np.testing.assert_allclose(N._norm_output_error(_xn.tolist(), ln, 1e-5, _U, ex), want, rtol=1e-13)
        rms = P.RMSNormParams(gamma)
        xr, rr = N._rms_normalized(_xn, 1e-6)
        e_x = (n / 2 + 4) * _U * np.abs(xr) + rr * (e + np.abs(xr) * _row_mean(np.abs(xr) * e))
        np.testing.assert_allclose(N._norm_output_error(_xn, rms, 1e-6, _U, ex),
                                   np.abs(gamma) * e_x + 2 * _U * np.abs(gamma * xr), rtol=1e-13)


def test_norm_backward_cores_widen_the_forward_values_in_a_magnitude_evaluation():
    """With d carrying forward_u, layer norm's core widens x̂ to |x̂| + Δx̂ and r to r(1 + ρ) (143, 144), RMSNorm's
    x̂ to |x̂|(1 + (n/2 + 4)u) (244); the same formulas as the plain backward with those values."""
    from attnclaims.reference import norms as N

    gamma, d = np.array([2.0, -1.0, 0.5]), np.array([[[1.0, -0.5, 2.0], [0.3, 0.7, -1.1]]] * 2) * [[[1.0]], [[-2.0]]]
    xhat, r = N._normalized(_xn, 1e-5)
    e_xhat, rho = N._ln_forward_error(_xn, xhat, r, None, _U)
    xw, rw = np.abs(xhat) + e_xhat, r * (1 + rho)
    g = d * gamma
    dx, dg, db = N._layer_norm_backward(_xn, gamma, 1e-5, d.view(_Widened))
    np.testing.assert_allclose(dx, rw * (g - _row_mean(g) - xw * _row_mean(g * xw)), rtol=1e-13)
    np.testing.assert_allclose(dg, d * xw, rtol=1e-13)
    np.testing.assert_array_equal(db, d)
    xr, rr = N._rms_normalized(_xn, 1e-6)
    xw = np.abs(xr) * (1 + (3 / 2 + 4) * _U)
    dx, dg = N._rms_norm_backward(_xn, gamma, 1e-6, d.view(_Widened))
    np.testing.assert_allclose(dx, rr * (g - xw * _row_mean(g * xw)), rtol=1e-13)
    np.testing.assert_allclose(dg, d * xw, rtol=1e-13)


# ---------------------------------------------------------------------------------------------
# ffn.py: messages, the tanh GELU and the smooth FFN backward against their formulas, and the
# |·|-evaluation's widened backward cores (as for the norms above)
# ---------------------------------------------------------------------------------------------

_ffp, _gfp = P.init_feed_forward(0, 3, 4), P.init_gated_feed_forward(0, 3, 4)
_xf = _xn  # (2, 2, 3)
_df = np.array([[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], [[-2.0, 1.0, 0.5], [0.1, -0.2, 0.3]]])


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: ffn_activation(np.ones(2), "tanh"),
                 "activation='tanh', but should be one of ('relu', 'gelu', 'gelu_tanh', 'silu')", id="ffn-activation"),
    pytest.param(lambda: gated_activation(np.ones(2), "relu"),
                 "activation='relu', but should be one of ('silu', 'gelu', 'gelu_tanh')", id="gated-activation"),
    pytest.param(lambda: gated_feed_forward(np.ones((2, 3)), _ffp),
                 "params is FeedForwardParams, but should be GatedFeedForwardParams", id="gated-params"),
    pytest.param(lambda: feed_forward_vjp(np.ones((2, 3)), _gfp, np.ones((2, 3))),
                 "params is GatedFeedForwardParams, but should be FeedForwardParams", id="ffn-vjp-params"),
    pytest.param(lambda: feed_forward_vjp(np.ones((2, 3)), _ffp, np.ones((3, 2))),
                 "d_out.shape=(3, 2), but should be x.shape=(2, 3)", id="ffn-vjp-d"),
    pytest.param(lambda: gated_feed_forward_vjp(np.ones((2, 3)), _ffp, np.ones((2, 3))),
                 "params is FeedForwardParams, but should be GatedFeedForwardParams", id="gated-vjp-params"),
    pytest.param(lambda: gated_feed_forward_vjp(np.ones((2, 3)), _gfp, np.ones((3, 2))),
                 "d_out.shape=(3, 2), but should be x.shape=(2, 3)", id="gated-vjp-d"),
])
def test_messages_of_the_ffns(call, message):
    """ffn.py 75, 82, 92, 145, 150, 286, 291."""
    _refused_with(call, message)


@pytest.mark.parametrize("call", [
    pytest.param(lambda x, d: gated_feed_forward(x, _gfp), id="gated"),
    pytest.param(lambda x, d: feed_forward_vjp(x, _ffp, d), id="ffn-vjp"),
    pytest.param(lambda x, d: gated_feed_forward_vjp(x, _gfp, d), id="gated-vjp"),
])
def test_the_gated_ffn_and_the_ffn_vjps_name_their_inputs_and_take_one_position(call):
    """gated_feed_forward, feed_forward_vjp and gated_feed_forward_vjp validate x as feed_forward does (lines
    whose text repeats feed_forward's, which mutmut 2 leaves untested: bench/mutation_untested.py found their
    names and the one-position form unchecked): a complex x and a width other than d_model are refused naming x
    and params.d_model, and one position x (d_model,) is accepted, the result that of the (1, d_model) row."""
    _refused_with(lambda: call(np.ones(3, complex), np.ones(3)),
                  "x.dtype=complex128, but should be a real floating or integer dtype")
    _refused_with(lambda: call(np.ones((2, 2)), np.ones((2, 2))), "x.shape[-1]=2 != params.d_model=3")
    x, d = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.25, -0.5])
    one, row = call(x, d), call(x[None], d[None])
    if isinstance(one, tuple):  # a vjp: (dx, dparams)
        np.testing.assert_array_equal(one[0], row[0][0])
        one, row = one[0], row[0]
    else:
        np.testing.assert_array_equal(one, row[0])
    assert one.shape == (3,)


def _gelu_tanh_and_slope(a):
    """a(1 + t)/2 and (1 + t)/2 + a(1 − t²)·√(2/π)(1 + 3·0.044715a²)/2, t = tanh(√(2/π)(a + 0.044715a³)), per entry."""
    out, slope = [], []
    for v in np.asarray(a, dtype=np.float64).ravel().tolist():
        t = math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))
        out.append(0.5 * v * (1 + t))
        slope.append(0.5 * (1 + t) + 0.5 * v * (1 - t * t) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * v * v))
    shape = np.shape(a)
    return np.reshape(out, shape), np.reshape(slope, shape)


def test_tanh_gelu_and_its_slope_follow_the_formula():
    """ffn_activation and _activation_and_derivative for "gelu_tanh" (52, 53, 73, 74, 181 … 187): the formula, a
    float32 input kept float32, and the tails where a³ overflows: t = ±1 and the slope's second term 0."""
    from attnclaims.reference import ffn as F

    a = np.array([[-3.0, -1.0, -0.1], [0.0, 0.7, 2.7]])
    want, slope = _gelu_tanh_and_slope(a)
    np.testing.assert_allclose(ffn_activation(a, "gelu_tanh"), want, rtol=1e-14, atol=1e-300)
    got, dgot = F._activation_and_derivative(a, "gelu_tanh")
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(dgot, slope, rtol=1e-14, atol=1e-300)
    got32, d32 = F._activation_and_derivative(a.astype(np.float32), "gelu_tanh")
    assert got32.dtype == d32.dtype == np.float32
    np.testing.assert_allclose(d32, slope, rtol=1e-6, atol=1e-7)
    huge = np.array([1e200, -1e200, 50.0])
    assert ffn_activation(huge, "gelu_tanh").tolist() == [1e200, 0.0, 50.0]
    out, dout = F._activation_and_derivative(huge, "gelu_tanh")
    assert out.tolist() == [1e200, 0.0, 50.0] and dout.tolist() == [1.0, 0.0, 1.0]
    _refused_with(lambda: F._activation_and_derivative(a, "relu"),
                  "activation='relu', but should be one of ('silu', 'gelu', 'gelu_tanh')")


def _dense_backward(x, w1, w2, d, slope, hidden):
    """dx, dW₁, db₁, dW₂, db₂ of a two-layer FFN with dP = (d W₂ᵀ) ⊙ slope (feed_forward_vjp's formulas), summed
    over every position."""
    dpre = (d @ w2.T) * slope
    xr, dr, hr = x.reshape(-1, x.shape[-1]), dpre.reshape(-1, dpre.shape[-1]), hidden.reshape(-1, hidden.shape[-1])
    return dpre @ w1.T, xr.T @ dr, dr.sum(axis=0), hr.T @ d.reshape(-1, d.shape[-1]), d.reshape(-1, d.shape[-1]).sum(axis=0)


def test_smooth_ffn_vjp_and_block_pieces():
    """feed_forward_vjp of a GELU FFN (152, 153: Φ(a) + a φ(a) as the slope, the activation copied) and the block's
    pieces of a smooth FFN (303 … 309: forward and backward the FFN's own)."""
    from attnclaims.reference import ffn as F

    p = P.init_feed_forward(1, 3, 4, activation="gelu")
    pre = _xf @ p.w1 + p.b1
    phi = 0.5 * np.vectorize(math.erfc)(-pre / math.sqrt(2))
    slope = phi + pre * np.exp(-0.5 * pre * pre) / math.sqrt(2 * math.pi)
    dx, grads = feed_forward_vjp(_xf, p, _df)
    want = _dense_backward(_xf, p.w1, p.w2, _df, slope, pre * phi)
    for got, w in zip((dx, grads.w1, grads.b1, grads.w2, grads.b2), want):
        np.testing.assert_allclose(got, w, rtol=1e-13, atol=1e-15)
    assert grads.activation == "gelu"
    forward, backward = F._ffn_pieces(p, np.float64)
    np.testing.assert_allclose(forward(_xf), feed_forward(_xf, p), rtol=1e-14)
    bdx, bgrads = backward(_xf, _df)
    np.testing.assert_allclose(bdx, dx, rtol=1e-14)
    for name in ("w1", "b1", "w2", "b2"):
        np.testing.assert_allclose(bgrads[name], getattr(grads, name), rtol=1e-14, err_msg=name)


def test_relu_ffn_vjp_takes_the_derivative_at_the_kink_as_zero():
    """ReLU'(0) = 0 (feed_forward_vjp's docstring; 122: ``pre >= 0`` passes the gradient of a unit at exactly P = 0)."""
    p = FeedForwardParams(w1=np.ones((2, 2)), b1=np.array([-3.0, 0.0]), w2=np.array([[1.0, 2.0], [3.0, 4.0]]),
                          b2=np.zeros(2))
    dx, grads = feed_forward_vjp(np.array([[1.0, 2.0]]), p, np.array([[1.0, 1.0]]))  # P = (0, 3)
    assert grads.b1.tolist() == [0.0, 7.0] and grads.w1.tolist() == [[0.0, 7.0], [0.0, 14.0]]
    assert dx.tolist() == [[7.0, 7.0]]


def test_ffn_backward_cores_widen_the_forward_values_in_a_magnitude_evaluation():
    """The |·|-evaluation branches: the ReLU kink counted twice within its error (131 … 133), the ReLU cores (117 …
    121, 259 … 265), the smooth core with slope_error (224, 225, 240 … 245) and the gated core (200 … 207), each
    against its docstring's widening, with and without an input error."""
    from attnclaims.reference import ffn as F

    # the kink: a unit with |P| ≤ ΔP is counted once more, live (P > 0) or not
    # (P = 0 is dead but within the error; |P| = ΔP exactly counts as within)
    w1, w2 = np.array([[1.0, -1.0, 3.0], [0.5, 2.0, -2.0]]), np.array([[1.0, 2.0], [-1.0, 0.5], [0.25, -3.0]])
    x, d = np.array([[1.0, 2.0], [0.5, -1.0]]), np.array([[1.0, -1.0], [2.0, 0.5]])
    pre, e_pre = np.array([[0.1, -0.1, 0.0], [3.0, -3.0, -0.2]]), np.full((2, 3), 0.2)
    hidden = np.array([[1.0, 2.0, 0.5], [3.0, 4.0, -1.0]])
    got = F._relu_kink_backward(x, w1, w2, d, pre, e_pre, hidden)
    for g, w in zip(got, _dense_backward(x, w1, w2, d, np.array([[2.0, 1.0, 1.0], [1.0, 0.0, 1.0]]), hidden)):
        np.testing.assert_array_equal(g, w)
    assert F.slope_error(np.array([-2.0, 0.5]), np.array([1e-3, 0.0]), _U).tolist() == [
        0.8e-3 + _U * (24.0 + 16.0 * (1.0 + 0.54)), _U * (24.0 + 4.0 * (1.0 + 0.135 * 0.25))]
    f = _ffn_dict_of(_ffp)
    dw = _df.view(_Widened)
    for ex in (None, _ex):
        e_x = np.zeros(_xf.shape) if ex is None else ex
        width = _U * (3 + 1)
        pre = _xf @ f["w1"] + f["b1"]
        # _feed_forward_backward: x widened by the layer norm's rounding, then the projection's error
        xw = np.abs(_xf) + _U * (2.0 * 4 + 4.0 * math.log(3) + 4.0) * _row_max(_xf) + e_x
        e_p = width * (xw @ np.abs(f["w1"]) + np.abs(f["b1"])) + e_x @ np.abs(f["w1"])
        want = F._relu_kink_backward(xw, f["w1"], f["w2"], _df, pre, e_p, np.maximum(0.0, pre) + e_p)
        for g, w in zip(F._feed_forward_backward(_xf, f["w1"], f["b1"], f["w2"], dw, ex), want):
            np.testing.assert_allclose(g, w, rtol=1e-13)
        # _relu_backward: |x| + e_x, the projection's error from |x|
        xa = np.abs(_xf) + e_x
        e_p = width * (np.abs(_xf) @ np.abs(f["w1"]) + np.abs(f["b1"])) + e_x @ np.abs(f["w1"])
        want = F._relu_kink_backward(xa, f["w1"], f["w2"], _df, pre, e_p, np.maximum(0.0, pre) + e_p)
        dx, grads = F._relu_backward(_xf, f, dw, ex)
        for g, w in zip((dx, grads["w1"], grads["b1"], grads["w2"], grads["b2"]), want):
            np.testing.assert_allclose(g, w, rtol=1e-13)
        # _smooth_backward: the activation's rounding u(6|act| + 2|P|) and the slope's slope_error
        for act_name in ("gelu", "silu", "gelu_tanh"):
            act, dact = F._activation_and_derivative(pre, act_name)
            hidden = np.abs(act) + 1.2 * e_p + _U * (6 * np.abs(act) + 2 * np.abs(pre))
            slope = np.abs(dact) + 0.8 * e_p + _U * (24.0 + 8.0 * np.abs(pre) * (1.0 + 0.135 * pre * pre))
            want = _dense_backward(xa, f["w1"], f["w2"], _df, slope, hidden)
            dx, grads = F._smooth_backward(_xf, f, act_name, dw, ex)
            for g, w in zip((dx, grads["w1"], grads["b1"], grads["w2"], grads["b2"]), want):
                np.testing.assert_allclose(g, w, rtol=1e-13, err_msg=act_name)
        # _gated_backward: both projections' errors, the gate's through its slope (1.2) and its rounding (6u)
        g = {k: np.asarray(getattr(_gfp, k)) for k in ("w_gate", "b_gate", "w_up", "b_up", "w_down", "b_down")}
        pre_g, up = _xf @ g["w_gate"] + g["b_gate"], _xf @ g["w_up"] + g["b_up"]
        act, dact = F._activation_and_derivative(pre_g, "silu")
        e_g = width * (np.abs(_xf) @ np.abs(g["w_gate"]) + np.abs(g["b_gate"])) + e_x @ np.abs(g["w_gate"])
        e_u = width * (np.abs(_xf) @ np.abs(g["w_up"]) + np.abs(g["b_up"])) + e_x @ np.abs(g["w_up"])
        up_w = np.abs(up) + e_u
        act_w = np.abs(act) + 1.2 * e_g + 6 * _U * np.abs(act)
        hidden = act_w * up_w + np.abs(act * up) * 2 * _U
        dh = _df @ g["w_down"].T
        d_up, d_gate = dh * act_w, dh * up_w * dact
        rows = lambda a: a.reshape(-1, a.shape[-1])
        dx, grads = F._gated_backward(_xf, g, "silu", dw, ex)
        np.testing.assert_allclose(dx, d_gate @ g["w_gate"].T + d_up @ g["w_up"].T, rtol=1e-13)
        want = {"w_down": rows(hidden).T @ rows(_df), "b_down": rows(_df).sum(axis=0),
                "w_up": rows(xa).T @ rows(d_up), "b_up": rows(d_up).sum(axis=0),
                "w_gate": rows(xa).T @ rows(d_gate), "b_gate": rows(d_gate).sum(axis=0)}
        for name, w in want.items():
            np.testing.assert_allclose(grads[name], w, rtol=1e-13, err_msg=name)


def _ffn_dict_of(p):
    return {k: np.asarray(getattr(p, k), dtype=np.float64) for k in ("w1", "b1", "w2", "b2")}


# ---------------------------------------------------------------------------------------------
# multihead.py: messages and the |·|-evaluation's widened attention (as for the norms above)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: MH.expand_kv(_ffp),
                 "params is FeedForwardParams, but should be MultiHeadParams", id="expand-kv-params"),
    pytest.param(lambda: MH._mha_dict(_gqa, np.float64), "num_kv_heads=3 != num_heads=6: the reference "
                 "backward covers multi-head attention without grouped-query heads", id="mha-dict-gqa"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4)), np.ones((3, 4)), _ffp, np.ones((3, 4))),
                 "params is FeedForwardParams, but should be MultiHeadParams", id="mha-vjp-params"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((2, 3, 4)), np.ones((5, 4)), init_multi_head(0, 4, 2),
                                                  np.ones((3, 4))),
                 "d_out.shape=(3, 4), but should be (2, 3, 4) (the output's shape)", id="mha-vjp-d"),
])
def test_messages_of_multihead(call, message):
    """multihead.py 157, 249, 279, 288."""
    _refused_with(call, message)


def test_widened_attention_follows_its_docstring_and_feeds_the_backward():
    """_widened_attention (225 … 243): inputs widened by a layer norm's rounding plus ex, the projections'
    u(d + 1)(|x||W| + |b|) + ex|W|, the scores' c(Δq|k|ᵀ + |q|Δkᵀ), the weights' A ⊙ (u(8(n_k + 1) + 4 ln n_k) + Δs +
    ⟨A, Δs⟩), the weighted sum's u(n_k + 2)|A||V| + ΔA|V| + |A|ΔV; _mha_backward runs on those values when d carries
    forward_u (199)."""
    p = MH._mha_dict(init_multi_head(2, 6, 2), np.float64)  # d_model 6, two heads of d_k = 3
    rng = np.random.default_rng(9)
    split = lambda t: np.moveaxis(t.reshape(t.shape[:-1] + (2, 3)), -2, -3)  # (..., n, 6) -> (..., 2, n, 3)
    merge = lambda t: np.moveaxis(t, -3, -2).reshape(t.shape[:-3] + (t.shape[-2], 6))
    kt = lambda t: np.swapaxes(t, -1, -2)
    c_mean = 2.0 * 7 + 4.0 * math.log(6) + 4.0  # 2(d + 1) + 4 ln d + 4, d = 6
    # a batch axis and a mask; no batch axis and a single key (ln n_k = 0)
    for shape_q, shape_kv in (((2, 4, 6), (2, 5, 6)), ((4, 6), (1, 6))):  # n_q = 4, n_k, d_k = 3 all apart
        x_q, x_kv = rng.normal(size=shape_q), rng.normal(size=shape_kv)
        mask = None
        if len(shape_q) == 3:
            mask = np.ones((2, 4, 5), bool)
            mask[0, 1, 3:] = False
        _, cache = MH._mha_forward(x_q, x_kv, p, mask)
        q, k, v, a, merged, c = cache
        n_k = shape_kv[-2]
        for ex_q, ex_kv in ((None, None), (np.full(shape_q, 1e-3), np.full(shape_kv, 2e-3))):
            eq_in = np.zeros(shape_q) if ex_q is None else ex_q
            ekv_in = np.zeros(shape_kv) if ex_kv is None else ex_kv
            ax_q = np.abs(x_q) + _U * c_mean * _row_max(x_q) + eq_in
            ax_kv = np.abs(x_kv) + _U * c_mean * _row_max(x_kv) + ekv_in
            err = {n: split(_U * 7 * (ax @ np.abs(p["w_" + n]) + np.abs(p["b_" + n])) + e @ np.abs(p["w_" + n]))
                   for n, ax, e in (("q", ax_q, eq_in), ("k", ax_kv, ekv_in), ("v", ax_kv, ekv_in))}
            es = (err["q"] @ kt(np.abs(k)) + np.abs(q) @ kt(err["k"])) / math.sqrt(3.0)
            ea = a * (_U * (8.0 * (n_k + 1) + 4.0 * math.log(n_k)) + es + (a * es).sum(axis=-1, keepdims=True))
            m = merge(np.abs(a @ v) + _U * (n_k + 2) * (a @ np.abs(v)) + ea @ np.abs(v) + a @ err["v"])
            want = (np.abs(q) + err["q"], np.abs(k) + err["k"], np.abs(v) + err["v"], a + ea, m, ax_q, ax_kv)
            got = MH._widened_attention(x_q, x_kv, p, q, k, v, a, _U, ex_q, ex_kv)
            for name, g, w in zip(("q", "k", "v", "a", "merged", "x_q", "x_kv"), got, want):
                np.testing.assert_allclose(g, w, rtol=1e-13, err_msg=name)
        d = rng.normal(size=shape_q)
        wq, wk, wv, wa, wm, wxq, wxkv = MH._widened_attention(x_q, x_kv, p, q, k, v, a, _U)
        plain = MH._mha_backward(wxq, wxkv, p, (wq, wk, wv, wa, wm, c), d)
        widened = MH._mha_backward(x_q, x_kv, p, cache, d.view(_Widened))
        for g, w in zip(widened[:2], plain[:2]):
            np.testing.assert_allclose(g, w, rtol=1e-13)
        for name in plain[2]:
            np.testing.assert_allclose(widened[2][name], plain[2][name], rtol=1e-13, err_msg=name)


# ---------------------------------------------------------------------------------------------
# positional.py: rotary embeddings' messages and angles
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    *[pytest.param(lambda base=base: rotary_frequencies(4, base), f"base={base!r}, but should be a finite number > 1",
                   id=f"rope-base-{base!r}") for base in (1, 0.5, float("inf"), float("nan"), True, "10")],
    *[pytest.param(lambda d=d: rotary_frequencies(d), f"d={d!r}, but should be an even integer >= 2 (rotary "
                   "embeddings rotate pairs)", id=f"rope-d-{d!r}") for d in (True, 3, 4.0)],
    pytest.param(lambda: rotary_embedding(np.ones((2, 4)), [0, 1, 2]),
                 "positions.shape=(3,), but should be (2,): one position per row of x", id="rope-positions-length"),
    pytest.param(lambda: rotary_angles([[0, 1]], 4),  # no length fits positions of two axes
                 "positions.shape=(1, 2), but should be (-1,): one position per row of x", id="rope-angles-2d"),
    pytest.param(lambda: rotary_embedding(np.ones((2, 4)), np.array([0.0, 1.0])),
                 "positions.dtype=float64, but should be an integer dtype", id="rope-positions-dtype"),
    pytest.param(lambda: rotary_pairs(4, "pairs"), "layout='pairs', but should be one of ('interleaved', 'half')",
                 id="rope-layout"),
    pytest.param(lambda: rotary_embedding_vjp(np.ones((2, 4)), [0, 1], np.ones((4, 2))),
                 "d_out.shape=(4, 2), but should be x.shape=(2, 4)", id="rope-vjp-d"),
])
def test_messages_of_rotary_embeddings(call, message):
    """positional.py 120 … 135, 139 … 142, 148, 209."""
    _refused_with(call, message)


def test_rotary_angles_and_an_empty_sequence():
    """θ_{m,i} = m·ω_i, ω_i = base^(−2i/d) (117, 136, 141, 142: the default base 10000, any base > 1), any integer
    positions; no positions need no integer dtype (134)."""
    assert rotary_angles([0, 3, -2], 4, base=100.0).tolist() == [[0.0, 0.0], [3.0, 3 * 0.1], [-2.0, -2 * 0.1]]
    assert rotary_angles(np.array([5], np.int32), 2).tolist() == [[5.0]]
    assert rotary_angles([0, 1], 4).tolist() == [[0.0, 0.0], [1.0, 0.01]]  # the default base, 10000
    assert rotary_frequencies(4).tolist() == [1.0, 0.01] and rotary_frequencies(2, 1.5).tolist() == [1.0]
    assert rotary_embedding(np.ones((0, 4)), np.array([])).shape == (0, 4)


# ---------------------------------------------------------------------------------------------
# packed.py: varlen and paged attention's messages and values (their own tests,
# tests/reference/test_reference_packed.py, are not among those bench/mutation.sh runs for it)
# ---------------------------------------------------------------------------------------------

_pk_rng = np.random.default_rng(31)
_vq, _vk, _vv = _pk_rng.normal(size=(5, 4, 3)), _pk_rng.normal(size=(6, 2, 3)), _pk_rng.normal(size=(6, 2, 2))
_cq, _ck = [0, 2, 5], [0, 4, 6]
_kc, _vc = _pk_rng.normal(size=(5, 2, 2, 3)), _pk_rng.normal(size=(5, 2, 2, 2))
_pq, _table, _lens = _pk_rng.normal(size=(2, 2, 4, 3)), np.array([[3, 1, 0], [2, 4, 0]]), np.array([5, 2])
_CU = "but should start at 0, never decrease and end at {} (cumulative sequence lengths, not the lengths)"
_ROWS = "but each should be in [n_q=2, block_table.shape[1]·block_size=6] (the queries are the last n_q positions)"


def _varlen(q=_vq, k=_vk, v=_vv, cq=_cq, ck=_ck, **kw):
    return varlen_attention(q, k, v, cq, ck, **kw)


def _paged(q=_pq, kc=_kc, vc=_vc, table=_table, lens=_lens):
    return paged_attention(q, kc, vc, table, lens)


@pytest.mark.parametrize("call, message", [
    # cu_seqlens (43 … 52, 71 … 73)
    pytest.param(lambda: varlen_mask([0], [0, 1]), "cu_seqlens_q.shape=(1,), but should be (batch + 1,) with batch >= 1",
                 id="cu-short"),
    pytest.param(lambda: _varlen(cq=[[0, 5]]), "cu_seqlens_q.shape=(1, 2), but should be (batch + 1,) with batch >= 1",
                 id="cu-2d"),
    pytest.param(lambda: _varlen(cq=np.array([0.0, 2.0, 5.0])),
                 "cu_seqlens_q.dtype=float64, but should be an integer dtype (cumulative sequence lengths)", id="cu-float"),
    pytest.param(lambda: _varlen(ck=np.array([False, True, True])),
                 "cu_seqlens_k.dtype=bool, but should be an integer dtype (cumulative sequence lengths)", id="cu-bool"),
    pytest.param(lambda: _varlen(cq=[1, 2, 5]), "cu_seqlens_q=[1, 2, 5], " + _CU.format(5), id="cu-start"),
    pytest.param(lambda: _varlen(ck=[0, 4, 5]), "cu_seqlens_k=[0, 4, 5], " + _CU.format(6), id="cu-end"),
    pytest.param(lambda: _varlen(cq=[0, 3, 2, 5], ck=[0, 1, 2, 6]), "cu_seqlens_q=[0, 3, 2, 5], " + _CU.format(5),
                 id="cu-decrease"),
    pytest.param(lambda: _varlen(ck=[0, 6]), "len(cu_seqlens_q)=3 != len(cu_seqlens_k)=2", id="cu-count"),
    # varlen_attention's arrays (57, 58, 96 … 107)
    pytest.param(lambda: _varlen(q=_vq[:, :3]), "k has 2 heads and q 3, but the K/V heads should divide the query heads",
                 id="varlen-heads"),
    pytest.param(lambda: _varlen(k=_vk[:, :0], v=_vv[:, :0]),
                 "k has 0 heads and q 4, but the K/V heads should divide the query heads", id="varlen-no-kv-heads"),
    *[pytest.param(lambda name=name, shape=shape: _varlen(**{name: np.ones(shape)}),
                   f"{name}.shape={shape}, but should be (total, heads, d): 3 axes", id=f"varlen-{name}-ndim")
      for name, shape in (("q", (5, 3)), ("k", (6, 3)), ("v", (6, 2)))],
    *[pytest.param(lambda name=name: _varlen(**{name: np.ones((5, 2, 3), complex)}),
                   f"{name}.dtype=complex128, but should be a real floating or integer dtype", id=f"varlen-{name}-dtype")
      for name in ("q", "k", "v")],
    pytest.param(lambda: _varlen(q=_vq[..., :2]), "q.shape[-1]=2 != k.shape[-1]=3", id="varlen-dk"),
    pytest.param(lambda: _varlen(v=_vv[:5]), "k.shape[0]=6 != v.shape[0]=5", id="varlen-kv-total"),
    pytest.param(lambda: _varlen(v=_vv[:, :1]), "k.shape[1]=2 != v.shape[1]=1", id="varlen-kv-heads"),
    pytest.param(lambda: _varlen(causal="yes"), "causal='yes', but should be True or False", id="varlen-causal"),
    pytest.param(lambda: _varlen(causal=None), "causal=None, but should be True or False", id="varlen-causal-none"),
    # paged_attention (127 … 152, 178 … 184)
    pytest.param(lambda: _paged(q=_pq[0]), "q.shape=(2, 4, 3), but should be (batch, n_q, heads, d_k): 4 axes",
                 id="paged-q-ndim"),
    pytest.param(lambda: _paged(q=_pq.astype(complex)), "q.dtype=complex128, but should be a real floating or integer "
                 "dtype", id="paged-q-dtype"),
    *[pytest.param(lambda name=name, a=a: _paged(**{name: a[0]}), f"{cache}.shape={a.shape[1:]}, but should be "
                   "(num_blocks, block_size, heads_kv, d): 4 axes", id=f"paged-{cache}-ndim")
      for name, cache, a in (("kc", "k_cache", _kc), ("vc", "v_cache", _vc))],
    *[pytest.param(lambda name=name, a=a: _paged(**{name: a.astype(complex)}), f"{cache}.dtype=complex128, but should "
                   "be a real floating or integer dtype", id=f"paged-{cache}-dtype")
      for name, cache, a in (("kc", "k_cache", _kc), ("vc", "v_cache", _vc))],
    pytest.param(lambda: _paged(vc=_vc[:, :, :1]), "k_cache.shape[:3]=(5, 2, 2) != v_cache.shape[:3]=(5, 2, 1)",
                 id="paged-cache-shapes"),
    pytest.param(lambda: _paged(table=_table.astype(float)), "block_table.dtype=float64, but should be an integer dtype",
                 id="paged-table-float"),
    pytest.param(lambda: _paged(table=_table > 0), "block_table.dtype=bool, but should be an integer dtype",
                 id="paged-table-bool"),
    pytest.param(lambda: _paged(lens=_lens.astype(float)), "seq_lens.dtype=float64, but should be an integer dtype",
                 id="paged-lens-float"),
    pytest.param(lambda: _paged(table=_table[0]), "block_table.shape=(3,), but should have 2 axes", id="paged-table-ndim"),
    pytest.param(lambda: _paged(lens=_lens[None]), "seq_lens.shape=(1, 2), but should have 1 axes", id="paged-lens-ndim"),
    pytest.param(lambda: _paged(table=_table[:1]), "block_table.shape[0]=1 != len(seq_lens)=2", id="paged-batch"),
    pytest.param(lambda: _paged(lens=np.array([5, 1])), "seq_lens=[5, 1], " + _ROWS, id="paged-lens-low"),
    pytest.param(lambda: _paged(lens=np.array([7, 2])), "seq_lens=[7, 2], " + _ROWS, id="paged-lens-high"),
    pytest.param(lambda: _paged(table=np.array([[3, 1, 5], [2, 4, 0]])), "block_table[0] holds pages [3, 1, 5] for its "
                 "5 positions, but each should be in [0, num_blocks=5)", id="paged-page-high"),
    pytest.param(lambda: _paged(table=np.array([[3, 1, 0], [-1, 4, 0]])), "block_table[1] holds pages [-1] for its "
                 "2 positions, but each should be in [0, num_blocks=5)", id="paged-page-negative"),
    pytest.param(lambda: _paged(q=_pq[..., :2]), "q.shape[-1]=2 != k_cache.shape[-1]=3", id="paged-dk"),
    pytest.param(lambda: _paged(q=_pq[:1]), "q.shape[0]=1 != len(seq_lens)=2", id="paged-q-batch"),
    pytest.param(lambda: _paged(q=_pq[:, :, :3]), "k has 2 heads and q 3, but the K/V heads should divide the query "
                 "heads", id="paged-heads"),
])
def test_messages_of_packed_attention(call, message):
    _refused_with(call, message)


def _attend(q, k, v, n_q, n_k, scale):
    """softmax(q kᵀ·scale) v over the keys j <= i + n_k − n_q of each query i (bottom-right), by hand."""
    out = np.zeros((q.shape[0], v.shape[-1]))
    for i in range(q.shape[0]):
        seen = [j for j in range(k.shape[0]) if j <= i + n_k - n_q]
        if not seen:
            continue
        s = np.array([q[i] @ k[j] * scale for j in seen])
        w = np.exp(s - s.max())
        out[i] = (w / w.sum()) @ v[seen]
    return out


def test_varlen_attention_is_each_sequences_attention():
    """Sequences without keys, without queries, with fewer queries than keys; grouped-query heads (query head h reads
    K/V head h // r: r = 2 and multi-query r = 4); causal bottom-right per sequence, not by default; the default scale
    1/√d_k; d_v apart from the head counts (59 … 118); sequence_bounds and varlen_mask (71 … 87)."""
    cq, ck = [0, 2, 2, 5, 7], [0, 0, 3, 6, 9]
    q, k, v = _pk_rng.normal(size=(7, 4, 3)), _pk_rng.normal(size=(9, 2, 3)), _pk_rng.normal(size=(9, 2, 5))
    assert sequence_bounds(cq, ck, 7, 9) == [(0, 2, 0, 0), (2, 2, 0, 3), (2, 5, 3, 6), (5, 7, 6, 9)]
    np.testing.assert_array_equal(varlen_mask(cq, ck), varlen_mask(cq, ck, causal=False))
    np.testing.assert_array_equal(varlen_attention(q, k, v, cq, ck), varlen_attention(q, k, v, cq, ck, causal=False))
    for causal in (False, True):
        want_mask = np.zeros((7, 9), bool)
        for q0, q1, k0, k1 in sequence_bounds(cq, ck, 7, 9):
            for i in range(q1 - q0):
                for j in range(k1 - k0):
                    want_mask[q0 + i, k0 + j] = not causal or j <= i + (k1 - k0) - (q1 - q0)
        np.testing.assert_array_equal(varlen_mask(np.array(cq, np.int32), ck, causal=causal), want_mask)
        for scale, kv in ((None, 2), (0.5, 2), (None, 1)):
            c = 1 / math.sqrt(3) if scale is None else scale
            got = varlen_attention(q, k[:, :kv], v[:, :kv], cq, ck, causal=causal, scale=scale)
            assert got.shape == (7, 4, 5) and (got[:2] == 0.0).all()  # queries without a key: zero rows
            for q0, q1, k0, k1 in [(2, 5, 3, 6), (5, 7, 6, 9)]:
                n_k = (k1 - k0) if causal else 10 ** 6  # not causal: every key is seen
                for h in range(4):
                    g = h // (4 // kv)
                    want = _attend(q[q0:q1, h], k[k0:k1, g], v[k0:k1, g], q1 - q0 if causal else 0, n_k, c)
                    np.testing.assert_allclose(got[q0:q1, h], want, rtol=1e-12, atol=1e-15)


def test_paged_attention_reads_the_pages_of_each_sequence():
    """Position t from page block_table[b, t // block_size], slot t % block_size (gather_pages, 158 … 161); the
    queries the last n_q positions (paged_mask, 166); table entries past a sequence's last page never read nor
    checked; seq_lens at both ends of [n_q, capacity]; grouped-query and multi-query heads; the default scale;
    block size, K/V heads and d_v all different (127 … 192)."""
    kc, vc = _pk_rng.normal(size=(6, 3, 2, 3)), _pk_rng.normal(size=(6, 3, 2, 5))  # block_size 3, 2 K/V heads, d_v 5
    table = np.array([[3, 1, 0], [2, 5, -7], [4, 0, 1]])  # sequence 1 uses two pages: the -7 is never read
    lens = np.array([5, 4, 9])  # 9 = 3 pages of 3: the capacity
    q = _pk_rng.normal(size=(3, 2, 4, 3))
    for kv, scale in ((2, None), (1, None), (2, 0.5)):
        got = paged_attention(q, kc[:, :, :kv], vc[:, :, :kv], table, lens, scale=scale)
        assert got.shape == (3, 2, 4, 5)
        for b in range(3):
            keys = np.array([kc[table[b, t // 3], t % 3, :kv] for t in range(lens[b])])  # (n, heads_kv, d)
            values = np.array([vc[table[b, t // 3], t % 3, :kv] for t in range(lens[b])])
            np.testing.assert_array_equal(gather_pages(kc[:, :, :kv], table[b], lens[b]), keys)
            for h in range(4):
                g = h // (4 // kv)
                want = _attend(q[b, :, h], keys[:, g], values[:, g], 2, lens[b], 1 / math.sqrt(3) if scale is None
                               else scale)
                np.testing.assert_allclose(got[b, :, h], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(paged_mask(2, 4), [[1, 1, 1, 0], [1, 1, 1, 1]])
    short = paged_attention(q[:1], kc, vc, np.array([[4, 0, 1]]), np.array([2]))  # seq_lens = n_q
    np.testing.assert_allclose(short[0, :, 0], _attend(q[0, :, 0], kc[4, :2, 0], vc[4, :2, 0], 2, 2, 1 / math.sqrt(3)),
                               rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# The second mutmut run's survivors: input names of the FFNs, multi-head vjp, repeat_kv and rotary
# embeddings; the block's ReLU FFN pieces; the multi-head backward's cache; rotary defaults and the
# lower-precision rotary backward
# ---------------------------------------------------------------------------------------------

_COMPLEX = "dtype=complex128, but should be a real floating or integer dtype"
_mh4 = init_multi_head(0, 4, 2)


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: ffn_activation(np.ones(2, complex), "relu"), "a." + _COMPLEX, id="ffn-activation-a"),
    pytest.param(lambda: feed_forward_vjp(np.ones((2, 3)), _ffp, np.ones((2, 3), complex)), "d_out." + _COMPLEX,
                 id="ffn-vjp-d-name"),
    pytest.param(lambda: gated_feed_forward_vjp(np.ones((2, 3)), _gfp, np.ones((2, 3), complex)),
                 "d_out." + _COMPLEX, id="gated-vjp-d-name"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4), complex), np.ones((5, 4)), _mh4, np.ones((3, 4))),
                 "x_q." + _COMPLEX, id="mha-vjp-x_q"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4)), np.ones((5, 4), complex), _mh4, np.ones((3, 4))),
                 "x_kv." + _COMPLEX, id="mha-vjp-x_kv"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 6)), np.ones((5, 4)), _mh4, np.ones((3, 6))),
                 "x_q.shape[-1]=6 != params.d_model=4", id="mha-vjp-x_q-width"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4)), np.ones((5, 6)), _mh4, np.ones((3, 4))),
                 "x_kv.shape[-1]=6 != params.d_model=4", id="mha-vjp-x_kv-width"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4)), np.ones((5, 4)), _mh4, np.ones((3, 4), complex)),
                 "d_out." + _COMPLEX, id="mha-vjp-d-name"),
    pytest.param(lambda: multi_head_attention_vjp(np.ones((3, 4)), np.ones((5, 4)), _mh4, np.ones((3, 4)),
                                                  mask=np.ones((3, 5))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="mha-vjp-mask"),
    pytest.param(lambda: MH.repeat_kv(np.ones((2, 3, 4), complex), 2), "x." + _COMPLEX, id="repeat-kv-x"),
    pytest.param(lambda: MH.repeat_kv(np.ones((3, 4)), 2), "x.ndim=2 (x.shape=(3, 4)), but should be >= 3",
                 id="repeat-kv-ndim"),
    pytest.param(lambda: MH.repeat_kv(np.ones((2, 3, 4)), 0), "group_size=0, but should be >= 1",
                 id="repeat-kv-group"),
    pytest.param(lambda: rotary_embedding(np.ones((2, 4), complex), [0, 1]), "x." + _COMPLEX, id="rope-x"),
    pytest.param(lambda: rotary_embedding_vjp(np.ones((2, 4), complex), [0, 1], np.ones((2, 4))), "x." + _COMPLEX,
                 id="rope-vjp-x"),
    pytest.param(lambda: rotary_embedding_vjp(np.ones((2, 4)), [0, 1], np.ones((2, 4), complex)),
                 "d_out." + _COMPLEX, id="rope-vjp-d-name"),
])
def test_inputs_are_named_in_every_message(call, message):
    """The name each input is refused by: ffn.py 66, 148, 289; multihead.py 148, 149, 280 … 289; positional.py 159,
    206, 207."""
    _refused_with(call, message)


def test_repeat_kv_takes_three_axes_and_repeats_each_head_in_place():
    """repeat_kv (148 … 150): x (h_kv, n, d_k) with exactly the three axes its docstring names is accepted, and head g
    lands at g·r … g·r + r − 1."""
    x = np.arange(2 * 1 * 2, dtype=np.float64).reshape(2, 1, 2)
    assert MH.repeat_kv(x, 2).tolist() == [[[0.0, 1.0]], [[0.0, 1.0]], [[2.0, 3.0]], [[2.0, 3.0]]]


def test_the_blocks_relu_ffn_pieces_are_feed_forward_and_its_vjp():
    """_ffn_pieces for a ReLU FFN (312, 313) and _relu_backward (266): the forward is feed_forward (biases added,
    negative units cut at 0) and the backward feed_forward_vjp, ReLU'(0) = 0 included (a unit with P = 0 exactly
    passes no gradient)."""
    from attnclaims.reference import ffn as F

    p = FeedForwardParams(w1=np.array([[1.0, -1.0, 2.0], [0.5, 1.0, -1.0]]), b1=np.array([0.5, -2.5, 1.0]),
                          w2=np.array([[1.0, 2.0], [3.0, -4.0], [-0.5, 1.5]]), b2=np.array([0.25, -0.75]))
    x = np.array([[[1.0, 3.5], [-1.0, 0.5]], [[2.0, -3.0], [0.0, 0.0]]])  # P[0, 0, 1] = 0 exactly; units below 0
    pre = x @ p.w1 + p.b1
    assert pre[0, 0, 1] == 0.0 and (pre < 0).any() and (pre > 0).any()
    d = np.array([[[1.0, -1.0], [0.5, 2.0]], [[-1.5, 0.25], [1.0, 1.0]]])
    forward, backward = F._ffn_pieces(p, np.float64)
    np.testing.assert_array_equal(forward(x), feed_forward(x, p))
    np.testing.assert_array_equal(forward(x), np.maximum(0.0, pre) @ p.w2 + p.b2)
    dx, grads = backward(x, d)
    want = _dense_backward(x, p.w1, p.w2, d, (pre > 0).astype(np.float64), np.maximum(0.0, pre))
    for got, w in zip((dx, grads["w1"], grads["b1"], grads["w2"], grads["b2"]), want):
        np.testing.assert_array_equal(got, w)
    vdx, vgrads = feed_forward_vjp(x, p, d)
    np.testing.assert_array_equal(dx, vdx)
    for name in ("w1", "b1", "w2", "b2"):
        np.testing.assert_array_equal(grads[name], getattr(vgrads, name), err_msg=name)


def test_the_multihead_backwards_cache_holds_the_projected_heads():
    """_mha_forward (182 … 184): the cache's q, k, v are the heads of x W + b — what the |·|-evaluation reads as |k|
    (_widened_attention), where a wrong key bias would not cancel as it does in the softmax."""
    mh = init_multi_head(4, 6, 2)
    p = MH._mha_dict(mh, np.float64)
    rng = np.random.default_rng(31)
    x_q, x_kv = rng.normal(size=(3, 6)), rng.normal(size=(4, 6))
    _, (q, k, v, _, _, _) = MH._mha_forward(x_q, x_kv, p, None)
    for got, x, name in ((q, x_q, "q"), (k, x_kv, "k"), (v, x_kv, "v")):
        np.testing.assert_array_equal(got, MH._split(x @ p["w_" + name] + p["b_" + name], 2), err_msg=name)


def test_rotary_defaults_and_the_half_layouts_pairs():
    """rotary_embedding's and rotary_embedding_vjp's defaults base 10000 and the interleaved layout (153, 195), and the
    half layout's pairs (i, i + d/2) as indices in [0, d) (150; the suite indexes with them)."""
    x = np.arange(1.0, 13.0).reshape(2, 6) / 4
    d = x[::-1] - 1.0
    pos = [3, -5]
    np.testing.assert_array_equal(rotary_embedding(x, pos), rotary_embedding(x, pos, 10000.0, "interleaved"))
    assert not np.array_equal(rotary_embedding(x, pos), rotary_embedding(x, pos, 10001.0))
    np.testing.assert_array_equal(rotary_embedding_vjp(x, pos, d),
                                  rotary_embedding_vjp(x, pos, d, base=10000.0, layout="interleaved"))
    assert not np.array_equal(rotary_embedding_vjp(x, pos, d), rotary_embedding_vjp(x, pos, d, base=10001.0))
    a, b = rotary_pairs(6, "half")
    assert a.tolist() == [0, 1, 2] and b.tolist() == [3, 4, 5]
    a, b = rotary_pairs(6, "interleaved")
    assert a.tolist() == [0, 2, 4] and b.tolist() == [1, 3, 5]


def test_the_float32_rotary_backward_rotates_by_the_float32_frequencies():
    """_rotary_backward in float32 (184: ω_i = base^(−2i/d) computed in float32) against the float64 vjp.

    Error model (u = 2⁻²⁴): −2i/d rounds once (u), base^y adds ≤ |y ln base|·u + u ≤ (ln base + 1)u, m·ω one more u,
    so |Δθ| ≤ |θ|(ln base + 3)u; cos, sin, the two products and the sum add ≤ 4u of |d_a| + |d_b|. Per entry
    |Δ| ≤ (|d_a| + |d_b|)(|θ|(ln base + 3) + 4)u; checked against twice that (θ ≤ 7, base 10⁴: ≈ 190u·max|d|).
    Which float32 rounding of ω_i is used (the float32 power or the float64 ω_i rounded, ≤ 7u apart for d ≤ 512) is
    a rounding the model covers, not pinned here."""
    from attnclaims.reference import positional as PO

    rng = np.random.default_rng(37)
    d = rng.normal(size=(2, 4, 8))
    pos = np.array([0, 1, -4, 7])
    u, base = 2.0 ** -24, 10000.0
    for layout in ("interleaved", "half"):
        want = rotary_embedding_vjp(d, pos, d, base=base, layout=layout)
        got = PO._rotary_backward(d.astype(np.float32), pos, base, layout)
        assert got.dtype == np.float32
        tol = 2 * 2 * np.abs(d).max() * (7 * (math.log(base) + 3) + 4) * u
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol, err_msg=layout)


# --- the decoder block's validation, KVCache, decoder_block_step and cached_decode (layers.py 175 … 296) ---

def _gqa_block():
    from attnclaims.reference import init_decoder_block

    return init_decoder_block(0, 8, 4, 10, num_kv_heads=2)


def test_the_decoder_blocks_refusals_name_the_argument():
    """_check_block (176 … 179) and decoder_block's mask (195): the exact messages of a wrong params type, an x of
    fewer than 2 dims, a width that is not d_model and a mask that does not broadcast to (n, n); an x of exactly
    2 dims (n, d_model) is accepted (min_ndim=2) and equals the block of the same x with a batch of one."""
    from attnclaims.reference import decoder_block

    p, x = _gqa_block(), np.random.default_rng(41).normal(size=(3, 8))
    _refused_with(lambda: decoder_block(x, "p"), "params is str, but should be DecoderBlockParams")
    _refused_with(lambda: decoder_block(np.ones(8), p), "x.ndim=1 (x.shape=(8,)), but should be >= 2")
    _refused_with(lambda: decoder_block(np.ones((3, 5)), p), "x.shape[-1]=5 != params.d_model=8")
    _refused_with(lambda: decoder_block(x, p, mask=np.ones((4, 4), bool)),
                  "mask.shape=(4, 4) does not broadcast to (3, 3)")
    np.testing.assert_array_equal(decoder_block(x, p), decoder_block(x[None], p)[0])


def test_kv_cache_checks_its_shapes_and_is_frozen():
    """KVCache (207 … 219): k and v of different shapes, or of fewer than 3 dims, are refused with the exact
    message; 3 dims (h_kv, length, d_k) are enough; length is the second-last axis (not axis 2); the cache is
    frozen (decoder_block_step promises not to modify the cache passed in)."""
    import dataclasses

    from attnclaims.reference.layers import KVCache

    msg = "KVCache k.shape={} and v.shape={}, but should be equal (..., h_kv, length, d_k)"
    _refused_with(lambda: KVCache(np.zeros((2, 3, 4)), np.zeros((2, 3, 5))), msg.format((2, 3, 4), (2, 3, 5)))
    _refused_with(lambda: KVCache(np.zeros((3, 4)), np.zeros((3, 4))), msg.format((3, 4), (3, 4)))
    cache = KVCache(np.zeros((2, 5, 4)), np.zeros((2, 5, 4)))
    assert cache.length == 5
    assert KVCache(np.zeros((1, 2, 6, 3)), np.zeros((1, 2, 6, 3))).length == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        cache.k = np.zeros((2, 6, 4))


def test_decoder_block_step_refusals_name_the_argument():
    """decoder_block_step (233 … 242): the exact messages of a negative position, a cache that is not a KVCache
    and a cache whose length is not the position."""
    from attnclaims.reference.layers import decoder_block_step

    p, x = _gqa_block(), np.ones((3, 8))
    _refused_with(lambda: decoder_block_step(x, None, p, -1), "position=-1, but should be >= 0")
    _refused_with(lambda: decoder_block_step(x, "c", p, 0), "cache is str, but should be KVCache or None")
    _refused_with(lambda: decoder_block_step(x, None, p, 2),
                  "cache.length=0 != position=2: the cache should hold exactly the positions before this step")


def test_decoder_block_step_broadcasts_a_batch_between_cache_and_step():
    """decoder_block_step's attn (250 … 254): the cache's batch and the step's batch broadcast (cache.k.shape[:-3]
    with k_new.shape[:-3]) and keys join on the length axis (−2, not axis 2); an empty cache takes x_t's whole
    batch (243: x_t.shape[:-2]), which a batch of two unequal dims needs. A batched prefill then an unbatched
    step, and an unbatched prefill then a batched step, each give the full block's last rows."""
    from attnclaims.reference import decoder_block
    from attnclaims.reference.layers import decoder_block_step

    p = _gqa_block()
    x = np.random.default_rng(43).normal(size=(2, 4, 8))
    tail = x[0, 3:]                                          # (1, 8): the same last position for both rows
    xs = np.concatenate([x[:, :3], np.broadcast_to(tail, (2, 1, 8))], axis=-2)
    _, cache = decoder_block_step(x[:, :3], None, p, 0)       # batched cache (2, h_kv, 3, d_k)
    y, new = decoder_block_step(tail, cache, p, 3)            # unbatched step
    assert new.length == 4 and new.k.shape[:-3] == (2,)
    np.testing.assert_allclose(y, decoder_block(xs, p)[:, 3:], rtol=0, atol=1e-13)
    _, cache = decoder_block_step(x[0, :3], None, p, 0)      # unbatched cache (h_kv, 3, d_k)
    y, new = decoder_block_step(x[:, 3:], cache, p, 3)        # batched step
    assert new.length == 4 and new.k.shape[:-3] == (2,)
    want = decoder_block(np.concatenate([np.broadcast_to(x[0, :3], (2, 3, 8)), x[:, 3:]], axis=-2), p)
    np.testing.assert_allclose(y, want[:, 3:], rtol=0, atol=1e-13)
    x2 = np.random.default_rng(44).normal(size=(3, 2, 2, 8))  # batch (3, 2): the empty cache's batch is x_t's
    y, new = decoder_block_step(x2, None, p, 0)
    assert new.k.shape[:-3] == (3, 2)
    np.testing.assert_allclose(y, decoder_block(x2, p), rtol=0, atol=1e-13)


def test_cached_decode_refusals_bounds_and_default_chunk():
    """cached_decode (266 … 289): the exact messages of an x of fewer than 2 dims, a negative prompt_length, a
    chunk < 1 and a prompt longer than n; an x of exactly 2 dims is decoded; n is x.shape[-2] (not axis 2);
    the calls' bounds are the prompt then ``chunk`` positions (default 1) at a time; n = 0 gives an empty
    output. decoder_block_decode (292 … 296) equals the full block and decodes one position at a time by
    default."""
    from attnclaims.reference import decoder_block
    from attnclaims.reference import layers as L

    p = _gqa_block()
    x = np.random.default_rng(47).normal(size=(2, 5, 8))
    _refused_with(lambda: L.cached_decode(None, np.ones(3), p, 0), "x.ndim=1, but should be >= 2 (..., n, d_model)")
    _refused_with(lambda: L.cached_decode(None, x, p, -1), "prompt_length=-1, but should be >= 0")
    _refused_with(lambda: L.cached_decode(None, x, p, 0, 0), "chunk=0, but should be >= 1")
    _refused_with(lambda: L.cached_decode(None, x, p, 6), "prompt_length=6, but should be <= n=5")
    _refused_with(lambda: L.decoder_block_decode(x, p, 6), "prompt_length=6, but should be <= n=5")
    calls = []

    def step(x_t, cache, params, position):
        calls.append((position, x_t.shape[-2]))
        return x_t * 2.0, (cache or 0) + 1

    np.testing.assert_array_equal(L.cached_decode(step, x[0], p, 2), x[0] * 2.0)
    assert calls == [(0, 2), (2, 1), (3, 1), (4, 1)]
    calls.clear()
    np.testing.assert_array_equal(L.cached_decode(step, x, p, 1, 3), x * 2.0)
    assert calls == [(0, 1), (1, 3), (4, 1)]
    assert L.cached_decode(L.decoder_block_step, x[:, :0], p, 0).shape == (2, 0, 8)
    for xi in (x, x[0]):
        np.testing.assert_allclose(L.decoder_block_decode(xi, p, 2), decoder_block(xi, p), rtol=0, atol=1e-13)
    seen, real = [], L.decoder_block_step

    def recording(x_t, cache, params, position):
        seen.append(x_t.shape[-2])
        return real(x_t, cache, params, position)

    with pytest.MonkeyPatch.context() as monkey:
        monkey.setattr(L, "decoder_block_step", recording)
        L.decoder_block_decode(x, p, 2)
    assert seen == [2, 1, 1, 1]


def test_the_sublayers_forward_errors_are_the_bounds_linear_errors():
    """_ffn_sub's forward_error (406 … 411) is bounds.feed_forward_error (linear_error twice through the ReLU) and
    _mha_sub's (380 … 388) is linear_error of the output projection with the merged heads' widening from
    _widened_attention (index 4) as its input error — self-attention with e_kv = eh, cross-attention with the
    memory exact (e_kv = 0). Each keeps its input error for its backward (state["ex"]): the |·|-evaluation's
    backward then differs from one that never propagated errors."""
    import dataclasses

    from attnclaims.checks.bounds import Magnitude, feed_forward_error
    from attnclaims.checks.bounds.common import linear_error
    from attnclaims.reference import layers as L
    from attnclaims.reference.ffn import _ffn_dict

    rng = np.random.default_rng(53)
    u = 2.0 ** -24
    h, eh = rng.normal(size=(2, 3, 6)), rng.uniform(0.0, 1e-6, size=(2, 3, 6))
    ffn = FeedForwardParams(rng.normal(size=(6, 10)), rng.normal(size=(10,)), rng.normal(size=(10, 6)),
                            rng.normal(size=(6,)))

    class _Widened(Magnitude):
        forward_u = u

    d = np.abs(rng.normal(size=(2, 3, 6))).view(_Widened)

    def widens(sub, *args):
        """forward_error(h, eh, u) of a fresh sub-layer, and whether its backward's |·|-evaluation (dx and every
        gradient) is at least, and somewhere above, that of one that never propagated errors."""
        runs = []
        for propagate in (False, True):
            grads: dict = {}
            forward, backward = sub(*args[:1], grads, *args[1:])
            forward(h)
            error = backward.forward_error(h, eh, u) if propagate else None
            dx = backward(d)
            runs.append((error, [np.asarray(a).view(np.ndarray) for a in [dx, *grads["s"].values()]]))
        pairs = list(zip(runs[0][1], runs[1][1]))
        return runs[1][0], all(np.all(w >= p) for p, w in pairs) and any(not np.array_equal(p, w) for p, w in pairs)

    got, widened = widens(L._ffn_sub, _ffn_dict(ffn, np.float64), "s")
    np.testing.assert_allclose(got, feed_forward_error(h, ffn, u=u, ex=eh), rtol=1e-14, atol=0)
    assert widened

    mh = init_multi_head(5, 6, 2)
    mh = dataclasses.replace(mh, **{b: rng.normal(size=6) for b in ("b_q", "b_k", "b_v", "b_o")})
    p = MH._mha_dict(mh, np.float64)
    memory = rng.normal(size=(2, 4, 6))
    for mem in (None, memory):
        got, widened = widens(lambda p_, grads, *rest: L._mha_sub(p_, None, grads, "s", mem, []), p)
        kv = h if mem is None else mem
        e_kv = eh if mem is None else np.zeros(kv.shape)
        q, k, v, a, merged, _ = MH._mha_forward(h, kv, p, None)[1]
        wide = MH._widened_attention(h, kv, p, q, k, v, a, u, eh, e_kv)[4]
        want = linear_error(merged, p["w_o"], p["b_o"], u=u, ex=wide - np.abs(merged))
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=0, err_msg=str(mem is None))
        assert widened


def test_a_sublayers_error_propagation_pre_and_post_ln():
    """_Sub.propagate (325 … 338) and _propagate_errors (348 … 358) against the formulas they state, with an F
    whose forward_error is known: Pre-LN keeps e_ln = ex and F's input error ex_F = LN's output error, and returns
    ex + forward_error(h, ex_F) + u|x + F(h)|; Post-LN keeps ex_F = ex, e_ln = ex + forward_error(x, ex) + u|z|
    and returns LN's output error at z. Without forward_error F passes its input error on unchanged. The first
    sub-layer starts from error 0 at the layer's input; the next from the previous one's output error."""
    from attnclaims.reference import layers as L
    from attnclaims.reference.norms import _ln_output_error, _norm_tuple

    rng = np.random.default_rng(59)
    u, eps = 2.0 ** -24, 1e-5
    x, ex = rng.normal(size=(3, 4)), rng.uniform(0.0, 1e-6, size=(3, 4))
    norm = _norm_tuple(LayerNormParams(rng.uniform(0.5, 2.0, size=4), rng.normal(size=4)), np.float64)
    w = rng.normal(size=(4, 4))
    seen = []

    def forward(h):
        return np.tanh(h @ w)

    def backward(d):
        return d @ w.T

    def forward_error(h, eh, u_):
        seen.append((h, eh, u_))
        return 3.0 * eh + 1e-9

    def bare_backward(d):
        return d @ w.T

    backward.forward_error = forward_error
    pre = L._Sub(forward, backward, norm, "n", eps, True)
    pre.run(x)
    assert pre.ex is None and pre.e_ln is None
    e_f = _ln_output_error(x, norm, eps, ex, u)
    want = ex + (3.0 * e_f + 1e-9) + u * np.abs(x + forward(pre.h))
    np.testing.assert_array_equal(pre.propagate(ex, u), want)
    np.testing.assert_array_equal(pre.e_ln, ex)
    np.testing.assert_array_equal(pre.ex, e_f)
    np.testing.assert_array_equal(seen[-1][0], pre.h)
    assert seen[-1][2] == u
    post = L._Sub(forward, backward, norm, "n", eps, False)
    post.run(x)
    z = x + forward(x)
    e_ln = ex + (3.0 * ex + 1e-9) + u * np.abs(z)
    np.testing.assert_array_equal(post.propagate(ex, u), _ln_output_error(z, norm, eps, e_ln, u))
    np.testing.assert_array_equal(post.e_ln, e_ln)
    np.testing.assert_array_equal(post.ex, ex)
    np.testing.assert_array_equal(seen[-1][0], x)
    bare = L._Sub(forward, bare_backward, norm, "n", eps, True)
    bare.run(x)
    np.testing.assert_array_equal(bare.propagate(ex, u), ex + e_f + u * np.abs(x + forward(bare.h)))
    np.testing.assert_array_equal(bare.ex, e_f)

    first, second = (L._Sub(forward, backward, norm, "n", eps, True) for _ in range(2))
    second.run(first.run(x))
    L._propagate_errors([first, second], x, u)
    np.testing.assert_array_equal(first.e_ln, np.zeros(x.shape))
    np.testing.assert_array_equal(second.e_ln, first.propagate(np.zeros(x.shape), u))


def test_bfloat16_inputs_are_computed_in_float64():
    """ml_dtypes' bfloat16 is not a numpy number, yet the reference takes it (the bfloat16 adapters hand it their
    inputs): ``as_float64`` casts it up, which is exact, so the result equals the float64 computation's bit for
    bit, and a bfloat16 array is never refused as "not a real dtype"."""
    import ml_dtypes

    from attnclaims.reference import attention
    from attnclaims.reference._validate import as_float64

    rng = np.random.default_rng(3)
    q, k, v = (rng.uniform(-1.0, 1.0, (2, 3, 4)).astype(ml_dtypes.bfloat16) for _ in range(3))
    got = as_float64("q", q)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, q.astype(np.float64))
    out = attention(q, k, v)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, attention(*(a.astype(np.float64) for a in (q, k, v))))


@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
@pytest.mark.parametrize("n_q, n_k", [(1, 1), (3, 7), (7, 3), (5, 5), (2, 9)])
@pytest.mark.parametrize("window", [1, 2, 3, 10])
def test_sliding_window_mask_is_its_definition_in_both_alignments(n_q, n_k, window, alignment):
    """M_ij = (p_i − w < j <= p_i) with p_i = i + offset, offset 0 (top-left) or n_k − n_q (bottom-right), entry by
    entry — with n_q ≠ n_k, where the two alignments differ, and windows wider than the keys."""
    offset = 0 if alignment == "top-left" else n_k - n_q
    want = np.array([[i + offset - window < j <= i + offset for j in range(n_k)] for i in range(n_q)], dtype=bool)
    np.testing.assert_array_equal(sliding_window_mask(n_q, n_k, window, alignment), want)


def test_sliding_window_mask_refuses_an_empty_window():
    with pytest.raises(ValueError, match=r"^window=0, but should be >= 1$"):
        sliding_window_mask(4, 4, 0)


@pytest.mark.parametrize("call, message", [
    pytest.param(lambda: encoder_layer_vjp(np.ones((2, 3, 4)), init_encoder_layer(0, 4, 2, 6), np.array(["a"])),
                 "d_out.dtype=<U1, but should be a real floating or integer dtype", id="d-dtype"),
    pytest.param(lambda: encoder_layer_vjp(np.ones((2, 3, 4)), init_encoder_layer(0, 4, 2, 6), np.ones((3, 4))),
                 "d_out.shape=(3, 4), but should be x.shape=(2, 3, 4)", id="d-shape"),
    pytest.param(lambda: encoder_layer_vjp(np.ones((2, 3, 4)), init_encoder_layer(0, 4, 2, 6), np.ones((2, 3, 4)),
                                           np.ones((3, 3))),
                 "mask.dtype=float64, but should be bool (True = may attend)", id="mask-dtype"),
    pytest.param(lambda: encoder_layer_vjp(np.ones((2, 3, 4)), init_encoder_layer(0, 4, 2, 6), np.ones((2, 3, 4)),
                                           np.ones((4, 3), bool)),
                 "mask.shape=(4, 3) does not broadcast to (2, 3, 3)", id="mask-shape"),
])
def test_messages_of_the_encoder_layer_vjp(call, message):
    """encoder_layer_vjp's own refusals of d_out and the mask, each by its argument's name."""
    _refused_with(call, message)


@pytest.mark.parametrize("d_out, message", [
    pytest.param(np.array(["a"]), "d_out.dtype=<U1, but should be a real floating or integer dtype", id="d-dtype"),
    pytest.param(np.ones((3, 4)), "d_out.shape=(3, 4), but should be x.shape=(2, 3, 4)", id="d-shape"),
])
def test_messages_of_the_decoder_block_vjp(d_out, message):
    """decoder_block_vjp's own refusals of d_out, by its name."""
    from attnclaims.reference import decoder_block_vjp, init_decoder_block

    _refused_with(lambda: decoder_block_vjp(np.ones((2, 3, 4)), init_decoder_block(0, 4, 2, 6), d_out), message)


@pytest.mark.parametrize("mask, message", [
    pytest.param(np.ones((3, 3)), "mask.dtype=float64, but should be bool (True = may attend)", id="mask-dtype"),
    pytest.param(np.ones((4, 3), bool), "mask.shape=(4, 3) does not broadcast to (2, 3, 3)", id="mask-shape"),
])
def test_messages_of_the_decoder_block_and_its_vjp_name_the_mask(mask, message):
    """The block's mask (``block_mask``: causal ∧ mask), refused by its name in the forward and in the vjp."""
    from attnclaims.reference import decoder_block, decoder_block_vjp, init_decoder_block

    p, x = init_decoder_block(0, 4, 2, 6), np.ones((2, 3, 4))
    _refused_with(lambda: decoder_block(x, p, mask), message)
    _refused_with(lambda: decoder_block_vjp(x, p, np.ones((2, 3, 4)), mask), message)


def _gradient_arrays(dx, grads: dict) -> list:
    """dx and every gradient of a layer backward's grads dict (dicts and tuples of arrays), as plain arrays."""
    out = [np.asarray(dx).view(np.ndarray)]
    for v in grads.values():
        for g in (v.values() if isinstance(v, dict) else v if isinstance(v, tuple) else (v,)):
            out.append(np.asarray(g).view(np.ndarray))
    return out


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_encoder_layer_backward_propagates_its_forward_errors(norm_first, monkeypatch):
    """Run on d_out = Magnitude(|d|) with ``Magnitude.forward_u`` > 0 (set on the class, as ``measured_bounds`` does),
    the encoder
    layer's backward first propagates the sub-layers' forward errors from x with that unit roundoff
    (``_propagate_errors``, as the decoder layer's and the block's do); with ``forward_u`` = 0 or a plain array it
    does not. The propagated errors widen the gradients: every one at least, and somewhere above, what the same
    evaluation gives when the propagation is skipped."""
    from attnclaims.checks.bounds import Magnitude
    from attnclaims.reference import layers as L

    u = 2.0 ** -24
    rng = np.random.default_rng(61)
    p = init_encoder_layer(4, 6, 2, 10, norm_first=norm_first)
    x = rng.normal(size=(2, 3, 6))
    d = np.abs(rng.normal(size=(2, 3, 6)))
    real = L._propagate_errors
    seen = []

    def spy(subs, x0, u0):
        seen.append((len(subs), x0, u0))
        return real(subs, x0, u0)

    monkeypatch.setattr(L, "_propagate_errors", spy)
    with np.errstate(all="ignore"):
        L._encoder_layer_backward(x, p, None, d, np.float64)
        L._encoder_layer_backward(x, p, None, d.view(Magnitude), np.float64)
        assert seen == []
        monkeypatch.setattr(Magnitude, "forward_u", u)
        widened = _gradient_arrays(*L._encoder_layer_backward(x, p, None, d.view(Magnitude), np.float64))
        assert len(seen) == 1 and seen[0][0] == 2 and seen[0][1] is x and seen[0][2] == u
        monkeypatch.setattr(L, "_propagate_errors", lambda *args: None)  # the same evaluation, not propagated
        skipped = _gradient_arrays(*L._encoder_layer_backward(x, p, None, d.view(Magnitude), np.float64))
    assert len(widened) == len(skipped) > 1
    assert all(np.all(w >= s_) for s_, w in zip(skipped, widened))
    assert any(np.any(w > s_) for s_, w in zip(skipped, widened))


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_decoder_layer_backward_propagates_its_forward_errors(norm_first, monkeypatch):
    """As the encoder layer's (above): on d_out = Magnitude(|d|) with ``Magnitude.forward_u`` > 0 the decoder layer's
    backward propagates its three sub-layers' forward errors from y with that unit roundoff, and not with
    ``forward_u`` = 0 or a plain array; the propagated errors widen the gradients (each at least, and somewhere above,
    the same evaluation with the propagation skipped)."""
    from attnclaims.checks.bounds import Magnitude
    from attnclaims.reference import layers as L

    u = 2.0 ** -24
    rng = np.random.default_rng(67)
    p = init_decoder_layer(5, 6, 2, 10, norm_first=norm_first)
    y, memory = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 4, 6))
    d = np.abs(rng.normal(size=(2, 3, 6)))
    own, mem_mask = L.decoder_masks(3, 4, (2,), None, None)
    real = L._propagate_errors
    seen = []

    def spy(subs, y0, u0):
        seen.append((len(subs), y0, u0))
        return real(subs, y0, u0)

    def backward(d_):
        dy, dmem, grads = L._decoder_layer_backward(y, memory, p, own, mem_mask, d_, np.float64)
        return [np.asarray(dmem).view(np.ndarray)] + _gradient_arrays(dy, grads)

    monkeypatch.setattr(L, "_propagate_errors", spy)
    with np.errstate(all="ignore"):
        backward(d)
        backward(d.view(Magnitude))
        assert seen == []
        monkeypatch.setattr(Magnitude, "forward_u", u)
        widened = backward(d.view(Magnitude))
        assert len(seen) == 1 and seen[0][0] == 3 and seen[0][1] is y and seen[0][2] == u
        monkeypatch.setattr(L, "_propagate_errors", lambda *args: None)  # the same evaluation, not propagated
        skipped = backward(d.view(Magnitude))
    assert len(widened) == len(skipped) > 1
    assert all(np.all(w >= s_) for s_, w in zip(skipped, widened))
    assert any(np.any(w > s_) for s_, w in zip(skipped, widened))


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_block_backward_hands_each_sub_layer_its_own_inputs_error(norm_first, monkeypatch):
    """On d_out = Magnitude(|d|) with ``forward_u`` > 0, which input error each sub-layer's backward is given (the
    comments of ``_decoder_block_backward``): Post-LN — the attention's input is the block's own x, exact (no error),
    and the FFN's is the first norm's output, that norm's output error for the attention sub-layer's error carried in
    the stream; Pre-LN — each gets its own norm's output error, the attention's norm on the exact x (no input error),
    the FFN's norm on the stream with that error. A block that gave the FFN's error to the attention would widen the
    wrong sub-layer's gradients."""
    from attnclaims.checks.bounds import Magnitude
    from attnclaims.reference import init_decoder_block
    from attnclaims.reference import layers as L

    u = 2.0 ** -24
    rng = np.random.default_rng(97)
    p = init_decoder_block(9, 8, 4, 10, num_kv_heads=2, norm_first=norm_first)
    x, d = rng.normal(size=(2, 5, 8)), np.abs(rng.normal(size=(2, 5, 8)))
    given, norm_errors = {}, []
    real_attention, real_ffn, real_norm_error = L._widened_block_attention, L._ffn_pieces, L._norm_output_error

    def attention_spy(*args):
        if sys._getframe(1).f_code.co_name == "backward":
            given["self_attn"] = args[1]
        return real_attention(*args)

    def ffn_pieces(ffn, dtype):
        forward, backward = real_ffn(ffn, dtype)

        def spied(x_, d_, ex=None):
            given["ffn"] = ex
            return backward(x_, d_, ex)
        return forward, spied

    def norm_error(x_, norm, eps, u_, e_in=None):
        out = real_norm_error(x_, norm, eps, u_, e_in)
        norm_errors.append((norm, e_in, out))
        return out

    monkeypatch.setattr(L, "_widened_block_attention", attention_spy)
    monkeypatch.setattr(L, "_ffn_pieces", ffn_pieces)
    monkeypatch.setattr(L, "_norm_output_error", norm_error)
    monkeypatch.setattr(Magnitude, "forward_u", u)
    with np.errstate(all="ignore"):
        L._decoder_block_backward(x, p, causal_mask(5), d.view(Magnitude), np.float64)
    assert set(given) == {"self_attn", "ffn"} and given["ffn"] is not None

    def made(error):  # the one recorded call of _norm_output_error whose result is ``error``
        calls = [(norm, e_in) for norm, e_in, out in norm_errors if out is error]
        assert len(calls) == 1, calls
        return calls[0]

    norm, e_in = made(given["ffn"])
    assert norm is (p.norm2 if norm_first else p.norm1) and e_in is not None and np.all(np.asarray(e_in) > 0)
    if norm_first:
        norm, e_in = made(given["self_attn"])
        assert norm is p.norm1 and e_in is None
    else:
        assert given["self_attn"] is None


@pytest.mark.parametrize("rotated", [False, True])
def test_widened_block_attention_follows_its_docstring(rotated):
    """_widened_block_attention, piece by piece from its docstring, with grouped-query heads (h = 4 query heads
    sharing h_kv = 2 key/value heads, r = 2), a causal mask (dead weights), with and without an input error: |x| + e_x;
    each projection's u(d + 1)(|x||W| + |b|) + e_x|W|, split into its heads, keys and values repeated for their
    groups, a rotation's 4u|q| and 4u|k| when rotated; e_s = c(e_q|k|ᵀ + |q|e_kᵀ) + u d_k c|q||k|ᵀ; each live
    weight's A(u η(t) + e_s + ⟨A, e_s⟩), η of the shifted score t over the live keys, dead weights 0; the weighted
    sum's u(n_k + 2)A|V| + e_A|V| + A e_V on top of |A V|, merged. Sizes all apart (n 5, d_model 12, d_k 3), with a batch
    axis of 2 and without one."""
    rng = np.random.default_rng(71)
    u, h, kv, r, d_k, n = 2.0 ** -24, 4, 2, 2, 3, 5
    d_model = h * d_k
    c = 1.0 / math.sqrt(d_k)
    w = {"w_q": rng.normal(size=(d_model, d_model)), "b_q": rng.normal(size=d_model),
         "w_k": rng.normal(size=(d_model, kv * d_k)), "b_k": rng.normal(size=kv * d_k),
         "w_v": rng.normal(size=(d_model, kv * d_k)), "b_v": rng.normal(size=kv * d_k)}
    for shape in ((2, n, d_model), (n, d_model)):  # with a batch axis and without (the heads' axis is then first)
        _check_widened_block_attention(rng.normal(size=shape), w, rng, u, h, kv, r, d_k, n, c, rotated)


def _check_widened_block_attention(x, w, rng, u, h, kv, r, d_k, n, c, rotated):
    from attnclaims.reference.attention import _row_softmax, _weight_relative_error
    from attnclaims.reference.layers import _widened_block_attention
    from attnclaims.reference.multihead import _merge, _split

    d_model = x.shape[-1]
    q = _split(x @ w["w_q"] + w["b_q"], h)
    k = np.repeat(_split(x @ w["w_k"] + w["b_k"], kv), r, axis=-3)
    v = np.repeat(_split(x @ w["w_v"] + w["b_v"], kv), r, axis=-3)
    scores = (q @ np.swapaxes(k, -1, -2)) * c
    allowed = causal_mask(n)
    a = _row_softmax(scores, allowed)
    s = {"q": q, "k": k, "v": v, "a": a, "scores": scores}
    kt = lambda t: np.swapaxes(t, -1, -2)
    for e_x in (None, rng.uniform(0.0, 1e-3, size=x.shape)):
        ex = np.zeros(x.shape) if e_x is None else e_x
        width = u * (d_model + 1)
        proj = {m: width * (np.abs(x) @ np.abs(w["w_" + m]) + np.abs(w["b_" + m])) + ex @ np.abs(w["w_" + m])
                for m in ("q", "k", "v")}
        rot = 4 * u if rotated else 0.0
        eq = _split(proj["q"], h) + rot * np.abs(q)
        ek = np.repeat(_split(proj["k"], kv), r, axis=-3) + rot * np.abs(k)
        ev = np.repeat(_split(proj["v"], kv), r, axis=-3)
        e_s = c * (eq @ kt(np.abs(k)) + np.abs(q) @ kt(ek)) + u * d_k * c * (np.abs(q) @ kt(np.abs(k)))
        t = np.where(allowed, scores - np.max(np.where(allowed, scores, -np.inf), axis=-1, keepdims=True), 0.0)
        e_a = np.where(allowed, a * (u * _weight_relative_error(t, n) + e_s
                                     + np.sum(a * e_s, axis=-1, keepdims=True)), 0.0)
        merged = _merge(np.abs(a @ v) + u * (n + 2) * (a @ np.abs(v)) + e_a @ np.abs(v) + a @ ev)
        want = (np.abs(x) + ex, np.abs(q) + eq, np.abs(k) + ek, np.abs(v) + ev, a + e_a, merged)
        got = _widened_block_attention(x, e_x, w, s, h, kv, r, c, rotated, u)
        assert len(got) == len(want)
        for name, g, wanted in zip(("x", "q", "k", "v", "a", "merged"), got, want):
            assert np.shape(g) == wanted.shape, name
            np.testing.assert_allclose(g, wanted, rtol=1e-13, atol=0, err_msg=name)
        assert np.all(got[4][..., ~allowed] == 0.0)  # the dead weights carry no error


def test_messages_of_the_decoder_layer_vjp():
    """decoder_layer_vjp's (and decoder_masks') refusals by the argument's name: self_mask, memory_mask, d_out."""
    p = init_decoder_layer(0, 4, 2, 6)
    y, mem = np.ones((2, 3, 4)), np.ones((2, 5, 4))
    _refused_with(lambda: decoder_layer_vjp(y, mem, p, np.ones((2, 3, 4)), np.ones((3, 3))),
                  "self_mask.dtype=float64, but should be bool (True = may attend)")
    _refused_with(lambda: decoder_layer_vjp(y, mem, p, np.ones((2, 3, 4)), None, np.ones((3, 5))),
                  "memory_mask.dtype=float64, but should be bool (True = may attend)")
    _refused_with(lambda: decoder_layer_vjp(y, mem, p, np.ones((3, 4))),
                  "d_out.shape=(3, 4), but should be (2, 3, 4) (the output's shape)")
    _refused_with(lambda: decoder_layer_vjp(y, mem, p, np.array(["a"])),
                  "d_out.dtype=<U1, but should be a real floating or integer dtype")


def test_the_decoder_layer_vjp_pairs_each_target_with_its_own_memory():
    """With a batch of two targets and two memories, each element's gradients are those of that element alone
    (its target with its own memory): the memory is broadcast over the batch axes only, never paired with the
    other element's target."""
    rng = np.random.default_rng(73)
    p = init_decoder_layer(5, 6, 2, 8)
    y, mem, d = rng.normal(size=(2, 3, 6)), rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 3, 6))
    dy, dmem, _ = decoder_layer_vjp(y, mem, p, d)
    for b in range(2):
        dy_b, dmem_b, _ = decoder_layer_vjp(y[b], mem[b], p, d[b])
        np.testing.assert_allclose(dy[b], dy_b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(dmem[b], dmem_b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rope", [None, "rope"])
def test_the_block_vjp_without_a_batch_axis_is_the_batched_one(rope):
    """decoder_block_vjp of x (n, d_model) is that of x[None] (1, n, d_model), less the axis: the block's attention
    transposes and groups its heads by the trailing axes, which a leading index would confuse when the heads' axis
    comes first (grouped-query: 4 query heads, 2 key/value heads)."""
    import dataclasses

    from attnclaims.reference import RotaryParams, decoder_block_vjp, init_decoder_block

    rng = np.random.default_rng(79)
    p = init_decoder_block(6, 8, 4, 10, num_kv_heads=2, rope=RotaryParams() if rope else None)
    x, d = rng.normal(size=(5, 8)), rng.normal(size=(5, 8))
    dx, dp = decoder_block_vjp(x, p, d)
    dx1, dp1 = decoder_block_vjp(x[None], p, d[None])
    np.testing.assert_allclose(dx, dx1[0], rtol=1e-12, atol=1e-14)
    for f in dataclasses.fields(dp.self_attn):
        a, b = getattr(dp.self_attn, f.name), getattr(dp1.self_attn, f.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f.name)


@pytest.mark.parametrize("rope", [None, "rope"])
def test_the_block_backward_widens_its_attention_by_its_forward_errors(rope, monkeypatch):
    """Run on d_out = Magnitude(|d|) with ``Magnitude.forward_u`` > 0 (as ``measured_bounds`` sets it: on the class,
    so that every array the backward derives from d carries it), the block's attention backward runs on
    ``_widened_block_attention``'s values, told whether the block rotates (RoPE) and given that unit roundoff; with
    ``forward_u`` = 0 it is not called. The widening shows in the gradients: each at least, and somewhere above, the
    same evaluation with the widening's error terms set to zero."""
    from attnclaims.checks.bounds import Magnitude
    from attnclaims.reference import RotaryParams, init_decoder_block
    from attnclaims.reference import layers as L

    u = 2.0 ** -24
    rng = np.random.default_rng(83)
    p = init_decoder_block(7, 8, 4, 10, num_kv_heads=2, rope=RotaryParams() if rope else None)
    x, d = rng.normal(size=(2, 5, 8)), np.abs(rng.normal(size=(2, 5, 8)))
    mask = causal_mask(5)
    real = L._widened_block_attention
    seen = []

    def spy(*args):
        seen.append((sys._getframe(1).f_code.co_name, args[8], args[9]))  # the caller: backward or output_error
        return real(*args)

    monkeypatch.setattr(L, "_widened_block_attention", spy)
    with np.errstate(all="ignore"):
        L._decoder_block_backward(x, p, mask, d.view(Magnitude), np.float64)
        assert seen == []
        monkeypatch.setattr(Magnitude, "forward_u", u)
        widened = _gradient_arrays(*L._decoder_block_backward(x, p, mask, d.view(Magnitude), np.float64))
        # the attention's backward itself runs on the widened values (the sub-layers' output errors use them too)
        assert ("backward", rope is not None, u) in seen, seen
        assert all(s[1:] == (rope is not None, u) for s in seen), seen
        # the same evaluation with every widening term zero: the values as they are, nothing added
        monkeypatch.setattr(L, "_widened_block_attention", lambda x_, e_x, w, s, *rest: (
            np.abs(x_), np.abs(s["q"]), np.abs(s["k"]), np.abs(s["v"]), s["a"], np.abs(s["merged"])))
        plain = _gradient_arrays(*L._decoder_block_backward(x, p, mask, d.view(Magnitude), np.float64))
    assert len(widened) == len(plain) > 1
    assert all(np.all(w >= q - 1e-12 * np.abs(q)) for q, w in zip(plain, widened))
    assert any(np.any(w > q * (1 + 1e-9)) for q, w in zip(plain, widened))


@pytest.mark.parametrize("rope", [None, "rope"])
def test_the_block_attentions_output_error_follows_its_docstring(rope, monkeypatch):
    """The block's attention sub-layer's ``output_error(e_x, u)``: |merged|'s widening by
    ``_widened_block_attention`` for that input error, through |W_O|, plus the output projection's
    u(H + 1)(|merged||W_O| + |b_O|), H = the merged width (grouped-query: 4 query heads, 2 key/value heads)."""
    import dataclasses

    from attnclaims.reference import RotaryParams, init_multi_head
    from attnclaims.reference import layers as L

    rng = np.random.default_rng(89)
    a = dataclasses.replace(init_multi_head(3, 8, 4, num_kv_heads=2), b_o=rng.normal(size=8))
    forward, _ = L._attention_pieces(a, RotaryParams() if rope else None, causal_mask(5), np.dtype(np.float64))
    x = rng.normal(size=(2, 5, 8))
    forward(x)
    seen = []
    real = L._widened_block_attention

    def spy(*args):
        out = real(*args)
        seen.append((args, out))
        return out

    monkeypatch.setattr(L, "_widened_block_attention", spy)
    u, e_x = 2.0 ** -24, rng.uniform(0.0, 1e-3, size=x.shape)
    got = forward.output_error(e_x, u)
    assert len(seen) == 1
    args, out = seen[0]
    assert args[0] is not None and args[1] is e_x and args[8] == (rope is not None) and args[9] == u
    merged, w_o = np.abs(args[3]["merged"]), np.abs(a.w_o)
    want = (out[-1] - merged) @ w_o + u * (merged.shape[-1] + 1) * (merged @ w_o + np.abs(a.b_o))
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    assert np.all(got > 0)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("rms", [False, True])
def test_the_block_backward_carries_the_attentions_error_into_the_ffns_norm(norm_first, rms, monkeypatch):
    """With ``forward_u`` > 0 the block's backward bounds the error of the FFN sub-layer's input stream (Pre-LN: y = x
    + Attn(N₁x), the second norm's input; Post-LN: z = x + Attn(x), the first norm's input) by the attention
    sub-layer's ``output_error`` for its own input's error (Pre-LN: N₁'s output error for the exact x; Post-LN: zero,
    x is exact) plus the residual add's rounding u|stream|, and hands it to the norm before the FFN
    (``_norm_output_error``'s ``ex``); the attention's own norm (Pre-LN) gets no incoming error. Checked on the
    calls the backward makes: the stream is the x of the FFN-side norm call, the attention's forward is the one the
    block built (``_attention_pieces``)."""
    from attnclaims.checks.bounds import Magnitude
    from attnclaims.reference import init_decoder_block
    from attnclaims.reference import layers as L
    from attnclaims.reference.params import RMSNormParams

    u = 2.0 ** -24
    rng = np.random.default_rng(97)
    p = init_decoder_block(5, 8, 2, 12, norm_first=norm_first)
    if rms:
        p = dataclasses.replace(p, norm1=RMSNormParams(rng.uniform(0.5, 1.5, 8)),
                                norm2=RMSNormParams(rng.uniform(0.5, 1.5, 8)))
    x, d = rng.normal(size=(2, 4, 8)), np.abs(rng.normal(size=(2, 4, 8)))
    calls, pieces = [], []
    real_norm_error, real_pieces = L._norm_output_error, L._attention_pieces

    def norm_error(x_, norm, eps, u_, ex=None):
        out = real_norm_error(x_, norm, eps, u_, ex)
        calls.append((x_, norm, eps, u_, ex, out))
        return out

    def attention_pieces(*args):
        made = real_pieces(*args)
        pieces.append(made)
        return made

    monkeypatch.setattr(L, "_norm_output_error", norm_error)
    monkeypatch.setattr(L, "_attention_pieces", attention_pieces)
    monkeypatch.setattr(Magnitude, "forward_u", u)
    with np.errstate(all="ignore"):
        L._decoder_block_backward(x, p, causal_mask(4), d.view(Magnitude), np.float64)
    assert len(pieces) == 1 and all(c[2] == p.eps and c[3] == u for c in calls), [c[1:4] for c in calls]
    forward = pieces[0][0]
    if norm_first:  # N₁(x) for the attention's input; then, backwards, the FFN's norm N₂ and the attention's N₁
        assert [id(c[1]) for c in calls] == [id(p.norm1), id(p.norm2), id(p.norm1)]
        first, ffn_side, attn_side = calls
        assert first[0] is x and first[4] is None and attn_side[0] is x and attn_side[4] is None
        e_in = first[5]
    else:  # only the FFN's input: the first norm's output, its input z carrying the stream's error
        assert [id(c[1]) for c in calls] == [id(p.norm1)]
        ffn_side, e_in = calls[0], np.zeros(x.shape)
    stream = np.asarray(ffn_side[0], dtype=np.float64)
    want = forward.output_error(e_in, u) + u * np.abs(stream)
    np.testing.assert_allclose(ffn_side[4], want, rtol=1e-13, atol=0)
    assert np.all(want > u * np.abs(stream))  # the attention's part is there, not only the add's rounding
