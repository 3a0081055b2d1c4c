"""The store term of the per-case measured bound of whole layers (attnclaims/checks/bounds/common.py, "The
per-case measured bound of whole layers"): a correct evaluation rounds each stored residual sum z = x + F(x)
by up to u|z|, which the next layer norm multiplies by |γ|/σ; every naive evaluation order may round such a sum
the same way, so the measured part of τ does not see it. The case below is one the strategies drew: a Post-LN
decoder layer whose self-attention output bias is 2¹⁸, so the first residual sum is about 2.6·10⁵ with a
spread of about 0.1, and torch's float64 decoder layer (a correct implementation) was 3.2 times over τ
without the term."""
from __future__ import annotations

import numpy as np
import pytest

from attnclaims.checks import bounds as T
from attnclaims.checks.bounds import common as BC
from attnclaims.checks.bounds import layers as BL
from attnclaims.reference import decoder_layer as ref_decoder_layer
from attnclaims.reference.params import DecoderLayerParams, FeedForwardParams, LayerNormParams, MultiHeadParams

_a = np.array


def _repro_layer():
    return DecoderLayerParams(
        self_attn=MultiHeadParams(
            w_q=_a([[0.2739233746429086, -0.4604265724722594, -0.9180529521276106], [-0.9669447289429418,
            0.6265404784005448, 0.8255111545554434], [0.21327155153435973, 0.4589931219679968,
            0.08724998293084574]]),
            w_k=_a([[0.8701448475755365, 0.6317071082430643, -0.9945229996597038], [0.7148085531751387,
            -0.9328288493890713, 0.45931089285988813], [-0.648688758794882, 0.7263578446997732,
            0.08292244049818343]]),
            w_v=_a([[-0.40057621892523043, -0.1546255576046831, -0.9433606577090741], [-0.7514334470008721,
            0.34124882938726064, 0.2943790231485002], [0.2307702229625077, -0.23264489147623313,
            0.994419871578422]]),
            w_o=_a([[0.9616706775524602, 0.3710839689613894, 0.3009185525356326], [0.37689346114188016,
            -0.22215715204179243, -0.7298069899551776], [0.4429766803881634, 0.050708644951451776,
            -0.3795162488820887]]),
            b_q=_a([-0.0028329282336421874, 0.07789756686980007, 0.08680870319124995]),
            b_k=_a([-0.02844096065818595, 0.014305966145952184, -0.035626121784811574]),
            b_v=_a([0.018860006039939356, -0.03241775489857335, -0.021676199894367754]),
            b_o=_a([262144.0780548704, 262143.94543151872, 262144.0246374289]),
            num_heads=1,
            num_kv_heads=1),
        cross_attn=MultiHeadParams(
            w_q=_a([[-0.8319693128352303, 0.6652882953067956, 0.5741966149773667], [-0.5212611140140957,
            0.7529684616214076, -0.8828639303896113], [-0.32776587890867925, -0.6994410662103219,
            -0.09932126670142605]]),
            w_k=_a([[0.5926485405745885, -0.5387155820125051, -0.8959573978711808], [-0.1908963203569436,
            -0.6029739109814893, -0.8184939087617562], [0.16066477197370133, -0.4026077343621548,
            0.34398975591271874]]),
            w_v=_a([[-0.6009691120635734, 0.8842262210129956, -0.2697796635103429], [-0.789009440859541,
            0.25821630307941845, 0.8543091061357349], [-0.11924569056843204, 0.9091809873814745,
            -0.00020837262470596585]]),
            w_o=_a([[-0.14954275030184894, 0.24042690403075562, 0.9901930104706482], [0.8978873498755306,
            -0.07990972138180785, 0.5154576906165829], [-0.005154609024762058, 0.05862432039354082,
            0.571571401427615]]),
            b_q=_a([-0.01706883012886584, 0.04689671435774587, 0.04222857559794996]),
            b_k=_a([0.08641193732267566, -0.07701347334381897, 0.04580302341526188]),
            b_v=_a([0.085484785724912, 0.09358523798492929, -0.09705873900692615]),
            b_o=_a([0.07272801804911516, 0.09623900801326887, 0.09144203592219272]),
            num_heads=1,
            num_kv_heads=1),
        ffn=FeedForwardParams(
            w1=_a([[-0.36685402462710553, 0.49364469628453145, 0.4072744050816638, 0.33670848144098453,
            -0.020901931886036396, -0.279527368916743, 0.31530398113099534, 0.4423628246498912,
            -0.24426896399013015, 0.04066566248936376, -0.05979272005325098, 0.45018290425389484,
            -0.47992090999840775, 0.2423225682425586, 0.119458960397541, -0.49260631025135787, 0.22896758515691729,
            -0.5055301511262479, 0.2694210350497781], [0.013326051830699903, 0.4481847415022342,
            -0.4532120510905314, 0.35649427183259497, -0.4525775254560418, -0.16261292367282482,
            -0.07280060015796569, 0.48678596731635604, 0.06499903932560769, -0.25185771833236614,
            -0.26981091700131565, 0.40537636496287155, -0.28632004396144684, -0.3921398204867477,
            -0.22108131394822744, 0.089952607477927, 0.05649568696673424, 0.32348235537070047, 0.06316507180155662],
            [-0.2209868342506086, -0.09097680294767135, 0.33226651762180004, 0.1321316906476696,
            0.47949095965462873, -0.13640264397188473, 0.054950930567005285, 0.09810062912598427,
            0.36377830275900114, -0.37029081268053465, -0.09764676860984195, 0.42818817050522673,
            -0.4772510697995442, 0.33705571689707114, -0.08837849058511282, 0.3444690280923576, -0.5118357681986825,
            -0.14095469111793169, -0.44010657252206953]]),
            b1=_a([0.0305229152673277, -0.045230180280088565, 0.040530414131957265, 0.08876028538841815,
            -0.07463657954775045, 0.07295565908015483, -0.08810716967993232, -0.023845898337822108,
            -0.014045187764284678, -0.002230090633307147, 0.09529246438720892, 0.05513823762036568,
            -0.0382285274561478, -0.04603264289983997, 0.07262404083786356, 0.07626143454753798,
            0.0021413011087290518, -0.03114085380753495, 0.09898346963218357]),
            w2=_a([[-0.19224069711544195, -0.3313961120413421, 0.39699953993866166], [0.3262236838511807,
            0.17535476508993775, 0.47879742286826554], [0.4446443742459417, 0.259287105295678, 0.3767403352438554],
            [-0.2640966164729094, -0.3747057506442254, 0.1776238085774109], [0.22416175071300826,
            -0.3477518742893811, -0.10908687047714583], [0.4284981727511975, 0.06413101013414091,
            0.08181919468506305], [-0.31947103297084556, 0.027179352252576616, 0.02447677447721064],
            [-0.429342721157152, 0.5033727259468394, 0.07457027263734461], [-0.5155391082381042,
            0.28477280308505415, 0.49953224633562676], [0.09386618322469942, -0.18833638849008377,
            -0.3263875461020927], [0.18019819213305244, -0.3184499363692438, 0.08114235735388275],
            [0.10678533702603843, 0.48298516866525365, -0.4467543596843513], [-2.8384762830846455e-05,
            0.2549515021093075, -0.3371256745401091], [-0.11691048572646784, -0.45654076221985374,
            0.23592486774801313], [-0.430562399895434, -0.10957313699617038, 0.390131664431411],
            [-0.02893135469592112, 0.4309695540246772, 0.27774137120686937], [0.4337917286309637,
            -0.38916486480547646, -0.44539901911560953], [-0.4487795916262404, 0.38525574569504606,
            0.14003152643299044], [-0.0035807490443643397, -0.3514174406362711, 0.18145865760413404]]),
            b2=_a([-0.03639652243084039, 0.04217597265318898, -0.00792893422653504]),
            activation='relu'),
        norm1=LayerNormParams(
            gamma=_a([1.0044819163267162, 1.1737994394759221, 0.7556472853140285]),
            beta=_a([0.047255101994101545, -0.18165903162247887, 0.18488205108814088])),
        norm2=LayerNormParams(
            gamma=_a([0.9933076216775559, 1.2932172000206918, 0.8097659948054312]),
            beta=_a([0.2778114840745603, 0.1805502219651654, -0.011243702054838822])),
        norm3=LayerNormParams(
            gamma=_a([1.1881204385077813, 1.0617093431446698, 1.0930726383948282]),
            beta=_a([0.24821445762443334, -0.26083775015322513, 0.20099292237504035])),
        norm_first=False,
        eps=1e-05)


