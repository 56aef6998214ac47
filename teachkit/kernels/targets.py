"""Compile kernels for the GPUs learners use, on any machine, and read their resource use.

``triton.compile`` can target any CUDA architecture without a GPU present, so CI checks that every
configuration a kernel may launch fits the shared memory of a T4 (sm_75), an A100 (sm_80), an L4
(sm_89) and an H100 (sm_90).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..gpus import SHARED_MEMORY_LIMIT

__all__ = ["DOT_INSTRUCTIONS", "SHARED_MEMORY_LIMIT", "UNIT_HEAD_DIM_STRIDES", "KernelConfig",
           "compile_for", "dot_evidence", "dot_instructions", "dot_path", "flash_forward_config",
           "format_dot_evidence", "gpu_class"]

# SHARED_MEMORY_LIMIT (capability -> bytes a block may use) lives in teachkit.gpus, beside the
# other facts about the GPUs learners have; it is re-exported here, where the check uses it.
UNIT_HEAD_DIM_STRIDES = {"stride_qd": 1, "stride_kd": 1, "stride_vd": 1, "stride_od": 1}
"""Constants of an attention kernel's compile check: Triton specialises an integer argument equal
to 1 into a constant at launch, and the head-dim strides of contiguous tensors are 1."""


def gpu_class(capability: tuple[int, int]) -> int:
    """The class a kernel picks its configurations by: 75 below sm_80 (T4: 64 KB of shared
    memory a block); 90 for Hopper (sm_90: 227 KB and TMA); 80 for the other large shared
    memories (sm_80, sm_87, sm_100); 89 for the ~99 KB ones (sm_86, sm_89, sm_12x).

    Examples
    --------
    >>> [gpu_class(c) for c in [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)]]
    [75, 80, 89, 89, 90, 80, 89]
    """
    major, minor = capability
    if major < 8:
        return 75
    if major == 9:
        return 90
    if (major, minor) in ((8, 0), (8, 7)) or major == 10:
        return 80
    return 89


@dataclass(frozen=True)
class KernelConfig:
    """One launch configuration of a kernel: what ``triton.compile`` needs to build it.

    Attributes
    ----------
    name : str
        A label for messages, e.g. ``"fused fp16 BLOCK_N=16384"``.
    kernel : object
        The ``@triton.jit`` function.
    signature : dict
        Argument name to Triton type (``"*fp32"``, ``"i32"``, ``"constexpr"``).
    constexprs : dict
        Values of the ``tl.constexpr`` arguments.
    num_warps : int
        Warps per program.
    num_stages : int
        Software pipelining depth.
    capabilities : tuple of int
        The compute capabilities (keys of :data:`SHARED_MEMORY_LIMIT`) the kernel launches this
        configuration on, when it picks configurations by GPU; empty (the default) means all.
    aligned : bool
        Compile as a launch with the course's tensors specialises it: every pointer and every
        ``stride_*`` integer divisible by 16 (torch allocations are aligned, and the strides of
        contiguous tensors with the supported head dims are multiples of 16). Only with these
        hints does the compiler vectorise loads and pipeline them through shared memory, so the
        shared memory it reports is what the launch will ask for.
    """

    name: str
    kernel: object
    signature: dict = field(hash=False)
    constexprs: dict = field(hash=False)
    num_warps: int = 4
    num_stages: int = 3
    capabilities: tuple[int, ...] = ()
    aligned: bool = True


def alignment_hints(config: KernelConfig) -> dict:
    """``triton.compile`` attributes marking the arguments a launch finds divisible by 16."""
    if not config.aligned:
        return {}
    names = config.kernel.arg_names
    return {(names.index(name),): [["tt.divisibility", 16]]
            for name, ty in config.signature.items()
            if ty.startswith("*") or (ty == "i32" and name.startswith("stride_"))}


def _compile(config: KernelConfig, capability: int) -> object:
    """``triton.compile`` of ``config`` for ``sm_<capability>``: the compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(config.kernel, signature=config.signature, constexprs=config.constexprs,
                    attrs=alignment_hints(config))
    return triton.compile(
        src,
        target=GPUTarget("cuda", capability, 32),
        options={"num_warps": config.num_warps, "num_stages": config.num_stages},
    )


def compile_for(config: KernelConfig, capability: int) -> int:
    """Compile ``config`` for ``sm_<capability>`` and return its shared memory in bytes."""
    return int(_compile(config, capability).metadata.shared)


