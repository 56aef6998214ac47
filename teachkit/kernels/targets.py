"""Compile kernels for the GPUs learners use, on any machine, and read their resource use.

``triton.compile`` can target any CUDA architecture without a GPU present, so CI checks that every
configuration a kernel may launch fits the shared memory of a T4 (sm_75), an A100 (sm_80), an L4
(sm_89) and an H100 (sm_90).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SHARED_MEMORY_LIMIT", "UNIT_HEAD_DIM_STRIDES", "KernelConfig", "compile_for",
           "gpu_class"]

SHARED_MEMORY_LIMIT = {75: 64 * 1024, 80: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
"""Largest shared memory one program (block) may use, in bytes, per compute capability."""
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


def compile_for(config: KernelConfig, capability: int) -> int:
    """Compile ``config`` for ``sm_<capability>`` and return its shared memory in bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(config.kernel, signature=config.signature, constexprs=config.constexprs,
                    attrs=alignment_hints(config))
    compiled = triton.compile(
        src,
        target=GPUTarget("cuda", capability, 32),
        options={"num_warps": config.num_warps, "num_stages": config.num_stages},
    )
    return int(compiled.metadata.shared)


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