_Y = _a([[[-0.573563155967303, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
_MEMORY = np.full((1, 8, 3), -0.6514261064664213)


def _bounds(dtype, derived=None):
    """(implementation's inputs, golden output, the bound with the store term, the same bound without it);
    ``derived``: the derived bound that caps both (the conformance bound when None)."""
    p = _repro_layer()
    y, memory = _Y.astype(dtype), _MEMORY.astype(dtype)
    golden = ref_decoder_layer(y, memory, p)
    if derived is None:
        derived = T.conformance(T.decoder_layer_error, y, memory, p, None, None, dtype=dtype)
    new = T.decoder_layer_bound(derived, golden, y, memory, p, None, None, dtype)
    gold, extra = BC._golden(lambda g: BL.decoder_layer(y, memory, p, None, None, g), golden, dtype)
    naive = BL.decoder_layer(y, memory, p, None, None, dtype, orders=BC.ORDERS)
    old = BC.measured(derived, naive, gold, dtype, n_floor=3, reference=extra)
    return (y, memory, p), golden, new, old


def _decoder_stores(y, memory, p, dtype):
    return BL._store_term(lambda g, o: BL._same_precision_decoder(y, memory, p, None, None, g, o), dtype,
                          (p.d_model, p.ffn.d_ff, y.shape[-2], memory.shape[-2]))


def _needs_golden(dtype):
    if not T.applies(dtype):
        pytest.skip(f"no golden result for {np.dtype(dtype).name} here (long double is float64)")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_the_store_term_is_added_to_every_row_as_its_row_maximum(dtype):
    """τ = C_SAME (max(naive orders' error, store term) + n_floor u max|golden|) per row, plus the reference's own
    error: the store term (:func:`~attnclaims.checks.bounds.layers._store_term`) counts as one more correct
    evaluation; positive on every row (every residual sum rounds) and, with a first residual sum about 2.6·10⁵
    on a spread of 0.1, larger than every naive order's error on some row."""
    _needs_golden(dtype)
    (y, memory, p), golden, new, old = _bounds(dtype, T.Bound(np.full((1, 4, 3), np.inf), T.unit_roundoff(dtype)))
    stores = _decoder_stores(y, memory, p, dtype).max(axis=-1, keepdims=True)
    assert np.all(stores > 0)
    gold, extra = BC._golden(lambda g: BL.decoder_layer(y, memory, p, None, None, g), golden, dtype)
    naive = np.abs(BL.decoder_layer(y, memory, p, None, None, dtype, orders=BC.ORDERS) - gold).max(axis=0)
    naive = naive.max(axis=-1, keepdims=True)
    floor = 3 * T.unit_roundoff(dtype) * np.abs(gold).max(axis=-1, keepdims=True)
    want = T.C_SAME * (np.maximum(naive, stores) + floor) + (0 if extra is None else np.abs(extra - gold))
    np.testing.assert_allclose(new.abs, np.broadcast_to(want.astype(np.float64), new.abs.shape), rtol=1e-12)
    assert np.any(stores > naive), "the stores' term is the larger one on some row of this case"


def test_torch_float64_is_inside_the_bound_only_with_the_store_term():
    """The false alarm the term removes: torch's float64 TransformerDecoderLayer (correct) is 3.2 times over τ
    without it, inside τ with it; and the bound stays below the derived bound (it still measures)."""
    pytest.importorskip("torch")
    _needs_golden(np.float64)
    from attnclaims.adapters.torch_adapter import TorchImplementation

    (y, memory, p), golden, new, old = _bounds(np.float64)
    err = np.abs(TorchImplementation().decoder_layer(y, memory, p) - golden)
    assert np.max(err / old.abs) > 2, "the case no longer shows the undercount the store term is for"
    assert np.all(err <= new.abs), f"false alarm: error/bound = {np.max(err / new.abs):.3g}"
    derived = T.conformance(T.decoder_layer_error, y, memory, p, None, None, dtype=np.float64)
    assert np.all(new.abs <= derived.abs) and np.max(new.abs / derived.abs) < 0.5


def test_torch_float32_is_inside_the_bound_on_the_same_case():
    pytest.importorskip("torch")
    from attnclaims.adapters.torch_adapter import TorchFloat32Implementation

    (y, memory, p), golden, new, _ = _bounds(np.float32)
    err = np.abs(TorchFloat32Implementation().decoder_layer(y, memory, p) - golden)
    assert np.all(err <= new.abs), f"false alarm: error/bound = {np.max(err / new.abs):.3g}"


def test_an_encoder_layer_and_stack_carry_the_term_too():
    """The encoder layer and stack take the store term likewise: a Post-LN encoder layer with the repro's
    self-attention (its output bias 2¹⁸) and FFN; the bound with the term is larger than τ without it."""
    _needs_golden(np.float64)
    from attnclaims.reference import encoder as ref_encoder
    from attnclaims.reference import encoder_layer as ref_encoder_layer
    from attnclaims.reference.params import EncoderLayerParams

    d = _repro_layer()
    p = EncoderLayerParams(self_attn=d.self_attn, ffn=d.ffn, norm1=d.norm1, norm2=d.norm2, norm_first=False,
                           eps=d.eps)
    free = T.Bound(np.full(_Y.shape, np.inf), T.unit_roundoff(np.float64))
    dims = (3, p.ffn.d_ff, _Y.shape[-2])
    for bound, naive, golden, in_order, n_floor in [
        (T.encoder_layer_bound, lambda g, **k: BL.encoder_layer(_Y, p, None, g, **k), ref_encoder_layer(_Y, p),
         lambda g, o: BL._same_precision_encoder(_Y, p, None, g, o), 2),
        (lambda f, r, x, p, m, dt: T.encoder_stack_bound(f, r, x, [p, p], m, dt),
         lambda g, **k: BL.encoder_stack(_Y, [p, p], None, g, **k), ref_encoder(_Y, [p, p]),
         lambda g, o: BL._stack_in_order(_Y, [p, p], None, g, o), 4),
    ]:
        gold, extra = BC._golden(naive, golden, np.float64)
        orders = naive(np.float64, orders=BC.ORDERS)
        stores = BL._store_term(in_order, np.float64, dims)
        old = BC.measured(free, orders, gold, np.float64, n_floor=n_floor, reference=extra)
        want = BC.measured(free, orders, gold, np.float64, n_floor=n_floor, reference=extra, stores=stores)
        new = bound(free, golden, _Y, p, None, np.float64)
        np.testing.assert_array_equal(new.abs, want.abs)
        assert np.all(new.abs >= old.abs) and np.any(new.abs > old.abs)


def _recording_layer(z, x):
    """A stand-in for ``evaluate(dtype, order)`` of :func:`~attnclaims.checks.bounds.layers._store_term`: one
    stored residual sum (``z``) and the means of a layer norm's rows (of ``x``, taken as 0), each through
    the order's perturbation when it has one; it returns them and the differences of neighbouring sums, which
    see whether two neighbours were perturbed the same way. Each call's dtype and perturbation signs are
    recorded."""
    calls = []

    def evaluate(dtype, o):
        s = np.asarray(z, dtype) if o.store is None else o.store(np.asarray(z, dtype))
        mean = np.zeros((np.shape(x)[0], 1), dtype)
        mean = mean if o.mean_store is None else o.mean_store(mean, np.asarray(x, dtype))
        calls.append({"dtype": dtype, "identity": o.store is None and o.mean_store is None,
                      "signs": np.sign(s - np.asarray(z, dtype)), "mean_moved": mean[:, 0].astype(float)})
        return np.concatenate([s, mean[:, 0], s[0::2] - s[1::2]])

    return evaluate, calls


def test_the_store_term_is_the_largest_change_over_all_plus_all_minus_and_two_random_sign_patterns():
    """The store term's documented recipe, step by step: the layer is evaluated in the golden dtype once as it
    is and once per sign pattern — all +, all −, then two random patterns drawn from ``seed`` (default 0) —
    each stored sum z moved by ±u|z| (u of the implementation's dtype) and each layer norm's mean by
    ±2u·max|x| (two roundings: ``MEAN_STORES``); the term is each output entry's largest change."""
    rng = np.random.default_rng(5)
    z = rng.uniform(1.0, 4.0, 64) * rng.choice([-1.0, 1.0], 64)
    x = np.array([[0.5, -3.0, 2.0]] * 8) * np.arange(1, 9)[:, None]  # rows' max|x|: 3, 6, …, 24
    top = 3.0 * np.arange(1, 9)
    u = T.unit_roundoff(np.float32)
    evaluate, calls = _recording_layer(z, x)
    term = BL._store_term(evaluate, np.float32, (3, 1, 1))

    assert len(calls) == 5  # the unperturbed evaluation and four sign patterns
    assert all(isinstance(c["dtype"], np.dtype) and c["dtype"] == T.golden_dtype(np.float32) == np.float64
               for c in calls)
    assert calls[0]["identity"] and not any(c["identity"] for c in calls[1:])
    # the sign of the move: +u|z| is up whatever the sign of z
    assert np.all(calls[1]["signs"] == 1) and np.all(calls[2]["signs"] == -1)
    # every pattern moves each mean by 2u·max|x| of its row (each call: the largest over the patterns would
    # hide one), up in all +, down in all − (a pattern moves the sums and the means the same way), both ways
    # among the rows of a random pattern
    for c, sign in zip(calls[1:], (1, -1, None, None)):
        np.testing.assert_allclose(np.abs(c["mean_moved"]), 2 * u * top, rtol=2.0 ** -50)
        moved = set(np.sign(c["mean_moved"]))
        assert moved == ({sign} if sign is not None else {1.0, -1.0})
    for c in calls[3:]:  # random signs: both occur among 64 entries
        assert np.any(c["signs"] == 1) and np.any(c["signs"] == -1)
    assert not np.array_equal(calls[3]["signs"], calls[4]["signs"])

    sums, mean, pairs = term[:64], term[64:72], term[72:]
    # the changes are differences of float64 values ≤ 4 + 2u: each off by at most a few roundings, 2⁻⁵³·4 each
    atol = 8 * 2.0 ** -53 * 4
    np.testing.assert_allclose(sums, u * np.abs(z), rtol=0, atol=atol)
    np.testing.assert_allclose(mean, 2 * u * top, rtol=2.0 ** -50)
    # a neighbouring pair moved the same way by all +/all −, apart by some random pattern
    apart = np.zeros(32, dtype=bool)
    for c in calls[3:]:
        apart |= c["signs"][0::2] != c["signs"][1::2]
    assert apart.any() and not apart.all()
    a = np.abs(z)
    np.testing.assert_allclose(pairs, np.where(apart, u * (a[0::2] + a[1::2]), u * np.abs(a[0::2] - a[1::2])),
                               rtol=0, atol=atol)


def test_the_store_terms_random_patterns_come_from_seed_0_by_default():
    """The default seed is 0: the same random patterns as ``seed=0``, other ones than ``seed=1``."""
    z = np.linspace(1.0, 2.0, 64)
    x = np.ones((2, 3))
    signs = {}
    for seed in (None, 0, 1):
        evaluate, calls = _recording_layer(z, x)
        BL._store_term(evaluate, np.float32, (3, 1, 1), **({} if seed is None else {"seed": seed}))
        signs[seed] = np.stack([c["signs"] for c in calls[3:]])
    np.testing.assert_array_equal(signs[None], signs[0])
    assert not np.array_equal(signs[0], signs[1])
