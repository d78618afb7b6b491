"""Gradient compression applied around an allreduce, as in horovod.torch.compression.

A compressor turns a tensor into the tensor that travels (`compress` returns it with a context needed to
undo the change) and turns the reduced result back (`decompress`). fp16 and bf16 halve the bytes on the wire
at the cost of precision: float32 gradients are rounded to the 16-bit type before the sum and cast back
after it. float16 keeps 10 mantissa bits but overflows above 65504; bfloat16 keeps float32's 8 exponent bits
(so its range) with 7 mantissa bits (relative rounding error <= 2^-8).

Low-rank compression (PowerSGD) needs two rounds of communication over all layers at once, so it is not a
per-tensor compressor: see pyhorovod/torch/powersgd.py.
"""
import torch


def check_floating(tensor, compressor, what="tensor"):
    """ValueError unless `tensor` is floating point: a compression that rounds or approximates values has
    no meaning for integers (Horovod passes them unchanged; pyhorovod refuses, so the mistake is seen)."""
    if not tensor.dtype.is_floating_point:
        name = getattr(compressor, "__name__", type(compressor).__name__)
        raise ValueError(f"compression={name} needs floating-point tensors, but {what} has dtype {tensor.dtype} "
                         f"(use Compression.none for integer and boolean tensors)")


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors unchanged."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Casts floating-point tensors to `wire_dtype` for the transfer and back afterwards."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        check_floating(tensor, cls)
        return tensor.to(cls.wire_dtype), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Casts floating-point tensors to float16 for the transfer."""
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Casts floating-point tensors to bfloat16 for the transfer (float32's range, 8 significant bits)."""
    wire_dtype = torch.bfloat16


class Compression:
    """The gradient compressions for ``DistributedOptimizer(compression=...)`` and ``allreduce(compression=...)``.

    Attributes:
        none: send tensors unchanged (the default).
        fp16: cast floating-point tensors to float16 for the transfer and back to their own dtype
            afterwards (half the bytes, float16's precision and range).
        bf16: the same with bfloat16: float32's range (no overflow where float32 has none), relative
            rounding error at most 2^-8.

    fp16 and bf16 raise ValueError on integer and boolean tensors. For low-rank compression of gradients
    pass ``compression=PowerSGD(...)`` to ``DistributedOptimizer``.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
