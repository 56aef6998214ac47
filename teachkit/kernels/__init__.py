"""The course's Triton kernels, one module per family.

Importing :mod:`teachkit` first decides the world: on a machine without a CUDA GPU the kernels run
in Triton's interpreter on CPU tensors. Triton has wheels for Linux only; elsewhere this package
cannot be imported and the torch references in :mod:`teachkit.softmax` stand in.
"""

from .. import device as _device  # noqa: F401  (decides TRITON_INTERPRET before triton loads)

try:
    import triton  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised on macOS/Windows only
    raise ImportError(
        "teachkit.kernels needs Triton, which has wheels for Linux only; on this machine use the "
        "torch references in teachkit.softmax and teachkit.attention, or run on Linux/Colab"
    ) from err

from .decode import decode_attention
from .decode_simple import decode_attention_simple
from .flash import flash_attention
from .softmax_kernels import softmax, softmax_blog, softmax_fused, softmax_online, softmax_split

__all__ = [
    "decode_attention",
    "decode_attention_simple",
    "flash_attention",
    "softmax",
    "softmax_blog",
    "softmax_fused",
    "softmax_online",
    "softmax_split",
]