def all_launch_configs() -> list[KernelConfig]:
    """The launch configurations of every kernel family in :mod:`teachkit.kernels`."""
    from . import decode, flash, flash_simple, softmax_kernels

    return (softmax_kernels.launch_configs() + flash.launch_configs()
            + flash_simple.launch_configs() + decode.launch_configs())


def check_config(config: KernelConfig, capability: int) -> str | None:
    """Compile one configuration for one capability; return a problem line, or ``None``."""
    try:
        shared = compile_for(config, capability)
    except Exception as err:  # noqa: BLE001 - report every failure, not just the first
        return f"sm_{capability} {config.name}: does not compile: {err}"
    if shared > SHARED_MEMORY_LIMIT[capability]:
        return (f"sm_{capability} {config.name}: {shared} bytes of shared memory, more than "
                f"the {SHARED_MEMORY_LIMIT[capability]} a block may use")
    return None


def _check_index(job: tuple[int, int]) -> str | None:
    return check_config(all_launch_configs()[job[0]], job[1])


def check_all(capabilities: tuple[int, ...] = tuple(SHARED_MEMORY_LIMIT),
              workers: int | None = None) -> list[str]:
    """Compile every configuration for every capability in parallel; return the problems.

    Must run with ``TRITON_INTERPRET=0`` (the compiler needs real ``@triton.jit`` functions);
    ``python -m teachkit.kernels`` arranges that.
    """
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(i, cap) for i, config in enumerate(all_launch_configs()) for cap in capabilities
            if not config.capabilities or cap in config.capabilities]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return [p for p in pool.map(_check_index, jobs) if p]



# ---------------------------------------------------------------------------------------------
# Which instructions multiply the tiles: evidence from the compiler's PTX
# ---------------------------------------------------------------------------------------------
DOT_INSTRUCTIONS = {
    "mma.sync": r"\bmma\.sync\.",
    "wgmma.mma_async": r"\bwgmma\.mma_async\.",
    "fma.rn.f32": r"\bfma\.rn\.f32\b",
}
"""PTX instructions counted by :func:`dot_instructions`, name to pattern: ``mma.sync`` is a warp's
tensor-core product (sm_75 to sm_89, and sm_90 without wgmma), ``wgmma.mma_async`` a
warpgroup's (Hopper), ``fma.rn.f32`` one thread's scalar fused multiply-add (the FMA path; a
kernel uses a few for its softmax, a ``tl.dot`` on this path thousands)."""


def dot_instructions(config: KernelConfig, capability: int) -> dict[str, int]:
    """Compile ``config`` for ``sm_<capability>`` and count its matrix instructions in the PTX.

    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --dot-evidence``
    arranges that). A kernel whose ``tl.dot`` runs on the tensor cores shows ``mma.sync`` or
    ``wgmma.mma_async`` instructions; one whose products run on the FMA units shows none and
    thousands of ``fma.rn.f32`` (every multiply-add of the tile, unrolled per thread).

    Returns
    -------
    dict
        :data:`DOT_INSTRUCTIONS`' names to their counts in the PTX.
    """
    ptx = _compile(config, capability).asm["ptx"]
    return {name: len(re.findall(pattern, ptx)) for name, pattern in DOT_INSTRUCTIONS.items()}


def dot_path(counts: dict[str, int]) -> str:
    """The unit :func:`dot_instructions`' counts say ``tl.dot`` runs on: ``"wgmma"``,
    ``"mma"`` (tensor cores) or ``"fma"`` (FMA units), the words of
    :attr:`teachkit.gpus.ColabGpu.triton_dot`.

    Examples
    --------
    >>> dot_path({"mma.sync": 0, "wgmma.mma_async": 16, "fma.rn.f32": 36})
    'wgmma'
    >>> dot_path({"mma.sync": 0, "wgmma.mma_async": 0, "fma.rn.f32": 16480})
    'fma'
    """
    if counts["wgmma.mma_async"]:
        return "wgmma"
    return "mma" if counts["mma.sync"] else "fma"


