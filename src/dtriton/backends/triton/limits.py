"""Resource limits of Triton kernels that the printer and the tuner respect."""

from __future__ import annotations

__all__ = ["MAX_BLOCK_NUMEL", "SMEM_BYTES_DEFAULT"]

#: Triton's largest block (``tl.arange``, ``tl.full``): 2**20 elements.
MAX_BLOCK_NUMEL = 1 << 20

#: Shared memory one program may use on an H100/H200 (bytes), when the device cannot be asked.
SMEM_BYTES_DEFAULT = 227 * 1024
