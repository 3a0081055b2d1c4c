"""The JAX / Flax adapter: the protocol's capabilities mapped onto jax.nn and flax.nnx, in float64.

* ``softmax``              ``jax.nn.softmax``
* ``attention``            ``jax.nn.dot_product_attention`` (layout (B, T, N, H))
* ``multi_head_attention`` ``flax.nnx.MultiHeadAttention`` (its default attention function,
                           ``flax.nnx.dot_product_attention``, calls ``jax.nn.dot_product_attention``
                           when there is no dropout)
* ``layer_norm``           ``flax.nnx.LayerNorm``
* ``feed_forward``         ``flax.nnx.Linear`` → ``jax.nn.relu`` → ``flax.nnx.Linear``

Neither jax nor flax ships a sinusoidal positional encoding or a Transformer encoder / decoder
layer, so those capabilities are absent (the report shows "not applicable") rather than
re-implemented here: a re-implementation would test this adapter, not the library.

Float64: ``jax_enable_x64`` is switched on when the implementation is constructed (before it
creates any array), and the constructor checks that a float64 array really is float64. Results
are returned in the dtype jax produced, never cast, so a silent fall-back to float32 shows as a
dtype failure.

Layout: our attention takes (..., n, d); jax's takes (batch, seq, heads, d). The last batch axis
becomes jax's head axis (so a (B, h, n, d) input is the usual multi-head call) and the ones
before it are flattened into its batch axis; masks (True = take part, the same polarity as
ours) are broadcast to (B, h, n_q, n_k). jax needs the value shaped like the key (d_v = d_k);
other widths go in as extra heads (see :meth:`JaxImplementation.attention`). Flax's kernels are the paper's matrices reshaped:
``query.kernel = w_q.reshape(d_model, heads, d_k)`` (head i = columns [i·d_k, (i+1)·d_k), as
ours), biases ``(heads, d_k)``, ``out.kernel = w_o.reshape(heads, d_k, d_model)``.

Every function is jitted once per process (``jax.jit`` caches a compilation per input shape;
parameters, scale and eps are traced arguments, so new values do not recompile). Flax modules
are built inside the jitted function from the given parameters, with flax's defaults except
the dtypes (float64) and eps.
"""
from __future__ import annotations

import numpy as np

__all__ = ["JaxImplementation", "INSTALL_HINT"]

INSTALL_HINT = "jax/flax is not installed: pip install 'attnclaims[jax]'"

#: the jitted functions, built on first use (they need jax imported)
_FUNCTIONS: dict = {}


def _import_jax():
    try:
        import jax
        import jax.numpy as jnp
        from flax import nnx
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return jax, jnp, nnx


def _enable_x64(jax, jnp) -> None:
    """Switch on float64 and check that it took effect, rather than trust it: without it jax turns
    float64 input into float32 silently."""
    jax.config.update("jax_enable_x64", True)
    probe = jnp.asarray(np.float64(1.0) / 3.0)
    if probe.dtype != np.float64 or float(probe) != 1.0 / 3.0:
        raise RuntimeError(f"jax did not enable float64: jnp.asarray(1/3) has dtype {probe.dtype} "
                           f"(set JAX_ENABLE_X64=1 before importing jax)")


