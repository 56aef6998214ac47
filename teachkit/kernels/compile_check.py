"""Compile the kernels for the GPUs learners use, on any machine, and read their resource use.

``triton.compile`` can target any CUDA architecture without a GPU present, so CI checks that every
configuration a kernel may launch fits the shared memory of a T4 (sm_75), an A100 (sm_80), an L4
(sm_89) and an H100 (sm_90): ``python -m teachkit.kernels`` runs :func:`check_all`.

This is the one module that imports every kernel module: the kernels import only
:mod:`teachkit.gpus` (their GPU classes and limits) and each other, and each family's list of
launch configurations lives here, beside the check that compiles them:

:func:`softmax_launch_configs`
    The softmax kernels of :mod:`teachkit.kernels.softmax_kernels`.
:func:`flash_launch_configs`
    :func:`~teachkit.kernels.flash.flash_fwd_kernel`, one per entry of
    :func:`~teachkit.kernels.flash.flash_config`'s table.
:func:`flash_simple_launch_configs`
    :func:`~teachkit.kernels.flash_simple.flash_simple_kernel`, notebook 08's first kernel.
:func:`flash_ladder_launch_configs`
    :func:`~teachkit.kernels.flash_ladder.ladder_kernel` at every step of notebook 08's ladder.
:func:`flash_backward_launch_configs`
    The three kernels of :mod:`teachkit.kernels.flash_backward`, per entry of
    :func:`~teachkit.kernels.flash_backward.backward_config`'s table.
:func:`decode_simple_launch_configs`
    The two kernels of :mod:`teachkit.kernels.decode_simple`, notebook 09's first split-KV
    decoding.
:func:`decode_launch_configs`
    The split and merge kernels of :mod:`teachkit.kernels.decode`.

``python -m teachkit.kernels --dot-evidence`` compiles notebook 08's FlashAttention forward
configuration for each GPU and counts which instructions multiply its tiles
(:func:`dot_evidence`); ``--page-interleave`` counts what a paged decode tile of several pages
costs a thread in key order and interleaved (:func:`page_interleave_evidence`);
``--paged-residency`` the registers of the tiles a paged call reading its entries splits with
(:func:`paged_entry_residency`), ``--last-wave-residency`` those of a contiguous call that
splits to fill its last wave (:func:`last_wave_residency`), ``--wave-tiles-residency`` those an
unsplit grid of many programs an SM chooses from, contiguous and paged
(:func:`wave_tiles_residency`), each compiled as a decoding launch specialises it
(:data:`AS_LAUNCHED`);
``--layout-evidence`` compiles the flash configuration for one GPU beside notebook 06's blog
softmax kernel and shows how each reduces a row: the layout of the reduced tile and the butterfly
shuffles (:func:`layout_evidence`).

Examples
--------
>>> len(all_launch_configs())
327
>>> config = flash_forward_config(90)
>>> config.constexprs["BLOCK_M"], config.constexprs["BLOCK_N"], config.num_warps
(128, 64, 8)
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import torch

from ..gpus import GPU_CLASSES, SHARED_MEMORY_LIMIT
from . import decode, decode_simple, flash, flash_backward, flash_ladder, flash_simple
from . import softmax_kernels as sk

__all__ = [
    "BACKWARD_REGISTER_TILES",
    "DOT_INSTRUCTIONS",
    "PAGE_INSTRUCTIONS",
    "UNIT_HEAD_DIM_STRIDES",
    "KernelConfig",
    "LONG_RANGE",
    "alignment_hints",
    "all_launch_configs",
    "backward_kernel_config",
    "backward_registers",
    "blog_softmax_config",
    "check_all",
    "check_jobs",
    "check_config",
    "compile_for",
    "decode_launch_configs",
    "decode_simple_launch_configs",
    "dot_evidence",
    "page_interleave_evidence",
    "paged_entry_residency",
    "last_wave_residency",
    "dot_instructions",
    "dot_path",
    "flash_backward_launch_configs",
    "flash_ladder_launch_configs",
    "ladder_config",
    "flash_forward_config",
    "flash_launch_configs",
    "flash_simple_launch_configs",
    "merge_evidence",
    "one_launch_config",
    "wgmma_operands",
    "format_backward_registers",
    "format_dot_evidence",
    "format_layout_evidence",
    "format_register_sweep",
    "format_two_pass_evidence",
    "fused_register_sweep",
    "gluon_compile",
    "kernel_signature",
    "layout_evidence",
    "programs_by_shared",
    "ptxas_resources",
    "reduction_evidence",
    "softmax_launch_configs",
    "two_pass_evidence",
    "wave_tiles_residency",
    "short_rows_residency",
    "AS_LAUNCHED",
    "WAVE_TILE_READS",
    "warp_specialized_dkdv_config",
    "warp_specialized_registers",
    "format_warp_specialized_registers",
    "assembled_resources",
    "tma_reduce_adds",
]

UNIT_HEAD_DIM_STRIDES = {"stride_qd": 1, "stride_kd": 1, "stride_vd": 1, "stride_od": 1}
"""Constants of an attention kernel's compile check: Triton specialises an integer argument equal
to 1 into a constant at launch, and the head-dim strides of contiguous tensors are 1."""


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
        Argument name to Triton type (``"*fp32"``, ``"i32"``, ``"constexpr"``), in the kernel's
        argument order (:func:`kernel_signature`).
    constexprs : dict
        Values of the ``tl.constexpr`` arguments.
    num_warps : int
        Warps per program.
    num_stages : int
        Software pipelining depth.
    capabilities : tuple of int
        The compute capabilities (keys of :data:`~teachkit.gpus.SHARED_MEMORY_LIMIT`) the kernel
        launches this configuration on, when it picks configurations by GPU; empty (the
        default) means all.
    aligned : bool
        Compile as a launch with the course's tensors specialises it: every pointer and every
        ``stride_*`` integer divisible by 16 (torch allocations are aligned, and the strides of
        contiguous tensors with the supported head dims are multiples of 16). Only with these
        hints does the compiler vectorise loads and pipeline them through shared memory, so the
        shared memory it reports is what the launch will ask for.
    max_registers : int or None
        The launch's cap on registers a thread (Triton's ``maxnreg``), or ``None`` for none.
    divisible : tuple of str
        Other integer arguments a launch finds divisible by 16 (with ``aligned``), such as a
        row length that the course's shapes keep a power of two.
    """

    name: str
    kernel: object
    signature: dict = field(hash=False)
    constexprs: dict = field(hash=False)
    num_warps: int = 4
    num_stages: int = 3
    capabilities: tuple[int, ...] = ()
    aligned: bool = True
    max_registers: int | None = None
    divisible: tuple[str, ...] = ()


def kernel_signature(kernel: object, types: dict[str, str], constexprs: dict) -> dict[str, str]:
    """Argument name to Triton type for every argument of ``kernel``, in its order.

    Parameters
    ----------
    kernel : object
        A ``@triton.jit`` function.
    types : dict
        Types of the arguments that are not 32-bit integers: pointers (``"*bf16"``), floats
        (``"fp32"``), tensor descriptors. Names the kernel does not take are ignored.
    constexprs : dict
        The values of the configuration's constants: its ``tl.constexpr`` arguments and the
        integers a launch specialises to constants (:data:`UNIT_HEAD_DIM_STRIDES`); these are
        typed ``"constexpr"``.

    Returns
    -------
    dict
        The signature of a :class:`KernelConfig`; every other argument is ``"i32"``.
    """
    return {name: "constexpr" if name in constexprs else types.get(name, "i32")
            for name in kernel.arg_names}


def _config(name: str, kernel: object, types: dict[str, str], constexprs: dict,
            num_warps: int = 4, num_stages: int = 3,
            capabilities: tuple[int, ...] = ()) -> KernelConfig:
    """A :class:`KernelConfig` whose signature :func:`kernel_signature` writes, with the
    defaults of ``kernel``'s ``tl.constexpr`` arguments that ``constexprs`` leaves out, as a
    launch binds them (left out of the signature, such an argument would be compiled as a
    32-bit integer, and the branches it stands for with it)."""
    import inspect

    parameters = inspect.signature(kernel.fn).parameters  # the Python function, both worlds
    defaults = {name: p.default for name, p in parameters.items()
                if p.default is not p.empty and "constexpr" in str(p.annotation)}
    constexprs = {**defaults, **constexprs}
    return KernelConfig(name, kernel, kernel_signature(kernel, types, constexprs), constexprs,
                        num_warps, num_stages, capabilities)