def flash_forward_config(capability: int, head_dim: int = 64, dtype: str = "fp16",
                         causal: bool = False) -> KernelConfig:
    """The FlashAttention forward configuration a GPU of ``sm_<capability>`` launches.

    Taken from :func:`teachkit.kernels.flash.launch_configs` (the table
    :func:`~teachkit.kernels.flash.flash_attention` picks from, by head dim, element size, mask
    and GPU class), with its pointers typed ``dtype``: the compile check's configurations are
    typed bfloat16, which stands for float16 there (same tiles, same shared memory) but not
    here, since a T4 has no bfloat16 tensor cores. The defaults are notebook 08's benchmark:
    ``D = 64``, float16, no mask.

    Parameters
    ----------
    capability : int
        ``75``, ``80``, ``89`` or ``90`` (a key of :data:`SHARED_MEMORY_LIMIT`).
    head_dim : int
        One of :data:`teachkit.kernels.flash.HEAD_DIMS`.
    dtype : str
        ``"fp16"``, ``"bf16"`` or ``"fp32"``.
    causal : bool
        The causal configuration (its pipeline depth may differ).
    """
    from . import flash

    if capability not in SHARED_MEMORY_LIMIT:
        raise ValueError(f"capability must be one of {tuple(SHARED_MEMORY_LIMIT)}, got "
                         f"{capability!r}")
    if dtype not in ("fp16", "bf16", "fp32"):
        raise ValueError(f"dtype must be 'fp16', 'bf16' or 'fp32', got {dtype!r}")
    stored = "fp32" if dtype == "fp32" else "bf16"
    for config in flash.launch_configs():
        c = config.constexprs
        if (capability in config.capabilities and c["HEAD_DIM"] == head_dim
                and c["CAUSAL"] == causal and stored in config.signature["Q"]):
            signature = {name: ty.replace(stored, dtype) for name, ty in config.signature.items()}
            name = config.name.replace(stored, dtype, 1)
            return replace(config, name=name, signature=signature)
    raise ValueError(f"no flash configuration for sm_{capability}, head dim {head_dim}, "
                     f"{dtype}, causal={causal}; head dims: {flash.HEAD_DIMS}")


def _dot_evidence_one(job: tuple[int, int, str, bool]) -> dict[str, int]:
    capability, head_dim, dtype, causal = job
    return dot_instructions(flash_forward_config(capability, head_dim, dtype, causal), capability)


def dot_evidence(capabilities: tuple[int, ...] = tuple(SHARED_MEMORY_LIMIT), head_dim: int = 64,
                 dtype: str = "fp16", causal: bool = False,
                 workers: int | None = None) -> dict[int, dict[str, int]]:
    """:func:`dot_instructions` of :func:`flash_forward_config` for each capability, compiled
    in parallel processes: which unit the flash kernel's ``tl.dot`` runs on, per GPU.

    Must run with ``TRITON_INTERPRET=0``, as :func:`check_all`.
    """
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(cap, head_dim, dtype, causal) for cap in capabilities]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return dict(zip(capabilities, pool.map(_dot_evidence_one, jobs), strict=True))


def format_dot_evidence(evidence: dict[int, dict[str, int]], head_dim: int = 64,
                        dtype: str = "fp16", causal: bool = False) -> str:
    """A table of :func:`dot_evidence`: one row per capability, its tiles, the counts and the
    unit they point to.

    Examples
    --------
    >>> counts = {"mma.sync": 128, "wgmma.mma_async": 0, "fma.rn.f32": 36}
    >>> print(format_dot_evidence({80: counts}))  # doctest: +ELLIPSIS
    flash forward, D=64 fp16, causal=False, Triton ...
    arch   tiles (M x N, warps, stages)  mma.sync  wgmma.mma_async  fma.rn.f32  tl.dot runs on
    sm_80  128 x 64, 8 warps, 3 stages        128                0          36  tensor cores (mma)
    """
    import triton

    words = {"fma": "FMA units (no tensor cores)", "mma": "tensor cores (mma)",
             "wgmma": "tensor cores (wgmma)"}
    head = ["arch", "tiles (M x N, warps, stages)", *DOT_INSTRUCTIONS, "tl.dot runs on"]
    rows = []
    for cap, counts in evidence.items():
        cfg = flash_forward_config(cap, head_dim, dtype, causal)
        c = cfg.constexprs
        tiles = (f"{c['BLOCK_M']} x {c['BLOCK_N']}, {cfg.num_warps} warps, "
                 f"{cfg.num_stages} stages{', TMA' if c['USE_TMA'] else ''}")
        rows.append([f"sm_{cap}", tiles, *(str(counts[n]) for n in DOT_INSTRUCTIONS),
                     words[dot_path(counts)]])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    numeric = range(2, 2 + len(DOT_INSTRUCTIONS))
    lines = [f"flash forward, D={head_dim} {dtype}, causal={causal}, Triton {triton.__version__}"]
    for r in [head, *rows]:
        cells = [cell.rjust(w) if i in numeric and r is not head else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