def _functions(dtype: str = "float64") -> dict:
    """The jitted library calls with modules built in ``dtype`` (one set per dtype)."""
    if dtype in _FUNCTIONS:
        return _FUNCTIONS[dtype]
    jax, jnp, nnx = _import_jax()
    f64 = getattr(jnp, dtype)  # the modules' dtype and param_dtype

    @jax.jit
    def attention(q, k, v, mask, scale):
        return jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale)

    def mha(x_q, x_kv, mask, w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o, *, num_heads):
        d_model = x_q.shape[-1]
        d_k = d_model // num_heads
        m = nnx.MultiHeadAttention(num_heads, d_model, dtype=f64, param_dtype=f64, decode=False, rngs=nnx.Rngs(0))
        for proj, w, b in ((m.query, w_q, b_q), (m.key, w_k, b_k), (m.value, w_v, b_v)):
            proj.kernel[...] = w.reshape(d_model, num_heads, d_k)  # (d_model, heads, d_k)
            proj.bias[...] = b.reshape(num_heads, d_k)  # (heads, d_k)
        m.out.kernel[...] = w_o.reshape(num_heads, d_k, d_model)  # (heads, d_k, d_model)
        m.out.bias[...] = b_o
        return m(x_q, x_kv, mask=mask)

    @jax.jit
    def layer_norm(x, gamma, beta, eps):
        m = nnx.LayerNorm(x.shape[-1], epsilon=eps, dtype=f64, param_dtype=f64, rngs=nnx.Rngs(0))
        m.scale[...] = gamma
        m.bias[...] = beta
        return m(x)

    @jax.jit
    def feed_forward(x, w1, b1, w2, b2):
        d_model, d_ff = w1.shape
        linear1 = nnx.Linear(d_model, d_ff, dtype=f64, param_dtype=f64, rngs=nnx.Rngs(0))
        linear2 = nnx.Linear(d_ff, d_model, dtype=f64, param_dtype=f64, rngs=nnx.Rngs(0))
        linear1.kernel[...], linear1.bias[...] = w1, b1  # kernel (in, out): the paper's layout
        linear2.kernel[...], linear2.bias[...] = w2, b2
        return linear2(jax.nn.relu(linear1(x)))

    _FUNCTIONS[dtype] = dict(
        softmax=jax.jit(jax.nn.softmax, static_argnames=("axis",)),
        attention=attention,
        multi_head_attention=jax.jit(mha, static_argnames=("num_heads",)),
        layer_norm=layer_norm,
        feed_forward=feed_forward,
    )
    return _FUNCTIONS[dtype]


#: the jitted vector-Jacobian products, built on first use, one set per dtype
_VJP_FUNCTIONS: dict = {}


def _vjp_functions(dtype: str = "float64") -> dict:
    """``jax.vjp`` of each library call of :func:`_functions`, jitted (one compilation per input shape)."""
    if dtype in _VJP_FUNCTIONS:
        return _VJP_FUNCTIONS[dtype]
    jax, _, _ = _import_jax()
    import functools

    fns = _functions(dtype)

    def softmax(x, d, axis):
        return jax.vjp(lambda a: jax.nn.softmax(a, axis=axis), x)[1](d)[0]

    def attention(q, k, v, mask, scale, d):
        return jax.vjp(lambda a, b, c: fns["attention"](a, b, c, mask, scale), q, k, v)[1](d)

    def mha(x_q, x_kv, mask, *rest, num_heads):
        weights, d = rest[:-1], rest[-1]
        f = functools.partial(fns["multi_head_attention"], num_heads=num_heads)
        return jax.vjp(lambda xq, xkv, *w: f(xq, xkv, mask, *w), x_q, x_kv, *weights)[1](d)

    def layer_norm(x, gamma, beta, eps, d):
        return jax.vjp(lambda a, g, b: fns["layer_norm"](a, g, b, eps), x, gamma, beta)[1](d)

    def feed_forward(x, w1, b1, w2, b2, d):
        return jax.vjp(fns["feed_forward"], x, w1, b1, w2, b2)[1](d)

    _VJP_FUNCTIONS[dtype] = dict(
        softmax=jax.jit(softmax, static_argnames=("axis",)), attention=jax.jit(attention),
        multi_head_attention=jax.jit(mha, static_argnames=("num_heads",)), layer_norm=jax.jit(layer_norm),
        feed_forward=jax.jit(feed_forward))
    return _VJP_FUNCTIONS[dtype]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _cast(a, dtype) -> np.ndarray:
    """An input in the implementation's dtype (through float64: a float64 input is rounded once)."""
    return _f64(a).astype(dtype)


def _numpy(out) -> np.ndarray:
    """A jax array as a fresh, writable numpy array of the dtype jax computed in."""
    return np.array(out)


def _static_axis(axis, ndim: int):
    """A softmax axis as jit's static argument: an int, or a sorted tuple of non-negative ints (one compilation
    per set of axes, whatever order or sign it was given in)."""
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(int(a) + ndim if int(a) < 0 else int(a) for a in axis))
    return int(axis)


def _heads_layout(a, batch: tuple[int, ...], dtype) -> np.ndarray:
    """Our (..., n, d) broadcast to batch + (n, d) -> jax's (B, n, N, d): the last batch axis is
    the head axis N (1 if there is none), the ones before it are flattened into B."""
    a = np.broadcast_to(_cast(a, dtype), batch + np.shape(a)[-2:])
    heads = batch[-1] if batch else 1
    a = a.reshape((-1, heads) + a.shape[-2:])  # (B, N, n, d)
    return a.transpose(0, 2, 1, 3)  # (B, n, N, d)


