"""Gradient compression applied around an allreduce, as in horovod.torch.compression.

A compressor turns a tensor into the tensor that travels (`compress` returns it with a context needed to
undo the change) and turns the reduced result back (`decompress`). fp16 halves the bytes on the wire at the
cost of precision: float32 gradients are rounded to float16 before the sum and cast back after it.
"""
import torch


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


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 for the transfer; other dtypes pass unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            return tensor.to(ctx)
        return tensor


class Compression:
    """The gradient compressions for ``DistributedOptimizer(compression=...)`` and ``allreduce(compression=...)``.

    Attributes:
        none: send tensors unchanged (the default).
        fp16: cast floating-point tensors to float16 for the transfer and back to their own dtype
            afterwards (half the bytes, float16's precision and range); other dtypes pass unchanged.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