# ---------------------------------------------------------------------------------------------
# The launch configurations of every kernel family
# ---------------------------------------------------------------------------------------------
def softmax_launch_configs() -> list[KernelConfig]:
    """Every configuration :func:`~teachkit.kernels.softmax` and the named variants can launch.

    float16 tiles are laid out as bfloat16 ones (same shared memory), so bfloat16 stands for
    both: the fused kernel for rows of 1 to 16384 columns (the tiles
    :func:`~teachkit.kernels.softmax_kernels.fused_config` picks per power of two), the blog and
    online kernels, the split kernels for chunks of 16384 down to 2048 columns, and the
    resident kernels with their chunks for 256 chunks a row (bfloat16 as words and, for rows
    that cannot be read as words, as weights).
    """
    configs = []
    for ty in ("fp32", "bf16"):
        types = {"X": f"*{ty}", "Y": f"*{ty}", "M": "*fp32", "D": "*fp32"}
        for n in (2**i for i in range(15)):
            block_m, block_n, warps = sk.fused_config(n)
            configs.append(_config(f"fused {ty} BLOCK_M={block_m} BLOCK_N={block_n}",
                                   sk.fused_kernel, types,
                                   {"BLOCK_M": block_m, "BLOCK_N": block_n}, warps))
        configs.append(_config(f"blog {ty}", sk.blog_kernel, types, {"BLOCK": 1024}, 4))
        configs.append(_config(f"online {ty}", sk.online_kernel, types, {"BLOCK": 2048}, 8))
        for chunk in (sk.SPLIT_CHUNK // 2**i for i in range(4)):  # 16384 .. 2048
            configs.append(_config(
                f"split stats {ty} CHUNK={chunk}", sk.split_stats_kernel, types,
                {"CHUNK": chunk, "BLOCK": 2048, "DEPTH": sk.split_depth(chunk, 2048)}, 8))
            configs.append(_config(
                f"split normalize {ty} CHUNK={chunk}", sk.split_normalize_kernel, types,
                {"CHUNK": chunk, "BLOCK": 2048, "BLOCK_P": 1024}, 8))
    configs.append(resident_launch_config(sk.RESIDENT_CONFIGS[4], "fp32",
                                          {"G": 256, "G_POW2": 256}))
    long = resident_launch_config(sk.LONG_ROW_CONFIGS[4], "fp32", {"G": 256, "G_POW2": 256})
    configs.append(replace(long, name=f"{long.name} long rows"))  # softmax's from LONG_ROW_FROM
    for x2 in (False, True):  # the GPUs without cvt.rn.bf16x2.f32 (the T4), then those with it
        capabilities = tuple(cls for cls, capability in GPU_CLASSES.items()
                             if sk.cvt_x2(capability) == x2)
        for config, rows in ((sk.RESIDENT_CONFIGS[2], ""), (sk.LONG_ROW_CONFIGS[2], " long rows")):
            words = resident_launch_config(config, "bf16", {"G": 256, "G_POW2": 256},
                                           capability=capabilities[0])
            configs.append(replace(words, name=words.name + rows, capabilities=capabilities))
    configs.append(replace(resident_launch_config(sk.UNPAIRED_CONFIG, "bf16",
                                                  {"G": 256, "G_POW2": 256}),
                           name=f"resident bf16 CHUNK={sk.UNPAIRED_CONFIG.chunk} G=256 unpaired"))
    return configs


def resident_launch_config(config: sk.ResidentConfig, ty: str, shape: dict,
                           cap: int | None | bool = True, capability: int = 90,
                           **constexprs: object) -> KernelConfig:
    """The resident kernel of ``config`` (:func:`~teachkit.kernels.softmax_kernels.
    resident_kernel_for`) for ``ty`` rows, compiled with the constants and integers of
    ``shape`` (``G`` and ``G_POW2`` at least) and ``constexprs``, and the register cap ``cap``
    (``True``: :func:`~teachkit.kernels.softmax_kernels.register_cap`'s; ``None``: uncapped),
    with the constants a launch on ``sm_<capability>`` passes
    (:func:`~teachkit.kernels.softmax_kernels.resident_constants` and, for rows of ``G``
    chunks, :func:`~teachkit.kernels.softmax_kernels.wait_constants`)."""
    constants = {"CHUNK": config.chunk, "BLOCK": 1024, "MAX_SPIN": sk.SPIN_POLLS,
                 **sk.resident_constants(config, GPU_CLASSES[capability]),
                 **sk.wait_constants(config, shape["G"], GPU_CLASSES[capability]), **shape,
                 **constexprs}
    name = (f"resident {ty} CHUNK={config.chunk} G={shape['G']}"
            f"{' words' if config.words else ''}{' cvt.x2' if constants.get('CVT_X2') else ''}")
    return replace(_config(name, sk.resident_kernel_for(config),
                           {"X": f"*{ty}", "Y": f"*{ty}", "SLOTS": "*i64"}, constants,
                           config.num_warps),
                   max_registers=sk.register_cap(config) if cap is True else cap,
                   divisible=("n_cols",))


def _attention_types(ty: str, scale: str) -> dict[str, str]:
    """The non-integer arguments of an attention kernel: ``Q, K, V, O`` of type ``ty``, a
    float32 ``LSE`` and the float ``scale`` argument."""
    return {**dict.fromkeys(("Q", "K", "V", "O"), f"*{ty}"), "LSE": "*fp32", scale: "fp32"}


def flash_launch_configs() -> list[KernelConfig]:
    """Every configuration :func:`~teachkit.kernels.flash.flash_attention` may launch on a GPU.

    One per (configuration, head dim, element size, causal) of
    :func:`~teachkit.kernels.flash.flash_config`'s table, each checked only on the capabilities
    whose class picks it (a T4 never launches the tiles chosen for an H100); float16 and
    bfloat16 tiles take the same shared memory, so bfloat16 stands for both.
    """
    classes: dict[tuple[int, str, bool, flash.FlashConfig], list[int]] = {}
    for cls, capability in GPU_CLASSES.items():
        for d in flash.HEAD_DIMS:
            for ty, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                for causal in (False, True):
                    cfg = flash.flash_config(d, dtype, capability, causal)
                    classes.setdefault((d, ty, causal, cfg), []).append(cls)
    configs = []
    for (d, ty, causal, cfg), used_by in classes.items():
        types = _attention_types(ty, "qk_scale")
        if cfg.tma:
            rows = {"Q": cfg.block_m, "K": cfg.block_n, "V": cfg.block_n}
            types.update({n: f"tensordesc<{ty}[1, 1, {r}, {d}]>" for n, r in rows.items()})
        gpus = "/".join(f"sm_{c}" for c in used_by)
        configs.append(_config(
            f"flash {ty} D={d} causal={causal} BLOCK_M={cfg.block_m} BLOCK_N={cfg.block_n} "
            f"warps={cfg.num_warps} stages={cfg.num_stages}{' TMA' if cfg.tma else ''} "
            f"(for {gpus}-class GPUs)",
            flash.flash_fwd_kernel, types,
            {"CAUSAL": causal, "HEAD_DIM": d, "BLOCK_M": cfg.block_m,
             "BLOCK_N": cfg.block_n, "PRECISION": "ieee" if ty == "fp32" else "tf32",
             "DOT_FP32": False, "USE_TMA": cfg.tma,
             "EVEN_S": False,  # the masked loop compiled too: the larger kernel of the two
             **UNIT_HEAD_DIM_STRIDES},
            cfg.num_warps, cfg.num_stages,
            tuple(used_by)))  # a class is checked on its Colab GPU, whose sm is the class
    return configs


def flash_simple_launch_configs() -> list[KernelConfig]:
    """The GPU launches of :func:`~teachkit.kernels.flash_simple.flash_attention_simple`: its
    default 64 x 64 tiles, 4 warps, 2 stages, causal, ``D`` of 64 and 128 (bfloat16 stands for
    both half types)."""
    return [_config(f"flash_simple bf16 D={d} causal", flash_simple.flash_simple_kernel,
                    _attention_types("bf16", "scale"),
                    {"CAUSAL": True, "HEAD_DIM": d, "BLOCK_M": 64, "BLOCK_N": 64,
                     "PRECISION": "tf32", "DOT_FP32": False, **UNIT_HEAD_DIM_STRIDES}, 4, 2)
            for d in (64, 128)]


def flash_ladder_launch_configs() -> list[KernelConfig]:
    """The GPU launches of notebook 08's ladder
    (:func:`~teachkit.kernels.flash_ladder.flash_attention_ladder`): every step and
    :data:`~teachkit.kernels.flash_ladder.QK_AHEAD` on the simple kernel's tiles, causal, ``D``
    of 64 and 128 (bfloat16 stands for both half types)."""
    steps = {**flash_ladder.LADDER, "qk ahead": flash_ladder.QK_AHEAD}
    return [ladder_config(step, d, f"flash ladder {name!r} bf16 D={d} causal")
            for d in (64, 128) for name, step in steps.items()]


def ladder_config(step: flash_ladder.LadderStep, head_dim: int = 64, name: str | None = None,
                  causal: bool = True) -> KernelConfig:
    """The ladder kernel at ``step`` on the simple kernel's tiles, bfloat16 (float16 compiles
    alike)."""
    tiles = flash_ladder.SIMPLE_TILES
    return _config(name or f"flash ladder {step} bf16 D={head_dim} causal={causal}",
                   flash_ladder.ladder_kernel, _attention_types("bf16", "scale"),
                   {"CAUSAL": causal, "HEAD_DIM": head_dim, "BLOCK_M": tiles.block_m,
                    "BLOCK_N": tiles.block_n, "PRECISION": "tf32", "DOT_FP32": False,
                    "EXP2": step.exp2, "BLOCK_KINDS": step.block_kinds,
                    "ACC_IN_DOT": step.acc_in_dot, "HEAVY_FIRST": step.heavy_first,
                    "QK_AHEAD": step.qk_ahead, **UNIT_HEAD_DIM_STRIDES},
                   tiles.num_warps, tiles.num_stages)


def flash_backward_launch_configs() -> list[KernelConfig]:
    """Every configuration of :func:`~teachkit.kernels.flash_backward.flash_backward` on a GPU.

    The dK/dV and dQ kernels per (tiles, head dim, element size) of
    :func:`~teachkit.kernels.flash_backward.backward_config`, causal (the causal kernels hold
    the unmasked loop too, so they are the larger), each checked on the capabilities whose
    class picks the tiles; and the delta kernel. bfloat16 stands for both half types.
    """
    classes: dict[tuple[int, str, flash_backward.BackwardConfig], list[int]] = {}
    for cls, capability in GPU_CLASSES.items():
        for d in (64, 128, 256):  # head dims 16 and 32 take the tiles of 64
            for ty, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                cfg = flash_backward.backward_config(d, dtype, capability)
                classes.setdefault((d, ty, cfg), []).append(cls)
    configs = []
    for (d, ty, cfg), used_by in classes.items():
        gpus = "/".join(f"sm_{c}" for c in used_by)
        for kernel, tiles in (("dkdv", (cfg.kv_block_m, cfg.kv_block_n, cfg.kv_warps,
                                        cfg.kv_stages)),
                              ("dq", (cfg.q_block_m, cfg.q_block_n, cfg.q_warps, cfg.q_stages))):
            configs.append(backward_kernel_config(kernel, d, ty, *tiles,
                                                  f"(for {gpus}-class GPUs)", tuple(used_by)))
    configs.append(warp_specialized_dkdv_config())
    for ty in ("bf16", "fp32"):
        configs.append(_config(
            f"flash backward delta {ty} D=256", flash_backward.flash_bwd_delta_kernel,
            {"O": f"*{ty}", "DO": f"*{ty}", "DLSE": "*fp32", "DELTA": "*fp32"},
            {"HAS_DLSE": True, "HEAD_DIM": 256, "BLOCK_M": 32, "stride_od": 1,
             "stride_dod": 1}))
    return configs


def warp_specialized_dkdv_config(head_dim: int = 128, causal: bool = False) -> KernelConfig:
    """The warp-specialised dK/dV kernel (:mod:`~teachkit.kernels.flash_backward_ws`) at its
    tiles, bfloat16, for sm_90, the one class that launches it (the table takes it at D = 128
    without the causal mask)."""
    from . import flash_backward_ws as ws

    block_m, block_n, warps, stages = ws.WS_TILES
    types = {**dict.fromkeys(("Q", "K", "V", "DO", "DK", "DV"), "*bf16"),
             "LSE": "*fp32", "DELTA": "*fp32", "scale": "fp32"}
    return _config(
        f"flash backward dkdv, warp-specialised, bf16 D={head_dim} causal={causal} "
        f"BLOCK_M={block_m} BLOCK_N={block_n} warps={warps} stages={stages} (for sm_90)",
        ws.flash_bwd_dkdv_ws_kernel, types,
        {"CAUSAL": causal, "HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n,
         "NUM_STAGES": stages}, warps, stages, (90,))


def backward_kernel_config(kernel: str, head_dim: int, ty: str, block_m: int, block_n: int,
                           warps: int, stages: int, note: str = "",
                           capabilities: tuple[int, ...] = ()) -> KernelConfig:
    """The causal dK/dV (``kernel="dkdv"``) or dQ (``"dq"``) backward kernel with these tiles,
    in element type ``ty`` (``"bf16"`` stands for both half types; the causal kernels hold the
    unmasked loop too, so they are the larger)."""
    types = {**dict.fromkeys(("Q", "K", "V", "DO", "DQ", "DK", "DV"), f"*{ty}"),
             "LSE": "*fp32", "DELTA": "*fp32", "scale": "fp32"}
    jit = (flash_backward.flash_bwd_dkdv_kernel if kernel == "dkdv"
           else flash_backward.flash_bwd_dq_kernel)
    own = {"ATOMIC_DQ": False} if kernel == "dkdv" else {}
    return _config(
        f"flash backward {kernel} {ty} D={head_dim} BLOCK_M={block_m} BLOCK_N={block_n} "
        f"warps={warps} stages={stages}" + (f" {note}" if note else ""),
        jit, types, {"CAUSAL": True, "HEAD_DIM": head_dim,
                     "PRECISION": "ieee" if ty == "fp32" else "tf32", "DOT_FP32": False,
                     **own, "BLOCK_M": block_m, "BLOCK_N": block_n},
        warps, stages, capabilities)


def _decode_variants(ty: str, head_dim: int) -> list[tuple[int, int]]:
    """``(page size, BLOCK_M)`` of the split kernel's checked launches: contiguous for one query
    row; contiguous for the most rows (in float32 for ``D >= 128`` only); in 16-bit with ``D``
    of 64 and 128 also pages smaller than a key block (one table entry per key) and pages of
    whole key blocks (one entry per block). Fewer in float32 and for the paged variants, to
    keep the check short: the tiles are the same."""
    rows = decode.max_rows(head_dim, torch.float32 if ty == "fp32" else torch.bfloat16)
    variants = [(0, 16)]
    if ty == "bf16" or head_dim >= 128:
        variants.append((0, rows))
    if ty == "bf16" and head_dim in (64, 128):
        variants += [(16, 16), (128, rows)]
    return variants


def decode_simple_launch_configs() -> list[KernelConfig]:
    """The GPU launches of :func:`~teachkit.kernels.decode_simple.decode_attention_simple`:
    the split kernel (64 keys per block, 4 warps, 2 stages) and the merge kernel for 2 and
    :data:`~teachkit.kernels.decode.MAX_SPLITS` splits, for ``D`` of 64 and 128 in bfloat16
    (standing for both half types) and float32."""
    configs = []
    for ty in ("bf16", "fp32"):
        split_types = {**dict.fromkeys(("Q", "K", "V"), f"*{ty}"), "O_PART": "*fp32",
                       "LSE_PART": "*fp32", "scale": "fp32"}
        merge_types = {"O_PART": "*fp32", "LSE_PART": "*fp32", "O": f"*{ty}", "LSE": "*fp32"}
        for d in (64, 128):
            configs.append(_config(
                f"decode_simple split {ty} D={d}", decode_simple.decode_simple_split_kernel,
                split_types, {"HEAD_DIM": d, "BLOCK_N": 64, "stride_qd": 1, "stride_kd": 1,
                              "stride_vd": 1}, 4, 2))
            configs += [_config(f"decode_simple merge {ty} D={d} SPLITS={splits}",
                                decode_simple.decode_simple_merge_kernel, merge_types,
                                {"HEAD_DIM": d, "SPLITS": splits}, 4, 1)
                        for splits in (2, decode.MAX_SPLITS)]
    return configs


LONG_RANGE = 1 << 20
"""Keys per split range that take :func:`~teachkit.kernels.decode.decode_config`'s tiles for
long ranges wherever it has them."""

SHORT_CACHE = 1024
"""Keys of a cache short enough to take :func:`~teachkit.kernels.decode.decode_config`'s tiles
for short caches wherever it has them (its ``cache_keys``)."""


def _split_config(ty: str, d: int, cls: int, cfg: decode.DecodeConfig, page_size: int,
                  table_tile: int, interleave: bool, block_m: int, merge: bool,
                  split_tiles: bool, tail_stages: int | None = None) -> KernelConfig:
    """One variant of the decode split kernel for :func:`decode_launch_configs`, its tensors
    in ``ty`` (``"bf16"`` or ``"fp32"``), its masked loop pipelined as deep as ``tail_stages``
    (``None``: as the kernel, the form of grids of many programs an SM)."""
    types = {**dict.fromkeys(("Q", "K", "V", "O", "OUT"), f"*{ty}"), "SEQLENS": "*i32",
             "TABLE": "*i32", "COUNTERS": "*i32", "LSE": "*fp32", "LSE_OUT": "*fp32",
             "qk_scale": "fp32"}
    return _config(
        f"decode split {ty} D={d} BLOCK_M={block_m} BLOCK_N={cfg.block_n} "
        f"page={page_size or 'none'}{f' table held={table_tile}' if table_tile else ''}"
        f"{' interleaved' if interleave else ''} warps={cfg.num_warps} stages={cfg.num_stages}"
        f"{' one launch' if merge else ''}{' split tiles' if split_tiles else ''}"
        f"{'' if tail_stages is None else f' masked loop in {tail_stages} stages'} "
        f"(for sm_{cls}-class GPUs)",
        decode.decode_split_kernel, types,
        {"GROUP": max(1, block_m // 2), "HEAD_DIM": d, "BLOCK_M": block_m,
         "BLOCK_N": cfg.block_n, "PAGE_SIZE": page_size, "TABLE_TILE": table_tile,
         "INTERLEAVE_PAGES": interleave, "PRECISION": "ieee" if ty == "fp32" else "tf32",
         "DOT_FP32": False, "ONE_LAUNCH": merge, "TAIL_STAGES": tail_stages,
         "stride_qd": 1, "stride_kd": 1, "stride_vd": 1},
        cfg.num_warps, cfg.num_stages, (cls,))


def decode_launch_configs() -> list[KernelConfig]:
    """Every configuration :func:`~teachkit.kernels.decode.decode_attention` may launch on a GPU.

    The split kernel per (GPU class, head dim, element size) in the variants of
    :func:`_decode_variants`, with its own merge (``ONE_LAUNCH``) at ``D = 128``, and with the
    tiles of a split call with long ranges where they differ (``decode_config(...,
    keys_per_split=LONG_RANGE)``, one query row, merging either way at ``D = 128``, and paged
    in one launch at ``D = 128`` in bf16), of an unsplit grid of one or two programs an SM
    (and of a grid of nearly one an SM that does not split:
    :func:`~teachkit.kernels.decode.unsplit_from`, on a long cache and on one of
    :data:`SHORT_CACHE` keys), and
    :func:`~teachkit.kernels.decode.paged_range_tiles` of a captured paged call whose ranges
    hold one iteration where they differ (``D = 128``, bf16, pages of 16), each paged variant
    reading its table entry by entry and, on a GPU class of
    :data:`~teachkit.kernels.decode.HELD_TABLE_PAGES`, holding the widest row it holds (an
    unsplit grid then takes the contiguous tiles), and, where its tiles hold several pages on a
    GPU class of :data:`~teachkit.kernels.decode.INTERLEAVE_PAGES_PER_SM`, with them
    interleaved as well; the merge kernel for 2 and
    :data:`~teachkit.kernels.decode.MAX_SPLITS` splits (``D`` of 64, 128, 256), waiting for
    the split kernel's grid where it is a programmatic dependent launch (``PDL``). Head-dim
    strides of 1 are constants, as Triton specialises them at launch for contiguous tensors.

    On a GPU class of ``decode.TAIL_LOOP_STAGES`` a grid of few programs an SM runs the split
    kernel's loop over masked key blocks not pipelined. That form loads its tiles into
    registers (:func:`tail_loop_evidence`), so it never needs more shared memory than the
    pipelined form of the same variant, which is checked: it is compiled once contiguous and
    once paged per head dim and element size, to show that it compiles, not for every variant.
    """
    configs = []
    for ty, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        for d in decode.HEAD_DIMS:
            for cls, capability in GPU_CLASSES.items():
                # (page size, BLOCK_M, merge inside the split kernel, keys per split range,
                # programs of the unsplit grid per SM, keys of the cache, tiles halved)
                variants = [(p, m, False, None, None, None, False)
                            for p, m in _decode_variants(ty, d)]
                if d == 128:  # the merge inside the split kernel: contiguous, one query row
                    variants.append((0, 16, True, None, None, None, False))
                paged_captured = decode.decode_config(d, dtype, capability, paged=True,
                                                      captured=True)
                if (ty == "bf16" and d == 128
                        and decode.paged_range_tiles(paged_captured, 1, capability)
                        != paged_captured):
                    # captured and paged, ranges of one iteration: their own tiles
                    variants.append((16, 16, False, None, None, None, True))
                split = decode.decode_config(d, dtype, capability, keys_per_split=LONG_RANGE)
                if split != decode.decode_config(d, dtype, capability):
                    # a split call with long ranges: its own tiles, merging either way, and
                    # paged merging in one launch
                    merges = (False, True) if d == 128 else (False,)
                    variants += [(0, 16, merge, LONG_RANGE, None, None, False)
                                 for merge in merges]
                    if ty == "bf16" and d == 128:
                        variants.append((16, 16, True, LONG_RANGE, None, None, False))
                wide = decode.decode_config(d, dtype, capability, programs_per_sm=2)
                if wide != decode.decode_config(d, dtype, capability):
                    # an unsplit grid of one or two programs an SM: its own tiles
                    variants += [(p, m, False, None, 2, None, False)
                                 for p, m in _decode_variants(ty, d)]
                nearly_full = decode.unsplit_from(capability, dtype, d)
                if nearly_full < 1:
                    # a grid nearly one program an SM, unsplit: its own tiles (contiguous, or
                    # paged with the row held), on a long cache and on a short one
                    variants += [(p, m, False, None, nearly_full, keys, False)
                                 for keys in (None, SHORT_CACHE)
                                 for p, m in _decode_variants(ty, d)]
                compiled = set()  # (page size, row held, interleaved, BLOCK_M, merge, tiles)
                interleaves = decode.interleave_pages_per_sm(capability) > 0
                # the masked loop not pipelined: once contiguous, once paged (the docstring's why)
                unpipelined = {paged: decode.TAIL_LOOP_STAGES.get(cls) for paged in (False, True)}
                for page_size, block_m, merge, split_keys, per_sm, cache_keys, halved in variants:
                    # a paged program holds its table row (the widest it holds) or reads it;
                    # unsplit, a held row takes the contiguous tiles (decode_attention's plan)
                    held = decode.held_table_pages(capability) if page_size else 0
                    for table_tile in dict.fromkeys((held, 0)):
                        entries = page_size > 0 and not (table_tile and per_sm is not None)
                        cfg = decode.decode_config(d, dtype, capability, paged=entries,
                                                   programs_per_sm=per_sm,
                                                   keys_per_split=split_keys,
                                                   cache_keys=cache_keys)
                        if halved:
                            cfg = decode.paged_range_tiles(cfg, 1, capability)
                        # tiles of several whole pages may interleave them (few programs an SM)
                        several = 0 < page_size < cfg.block_n and cfg.block_n % page_size == 0
                        for interleave in dict.fromkeys((False, interleaves and several)):
                            key = (page_size, table_tile, interleave, block_m, merge, cfg[:3])
                            if key in compiled:
                                continue
                            compiled.add(key)
                            tail = unpipelined[page_size > 0]
                            unpipelined[page_size > 0] = None
                            for tail_stages in dict.fromkeys((None, tail)):
                                configs.append(_split_config(
                                    ty, d, cls, cfg, page_size, table_tile, interleave,
                                    block_m, merge, split_keys is not None, tail_stages))
        merge_types = {"O_PART": "*fp32", "LSE_PART": "*fp32", "O": f"*{ty}", "LSE": "*fp32"}
        for d in (64, 128, 256):
            for splits in (2, decode.MAX_SPLITS):
                for pdl in (False, True):  # a programmatic dependent launch where it is one
                    classes = tuple(cls for cls in GPU_CLASSES
                                    if (cls in decode.DEPENDENT_MERGE) == pdl)
                    configs.append(_config(
                        f"decode merge {ty} D={d} SPLITS={splits}"
                        f"{' dependent launch' if pdl else ''}", decode.decode_merge_kernel,
                        merge_types, {"HEAD_DIM": d, "SPLITS": splits, "PDL": pdl}, 4, 1,
                        classes))
    return configs


def all_launch_configs() -> list[KernelConfig]:
    """The launch configurations of every kernel family in :mod:`teachkit.kernels`."""
    return (softmax_launch_configs() + flash_launch_configs() + flash_simple_launch_configs()
            + flash_ladder_launch_configs() + flash_backward_launch_configs()
            + decode_simple_launch_configs()
            + decode_launch_configs())


# ---------------------------------------------------------------------------------------------
# Compiling for a GPU that is not here
# ---------------------------------------------------------------------------------------------
def alignment_hints(config: KernelConfig) -> dict:
    """``triton.compile`` attributes marking the arguments a launch finds divisible by 16."""
    if not config.aligned:
        return {}
    names = config.kernel.arg_names
    return {(names.index(name),): [["tt.divisibility", 16]]
            for name, ty in config.signature.items()
            if ty.startswith("*") or (ty == "i32" and (name.startswith("stride_")
                                                       or name in config.divisible))}


def _compile(config: KernelConfig, capability: int) -> object:
    """``triton.compile`` of ``config`` for ``sm_<capability>``: the compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(config.kernel, signature=config.signature, constexprs=config.constexprs,
                    attrs=alignment_hints(config))
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if config.max_registers is not None:
        options["maxnreg"] = config.max_registers
    return triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)


def compile_for(config: KernelConfig, capability: int) -> int:
    """Compile ``config`` for ``sm_<capability>`` and return its shared memory in bytes."""
    return int(_compile(config, capability).metadata.shared)


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


def _default_sigterm() -> None:
    """Initializer of the compile workers: SIGTERM ends a worker at once (a forked worker would
    otherwise inherit the handler :func:`_worker_pool` gives its parent)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _worker_pool(workers: int | None) -> Iterator[object]:
    """A ``multiprocessing`` pool of compile workers that never outlive the check.

    Leaving the block, normally or by an exception, terminates the workers. A SIGTERM to this
    process (from the main thread) raises ``SystemExit(143)`` where it is waiting, so the
    workers are terminated before it exits: a stopped check leaves no compile running.
    """
    import multiprocessing

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    handles = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if handles else None
    pool = multiprocessing.Pool(workers, initializer=_default_sigterm)
    try:
        yield pool
    finally:
        if handles:  # a second SIGTERM must not interrupt the clean-up
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        pool.terminate()
        pool.join()
        if handles:
            signal.signal(signal.SIGTERM, previous)


def _parallel_map(fn: Callable, jobs: list, workers: int | None) -> list:
    """``[fn(job) for job in jobs]`` computed by :func:`_worker_pool`'s processes."""
    with _worker_pool(workers) as pool:
        return pool.map(fn, jobs, chunksize=1)


def _check_index(job: tuple[int, int]) -> str | None:
    return check_config(all_launch_configs()[job[0]], job[1])


def check_all(capabilities: tuple[int, ...] = tuple(SHARED_MEMORY_LIMIT),
              workers: int | None = None) -> list[str]:
    """Compile every configuration for every capability in parallel; return the problems.

    Must run with ``TRITON_INTERPRET=0`` (the compiler needs real ``@triton.jit`` functions);
    ``python -m teachkit.kernels`` arranges that. A SIGTERM stops the worker processes too.
    """
    return [p for p in _parallel_map(_check_index, check_jobs(capabilities), workers) if p]


def check_jobs(capabilities: tuple[int, ...] = tuple(SHARED_MEMORY_LIMIT),
               ) -> list[tuple[int, int]]:
    """The compilations :func:`check_all` makes: ``(index into all_launch_configs(),
    capability)`` for every configuration on every capability of ``capabilities`` that
    launches it.

    Examples
    --------
    >>> all_jobs, t4 = check_jobs(), check_jobs((75,))
    >>> set(t4) < set(all_jobs) and {cap for _, cap in t4} == {75}
    True
    """
    return [(i, cap) for i, config in enumerate(all_launch_configs()) for cap in capabilities
            if not config.capabilities or cap in config.capabilities]


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


def wgmma_operands(config: KernelConfig, capability: int = 90) -> dict[str, int]:
    """Compile ``config`` for ``sm_<capability>`` (Hopper) and count its ``wgmma`` instructions
    by where their A operand comes from.

    A warpgroup product ``wgmma.mma_async`` always reads B from shared memory through a matrix
    descriptor; A comes either from shared memory (a second descriptor) or from registers (a
    brace list of registers right after the accumulator's). Needs no GPU, and
    ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --wgmma-operands`` arranges that).

    Returns
    -------
    dict
        ``{"A from shared memory": n, "A from registers": m}``.
    """
    ptx = _compile(config, capability).asm["ptx"]
    counts = {"A from shared memory": 0, "A from registers": 0}
    for line in ptx.splitlines():
        if "wgmma.mma_async" not in line or "}" not in line:
            continue
        after_accumulator = line[line.index("}") + 1:].lstrip(", \t")
        counts["A from registers" if after_accumulator.startswith("{")
               else "A from shared memory"] += 1
    return counts


def wgmma_overlap(config: KernelConfig, capability: int = 90) -> dict[str, object]:
    """Compile ``config`` for ``sm_<capability>`` (Hopper) and show, in PTX order, when its
    warpgroup products are waited for and whether any ``ex2`` (the softmax's exponentials)
    runs while one is still in flight.

    ``wgmma.mma_async`` instructions are issued, then ``wgmma.commit_group`` closes them into a
    group that runs on the tensor cores while the warpgroup goes on; ``wgmma.wait_group N``
    stops the warpgroup until at most ``N`` groups are pending. Read in the order the PTX lists
    them, the instructions between a commit and the next wait run beside the product. Needs no
    GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --wgmma-overlap`` arranges
    that).

    Returns
    -------
    dict
        ``"loop"``: the body of the first loop that issues a product, as runs of ``wgmma``,
        ``commit``, ``wait N`` and ``ex2`` (``"wgmma x8"``), ``"ex2"``: the kernel's ``ex2``
        instructions, ``"ex2 in flight"``: how many of them follow a commit before its wait,
        ``"waits"``: the ``N`` of every ``wgmma.wait_group``.
    """
    return loop_overlap(_compile(config, capability).asm["ptx"])


def loop_overlap(ptx: str) -> dict[str, object]:
    """:func:`wgmma_overlap`'s reading of compiled PTX: the first loop that issues a ``wgmma``,
    as runs of events, and the ``ex2`` instructions that run while a product is in flight."""
    lines = [line.strip() for line in ptx.splitlines()]
    # the first loop that issues a product: from a label to the branch back to it (a product
    # issued before the loop, as for the first block's scores one block ahead, is not in it)
    labels = {line.split(":")[0]: i for i, line in enumerate(lines)
              if re.match(r"\$L__BB\d+_\d+:", line)}
    loops = sorted((labels[target], i) for i, line in enumerate(lines) if " bra" in line
                   and (target := line.rstrip(";").split()[-1]) in labels and labels[target] < i)
    start, stop = next((a, b) for a, b in loops
                       if any(line.startswith("wgmma.mma_async") for line in lines[a:b]))
    pending, ex2, ex2_in_flight, waits, loop = 0, 0, 0, [], []
    for i, line in enumerate(lines):
        if line.startswith("wgmma.mma_async"):
            event = "wgmma"
        elif line.startswith("wgmma.commit_group"):
            pending += 1
            event = "commit"
        elif line.startswith("wgmma.wait_group"):
            n = int(line.split()[-1].rstrip(";"))
            pending = min(pending, n)
            waits.append(n)
            event = f"wait {n}"
        elif line.startswith("ex2."):
            ex2 += 1
            ex2_in_flight += pending > 0
            event = "ex2"
        else:
            continue
        if start < i < stop:
            if loop and loop[-1][0] == event:
                loop[-1][1] += 1
            else:
                loop.append([event, 1])
    loop = [f"{event} x{n}" if event in ("wgmma", "ex2") else event for event, n in loop]
    return {"loop": loop, "ex2": ex2, "ex2 in flight": ex2_in_flight, "waits": waits}


def hopper_compiled(head_dim: int = 128, dtype: str = "fp16", causal: bool = False,
                    overlap: bool = True, block_n: int | None = None,
                    persistent: bool = False) -> object:
    """The Gluon forward kernel (:mod:`teachkit.kernels.flash_hopper`; with ``persistent`` its
    persistent form) compiled for sm_90 with its launch's tiles, without a GPU:
    ``triton.compile`` of its Gluon source, the types of its tensor descriptors those of
    :func:`~teachkit.kernels.flash_hopper.hopper_descriptors` over empty tensors, in key blocks
    of ``block_n`` (default the head dim's). Needs ``TRITON_INTERPRET=0``, as
    :func:`wgmma_overlap`."""
    from . import flash_hopper as fh

    default_block, stages = fh.HOPPER_TILES[head_dim]
    block_n = default_block if block_n is None else block_n
    rows, keys = (_empty_rows(n, head_dim, dtype) for n in (fh.HOPPER_ROWS, block_n))
    descriptors = fh.hopper_descriptors(rows, keys, keys, rows, block_n)
    scalars = {"LSE": "*fp32", "L": "i32", "S": "i32", "H": "i32", "H_KV": "i32",
               **({"BH": "i32"} if persistent else {}), "qk_scale": "fp32"}
    constexprs = {"CAUSAL": causal, "OVERLAP": overlap, "STAGES": stages,
                  **({"Q_BUFS": fh.HOPPER_QUERY_BUFFERS[head_dim]} if persistent else {})}
    kernel = fh.flash_fwd_hopper_persistent_kernel if persistent else fh.flash_fwd_hopper_kernel
    return gluon_compile(
        kernel, dict(zip(("q_desc", "k_desc", "v_desc", "o_desc"), descriptors, strict=True)),
        scalars, constexprs, fh.HOPPER_MAX_REGISTERS)


def hopper_dkdv_compiled(head_dim: int = 128, dtype: str = "fp16", causal: bool = False,
                         fused_dq: bool = False) -> object:
    """The Gluon dK/dV kernel (:mod:`teachkit.kernels.flash_backward_hopper`) compiled for
    sm_90 with its launch's tiles, without a GPU, as :func:`hopper_compiled`: the types of its
    tensor descriptors those of :func:`~teachkit.kernels.flash_backward_hopper.dkdv_descriptors`
    over empty tensors. ``fused_dq`` compiles the variant that also adds ``dQ`` (``FUSED_DQ``)."""
    from . import flash_backward_hopper as fbh

    block_m, stages = fbh.DKDV_HOPPER_TILES[head_dim]
    queries, keys = (_empty_rows(n, head_dim, dtype) for n in (block_m, fbh.DKDV_HOPPER_KEYS))
    dq = torch.empty(queries.shape, dtype=torch.float32) if fused_dq else None
    descriptors = fbh.dkdv_descriptors(queries, queries, keys, keys, keys, keys, dq)
    return gluon_compile(
        fbh.flash_bwd_dkdv_hopper_kernel,
        dict(zip(("q_desc", "do_desc", "k_desc", "v_desc", "dk_desc", "dv_desc", "dq_desc"),
                 descriptors, strict=True)),
        {"LSE": "*fp32", "DELTA": "*fp32", "L": "i32", "S": "i32", "H": "i32", "H_KV": "i32",
         "qk_scale": "fp32", "scale": "fp32"},
        {"CAUSAL": causal, "STAGES": stages, "FUSED_DQ": fused_dq},
        fbh.DKDV_HOPPER_MAX_REGISTERS)


def hopper_dkdv_registers(head_dim: int = 128, causal: bool = False,
                          fused_dq: bool = False) -> dict[str, int]:
    """:func:`ptxas_resources`'s fields of the Gluon dK/dV kernel (:func:`hopper_dkdv_compiled`,
    float16): the registers a thread starts with, and the bytes it spills."""
    return assembled_resources(
        hopper_dkdv_compiled(head_dim, "fp16", causal, fused_dq).asm["ptx"], 90)


def format_hopper_dkdv_registers(found: dict[str, int], head_dim: int = 128,
                                 fused_dq: bool = False) -> str:
    """:func:`hopper_dkdv_registers` in one line (two with the spills).

    Examples
    --------
    >>> print(format_hopper_dkdv_registers({"registers": 168, "spill_stores": 60,
    ...     "spill_loads": 48, "stack": 0}))
    Gluon dK/dV (sm_90, D = 128, no mask): 168 registers at launch, 240 a consumer thread
    spilled bytes 60 + 48
    """
    from .flash_backward_hopper import DKDV_CONSUMER_REGISTERS

    name = "dK/dV with dQ fused in" if fused_dq else "dK/dV"
    return (f"Gluon {name} (sm_90, D = {head_dim}, no mask): {found['registers']} registers "
            f"at launch, {DKDV_CONSUMER_REGISTERS.value} a consumer thread\n"
            f"spilled bytes {found['spill_stores']} + {found['spill_loads']}")


def tma_reduce_adds(ptx: str) -> int:
    """How many TMA reduce-adds (``cp.reduce.async.bulk.tensor ... .add``) the PTX holds.

    Examples
    --------
    >>> tma_reduce_adds("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group [a]")
    1
    """
    return len(re.findall(r"cp\.reduce\.async\.bulk\.tensor\S*\.add\b", ptx))


def _empty_rows(rows: int, head_dim: int, dtype: str) -> torch.Tensor:
    """An empty ``(1, 1, rows, head_dim)`` CPU tensor of ``dtype`` (``"fp16"`` or ``"bf16"``):
    what a Gluon kernel's descriptors are built over to compile it without a GPU."""
    return torch.empty((1, 1, rows, head_dim),
                       dtype={"fp16": torch.float16, "bf16": torch.bfloat16}[dtype])


def gluon_compile(kernel: object, descriptors: dict[str, object], scalars: dict[str, str],
                  constexprs: dict[str, object], maxnreg: int, num_warps: int = 4,
                  divisible: tuple[str, ...] = ()) -> object:
    """``triton.compile`` of a Gluon kernel for sm_90 (``num_warps``, ``maxnreg``), its arguments
    the ``descriptors`` (whose types are read off them), the typed ``scalars`` and the
    ``constexprs``, in the kernel's order. Given ``divisible``, the scalars it names and every
    pointer are specialised as divisible by 16, as a launch finds them where they are."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    signature = {**{name: mangle_type(d) for name, d in descriptors.items()}, **scalars,
                 **dict.fromkeys(constexprs, "constexpr")}
    names = list(signature)
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name, ty in scalars.items()
             if divisible and (ty.startswith("*") or name in divisible)}
    src = GluonASTSource(kernel, signature, constexprs=constexprs, attrs=attrs or None)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "maxnreg": maxnreg})


def resident_tma_compiled(dtype: torch.dtype = torch.float32, config: object = None,
                          chunks: int = 128) -> object:
    """The Gluon resident softmax (:func:`~teachkit.kernels.softmax_tma.resident_tma_kernel`)
    compiled for sm_90 as launched on rows of ``chunks`` chunks of ``dtype``, in ``config``
    (default the dtype's :data:`~teachkit.kernels.softmax_tma.TMA_CONFIGS`), without a GPU:
    its descriptor's type that of a descriptor over an empty tensor, the row stride and the
    pointers' alignment as a launch on a contiguous tensor specialises them. Needs
    ``TRITON_INTERPRET=0``, as :func:`wgmma_overlap`."""
    from . import softmax_tma as st
    from .grid_math import next_power_of_2

    config = st.TMA_CONFIGS[dtype.itemsize] if config is None else config
    descriptor = st.chunk_descriptor(torch.empty(1, config.chunk, dtype=dtype), config)
    pointer = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}[dtype]
    scalars = {"X": pointer, "Y": pointer, "SLOTS": "*i64", "n_rows": "i32", "n_cols": "i32",
               "stride_y": "i32", "n_programs": "i32", "G": "i32"}
    constexprs = {"G_POW2": max(next_power_of_2(chunks), 32),
                  "MAX_SPIN": sk.SPIN_POLLS, "BACKOFF": config.backoff}
    if config.words:
        constexprs["PADDING"] = st.word_padding(dtype)
        constexprs["KEEP_WEIGHTS"] = config.keep_weights
        constexprs["CVT_X2"] = config.cvt_x2
        constexprs["PRMT"] = config.prmt
        constexprs["LOG2_D"] = config.log2_d
    else:
        constexprs["WRITE_BEHIND"] = config.write_behind
    constexprs["PAIR_FROM_BUFFER"] = config.pair_from_buffer
    constexprs["REREAD"] = config.reread
    constexprs["DEPTH"] = config.depth
    constexprs["BOXES"] = config.boxes
    kernel = st.resident_tma_words_kernel if config.words else st.resident_tma_kernel
    return gluon_compile(kernel, {"x_desc": descriptor}, scalars, constexprs,
                          config.max_registers, config.num_warps,
                          divisible=("n_cols", "stride_y"))


_SASS_OPCODE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)", re.M)
"""An instruction's opcode in ``nvdisasm`` output (its modifiers and predicate left off)."""

TMA_WORDS_STEPS = (("one F2F a result", {}),
                   ("two results an F2FP", {"cvt_x2": True}),
                   ("halves by PRMT", {"cvt_x2": True, "prmt": True}),
                   ("division in the exponent", {"cvt_x2": True, "prmt": True, "log2_d": True}))
"""The steps by which the TMA words kernel takes fewer instructions an element, as
:class:`~teachkit.kernels.softmax_tma.TmaConfig` changes of its configuration (the rule's,
:data:`~teachkit.kernels.softmax_tma.TMA_WORDS_CONFIGS`, is the third)."""


def tma_words_instruction_evidence() -> list[str]:
    """The sm_90 SASS of the TMA words kernel
    (:func:`~teachkit.kernels.softmax_tma.resident_tma_words_kernel`) in the rule's configuration
    for bfloat16 rows (:data:`~teachkit.kernels.softmax_tma.TMA_WORDS_CONFIGS`) with its
    switches off, as launched on rows of 256 chunks, at each step of :data:`TMA_WORDS_STEPS`: its
    instructions, and those that work on the elements (exponentials, conversions, byte moves,
    selects, float32 arithmetic), with the elements a thread holds. Its loops over a chunk are
    unrolled, so each element's instructions are in the code once. Needs no GPU, and
    ``TRITON_INTERPRET=0``."""
    from . import softmax_tma as st

    config = st.TMA_WORDS_CONFIGS[2]._replace(cvt_x2=False, prmt=False, log2_d=False)
    held = config.chunk // (32 * config.num_warps)
    ops = ("MUFU", "F2F", "F2FP", "PRMT", "SHF", "SEL", "FADD", "FMUL", "FFMA")
    lines = [f"TMA words kernel, bf16, sm_90 SASS: {held} elements a thread; "
             "instructions in its code"]
    for name, change in TMA_WORDS_STEPS:
        kernel = resident_tma_compiled(torch.bfloat16, config._replace(**change), 256)
        found = _SASS_OPCODE.findall(cubin_sass(kernel.asm["cubin"]))
        counts = ", ".join(f"{found.count(op)} {op}" for op in ops)
        lines.append(f"  {name}: {len(found)} ({len(found) / held:.1f} an element): {counts}")
    return lines


def hopper_overlap(head_dim: int = 128, dtype: str = "fp16", causal: bool = False,
                   overlap: bool = True, block_n: int | None = None) -> dict[str, object]:
    """:func:`wgmma_overlap` of the Gluon kernel (:func:`hopper_compiled`): a consumer
    warpgroup's key loop, with ``overlap`` as the kernel's switch, in key blocks of ``block_n``
    (default the head dim's)."""
    return loop_overlap(hopper_compiled(head_dim, dtype, causal, overlap, block_n).asm["ptx"])


def one_launch_config(capability: int = 90) -> KernelConfig:
    """The split-KV decoding kernel with its own merge (``ONE_LAUNCH``), as
    :func:`decode_launch_configs` checks it for ``sm_<capability>``-class GPUs: D = 128,
    bfloat16 (float16 compiles alike), a contiguous cache."""
    return next(c for c in decode_launch_configs()
                if "one launch" in c.name and " bf16 " in c.name and capability in c.capabilities)


def merge_evidence(capability: int = 90) -> list[str]:
    """The PTX lines that order the one-launch merge of :func:`one_launch_config`: the barrier
    before the count, the atomic count by one thread, and the barrier that hands its result to
    every thread; then how many atomics and ``ld.volatile`` loads (past the SM's L1 cache) the
    kernel holds with its merge and without it.

    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --merge-evidence``
    arranges that).
    """
    config = one_launch_config(capability)
    lines = [line.strip() for line in _compile(config, capability).asm["ptx"].splitlines()]
    where = next(i for i, line in enumerate(lines) if "atom." in line)
    before = next(i for i in range(where, -1, -1) if lines[i].startswith("bar.sync"))
    after = next(i for i in range(where + 1, len(lines)) if lines[i].startswith("bar.sync"))
    shown = [lines[before], lines[where], *(line for line in lines[where + 1:after + 1]
                                            if line.startswith(("st.shared", "@", "bar.sync")))]
    plain = replace(config, constexprs={**config.constexprs, "ONE_LAUNCH": False})
    plain_lines = _compile(plain, capability).asm["ptx"].splitlines()

    def counts(ptx: list[str]) -> str:
        return (f"{sum('atom.' in line for line in ptx)} atom, "
                f"{sum('ld.volatile' in line for line in ptx)} ld.volatile")

    return [f"sm_{capability}, {config.name}:", *shown,
            f"with its merge: {counts(lines)}; without: {counts(plain_lines)}"]


def dependent_merge_evidence() -> list[str]:
    """The grid dependency control (``griddepcontrol``) in the PTX of the decode merge kernel as
    :func:`decode_launch_configs` checks it for each GPU class (``D = 128``, bfloat16, two
    splits): ``griddepcontrol.wait`` before its first load on the classes where it is a
    programmatic dependent launch (:data:`~teachkit.kernels.decode.DEPENDENT_MERGE`), none
    elsewhere (sm_75 and sm_80 have no such instruction).

    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels
    --dependent-merge-evidence`` arranges that).
    """
    lines = []
    for config in decode_launch_configs():
        if (config.kernel is not decode.decode_merge_kernel
                or not config.name.startswith("decode merge bf16 D=128 SPLITS=2")):
            continue
        for capability in config.capabilities:
            ptx = [line.strip() for line in _compile(config, capability).asm["ptx"].splitlines()]
            loads = [i for i, line in enumerate(ptx) if "ld.global" in line]
            control = [(i, line.split(";")[0].strip()) for i, line in enumerate(ptx)
                       if line.startswith("griddepcontrol")]
            shown = ", ".join(f"{line} (before the first load)" if loads and i < loads[0]
                              else line for i, line in control)
            lines.append(f"sm_{capability}, {config.name}: {shown or 'no griddepcontrol'}")
    return sorted(lines)


TAIL_LOOP_INSTRUCTIONS = {"cp.async.cg": r"\bcp\.async\.cg\b",
                          "cp.async.commit_group": r"\bcp\.async\.commit_group\b",
                          "cp.async.wait_group": r"\bcp\.async\.wait_group\b",
                          "ld.global": r"\bld\.global\b"}
"""What :func:`tail_loop_evidence` counts in PTX, name to pattern: copies to shared memory that
do not wait (``cp.async``, 16 bytes each), the groups they are committed in and the waits for
them, and loads straight into registers (``ld.global``)."""


def tail_loop_evidence(capability: int = 90) -> list[str]:
    """The decode split kernel's PTX with its loop over masked key blocks not pipelined
    (``TAIL_STAGES`` = :data:`~teachkit.kernels.decode.TAIL_LOOP_STAGES`, as a grid of few programs
    an SM launches it) and pipelined as deep as the unmasked loop (``TAIL_STAGES=None``, as a
    grid of more launches it), compiled for ``sm_<capability>`` (a class of ``TAIL_LOOP_STAGES``) as
    an unsplit grid of one or two programs an SM (``D = 128``, bfloat16, one query row, 128 keys
    in 2 stages): a line per form with the counts of :data:`TAIL_LOOP_INSTRUCTIONS` and its shared
    memory.

    Not pipelined, the masked loop loads its tiles into registers (``ld.global``); pipelined, it
    has its own copies to shared memory, commit groups and waits, beside the unmasked loop's.
    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels
    --tail-loop-evidence`` arranges that).
    """
    config = _split_config("bf16", 128, capability, decode.DecodeConfig(128, 4, 2), 0, 0, False,
                           16, False, False)
    lines = []
    for stages, form in ((decode.TAIL_LOOP_STAGES[capability], "not pipelined"),
                         (None, "pipelined as the unmasked loop")):
        form_config = replace(config, constexprs={**config.constexprs, "TAIL_STAGES": stages})
        compiled = _compile(form_config, capability)
        counts = ", ".join(f"{len(re.findall(pattern, compiled.asm['ptx']))} {name}"
                           for name, pattern in TAIL_LOOP_INSTRUCTIONS.items())
        lines.append(f"sm_{capability}, masked loop {form} (TAIL_STAGES={stages}): {counts}; "
                     f"{compiled.metadata.shared} bytes of shared memory")
    return lines


def sass(config: KernelConfig, capability: int = 90) -> str:
    """The machine code (SASS) of ``config`` for ``sm_<capability>``, as the ``nvdisasm`` that
    Triton ships prints it. Needs no GPU, and ``TRITON_INTERPRET=0``."""
    return cubin_sass(_compile(config, capability).asm["cubin"])


def cubin_sass(cubin: bytes) -> str:
    """The machine code (SASS) in a compiled kernel's ``cubin``, as the ``nvdisasm`` that Triton
    ships prints it."""
    import subprocess
    import tempfile
    from pathlib import Path

    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([knobs.nvidia.nvdisasm.path, "-c", str(path)],
                              capture_output=True, text=True, check=True).stdout


_SASS_MEMORY = re.compile(r"\b(MEMBAR\.[A-Z.]+|ATOMG\.[A-Z0-9.]+|LDG\.[A-Z0-9.]*STRONG\.[A-Z]+)")


def resident_register_evidence(capability: int = 90) -> list[str]:
    """Registers a thread of the resident softmax kernels (``ptxas -v``, ``sm_<capability>``) as
    :func:`~teachkit.kernels.softmax_kernels.resident_programs` compiles them (one program, one
    row, one chunk: Triton compiles integer arguments equal to 1 as constants) and as launched
    on rows of 256 chunks, without a cap and with
    :func:`~teachkit.kernels.softmax_kernels.register_cap`, with how many programs a
    multiprocessor's 65536 registers then hold: for each dtype's configuration and for
    bfloat16 weights loaded a chunk ahead, a configuration ``gpu_checks/resident_sweep.py``
    times (bfloat16's before words). Then the
    words kernel as launched without :func:`~teachkit.kernels.softmax_kernels.fresh`, with its
    spills. Needs no GPU, and ``TRITON_INTERPRET=0``.
    """
    lines = [f"resident softmax kernel, sm_{capability}: registers a thread (programs a "
             "multiprocessor holds by registers)"]
    one_program = {"G": 1, "G_POW2": 1, "n_rows": 1, "n_programs": 1}
    launched = {"G": 256, "G_POW2": 256}
    for ty, config in (("bf16", sk.RESIDENT_CONFIGS[2]), ("fp32", sk.RESIDENT_CONFIGS[4]),
                       ("bf16", sk.ResidentConfig(16384, 8, 2, prefetch=True,
                                                  max_registers=120))):
        cells = []
        for cap in (None, True):
            found = []
            for shape in (one_program, launched):
                registers = ptxas_resources(
                    resident_launch_config(config, ty, shape, cap, capability), capability
                )["registers"]
                found.append(f"{registers} "
                             f"({sk.programs_by_registers(registers, config.num_warps)})")
            cells.append(f"{'uncapped' if cap is None else f'capped at {sk.register_cap(config)}'}"
                         f": one program {found[0]}, as launched {found[1]}")
        kept = "words" if config.words else "weights" + (", prefetch" if config.prefetch else "")
        lines.append(f"  {ty} {config.chunk} columns x {config.num_warps} warps ({kept}), "
                     f"{config.per_sm} wanted a multiprocessor; " + "; ".join(cells))
    spilled = [ptxas_resources(resident_launch_config(sk.RESIDENT_CONFIGS[2], "bf16", launched,
                                                      capability=capability, FRESH=fresh),
                               capability)["spill_stores"]
               for fresh in (True, False)]
    lines.append(f"  bf16 words as launched, capped at {sk.register_cap(sk.RESIDENT_CONFIGS[2])}"
                 f": spilled {spilled[0]} B a thread with fresh(), {spilled[1]} B without")
    return lines


def exchange_configs() -> list[KernelConfig]:
    """The exchange of ``(m, d)`` among 8 programs written two ways
    (:func:`~teachkit.kernels.teaching.counter_exchange_kernel`,
    :func:`~teachkit.kernels.teaching.word_exchange_kernel`), then the resident kernels as
    :func:`softmax_launch_configs` checks them."""
    from . import teaching

    shape = {"G": 8, "G_POW2": 8, "MAX_SPIN": sk.SPIN_POLLS}
    pairs = {name: "*fp32" for name in ("M", "D", "PART_M", "PART_D", "OUT_M", "OUT_D")}
    return [
        _config("pair as two stores, arrival counter (release-acquire)",
                teaching.counter_exchange_kernel, {**pairs, "ARRIVED": "*i32"}, shape),
        _config("pair as one 64-bit word (relaxed)", teaching.word_exchange_kernel,
                {**pairs, "SLOTS": "*i64"}, shape),
        *(c for c in softmax_launch_configs() if c.name.startswith("resident")),
    ]


def exchange_evidence(capability: int = 90) -> list[str]:
    """What the exchange of ``(m, d)`` between a row's programs compiles to on
    ``sm_<capability>``: for each of :func:`exchange_configs` launched there, its memory barriers
    (``MEMBAR``), atomics (``ATOMG``) and strong loads (``LDG...STRONG``, the polls that go past
    the SM's L1 cache), counted in its SASS (:func:`sass`).

    A release (or release-acquire) atomic compiles to a ``MEMBAR`` before the atomic: the
    thread waits there until every load and store it issued before is complete GPU-wide.

    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --exchange-evidence``
    arranges that).
    """
    lines = [f"sm_{capability} SASS (nvdisasm), memory-ordering instructions per kernel:"]
    for config in exchange_configs():
        if config.capabilities and capability not in config.capabilities:
            continue  # launched on other GPUs
        found = _SASS_MEMORY.findall(sass(config, capability))
        counts = {op: found.count(op) for op in dict.fromkeys(found)}
        fences = sum(n for op, n in counts.items() if op.startswith("MEMBAR"))
        lines.append(f"  {config.name}: {fences} MEMBAR; "
                     + ", ".join(f"{n} {op}" for op, n in counts.items()))
    return lines


_SASS_EXP_AND_CVT = re.compile(r"\b(MUFU\.EX2|F2F\.BF16\.F32|F2FP\.BF16\.F32\.PACK_AB)\b")
"""sm_80+ SASS for an exponential (``MUFU.EX2``) and for float32 rounded to bfloat16, one element
an instruction (``F2F.BF16.F32``) or two packed in one word (``F2FP.BF16.F32.PACK_AB``)."""


def resident_conversion_evidence(capability: int = 90) -> list[str]:
    """The exponentials and conversions to bfloat16 in the SASS of
    :func:`~teachkit.kernels.softmax_kernels.resident_words_kernel`, as launched on bfloat16
    rows of 256 chunks for ``sm_<capability>``, writing its results with
    :func:`~teachkit.kernels.softmax_kernels.pack_halves` (Triton's conversion, element by
    element) and with :func:`~teachkit.kernels.softmax_kernels.pack_halves_x2` (PTX's
    ``cvt.rn.bf16x2.f32``, a word at a time), counted in the kernel's code, with the elements
    a thread holds. Needs no GPU, and ``TRITON_INTERPRET=0``.
    """
    config = sk.RESIDENT_CONFIGS[2]
    held = config.chunk // (32 * config.num_warps)
    lines = [f"resident words kernel, bf16, sm_{capability} SASS: {held} elements ({held // 2} "
             "words) a thread; exponentials and conversions in its code"]
    for x2 in (False, True):
        if x2 and not sk.cvt_x2(GPU_CLASSES[capability]):
            lines.append(f"  pack_halves_x2: none on sm_{capability}; "
                         "cvt.rn.bf16x2.f32 needs sm_80 or later")
            continue
        launched = resident_launch_config(config, "bf16", {"G": 256, "G_POW2": 256},
                                          capability=capability, CVT_X2=x2)
        found = _SASS_EXP_AND_CVT.findall(sass(launched, capability))
        lines.append(f"  {'pack_halves_x2' if x2 else 'pack_halves'}: "
                     + ", ".join(f"{found.count(op)} {op}" for op in
                                 ("MUFU.EX2", "F2F.BF16.F32", "F2FP.BF16.F32.PACK_AB")))
    return lines


def flash_forward_config(capability: int, head_dim: int = 64, dtype: str = "fp16",
                         causal: bool = False) -> KernelConfig:
    """The FlashAttention forward configuration a GPU of ``sm_<capability>`` launches.

    Taken from :func:`flash_launch_configs` (the table
    :func:`~teachkit.kernels.flash.flash_attention` picks from, by head dim, element size, mask
    and GPU class), with its pointers typed ``dtype``: the compile check's configurations are
    typed bfloat16, which stands for float16 there (same tiles, same shared memory) but not
    here, since a T4 has no bfloat16 tensor cores. The defaults are notebook 08's benchmark:
    ``D = 64``, float16, no mask.

    Parameters
    ----------
    capability : int
        ``75``, ``80``, ``89`` or ``90`` (a key of :data:`~teachkit.gpus.SHARED_MEMORY_LIMIT`).
    head_dim : int
        One of :data:`teachkit.kernels.flash.HEAD_DIMS`.
    dtype : str
        ``"fp16"``, ``"bf16"`` or ``"fp32"``.
    causal : bool
        The causal configuration (its pipeline depth may differ).
    """
    if capability not in SHARED_MEMORY_LIMIT:
        raise ValueError(f"capability must be one of {tuple(SHARED_MEMORY_LIMIT)}, got "
                         f"{capability!r}")
    if dtype not in ("fp16", "bf16", "fp32"):
        raise ValueError(f"dtype must be 'fp16', 'bf16' or 'fp32', got {dtype!r}")
    stored = "fp32" if dtype == "fp32" else "bf16"
    for config in flash_launch_configs():
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
    jobs = [(cap, head_dim, dtype, causal) for cap in capabilities]
    return dict(zip(capabilities, _parallel_map(_dot_evidence_one, jobs, workers), strict=True))


PAGE_INSTRUCTIONS = {"ptx instructions": r"(?m)^\s+(?:@!?%p\d+\s+)?[a-z][\w.]*[ ;]",
                     "table entries (ld.shared.s32)": r"\bld\.shared\.s32\b",
                     "row addresses (mad.wide.s32)": r"\bmad\.wide\.s32\b"}
"""What :func:`page_interleave_evidence` counts in the paged decode kernel's PTX: every
instruction, the table entries a thread takes from its held row (``tl.gather``'s loads from
shared memory), and the 64-bit addresses formed from a page and a row."""


def page_interleave_evidence(head_dim: int = 64, block_n: int = 256, num_stages: int = 3,
                             capability: int = 90) -> dict[bool, dict[str, int]]:
    """:data:`PAGE_INSTRUCTIONS` counted in the PTX of the paged decode split kernel (bf16,
    pages of 16, the table row held) for ``sm_<capability>``, its tiles' pages in key order
    (``False``) and interleaved (``True``, ``INTERLEAVE_PAGES``). Must run with
    ``TRITON_INTERPRET=0``, as :func:`check_all`."""
    cfg = decode.DecodeConfig(block_n, 4, num_stages, one_launch=False)
    found = {}
    for interleave in (False, True):
        config = _split_config("bf16", head_dim, capability, cfg, 16,
                               decode.held_table_pages(None), interleave, 16, False, False)
        ptx = _compile(config, capability).asm["ptx"]
        found[interleave] = {name: len(re.findall(pattern, ptx))
                             for name, pattern in PAGE_INSTRUCTIONS.items()}
    return found


AS_LAUNCHED = {"GROUP": 1, "Lq": 1}
"""The constants a decoding launch of one new token with one query head a cache head gives the
split kernel besides its tiles: ``GROUP``, and ``Lq``, an integer argument that Triton makes a
constant at launch because it equals 1 (as it does every integer argument equal to 1). With
``Lq`` a constant the rows' ``offs_r // Lq`` and ``offs_r % Lq`` vanish. Compiled with these,
the kernels take the registers and shared memory that the launched ones report (the
``launched_residency`` of ``gpu_checks/decode_gpu.py --wave-tiles-sweep``, Triton 3.6, H200:
contiguous 128 / 244 / 96 registers, paged 96 / 138 / 96 holding the table row and 96 / 168 /
159 reading it entry by entry); compiled with eight query heads a cache head and ``Lq`` an
argument, as the fit check of :func:`decode_launch_configs` compiles them (the most rows a
program holds), the same tiles took up to 255 and 168 registers."""


def _split_residency(head_dim: int, cfg: decode.DecodeConfig, page_size: int, one_launch: bool,
                     capability: int, table_tile: int = 0, interleave: bool = False,
                     tail_stages: int | None = None, group: int = 1) -> dict[str, int]:
    """``BLOCK_N``, stages, registers a thread, spilled bytes, shared memory and programs an SM
    (by registers and shared memory) of the decode split kernel with tiles ``cfg`` (bf16, one
    query row, in key order or with ``interleave`` its pages interleaved; ``table_tile``
    entries of the table row held, 0: none; its masked loop ``tail_stages`` deep, ``None``: as
    the kernel) compiled for ``sm_<capability>`` as a launch of one new token with one query
    head a cache head specialises it (:data:`AS_LAUNCHED`), or with ``group`` query heads a
    cache head (at most 16, the rows a program then holds)."""
    config = _split_config("bf16", head_dim, capability, cfg, page_size, table_tile, interleave,
                           16, one_launch, False, tail_stages)
    constexprs = {**config.constexprs, **AS_LAUNCHED, "GROUP": group}
    config = replace(config, constexprs=constexprs,
                     signature=kernel_signature(config.kernel, dict(config.signature), constexprs))
    compiled = _compile(config, capability)
    used = assembled_resources(compiled.asm["ptx"], capability)
    shared = compiled.metadata.shared
    return {"block_n": cfg.block_n, "stages": cfg.num_stages, "registers": used["registers"],
            "spilled": used["spill_stores"] + used["spill_loads"], "shared": shared,
            "programs_an_sm": min(sk.programs_by_registers(used["registers"], cfg.num_warps),
                                  programs_by_shared(shared, capability))}


SHARED_RESERVED_PER_BLOCK = 1024
"""Shared memory the CUDA runtime reserves for each block from sm_80 on, besides what the
block asks for: a multiprocessor holds the most one block may ask for
(:data:`~teachkit.gpus.SHARED_MEMORY_LIMIT`) plus this (sm_90: 227 + 1 = 228 KB)."""


def programs_by_shared(shared: int, capability: int) -> int:
    """Programs that ask for ``shared`` bytes of shared memory each that one multiprocessor of
    ``sm_<capability>`` (sm_80 or newer) holds at once.

    >>> programs_by_shared(38912, 90), programs_by_shared(73728, 90)
    (5, 3)
    """
    per_sm = SHARED_MEMORY_LIMIT[capability] + SHARED_RESERVED_PER_BLOCK
    return per_sm // (shared + SHARED_RESERVED_PER_BLOCK)


def paged_entry_residency(capability: int = 90) -> dict[tuple[int, bool], dict[str, int]]:
    """What the tiles of a paged decode call that reads its table entry by entry and splits
    (``decode_config(..., paged=True)``, the usual tiles: bf16, pages of 16, no row held, key
    order) cost a thread on ``sm_<capability>``, for ``(head dim, merging in one launch)``,
    compiled as a launch of one new token with one query head a cache head specialises them
    (:data:`AS_LAUNCHED`): ``BLOCK_N``, the registers and spilled bytes from ``ptxas -v``
    (:func:`ptxas_resources`),
    and the programs of its warps an SM's registers hold
    (:func:`~teachkit.kernels.softmax_kernels.programs_by_registers`), the count the plan's
    ``decode.PAGED_ENTRY_WAVES`` is set against. Must run with ``TRITON_INTERPRET=0``, as
    :func:`check_all`."""
    found = {}
    for head_dim in (64, 128):
        for one_launch in (False, True):
            cfg = decode.decode_config(head_dim, torch.bfloat16, divmod(capability, 10),
                                       paged=True, captured=not one_launch)
            found[head_dim, one_launch] = _split_residency(head_dim, cfg, 16, one_launch,
                                                           capability)
    return found


def entry_grid_residency(capability: int = 90, group: int = 1,
                         ) -> dict[tuple[int, bool], dict[str, int]]:
    """What the tiles of a paged decode call that reads its table entry by entry and runs by
    ``decode.ENTRY_GRID`` (its tile bytes, up to 256 keys, and stages; bf16, pages of 16, no row
    held) cost on ``sm_<capability>``, for ``(head dim, merging in one launch)``: each head dim
    of ``decode.ENTRY_GRID_HEAD_DIMS``, unsplit or split and merged by the merge kernel (one
    kernel, ``False``) and split merging in one launch (``True``, a split call launched plainly).
    Compiled as the plan launches a grid of at most two programs an SM (its tiles' pages
    interleaved, ``decode.INTERLEAVE_PAGES_PER_SM``; its masked loop ``decode.TAIL_LOOP_STAGES``
    deep) and as a launch of one new token with one query head a cache head specialises them
    (:data:`AS_LAUNCHED`), or ``group`` query heads a cache head (grouped-query heads, which the
    rule counts by their cache heads): the registers, shared memory and the programs an SM they
    leave, to set beside the rule's grid of up to two an SM. Must run with
    ``TRITON_INTERPRET=0``."""
    _, _, stage_bytes, stages = decode.ENTRY_GRID[capability]
    return {(head_dim, one_launch): _split_residency(
                head_dim, decode.DecodeConfig(decode._entry_grid_keys(stage_bytes, head_dim, 2),
                                              4, stages, one_launch=one_launch), 16, one_launch,
                capability, interleave=True, tail_stages=decode.TAIL_LOOP_STAGES.get(capability),
                group=group)
            for head_dim in decode.ENTRY_GRID_HEAD_DIMS for one_launch in (False, True)}


def last_wave_residency(capability: int = 90) -> dict[bool, dict[str, int]]:
    """What the tiles of a contiguous decode call at ``D = 128`` that splits a grid of one to
    four thirds programs an SM (``decode.LAST_WAVE_GRID``: its shortest ranges, a cache of
    ``decode.LAST_WAVE_FEWEST_KEYS`` keys in ``decode.LAST_WAVE_MOST_SPLITS``, take
    ``decode_config(..., keys_per_split=...)``, bf16) cost a thread on ``sm_<capability>``,
    merging with the merge kernel (``False``) and in one launch (``True``), as
    :func:`paged_entry_residency` reports them: the programs an SM are what
    :func:`~teachkit.kernels.decode.last_wave_splits` is given. Must run with
    ``TRITON_INTERPRET=0``."""
    found = {}
    for one_launch in (False, True):
        cfg = decode.decode_config(128, torch.bfloat16, divmod(capability, 10),
                                   captured=not one_launch,
                                   keys_per_split=decode.LAST_WAVE_FEWEST_KEYS
                                   // decode.LAST_WAVE_MOST_SPLITS)
        found[one_launch] = _split_residency(128, cfg, 0, one_launch, capability)
    return found


WAVE_TILE_READS = {"contiguous": (0, 0), "paged, row held": (16, 256),
                   "paged, entry by entry": (16, 0)}
"""How :func:`wave_tiles_residency` reads the cache: name -> (page size, 0 for contiguous; table
entries a program holds, 0 for none), as the wave-tiles sweep's calls read it (pages of 16; a
row held at 4k tokens, read entry by entry at 16k)."""


def wave_tiles_residency(capability: int = 90) -> dict[str, list[dict[str, int]]]:
    """What each of the tiles an unsplit decode call at ``D = 128`` of more than two programs an
    SM chooses from (``decode.FULLEST_WAVE_TILES[capability]``, contiguous and paged, bf16, one
    query row) costs on ``sm_<capability>``, for each way of :data:`WAVE_TILE_READS`, compiled
    as a launch of one new token with one query head a cache head specialises it
    (:data:`AS_LAUNCHED`): the registers, shared memory (the compiled kernel's
    ``metadata.shared``) and the programs an SM they leave between them, the counts
    :func:`~teachkit.kernels.decode.fullest_wave_tiles` is given. Compiled here, without a GPU,
    with Triton 3.6 these are what the launched kernels report
    (``gpu_checks/decode_gpu.py --wave-tiles-sweep`` records those). Must run with
    ``TRITON_INTERPRET=0``."""
    found = {}
    for name, (page_size, table_tile) in WAVE_TILE_READS.items():
        found[name] = []
        for stage_bytes, stages, _ in decode.FULLEST_WAVE_TILES[capability][page_size > 0]:
            block_n = decode._keys_per_block(stage_bytes, 128, 2)
            cfg = decode.DecodeConfig(block_n, 4, stages, one_launch=False)
            found[name].append(_split_residency(128, cfg, page_size, False, capability,
                                                table_tile))
    return found


def short_rows_residency(capability: int = 90) -> list[dict[str, int]]:
    """What the tiles a captured contiguous decode call at ``D = 64`` (rows of 128 bytes) that
    splits the keys takes (``decode.SHORT_ROW_SPLITS[capability]``: the short ranges' tiles,
    then the long ones', bf16, with the merge kernel) cost on ``sm_<capability>``, compiled as a
    launch of one new token with one query head a cache head specialises them
    (:data:`AS_LAUNCHED`): the registers, shared memory and the programs an SM they leave, to
    set beside the programs an SM the rule aims for. Must run with ``TRITON_INTERPRET=0``."""
    _, stage_bytes, stages = decode.SHORT_ROW_SPLITS[capability]
    block_n = decode._keys_per_block(stage_bytes, 64, 2)
    return [_split_residency(64, decode.DecodeConfig(n, 4, stages, one_launch=False), 0, False,
                             capability) for n in (block_n // 2, block_n)]


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


# ---------------------------------------------------------------------------------------------
# How a row is reduced: the layout and the shuffles, from the compiled IR and PTX
# ---------------------------------------------------------------------------------------------
_LAYOUT_DEF = re.compile(r"^(#[\w]+) = (#ttg\.[\w]+<.*>)\s*$", re.M)
_REDUCED_TYPE = re.compile(r'"tt\.reduce"\(.*?\).*?:\s*\(tensor<([0-9x]+)x\w+, (#[\w]+)>', re.S)
_SHUFFLE = re.compile(r"\bshfl\.sync\.bfly\.b32\s+[^,]+,\s*[^,]+,\s*(\d+),")


def reduction_evidence(config: KernelConfig, capability: int) -> dict:
    """Compile ``config`` for ``sm_<capability>`` and read how its ``tl.max`` / ``tl.sum`` run.

    Needs no GPU, and ``TRITON_INTERPRET=0`` (``python -m teachkit.kernels --layout-evidence``
    arranges that).

    Returns
    -------
    dict
        ``"reductions"``: the ``tt.reduce`` operations of the compiled IR (TTGIR), one per
        ``tl.max`` / ``tl.sum`` / ``tl.reduce`` the compiler kept, as ``(tile shape, layout
        name)``; ``"layouts"``: the definition line of each of those layouts (e.g. ``#mma =
        #ttg.nvidia_mma<{... warpsPerCTA = [8, 1] ...}>``); ``"shuffles"``: lane offset to the
        number of ``shfl.sync.bfly`` (butterfly shuffles) with that offset in the PTX;
        ``"shared_bytes"``: the shared memory the kernel asks for.
    """
    compiled = _compile(config, capability)
    ttgir, ptx = compiled.asm["ttgir"], compiled.asm["ptx"]
    definitions = dict(_LAYOUT_DEF.findall(ttgir))
    reductions = [(shape, layout) for shape, layout in _REDUCED_TYPE.findall(ttgir)]
    layouts = {name: f"{name} = {definitions[name]}" for _, name in reductions
               if name in definitions}
    shuffles: dict[int, int] = {}
    for offset in _SHUFFLE.findall(ptx):
        shuffles[int(offset)] = shuffles.get(int(offset), 0) + 1
    return {"reductions": reductions, "layouts": layouts,
            "shuffles": dict(sorted(shuffles.items(), reverse=True)),
            "shared_bytes": int(compiled.metadata.shared)}


def blog_softmax_config() -> KernelConfig:
    """Notebook 06's blog kernel as :func:`~teachkit.kernels.softmax_blog` launches it (float32,
    blocks of 1024, 4 warps): one program reduces a whole block of a row to a scalar."""
    return next(c for c in softmax_launch_configs() if c.name == "blog fp32")


def _reduction_one(job: tuple[str, int, int, str, bool]) -> dict:
    which, capability, head_dim, dtype, causal = job
    config = (blog_softmax_config() if which == "blog"
              else flash_forward_config(capability, head_dim, dtype, causal))
    return {"name": config.name, "warps": config.num_warps,
            **reduction_evidence(config, capability)}


def layout_evidence(capability: int = 90, head_dim: int = 128, dtype: str = "fp16",
                    causal: bool = False) -> dict[str, dict]:
    """:func:`reduction_evidence` of notebook 08's flash forward configuration for
    ``sm_<capability>`` and, for contrast, of notebook 06's blog softmax kernel, compiled in two
    processes. Keys ``"flash"`` and ``"blog"``; each value adds the configuration's ``"name"``
    and ``"warps"``.

    Must run with ``TRITON_INTERPRET=0``, as :func:`check_all`.
    """
    jobs = [(which, capability, head_dim, dtype, causal) for which in ("flash", "blog")]
    return dict(zip(("flash", "blog"), _parallel_map(_reduction_one, jobs, 2), strict=True))


def format_layout_evidence(evidence: dict[str, dict], capability: int = 90) -> str:
    """What :func:`layout_evidence` found, one block per kernel: its reductions, the layout line
    of the reduced tiles, and the butterfly shuffles of the PTX by lane offset.

    Examples
    --------
    >>> found = {"reductions": [("128x128", "#mma")], "warps": 8, "shared_bytes": 0,
    ...          "layouts": {"#mma": "#mma = #ttg.nvidia_mma<{warpsPerCTA = [8, 1]}>"},
    ...          "shuffles": {2: 4, 1: 4}, "name": "flash"}
    >>> print(format_layout_evidence({"flash": found}))  # doctest: +ELLIPSIS
    sm_90, Triton ...
    flash, 8 warps: 1 tt.reduce over 128x128 #mma
      #mma = #ttg.nvidia_mma<{warpsPerCTA = [8, 1]}>
      shfl.sync.bfly in the PTX, by lane offset: 2: 4, 1: 4 (8 in all)
    """
    import triton

    lines = [f"sm_{capability}, Triton {triton.__version__}"]
    for found in evidence.values():
        tiles = sorted({f"{shape} {layout}" for shape, layout in found["reductions"]})
        lines.append(f"{found['name']}, {found['warps']} warps: {len(found['reductions'])} "
                     f"tt.reduce over {', '.join(tiles)}")
        lines += [f"  {line}" for line in found["layouts"].values()]
        counts = ", ".join(f"{offset}: {n}" for offset, n in found["shuffles"].items())
        lines.append(f"  shfl.sync.bfly in the PTX, by lane offset: {counts} "
                     f"({sum(found['shuffles'].values())} in all)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Registers and spills, from ptxas
# ---------------------------------------------------------------------------------------------
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame")


def ptxas_resources(config: KernelConfig, capability: int) -> dict[str, int]:
    """Compile ``config`` for ``sm_<capability>`` and read its registers and spills from
    ``ptxas -v``, the assembler Triton ships and runs on its PTX (no GPU needed).

    On a GPU the same figures are the compiled kernel's ``n_regs`` and ``n_spills``. Needs
    ``TRITON_INTERPRET=0``, as :func:`check_all`.

    Returns
    -------
    dict
        ``"registers"`` per thread, ``"spill_stores"`` and ``"spill_loads"`` (bytes per thread
        written to and read back from local memory because the registers ran out), and
        ``"stack"`` (bytes of local memory per thread).
    """
    return assembled_resources(_compile(config, capability).asm["ptx"], capability)


def assembled_resources(ptx: str, capability: int) -> dict[str, int]:
    """:func:`ptxas_resources` of PTX already compiled for ``sm_<capability>``: for callers
    that read the PTX too, so that the kernel is compiled once."""
    import subprocess
    import tempfile
    from pathlib import Path

    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [get_ptxas(capability).path, "-v", "--regAllocOptLevel=2",
             f"--gpu-name={sm_arch_from_capability(capability)}", str(source),
             "-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True, text=True, check=True)
    log = done.stdout + done.stderr
    stores, loads = map(int, _PTXAS_SPILLS.search(log).groups())
    return {"registers": int(_PTXAS_REGISTERS.search(log).group(1)), "spill_stores": stores,
            "spill_loads": loads, "stack": int(_PTXAS_STACK.search(log).group(1))}


BACKWARD_REGISTER_TILES = (
    ("dkdv", 64, 128, 8, 2),
    ("dkdv", 32, 128, 8, 2),
    ("dkdv", 16, 128, 8, 2),
)
"""dK/dV tiles ``(kernel, block_m, block_n, warps, stages)`` that ``--backward-registers``
compiles beside the table's (D = 128 on sm_90): the table's step of 64 queries with one pipeline
stage fewer, then steps of 32 and 16 queries."""


def _backward_registers_one(job: tuple[str, int, int, int, int, int, int, str]) -> dict:
    kernel, d, block_m, block_n, warps, stages, capability, note = job
    config = backward_kernel_config(kernel, d, "bf16", block_m, block_n, warps, stages)
    return {"kernel": kernel, "tiles": (block_m, block_n, warps, stages), "note": note,
            **ptxas_resources(config, capability)}


def backward_registers(capability: int = 90, head_dim: int = 128,
                       workers: int | None = None) -> list[dict]:
    """Registers and spills (``ptxas -v``) of the backward kernels for ``sm_<capability>`` at
    ``head_dim`` in half precision, causal: the dK/dV and dQ kernels with the tiles of
    :func:`~teachkit.kernels.flash_backward.backward_config`, and the dK/dV kernel with the
    :data:`BACKWARD_REGISTER_TILES`. No GPU needed; ``TRITON_INTERPRET=0``, as
    :func:`check_all`.

    Returns
    -------
    list of dict
        One per kernel: ``"kernel"`` (``"dkdv"`` or ``"dq"``), ``"tiles"`` ``(block_m, block_n,
        warps, stages)``, ``"note"`` (``"the table's"`` or ``""``) and :func:`ptxas_resources`'s
        fields.
    """
    cfg = flash_backward.backward_config(head_dim, torch.float16, GPU_CLASSES[capability])
    table = [("dkdv", cfg.kv_block_m, cfg.kv_block_n, cfg.kv_warps, cfg.kv_stages),
             ("dq", cfg.q_block_m, cfg.q_block_n, cfg.q_warps, cfg.q_stages)]
    jobs = [(t[0], head_dim, *t[1:], capability, "the table's") for t in table]
    jobs += [(t[0], head_dim, *t[1:], capability, "") for t in BACKWARD_REGISTER_TILES
             if t not in table]
    return _parallel_map(_backward_registers_one, jobs, workers)


def format_backward_registers(found: list[dict], capability: int = 90,
                              head_dim: int = 128) -> str:
    """:func:`backward_registers` as a table, with the float32 accumulator values one thread
    holds (``acc/thread``: dK and dV, or dQ, spread over the program's threads), each a
    register, before any tile of a step. ``spilled bytes``: stores + loads a thread makes to
    local memory because its registers ran out.

    Examples
    --------
    >>> print(format_backward_registers([{"kernel": "dkdv", "tiles": (64, 128, 8, 3),
    ...     "note": "the table's", "registers": 255, "spill_stores": 856, "spill_loads": 880,
    ...     "stack": 1080}]))  # doctest: +NORMALIZE_WHITESPACE
    backward kernels for sm_90, D = 128, half precision, causal (ptxas -v):
    kernel  tiles     warps  stages  acc/thread  registers  spilled bytes
    dK/dV   64 x 128  8      3       128         255        856 + 880 (the table's)
    """
    lines = [f"backward kernels for sm_{capability}, D = {head_dim}, half precision, causal "
             "(ptxas -v):",
             f"{'kernel':<8}{'tiles':<10}{'warps':<7}{'stages':<8}{'acc/thread':<12}"
             f"{'registers':<11}spilled bytes"]
    for r in found:
        block_m, block_n, warps, stages = r["tiles"]
        held = block_n if r["kernel"] == "dkdv" else block_m  # rows of the held accumulators
        count = 2 if r["kernel"] == "dkdv" else 1  # dK and dV, or dQ
        acc = count * held * head_dim // (32 * warps)  # float32 values a thread holds
        note = f" ({r['note']})" if r["note"] else ""
        lines.append(f"{'dK/dV' if r['kernel'] == 'dkdv' else 'dQ':<8}"
                     f"{f'{block_m} x {block_n}':<10}{warps:<7}{stages:<8}{acc:<12}"
                     f"{r['registers']:<11}{r['spill_stores']} + {r['spill_loads']}{note}")
    return "\n".join(lines)


def warp_specialized_registers(capability: int = 90, head_dim: int = 128) -> dict:
    """Registers of the warp-specialised dK/dV kernel
    (:func:`warp_specialized_dkdv_config`, without the causal mask, as the table launches it)
    for ``sm_<capability>``: :func:`ptxas_resources`'s fields (the registers a thread starts
    with), plus ``"warps"`` (what Triton made of the 4 asked for) and ``"setmaxnreg"``, the
    register counts its PTX moves warpgroups to (``setmaxnreg.inc`` / ``.dec``), largest first.
    No GPU needed; ``TRITON_INTERPRET=0``.
    """
    compiled = _compile(warp_specialized_dkdv_config(head_dim), capability)
    ptx = compiled.asm["ptx"]
    counts = re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
    return {**assembled_resources(ptx, capability), "warps": compiled.metadata.num_warps,
            "setmaxnreg": sorted({int(c) for c in counts}, reverse=True)}


def format_warp_specialized_registers(found: dict, capability: int = 90,
                                      head_dim: int = 128) -> str:
    """:func:`warp_specialized_registers` in two lines.

    Examples
    --------
    >>> print(format_warp_specialized_registers({"warps": 12, "registers": 168,
    ...     "setmaxnreg": [256, 40], "spill_stores": 16, "spill_loads": 68, "stack": 16}))
    warp-specialised dK/dV (sm_90, D = 128, no mask): 12 warps (4 asked), 168 registers at launch
    setmaxnreg moves warpgroups to 256, 40 registers; spilled bytes 16 + 68
    """
    from .flash_backward_ws import WS_TILES

    return (f"warp-specialised dK/dV (sm_{capability}, D = {head_dim}, no mask): "
            f"{found['warps']} warps ({WS_TILES[2]} asked), {found['registers']} registers at "
            "launch\n"
            f"setmaxnreg moves warpgroups to {', '.join(map(str, found['setmaxnreg']))} "
            f"registers; spilled bytes {found['spill_stores']} + {found['spill_loads']}")


def _fused_one_row_config(n_cols: int, ty: str, num_warps: int) -> KernelConfig:
    """The fused softmax kernel as :func:`teachkit.kernels.teaching.fused_one_row` launches it:
    one row of ``n_cols`` (a power of two) per program, ``num_warps`` warps."""
    types = {"X": f"*{ty}", "Y": f"*{ty}"}
    return _config(f"fused {ty} one row BLOCK_N={n_cols} warps={num_warps}", sk.fused_kernel,
                   types, {"BLOCK_M": 1, "BLOCK_N": n_cols}, num_warps)


def _sweep_one(job: tuple[int, int, str, int]) -> dict[str, int]:
    capability, n_cols, ty, num_warps = job
    return ptxas_resources(_fused_one_row_config(n_cols, ty, num_warps), capability)


def fused_register_sweep(capabilities: tuple[int, ...] = tuple(SHARED_MEMORY_LIMIT),
                         columns: tuple[int, ...] = (4096, 8192, 16384, 32768, 65536),
                         dtype: str = "fp32", num_warps: int = 16,
                         workers: int | None = None) -> dict[int, dict[int, dict[str, int]]]:
    """:func:`ptxas_resources` of the fused softmax kernel, one row per program of ``n`` columns
    and ``num_warps`` warps (notebook 06's register-cliff experiment), for each capability and
    row length, compiled in parallel processes: capability to ``n`` to the resources.

    Must run with ``TRITON_INTERPRET=0``, as :func:`check_all`.
    """
    jobs = [(cap, n, dtype, num_warps) for cap in capabilities for n in columns]
    found = _parallel_map(_sweep_one, jobs, workers)
    sweep: dict[int, dict[int, dict[str, int]]] = {}
    for (cap, n, _, _), resources in zip(jobs, found, strict=True):
        sweep.setdefault(cap, {})[n] = resources
    return sweep


def format_register_sweep(sweep: dict[int, dict[int, dict[str, int]]], dtype: str = "fp32",
                          num_warps: int = 16) -> str:
    """A table of :func:`fused_register_sweep`: per row length, the registers per thread and
    the bytes spilled per thread on each GPU class, and the longest row with no spill.

    Examples
    --------
    >>> fits = {"registers": 40, "spill_stores": 0, "spill_loads": 0, "stack": 0}
    >>> spills = {"registers": 255, "spill_stores": 96, "spill_loads": 96, "stack": 96}
    >>> print(format_register_sweep({90: {16384: fits, 32768: spills}}))  # doctest: +ELLIPSIS
    fused softmax, one fp32 row per program, 16 warps (512 threads), Triton ...
    columns  values/thread  sm_90 registers (spilled bytes)
      16384             32                   40
      32768             64                  255 (96 + 96)
    longest row with no spill: sm_90 16384
    """
    import triton

    caps = list(sweep)
    threads = 32 * num_warps
    lines = [f"fused softmax, one {dtype} row per program, {num_warps} warps ({threads} "
             f"threads), Triton {triton.__version__}"]
    head = ["columns", "values/thread"] + [f"sm_{c} registers (spilled bytes)" for c in caps]
    rows = []
    for n in sweep[caps[0]]:
        cells = [str(n), str(n // threads)]
        for cap in caps:
            r = sweep[cap][n]
            spilled = r["spill_stores"] + r["spill_loads"]
            cells.append(f"{r['registers']}" + (f" ({r['spill_stores']} + {r['spill_loads']})"
                                                 if spilled else ""))
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    for cells in rows:  # numbers right-aligned; a spill's bytes hang past the register count
        out = [cells[0].rjust(widths[0]), cells[1].rjust(widths[1])]
        for cell, w in zip(cells[2:], widths[2:], strict=True):
            regs, _, rest = cell.partition(" ")
            out.append((regs.rjust(min(w, len(head[2]) - 14)) + (" " + rest if rest else "")
                        ).ljust(w))
        lines.append("  ".join(out).rstrip())
    fits = ", ".join(
        f"sm_{cap} " + str(max((n for n, r in sweep[cap].items()
                                if not r["spill_stores"] + r["spill_loads"]), default=0))
        for cap in caps)
    lines.append(f"longest row with no spill: {fits}")
    return "\n".join(lines)


def _two_pass_one(job: tuple[str, int]) -> dict[str, int]:
    name, capability = job
    config = next(c for c in softmax_launch_configs() if c.name == name)
    ptx = _compile(config, capability).asm["ptx"]
    return {"warps": config.num_warps, "block": config.constexprs["BLOCK"],
            "ex2": len(re.findall(r"\bex2\.approx", ptx)),
            "shuffles": len(_SHUFFLE.findall(ptx)),
            **assembled_resources(ptx, capability)}


def two_pass_evidence(capability: int = 90) -> dict[str, dict[str, int]]:
    """The blog kernel and the per-slot online kernel of notebook 06, in float32 as
    :func:`~teachkit.kernels.softmax_blog` and :func:`~teachkit.kernels.softmax_online` launch
    them, compiled for ``sm_<capability>``: per kernel its ``"warps"``, ``"block"`` (the
    elements one iteration loads), ``"ex2"`` and ``"shuffles"`` (``ex2.approx`` and
    ``shfl.sync.bfly`` instructions in the PTX) and :func:`ptxas_resources`.

    Must run with ``TRITON_INTERPRET=0``, as :func:`check_all`.
    """
    names = {"blog": "blog fp32", "online": "online fp32"}
    jobs = [(name, capability) for name in names.values()]
    return dict(zip(names, _parallel_map(_two_pass_one, jobs, 2), strict=True))


def format_two_pass_evidence(evidence: dict[str, dict[str, int]], n_cols: int = 1024,
                             capability: int = 90) -> str:
    """:func:`two_pass_evidence` as a table, with what one program does on a row of ``n_cols``.

    Examples
    --------
    >>> r = {"warps": 4, "block": 1024, "ex2": 12, "shuffles": 14, "registers": 32,
    ...      "spill_stores": 0, "spill_loads": 0, "stack": 0}
    >>> print(format_two_pass_evidence({"blog": r}))  # doctest: +NORMALIZE_WHITESPACE
    two-pass kernels, fp32, sm_90, rows of 1024: one program per row
    kernel  warps  threads  block  slots masked  registers  regs/program  ex2  shfl.bfly
    blog        4      128   1024            0         32          4096   12         14
    """
    head = ["kernel", "warps", "threads", "block", "slots masked", "registers",
            "regs/program", "ex2", "shfl.bfly"]
    rows = []
    for name, r in evidence.items():
        threads = 32 * r["warps"]
        masked = -n_cols % r["block"]
        rows.append([name, r["warps"], threads, r["block"], masked, r["registers"],
                     r["registers"] * threads, r["ex2"], r["shuffles"]])
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    lines = [f"two-pass kernels, fp32, sm_{capability}, rows of {n_cols}: one program per row",
             "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                       for i, (h, w) in enumerate(zip(head, widths, strict=True)))]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return "\n".join(lines)