class JaxImplementation:
    """JAX / Flax with ``jax_enable_x64``: jax.nn and flax.nnx functions with their defaults, float64.

    Capabilities: softmax, attention, multi_head_attention, layer_norm, feed_forward (see the
    module docstring for the function behind each). No positional_encoding, encoder_layer or
    decoder_layer: jax and flax have no such library function.
    """

    name = "jax"
    dtype = np.dtype(np.float64)
    #: JAX compiles once per input shape (~0.5 s each): the strategies draw from their small fixed
    #: menu of shapes (attnclaims/checks/strategies/common.py, FIXED_SHAPES) instead of drawing shapes freely.
    fixed_shapes = True
    responsible = {
        "softmax": "jax.nn.softmax",
        "attention": "jax.nn.dot_product_attention",
        "multi_head_attention": "flax.nnx.MultiHeadAttention (flax.nnx.dot_product_attention -> "
                                "jax.nn.dot_product_attention)",
        "layer_norm": "flax.nnx.LayerNorm",
        "feed_forward": "flax.nnx.Linear + jax.nn.relu",
        # the backward passes are jax.vjp of the same calls: a failure names the forward function
        "softmax_vjp": "jax.vjp of jax.nn.softmax",
        "attention_vjp": "jax.vjp of jax.nn.dot_product_attention",
        "multi_head_attention_vjp": "jax.vjp of flax.nnx.MultiHeadAttention (-> jax.nn.dot_product_attention)",
        "layer_norm_vjp": "jax.vjp of flax.nnx.LayerNorm",
        "feed_forward_vjp": "jax.vjp of flax.nnx.Linear + jax.nn.relu",
    }

    def __init__(self):
        jax, jnp, _ = _import_jax()
        _enable_x64(jax, jnp)
        import flax

        self.versions = {"jax": jax.__version__, "flax": flax.__version__}
        try:
            import jaxlib

            self.versions["jaxlib"] = jaxlib.__version__
        except (ImportError, AttributeError):  # pragma: no cover - jaxlib always comes with jax
            pass
        self._fn = _functions(self.dtype.name)

    #: jax.nn.softmax takes a tuple of axes (2-D attention maps): the variant softmax_axes
    variants = {"softmax_axes": True}

    def softmax(self, x, axis=-1):
        """``jax.nn.softmax(x, axis=axis)``, axis an int or a tuple of axes."""
        return _numpy(self._fn["softmax"](_cast(x, self.dtype), axis=_static_axis(axis, np.ndim(x))))

    def attention(self, q, k, v, mask=None, scale=None):
        """``jax.nn.dot_product_attention(q, k, v, mask=mask, scale=scale)`` in layout (B, T, N, H).

        The last batch axis of our (..., n, d) arrays is jax's head axis N, the others are
        flattened into B. The mask has our polarity (True = take part) and is broadcast to
        (B, N, n_q, n_k).

        jax requires value to have the key's shape (d_v = d_k). For d_v ≠ d_k the value columns
        are cut into c = ⌈d_v/d_k⌉ blocks of d_k (the last padded with zero columns) that go in
        as c extra heads sharing the same q, k and mask; the blocks of the output are put back
        side by side. Every head computes the same weights, so this is exactly one call's result
        for each block, and jax still applies its own default scale 1/√d_k.
        """
        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
        n_q, n_k, d_k, d_v = q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]
        q4, k4, v4 = (_heads_layout(a, batch, self.dtype) for a in (q, k, v))  # (B, n, N, d)
        b, heads = q4.shape[0], q4.shape[2]
        mask4 = None
        if mask is not None:
            mask4 = np.broadcast_to(np.asarray(mask), batch + (n_q, n_k)).reshape(b, heads, n_q, n_k)
        blocks = -(-d_v // d_k)  # ⌈d_v / d_k⌉
        if d_v != d_k:
            v4 = np.concatenate([v4, np.zeros(v4.shape[:-1] + (blocks * d_k - d_v,), v4.dtype)], axis=-1)  # (B, n_k, N, c·d_k)
            v4 = v4.reshape(b, n_k, heads * blocks, d_k)  # (B, n_k, N·c, d_k): head n·c + j = block j of head n
            q4, k4 = np.repeat(q4, blocks, axis=2), np.repeat(k4, blocks, axis=2)  # (B, n, N·c, d_k)
            mask4 = None if mask4 is None else np.repeat(mask4, blocks, axis=1)  # (B, N·c, n_q, n_k)
        out = self._fn["attention"](q4, k4, v4, mask4, None if scale is None else float(scale))  # (B, n_q, N·c, d_k)
        out = _numpy(out).reshape(b, n_q, heads, blocks * d_k)[..., :d_v]  # (B, n_q, N, d_v)
        out = out.transpose(0, 2, 1, 3)  # (B, N, n_q, d_v)
        return out.reshape(batch + (n_q, d_v))

    def multi_head_attention(self, x_q, x_kv, params, mask=None):
        """``flax.nnx.MultiHeadAttention(num_heads, d_model, dtype=float64, param_dtype=float64,
        decode=False)(x_q, x_kv, mask=mask[..., None, :, :])`` with the kernels set from the params;
        x_q and x_kv are broadcast to a common batch shape (flax needs equal batch axes)."""
        batch = tuple(np.broadcast_shapes(np.shape(x_q)[:-2], np.shape(x_kv)[:-2]))
        n_q, n_k = np.shape(x_q)[-2], np.shape(x_kv)[-2]
        x_q = np.broadcast_to(_cast(x_q, self.dtype), batch + np.shape(x_q)[-2:])
        x_kv = np.broadcast_to(_cast(x_kv, self.dtype), batch + np.shape(x_kv)[-2:])
        if mask is not None:
            mask = np.broadcast_to(np.asarray(mask), batch + (n_q, n_k))[..., None, :, :]  # (..., 1, n_q, n_k)
        p = params
        out = self._fn["multi_head_attention"](x_q, x_kv, mask, *(_cast(a, self.dtype) for a in (
            p.w_q, p.b_q, p.w_k, p.b_k, p.w_v, p.b_v, p.w_o, p.b_o)), num_heads=p.num_heads)
        return _numpy(out)

    def layer_norm(self, x, gamma, beta, eps):
        """``flax.nnx.LayerNorm(d, epsilon=eps, dtype=float64, param_dtype=float64)`` with
        ``scale = gamma``, ``bias = beta`` and flax's other defaults (``use_fast_variance=True``)."""
        c = lambda a: _cast(a, self.dtype)
        return _numpy(self._fn["layer_norm"](c(x), c(gamma), c(beta), float(eps)))

    def feed_forward(self, x, params):
        """``nnx.Linear(d_model, d_ff)`` → ``jax.nn.relu`` → ``nnx.Linear(d_ff, d_model)``, kernels = w1, w2."""
        p = params
        return _numpy(self._fn["feed_forward"](*(_cast(a, self.dtype) for a in (x, p.w1, p.b1, p.w2, p.b2))))

    # -- backward passes: jax.vjp of the same library calls (docs/adapters.md "Backward passes")
    def softmax_vjp(self, x, d_out, axis=-1):
        """``jax.vjp(lambda x: jax.nn.softmax(x, axis=axis), x)[1](d_out)``."""
        fn = _vjp_functions(self.dtype.name)["softmax"]
        return _numpy(fn(_cast(x, self.dtype), _cast(d_out, self.dtype), axis=_static_axis(axis, np.ndim(x))))

    def attention_vjp(self, q, k, v, d_out, mask=None, scale=None):
        """``jax.vjp`` of :meth:`attention`'s call of ``jax.nn.dot_product_attention``, its layout mapped
        back: the gradients of the extra heads of a d_v ≠ d_k call are summed (q, k) or cut (v), and broadcast
        batch axes are summed back."""
        from attnclaims.reference import sum_to

        q_shape, k_shape, v_shape = np.shape(q), np.shape(k), np.shape(v)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2]))
        n_q, n_k, d_k, d_v = q_shape[-2], k_shape[-2], q_shape[-1], v_shape[-1]
        q4, k4, v4 = (_heads_layout(a, batch, self.dtype) for a in (q, k, v))  # (B, n, N, d)
        b, heads = q4.shape[0], q4.shape[2]
        mask4 = None
        if mask is not None:
            mask4 = np.broadcast_to(np.asarray(mask), batch + (n_q, n_k)).reshape(b, heads, n_q, n_k)
        blocks = -(-d_v // d_k)
        d4 = np.zeros((b, n_q, heads, blocks * d_k), dtype=self.dtype)
        d4[..., :d_v] = np.broadcast_to(_cast(d_out, self.dtype), batch + (n_q, d_v)).reshape(
            b, heads, n_q, d_v).transpose(0, 2, 1, 3)
        d4 = d4.reshape(b, n_q, heads * blocks, d_k)
        if d_v != d_k:
            v4 = np.concatenate([v4, np.zeros(v4.shape[:-1] + (blocks * d_k - d_v,), v4.dtype)], axis=-1)
            v4 = v4.reshape(b, n_k, heads * blocks, d_k)
            q4, k4 = np.repeat(q4, blocks, axis=2), np.repeat(k4, blocks, axis=2)
            mask4 = None if mask4 is None else np.repeat(mask4, blocks, axis=1)
        fn = _vjp_functions(self.dtype.name)["attention"]
        dq4, dk4, dv4 = (_numpy(g) for g in fn(q4, k4, v4, mask4, None if scale is None else float(scale), d4))

        def back(g4, n, width, cut=None):  # (B, n, N·c, d_k) -> our (batch, n, width)
            if cut is None:
                g4 = g4.reshape(b, n, heads, blocks, d_k).sum(axis=3)  # the c copies of q or k
            else:
                g4 = g4.reshape(b, n, heads, blocks * d_k)[..., :cut]
            return g4.transpose(0, 2, 1, 3).reshape(batch + (n, width))

        return (sum_to(back(dq4, n_q, d_k), q_shape), sum_to(back(dk4, n_k, d_k), k_shape),
                sum_to(back(dv4, n_k, d_v, cut=d_v), v_shape))

    def multi_head_attention_vjp(self, x_q, x_kv, params, d_out, mask=None):
        """``jax.vjp`` of :meth:`multi_head_attention`'s flax module call with respect to x_q, x_kv and the
        kernels, the kernels' gradients reshaped back into the paper's matrices."""
        from attnclaims.reference import sum_to
        from attnclaims.reference.params import MultiHeadParams

        q_shape, kv_shape = np.shape(x_q), np.shape(x_kv)
        batch = tuple(np.broadcast_shapes(q_shape[:-2], kv_shape[:-2]))
        n_q, n_k = q_shape[-2], kv_shape[-2]
        xq = np.broadcast_to(_cast(x_q, self.dtype), batch + q_shape[-2:])
        xkv = np.broadcast_to(_cast(x_kv, self.dtype), batch + kv_shape[-2:])
        if mask is not None:
            mask = np.broadcast_to(np.asarray(mask), batch + (n_q, n_k))[..., None, :, :]
        p = params
        names = ("w_q", "b_q", "w_k", "b_k", "w_v", "b_v", "w_o", "b_o")
        fn = _vjp_functions(self.dtype.name)["multi_head_attention"]
        g = [_numpy(a) for a in fn(xq, xkv, mask, *(_cast(getattr(p, n), self.dtype) for n in names),
                                   _cast(d_out, self.dtype), num_heads=p.num_heads)]
        dq, dkv, grads = g[0], g[1], dict(zip(names, g[2:]))
        return sum_to(dq, q_shape), sum_to(dkv, kv_shape), MultiHeadParams(**grads, num_heads=p.num_heads)

    def layer_norm_vjp(self, x, gamma, beta, eps, d_out):
        """``jax.vjp`` of :meth:`layer_norm`'s ``flax.nnx.LayerNorm`` call with respect to x, scale, bias."""
        c = lambda a: _cast(a, self.dtype)
        fn = _vjp_functions(self.dtype.name)["layer_norm"]
        return tuple(_numpy(a) for a in fn(c(x), c(gamma), c(beta), float(eps), c(d_out)))

    def feed_forward_vjp(self, x, params, d_out):
        """``jax.vjp`` of :meth:`feed_forward`'s two ``nnx.Linear`` and ``jax.nn.relu``."""
        from attnclaims.reference.params import FeedForwardParams

        p = params
        fn = _vjp_functions(self.dtype.name)["feed_forward"]
        dx, w1, b1, w2, b2 = (_numpy(a) for a in fn(*(_cast(a, self.dtype) for a in (x, p.w1, p.b1, p.w2, p.b2)),
                                                    _cast(d_out, self.dtype)))
        return dx, FeedForwardParams(w1=w1, b1=b1, w2=w2, b2=b2)

    def __repr__(self) -> str:
        return "JaxImplementation()"


class JaxFloat32Implementation(JaxImplementation):
    """:class:`JaxImplementation` in float32 — jax's default dtype, the one jax models run in:
    inputs rounded to float32 once, flax modules with ``dtype=param_dtype=float32``, and every
    check at the float32 tolerance (u = 2⁻²⁴)."""

    name = "jax-float32"
    dtype = np.dtype(np.float32)

    def __repr__(self) -> str:
        return "JaxFloat32Implementation()"

