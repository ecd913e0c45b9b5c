"""Reduced-precision inference: int8 or float16 weights and a 16-bit KV cache, opt-in, for decoding on a CPU.

A decoding step at batch 1 (or 4 beams, or a few dozen rows) reads every weight of the model once
and does little arithmetic with it, so its time is the time to read the weights (and the KV cache)
from memory. Storing the weights in int8 reads a quarter of the bytes:

    W ≈ q * s        q: (out_features, in_features) int8 in [-127, 127], s: (out_features,) float

one scale per output channel (the row's largest magnitude / 127, symmetric, no zero point). The
product runs in PyTorch's dynamically quantized linear kernel (``torch.ops.quantized.linear_dynamic``:
FBGEMM on x86, QNNPACK on ARM), which quantizes each call's input to 7 bits with its own range,
multiplies in integers and returns float32, so nothing else in the model changes. Chosen by
measurement on this project's 2-core AVX2 CPU (docs/benchmarks.md, ``benchmarks/quantized_inference.py
--kernels``): it runs a 256 x 1024 layer 1.65x as fast as float32 at 8 rows and the 256 x 8000
output layer 2.2x as fast at 1 row; PyTorch's weight-only int8 kernel
(``aten._weight_int8pack_mm``, float32 activations) has no AVX2 code and ran 8-30x *slower* than
float32 there. At one row a small layer gains nothing (the weights sit in the CPU's cache anyway).

The kernel wants its weights packed into its own layout: each layer packs once, at its first call
after the weights change, and keeps both the packed copy and the plain ``qweight`` (what a state
dict and a model folder hold), two bytes per weight in all, half of float32.

:func:`quantize_model` swaps every ``nn.Linear`` of a model (attention projections, feed-forward,
the output layer) for an :class:`Int8Linear`, in place; embeddings, norms and position tables stay
float. The quantized model runs forward passes, cached decoding and losses, not training.

``quantize_model(model, "float16")`` swaps in :class:`Float16Linear` instead: float16 weights (half
of float32's bytes) multiplied by FBGEMM's half-precision GEMM, which widens them to float32 as it
reads them. Nothing but the weights is rounded (the input is not quantized), so its logits stay
about a hundred times closer to float32's than int8's — for when int8's error costs too much.

A smaller KV cache (``kv_cache_dtype``, :class:`~multimodal.layers.cache.KVCache`) stores keys and
values in float16 or bfloat16 and attends in float32.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from multimodal.layers.lora import LoRALinear, merge_lora

WEIGHT_SCHEMES = ("int8", "float16")
"""What ``quantize=`` takes (``load``, ``multimodal generate --quantize``)."""

KV_CACHE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
"""What ``kv_cache_dtype=`` takes (``multimodal generate --kv-cache``): the dtype the caches store."""


def _kernel(overload):
    """The C++ function behind an op's overload. Calling ``torch.ops.quantized.X`` resolves the overload and
    scans the arguments for traced script objects on every call (~10 µs; a batch-1 decoding step of the
    benchmark LM makes 25 such calls, about a tenth of the step); eager inference needs neither."""
    return getattr(overload, "_op", overload)  # the overload itself where a torch release renames it


_LINEAR_DYNAMIC = _kernel(torch.ops.quantized.linear_dynamic.default)
_LINEAR_DYNAMIC_FP16 = _kernel(torch.ops.quantized.linear_dynamic_fp16.default)


class PackedLinear(nn.Module):
    """Base of the reduced-precision linear layers: float32 in, float32 out, weights in a kernel's packed layout.

    Subclasses hold their weights as buffers (what a state dict and a model folder hold) and say how
    to pack them (:meth:`pack`) and multiply (:meth:`multiply`); packing happens once, at the first
    call after the buffers change (loaded, moved or converted).
    """

    scheme: str = ""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self._packed = None  # the kernel's layout of the weights, made at the first call

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._packed = None

    def _apply(self, fn, recurse: bool = True):
        self._packed = None  # moved or converted: pack again from the new buffers
        return super()._apply(fn, recurse)

    def packed(self):
        """The weights in the kernel's packed layout (made once, after any change of the buffers)."""
        if self._packed is None:
            self._packed = self.pack()
        return self._packed

    def pack(self):
        raise NotImplementedError

    def multiply(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def dequantized(self) -> Tensor:
        """The float32 weight ``(out_features, in_features)`` this layer multiplies by."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        """``(..., in_features)`` float32 -> ``(..., out_features)``."""
        if x.dtype != torch.float32:
            raise TypeError(f"a {self.scheme} layer takes float32 inputs, got {x.dtype}")
        if x.device.type == "meta":
            return x.new_empty(*x.shape[:-1], self.out_features)
        return self.multiply(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Linear(PackedLinear):
    """``y ≈ x @ (q * s).T + b`` with int8 ``q`` and one float32 scale per output channel; the input is
    quantized per call (7 bits, its own range), the output is float32.

    Args:
        in_features: Input width.
        out_features: Output width.
        bias: Whether the layer has a (float32) bias.

    Buffers (what a state dict and a model folder hold):
        qweight: ``(out_features, in_features)`` int8.
        scales: ``(out_features,)`` float32.
        bias: ``(out_features,)`` float32, when the layer has one.
    """

    scheme = "int8"

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features)
        self.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    def pack(self):
        weight = torch._make_per_channel_quantized_tensor(  # the int8 values as they are, no rounding again
            self.qweight, self.scales.double(), torch.zeros_like(self.scales, dtype=torch.long), 0
        )
        return torch.ops.quantized.linear_prepack(weight, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """The int8 version of ``linear`` (round to nearest, per-channel symmetric scales)."""
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        qweight, scales = quantize_rows(linear.weight.detach())
        layer.qweight, layer.scales = qweight, scales
        if linear.bias is not None:
            layer.bias = linear.bias.detach().float().clone()
        return layer

    def dequantized(self) -> Tensor:
        return self.qweight.float() * self.scales[:, None]

    def multiply(self, x: Tensor) -> Tensor:
        # reduce_range: 7-bit inputs, so FBGEMM's 16-bit accumulation (AVX2 has no VNNI) cannot saturate
        return _LINEAR_DYNAMIC(x, self.packed(), True)


class Float16Linear(PackedLinear):
    """``y = x @ w.T + b`` with float16 ``w``: half of float32's bytes, and the input stays float32.

    FBGEMM's half-precision GEMM converts the weights to float32 as it reads them, so the only error
    is rounding each weight to float16 (11 significant bits, ~3e-4 relative) — no input quantization,
    unlike :class:`Int8Linear`. Weights beyond float16's range (±65504) are refused.

    Buffers: ``weight`` ``(out_features, in_features)`` float16; ``bias`` ``(out_features,)`` float32.
    """

    scheme = "float16"

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__(in_features, out_features)
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float16))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    def pack(self):
        return torch.ops.quantized.linear_prepack_fp16(self.weight.float(), self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Float16Linear:
        """The float16 version of ``linear`` (round to nearest)."""
        weight = linear.weight.detach().float()
        if not weight.is_meta and weight.abs().max() > torch.finfo(torch.float16).max:
            raise ValueError(f"a weight of {weight.abs().max():.4g} does not fit float16; use int8")
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        layer.weight = weight.half()
        if linear.bias is not None:
            layer.bias = linear.bias.detach().float().clone()
        return layer

    def dequantized(self) -> Tensor:
        return self.weight.float()

    def multiply(self, x: Tensor) -> Tensor:
        return _LINEAR_DYNAMIC_FP16(x, self.packed())


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row symmetric int8 of ``weight`` ``(rows, cols)``: ``(q int8 (rows, cols), scales float32 (rows,))``.

    ``scales = max |row| / 127`` (a row of zeros gets scale 1), ``q = round(weight / scales)``.
    """
    weight = weight.float()
    scales = weight.abs().amax(dim=1) / 127
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    qweight = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return qweight, scales


def quantize_model(model: nn.Module, scheme: str = "int8") -> nn.Module:
    """Replaces every ``nn.Linear`` of ``model`` by the ``scheme``'s layer, in place; returns ``model``.

    ``"int8"``: :class:`Int8Linear` (a quarter of float32's bytes); ``"float16"``: :class:`Float16Linear`
    (half, and closer to float32). LoRA adapters are merged first. Tied weights (an output layer
    sharing the embedding matrix) are untied: the embedding stays float32, the output layer gets its
    reduced copy. The model records ``model.quantization = scheme`` (a model folder written from it
    says so in its config).

    Raises:
        ValueError: An unknown ``scheme``, or this PyTorch build has no such kernel for the model's device.
    """
    if scheme not in WEIGHT_SCHEMES:
        raise ValueError(f"unknown quantization {scheme!r}; choose among {list(WEIGHT_SCHEMES)}")
    if getattr(model, "quantization", None) == scheme:
        return model
    if getattr(model, "quantization", None) is not None:
        raise ValueError(f"the model's weights are {model.quantization} already; load the float32 model again")
    device = next(iter(model.parameters()), torch.empty(0)).device
    check_kernel(scheme, device)
    if any(isinstance(module, LoRALinear) for module in model.modules()):
        merge_lora(model)
    for name, module in list(model.named_modules()):
        if type(module) is nn.Linear:
            parent_name, _, attribute = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attribute, LAYERS[scheme].from_linear(module).to(device))
    model.quantization = scheme
    return model


