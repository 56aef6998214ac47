"""The GPUs learners get in Google Colab, and what each can do for the course.

Colab lends four NVIDIA GPUs: a T4 (free tier), an L4, an A100 and an H100. They differ in more
than speed: the T4 (Turing, sm_75) has no bfloat16, 64 KB of shared memory per block, and Triton
(3.6 and 3.9, read from the PTX it writes) multiplies its ``tl.dot`` tiles on the FMA units rather
than the tensor cores; CuTe DSL runs on
Ampere (sm_80) and newer only; the H100 alone has Hopper's ``wgmma`` and TMA copy engine. The
kernels pick their tiles per GPU class (:func:`gpu_class`), and the compile check of
``python -m teachkit.kernels`` (:mod:`teachkit.kernels.compile_check`) proves they fit each of
these GPUs without one.

This module is a leaf: it imports no kernel, so the README, the notebooks, the kernels and their
compile check can all read it (never the reverse).

Examples
--------
>>> [g.name for g in COLAB_GPUS]
['T4', 'A100', 'L4', 'H100']
>>> t4 = by_capability((7, 5))
>>> t4.sm_name, t4.bf16, t4.cute_dsl, t4.shared_memory_per_block // 1024
('sm_75', False, False, 64)
>>> SHARED_MEMORY_LIMIT[90] // 1024
227
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COLAB_GPUS",
    "CUTE_DSL_MIN_CAPABILITY",
    "GPU_CLASSES",
    "SHARED_MEMORY_LIMIT",
    "ColabGpu",
    "by_capability",
    "describe_gpus",
    "gpu_class",
    "gpu_table",
]

CUTE_DSL_MIN_CAPABILITY = (8, 0)
"""The oldest GPU CuTe DSL (``nvidia-cutlass-dsl``) compiles for: Ampere, sm_80."""
_BF16_MIN_CAPABILITY = (8, 0)
"""bfloat16 arithmetic and tensor-core products came with Ampere (sm_80)."""


@dataclass(frozen=True)
class ColabGpu:
    """One GPU Colab lends, as the course sees it.

    Attributes
    ----------
    name : str
        Colab's name for it: ``"T4"``, ``"L4"``, ``"A100"``, ``"H100"``.
    architecture : str
        NVIDIA's architecture: Turing, Ampere, Ada Lovelace, Hopper.
    capability : tuple of int
        ``(major, minor)`` compute capability, as ``torch.cuda.get_device_capability`` says.
    memory_gib : float
        GPU memory a notebook can use, as Colab's resource panel shows it (GiB, labelled "GB").
    shared_memory_per_block : int
        Largest shared memory one program (thread block) may use, in bytes (the opt-in
        maximum; a kernel asking for more does not launch).
    triton_dot : str
        How Triton compiles notebook 08's float16 ``tl.dot`` for this GPU: ``"fma"`` (scalar
        ``fma.rn.f32``: the FMA units, no tensor cores), ``"mma"`` (``mma.sync``, tensor cores)
        or ``"wgmma"`` (Hopper's warpgroup tensor-core instructions). Read from the PTX the
        compiler writes, not from memory: ``python -m teachkit.kernels --dot-evidence`` measures
        it, and ``tests/test_compile_check.py`` checks this table against the installed Triton
        (measured the same with Triton 3.6, Colab's, and 3.9).
    tma : bool
        Whether the TMA copy engine and ``wgmma`` exist (Hopper): the flash kernel's ``tma``
        configurations run only there.

    Examples
    --------
    >>> by_capability((8, 9))
    ColabGpu(name='L4', architecture='Ada Lovelace', capability=(8, 9), memory_gib=22.5, \
shared_memory_per_block=101376, triton_dot='mma', tma=False)
    """

    name: str
    architecture: str
    capability: tuple[int, int]
    memory_gib: float
    shared_memory_per_block: int
    triton_dot: str
    tma: bool = False

    @property
    def sm(self) -> int:
        """The capability as one number, ``75`` for sm_75: the keys of
        :data:`SHARED_MEMORY_LIMIT` and of the compile check's targets."""
        major, minor = self.capability
        return 10 * major + minor

    @property
    def sm_name(self) -> str:
        """``"sm_75"``, ``"sm_90"``...: the architecture name the compilers use."""
        return f"sm_{self.sm}"

    @property
    def bf16(self) -> bool:
        """Whether the GPU computes in bfloat16 (sm_80 and newer; a T4 has float16 only)."""
        return self.capability >= _BF16_MIN_CAPABILITY

    @property
    def cute_dsl(self) -> bool:
        """Whether CuTe DSL runs on it (Ampere, sm_80, and newer): notebook 11's kernel."""
        return self.capability >= CUTE_DSL_MIN_CAPABILITY


COLAB_GPUS: tuple[ColabGpu, ...] = (
    ColabGpu("T4", "Turing", (7, 5), 15.0, 64 * 1024, "fma"),
    ColabGpu("A100", "Ampere", (8, 0), 40.0, 163 * 1024, "mma"),
    ColabGpu("L4", "Ada Lovelace", (8, 9), 22.5, 99 * 1024, "mma"),
    ColabGpu("H100", "Hopper", (9, 0), 80.0, 227 * 1024, "wgmma", tma=True),
)
"""The GPUs of Colab's runtime menu, oldest architecture first."""

SHARED_MEMORY_LIMIT: dict[int, int] = {g.sm: g.shared_memory_per_block for g in COLAB_GPUS}
"""Largest shared memory one program (block) may use, in bytes, per compute capability (75, 80,
89, 90): the limits the compile check holds every kernel configuration to."""

GPU_CLASSES: dict[int, tuple[int, int]] = {g.sm: g.capability for g in COLAB_GPUS}
"""The classes the kernels pick their configurations by (:func:`gpu_class`), each with the
capability of the Colab GPU that stands for it in the compile check: 75 (T4, 64 KB of shared
memory a block), 80 (A100, 163 KB), 89 (L4, RTX: about 99 KB), 90 (H100, H200: 227 KB and TMA)."""


def gpu_class(capability: tuple[int, int]) -> int:
    """The class a kernel picks its configurations by: 75 below sm_80 (T4: 64 KB of shared
    memory a block); 90 for Hopper (sm_90: 227 KB and TMA); 80 for the other large shared
    memories (sm_80, sm_87, sm_100); 89 for the ~99 KB ones (sm_86, sm_89, sm_12x).

    Parameters
    ----------
    capability : tuple of int
        ``(major, minor)`` compute capability, as ``torch.cuda.get_device_capability`` says.

    Returns
    -------
    int
        A key of :data:`GPU_CLASSES`.

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


def by_capability(capability: tuple[int, int]) -> ColabGpu | None:
    """The Colab GPU of this exact compute capability, or ``None`` (e.g. an RTX 3090, sm_86).

    Examples
    --------
    >>> by_capability((9, 0)).name, by_capability((8, 6))
    ('H100', None)
    """
    return next((g for g in COLAB_GPUS if g.capability == tuple(capability)), None)


_DOT_WORDS = {"fma": "FMA units", "mma": "tensor cores (mma)", "wgmma": "tensor cores (wgmma)"}
_COLUMNS = ("GPU", "architecture", "arch", "memory", "shared memory/block", "bf16",
            "Triton tl.dot (fp16)", "CuTe DSL")


def gpu_table() -> list[dict[str, str]]:
    """One row per Colab GPU, column name to text, for a table in the README or a notebook.

    Examples
    --------
    >>> gpu_table()[0]  # doctest: +NORMALIZE_WHITESPACE
    {'GPU': 'T4', 'architecture': 'Turing', 'arch': 'sm_75', 'memory': '15 GB',
     'shared memory/block': '64 KB', 'bf16': 'no', 'Triton tl.dot (fp16)': 'FMA units',
     'CuTe DSL': 'no'}
    """
    rows = []
    for g in COLAB_GPUS:
        values = (g.name, g.architecture, g.sm_name, f"{g.memory_gib:g} GB",
                  f"{g.shared_memory_per_block // 1024} KB", "yes" if g.bf16 else "no",
                  _DOT_WORDS[g.triton_dot], "yes" if g.cute_dsl else "no")
        rows.append(dict(zip(_COLUMNS, values, strict=True)))
    return rows


def describe_gpus(markdown: bool = True) -> str:
    """:func:`gpu_table` as text: a Markdown table, or aligned plain columns.

    Examples
    --------
    >>> print(describe_gpus(markdown=False))
    GPU   architecture  arch   memory   shared memory/block  bf16  Triton tl.dot (fp16)  CuTe DSL
    T4    Turing        sm_75  15 GB    64 KB                no    FMA units             no
    A100  Ampere        sm_80  40 GB    163 KB               yes   tensor cores (mma)    yes
    L4    Ada Lovelace  sm_89  22.5 GB  99 KB                yes   tensor cores (mma)    yes
    H100  Hopper        sm_90  80 GB    227 KB               yes   tensor cores (wgmma)  yes
    >>> print(describe_gpus().splitlines()[2])
    | T4 | Turing | sm_75 | 15 GB | 64 KB | no | FMA units | no |
    """
    rows = [list(_COLUMNS)] + [list(row.values()) for row in gpu_table()]
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in rows]
        lines.insert(1, "|" + "|".join(" --- " for _ in _COLUMNS) + "|")
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)
