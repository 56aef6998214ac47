"""pytest: the kernel module imports ``cutlass``; skip its doctests where CuTe DSL is absent."""

from teachkit.cute.entry import _cutlass_importable

collect_ignore = [] if _cutlass_importable() else ["kernel.py"]