LAYERS: dict[str, type[PackedLinear]] = {"int8": Int8Linear, "float16": Float16Linear}
"""The layer each weight scheme puts in place of ``nn.Linear``."""


def check_kernel(scheme: str, device: torch.device | str) -> None:
    """Raises ``ValueError`` with what to do when this PyTorch has no ``scheme`` linear kernel on ``device``."""
    device = torch.device(device)
    if device.type == "meta" or _kernel_works(scheme, device.type):
        return
    raise ValueError(f"{scheme} weights need PyTorch's quantized CPU kernels (torch.ops.quantized), "
                     f"which this PyTorch ({torch.__version__}, engine {torch.backends.quantized.engine}) "
                     f"cannot run on {device.type}; run on the CPU or without --quantize")  # fmt: skip


@functools.cache
def _kernel_works(scheme: str, device_type: str) -> bool:
    if device_type != "cpu":
        return False
    try:
        linear = nn.Linear(32, 8, bias=False)
        nn.init.constant_(linear.weight, 1.0)
        layer = LAYERS[scheme].from_linear(linear)
        return bool(torch.allclose(layer(torch.ones(1, 32)), torch.full((1, 8), 32.0), rtol=0.02))
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


def kv_cache_dtype(name: str | torch.dtype | None) -> torch.dtype | None:
    """The storage dtype a ``kv_cache_dtype`` option names (None and ``"float32"``: the computing dtype)."""
    if name is None or isinstance(name, torch.dtype):
        return None if name in (None, torch.float32) else name
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown KV-cache dtype {name!r}; choose among {list(KV_CACHE_DTYPES)}")
    return None if name == "float32" else KV_CACHE_DTYPES[name]


def set_kv_cache_dtype(model: nn.Module, dtype: str | torch.dtype | None) -> nn.Module:
    """Makes every decoding state ``model``'s stacks create store keys/values in ``dtype``; returns ``model``.

    Attention still runs in float32 (the cached keys and values are converted as they are read).
    Applies to every way of decoding (plain, beam, batched, speculative): they all start from the
    stack's ``new_state``.
    """
    from multimodal.layers.stack import TransformerStack

    storage = kv_cache_dtype(dtype)
    for module in model.modules():
        if isinstance(module, TransformerStack):
            module.kv_cache_dtype = storage
    return model
