"""Resolve implementation names: ``reference``, ``torch``, ``jax``, ``all`` or ``package.module:attr``.

``module:attr`` names an object that follows the protocol, or a factory (a
class or a function taking no arguments) that returns one. Problems raise
:class:`ImplementationError` with a one-line message — also ``SystemExit`` or
``KeyboardInterrupt`` raised while importing the module or calling the factory.

:func:`resolve` imports and runs the implementation's code, so it is called only
in child processes (the pytest child, the orchestrator's short-lived probe); the
command line uses :func:`expand` and :func:`installed`, which import nothing of
an implementation (a built-in's library is looked up with ``find_spec``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from attnclaims.protocol import CAPABILITIES

#: built-in names -> "module:attr" of a factory. Library adapters import their library lazily.
BUILTINS: dict[str, str] = {
    "reference": "attnclaims.reference.impl:Reference",
    "torch": "attnclaims.adapters.torch_adapter:TorchImplementation",
    "torch-fastpath": "attnclaims.adapters.torch_adapter:TorchFastPathImplementation",
    "torch-float32": "attnclaims.adapters.torch_adapter:TorchFloat32Implementation",
    "torch-bfloat16": "attnclaims.adapters.torch_adapter:TorchBFloat16Implementation",
    "torch-float16": "attnclaims.adapters.torch_adapter:TorchFloat16Implementation",
    # SDPA's backends by name (docs/adapters.md, "SDPA's backends by name"): added below
    "jax": "attnclaims.adapters.jax_adapter:JaxImplementation",
    "jax-float32": "attnclaims.adapters.jax_adapter:JaxFloat32Implementation",
    "hf-bert": "attnclaims.adapters.hf_adapter:HFBert",
    "hf-bert-float32": "attnclaims.adapters.hf_adapter:HFBertFloat32",
    "hf-gpt2": "attnclaims.adapters.hf_adapter:HFGPT2",
    "hf-gpt2-sdpa": "attnclaims.adapters.hf_adapter:HFGPT2Sdpa",
    "hf-gpt2-float32": "attnclaims.adapters.hf_adapter:HFGPT2Float32",
    "hf-llama": "attnclaims.adapters.hf_adapter:HFLlama",
    "hf-llama-sdpa": "attnclaims.adapters.hf_adapter:HFLlamaSdpa",
    "hf-llama-float32": "attnclaims.adapters.hf_adapter:HFLlamaFloat32",
    "keras": "attnclaims.adapters.keras_adapter:KerasImplementation",
    "keras-float32": "attnclaims.adapters.keras_adapter:KerasFloat32Implementation",
    "onnxruntime": "attnclaims.adapters.onnx_adapter:OnnxRuntimeImplementation",
    "onnxruntime-float32": "attnclaims.adapters.onnx_adapter:OnnxRuntimeFloat32Implementation",
    "onnxruntime-attention-op": "attnclaims.adapters.onnx_adapter:OnnxRuntimeAttentionOpImplementation",
    "onnx-reference": "attnclaims.adapters.onnx_adapter:OnnxReferenceImplementation",
}

#: ``torch-sdpa-<backend>[-<dtype>]`` (CPU) and ``torch-cuda-sdpa-<backend>[-<dtype>]``: torch with every
#: ``scaled_dot_product_attention`` call on one backend (math, flash, efficient, cudnn), in float64 (no suffix),
#: float32, bfloat16 or float16. A backend or device this torch lacks is unavailable when resolved.
SDPA_BUILTINS: dict[str, str] = {
    f"torch{dev}-sdpa-{backend}{suffix}": "attnclaims.adapters.torch_adapter:SDPA."
                                          f"torch{dev.replace('-', '_')}_sdpa_{backend}{suffix.replace('-', '_')}"
    for dev in ("", "-cuda") for backend in ("math", "flash", "efficient", "cudnn")
    for suffix in ("", "-float32", "-bfloat16", "-float16")}
BUILTINS.update(SDPA_BUILTINS)
#: Built-ins ``all`` leaves out: the SDPA backend names (32, most of them needing CUDA) test again what
#: ``torch`` tests, one backend at a time; name them to run them.
NOT_IN_ALL = frozenset(SDPA_BUILTINS)


#: The libraries a built-in needs, looked up without importing them: per built-in, else per adapter
#: module (a built-in found in neither is taken as installed; its pytest child says otherwise).
REQUIRES: dict[str, tuple[str, ...]] = {"onnx-reference": ("onnx",)}
ADAPTER_REQUIRES: dict[str, tuple[str, ...]] = {
    "attnclaims.adapters.torch_adapter": ("torch",),
    "attnclaims.adapters.jax_adapter": ("jax", "flax"),
    "attnclaims.adapters.hf_adapter": ("torch", "transformers"),
    "attnclaims.adapters.keras_adapter": ("torch", "keras"),
    "attnclaims.adapters.onnx_adapter": ("onnx", "onnxruntime"),
}


#: library -> the extra of pyproject.toml that installs it
_EXTRA = {"flax": "jax", "transformers": "hf", "onnxruntime": "onnx"}


def required(spec: str) -> tuple[str, ...]:
    """The libraries the built-in ``spec`` needs (none for the reference or a ``module:attr``)."""
    if spec in REQUIRES:
        return REQUIRES[spec]
    return ADAPTER_REQUIRES.get(BUILTINS.get(spec, "").partition(":")[0], ())
#: What a raised exception that is not an Exception is reported as (the implementation's, never ours).
_FATAL = (SystemExit, KeyboardInterrupt)


class ImplementationError(ValueError):
    """An implementation name that cannot be resolved; the message is one line."""


@dataclass(frozen=True)
class Availability:
    name: str
    available: bool
    reason: str = ""


def _import_target(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ImplementationError(f"implementation {spec!r}: expected 'package.module:attr'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImplementationError(f"implementation {spec!r}: cannot import {module_name!r}: {exc}") from None
    except (Exception, *_FATAL) as exc:
        raise ImplementationError(f"implementation {spec!r}: importing {module_name!r} raised "
                                  f"{type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplementationError(f"implementation {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
        except (Exception, *_FATAL) as exc:  # a module __getattr__ or property that raises
            raise ImplementationError(f"implementation {spec!r}: looking up {attr!r} raised "
                                      f"{type(exc).__name__}: {exc}") from None
    return obj


def _is_implementation(obj) -> bool:
    return not isinstance(obj, type) and any(callable(getattr(obj, c, None)) for c in CAPABILITIES)


def resolve(spec: str):
    """The implementation object named by ``spec`` (not ``all``; see :func:`expand`)."""
    target = BUILTINS.get(spec, spec)
    if ":" not in target:
        listed = [b for b in BUILTINS if b not in SDPA_BUILTINS]
        raise ImplementationError(f"unknown implementation {spec!r} (expected one of {', '.join(listed)}, "
                                  "torch[-cuda]-sdpa-{math,flash,efficient,cudnn}[-float32|-bfloat16|-float16], "
                                  "'all', or 'package.module:attr')")
    obj = _import_target(target)
    if not _is_implementation(obj):
        if not callable(obj):
            raise ImplementationError(f"implementation {spec!r}: {type(obj).__name__} object has none of the "
                                      f"protocol's methods ({', '.join(CAPABILITIES)})")
        try:
            obj = obj()
        except ImportError as exc:
            raise ImplementationError(f"implementation {spec!r} is unavailable: {exc}") from None
        except (Exception, *_FATAL) as exc:
            raise ImplementationError(f"implementation {spec!r}: its factory raised {type(exc).__name__}: {exc}") from None
        if not _is_implementation(obj):
            raise ImplementationError(f"implementation {spec!r}: the factory returned a {type(obj).__name__}, "
                                      f"which has none of the protocol's methods")
    if not isinstance(getattr(obj, "name", None), str):
        try:
            obj.name = spec
        except AttributeError:
            pass
    check_variants(spec, obj)
    return obj


def check_variants(spec: str, obj) -> None:
    """Refuse an implementation whose ``variants`` declaration is invalid, before anything runs
    (docs/adapters.md: one line naming the key): an unknown key, a value a key cannot take, not a
    dict, or a ``variants`` attribute that raises."""
    from attnclaims.protocol import declared_variants

    try:
        declared_variants(obj)
    except ValueError as exc:
        raise ImplementationError(f"implementation {spec!r}: invalid variants: {' '.join(str(exc).split())}") from None
    except (Exception, *_FATAL) as exc:
        raise ImplementationError(f"implementation {spec!r}: reading its variants raised "
                                  f"{type(exc).__name__}: {exc}") from None


def availability(spec: str) -> Availability:
    """Whether ``spec`` resolves (it imports and constructs the implementation: children only)."""
    try:
        resolve(spec)
    except ImplementationError as exc:
        return Availability(spec, False, str(exc))
    return Availability(spec, True)


def installed(spec: str) -> Availability:
    """Whether a built-in's libraries are installed, without importing them (or the adapter)."""
    import importlib.util

    for lib in required(spec):
        try:
            found = importlib.util.find_spec(lib) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            extra = _EXTRA.get(lib, lib)
            return Availability(spec, False, f"implementation {spec!r} is unavailable: {lib} is not installed "
                                             f"(pip install 'attnclaims[{extra}]')")
    return Availability(spec, True)


def expand(specs: list[str] | tuple[str, ...]) -> tuple[list[str], list[Availability]]:
    """Expand ``all`` into every built-in that is installed. Returns (names, unavailable built-ins).
    Imports nothing of an implementation (see :func:`installed`)."""
    names: list[str] = []
    skipped: list[Availability] = []
    for spec in specs or ["reference"]:
        if spec == "all":
            for builtin in BUILTINS:
                if builtin in NOT_IN_ALL:
                    continue
                a = installed(builtin)
                if a.available:
                    names.append(builtin)
                else:
                    skipped.append(a)
        else:
            names.append(spec)
    return list(dict.fromkeys(names)), skipped
