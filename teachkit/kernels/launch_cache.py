"""A shorter host path for the launches an entry point makes on every call.

``kernel[grid](*args)`` goes through ``JITFunction.run``, which on every call binds the
arguments to the kernel's signature, specialises each (dtype and 16-byte alignment of a tensor,
divisibility by 16 of an integer), builds a cache key from that and the options, finds the
compiled kernel, checks the globals the kernel read, builds launch metadata for profiler hooks
and calls the launcher, which in turn asks the driver about every tensor's pointer. For the
decoding kernel's 50 parameters (34 since it works out its own buffers' strides) the binding
and specialisation alone took about 20 µs on an H100 machine; ``python -m teachkit.bench host``
times the entry points with and without this module.

:func:`cached_launch` keeps, per kernel, a dictionary from a launch's **key** to its compiled
kernel, and on a hit calls the compiled kernel's launcher directly. The key is built in one pass
over the arguments and is finer than what Triton specialises on: every integer by its value;
every tensor by its dtype, whether its address is a multiple of 16 and whether it is on the GPU;
a tensor descriptor (TMA) by its dtype and block shape (and a Gluon kernel's descriptor by its
shared-memory layout too); every float as "a float"; the value of
every ``tl.constexpr`` parameter and of every keyword (``num_warps``, ...); the device; Triton's
debug settings. Two launches with equal keys therefore get the same compiled kernel from Triton
too. A model calls an entry point with few distinct shapes, so keys by value stay few; past
:data:`MAX_KEYS` a kernel's dictionary starts again. A miss goes through ``JITFunction.run``
unchanged, which compiles or finds the kernel, launches it and returns it for the dictionary.
An argument of any other kind (a NumPy integer, say) makes the launch take
``JITFunction.run`` every time, as do a grid given as a function, ``warmup``, pre-run hooks and
profiler launch hooks.

The key is the costly part of a hit: a loop over the arguments took 13 µs of a decoding call's
launch on an H100 machine. After each miss the cache writes a function for the kinds of
arguments it just met (:func:`key_function`: this tensor, that integer, ...) that builds the
key in one expression, and with it the arguments for the launcher, each tensor as the integer
address it already read for the alignment. Given a tensor, Triton's launcher reads its address
and asks the driver whether it is GPU memory; given an integer it takes it as it is, so the key
holds whether each tensor is on the GPU (``is_cuda``) and a CPU tensor never hits a GPU
tensor's key. Launches whose arguments are of other kinds are keyed one argument at a time, to
the same key, and give the launcher the tensors. With the Triton versions in
:data:`DIRECT_LAUNCH_VERSIONS` a hit calls the launcher's compiled C function without its
Python wrapper, when the kernel needs no scratch memory.

An entry point can go one step further where a few properties of its inputs decide every
argument of its launch but the tensors' addresses (``softmax`` of short rows: dtype, shape,
strides, alignment, device). It keys its own dictionary (:func:`replay_table`) by those
properties and keeps there the launcher call of its first such launch
(:meth:`CachedRun.replay`, a :class:`LaunchReplay`); the next call of that kind makes it again
with its own addresses, skipping the key of every argument. Such a key must hold what
:func:`launch_settings` reads, as the cache's does.

Under Triton's interpreter (no GPU) the kernel is returned as it is.

Used as::

    @cached_launch
    @triton.jit
    def fused_kernel(X, Y, ...):
        ...

    fused_kernel[grid](x, y, ...)  # launched as any Triton kernel
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import torch

from ..device import INTERPRETED, current_gpu

try:
    from triton import knobs
except ImportError:  # no Triton (macOS, Windows): no kernel to launch
    knobs = None
try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # a Triton without host-side tensor descriptors
    TensorDescriptor = None
try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
except ImportError:  # a Triton without Gluon
    GluonTensorDescriptor = None

__all__ = ["cached_launch", "CachedRun", "LaunchReplay", "argument_key", "key_function",
           "hooks_free", "keep", "launch_replay", "launch_settings", "replay_table",
           "slow_key", "tensor_key", "MAX_KEYS", "REPLAY_TABLES", "DIRECT_LAUNCH_VERSIONS"]

K = TypeVar("K")

UNCACHED = object()
"""What :func:`argument_key` returns for an argument it does not know: no key, no cache."""

MAX_KEYS = 1024
"""Keys one kernel keeps; the next new key empties its dictionary first."""

DIRECT_LAUNCH_VERSIONS = ("3.6.",)
"""Triton versions whose launcher (``CudaLauncher``) is called through its compiled C function
``launch``, whose arguments these versions order as ``CudaLauncher.__call__`` does; other
versions get ``CudaLauncher.__call__``."""


def argument_key(value: Any) -> Any:
    """The part of a launch's key for one argument of a non-constexpr parameter: at least what
    Triton specialises on, or :data:`UNCACHED`.

    An integer is its own key (Triton specialises on divisibility by 16, on being 1 and on
    int32/int64 range, which its value decides); a tensor is its dtype and whether its address
    is a multiple of 16 (and whether it is on the GPU, which Triton's launcher checks when it
    is given the tensor, not when it is given its address); a float is "a float"; a bool is
    its value.

    Examples
    --------
    >>> argument_key(32), argument_key(0.5) is float, argument_key(None), argument_key(True)
    (32, True, None, (<class 'bool'>, True))
    >>> argument_key(torch.zeros(4)) == (torch.float32, True, False)
    True
    """
    kind = type(value)
    if kind is int:
        return value
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.data_ptr() % 16 == 0, value.is_cuda)
    if kind is float:
        return float
    if kind is bool:
        return (bool, value)  # not the int 1 or 0, which equal True and False
    if value is None:
        return None
    if kind is TensorDescriptor:  # Triton specialises on the dtype and the block's shape
        return (kind, value.base.dtype, tuple(value.block_shape),
                getattr(value, "padding", None))
    if kind is GluonTensorDescriptor:  # and, for Gluon's, on the shared-memory layout
        return (kind, value.base.dtype, tuple(value.block_shape), value.padding, value.layout)
    return UNCACHED


class _NoKey(Exception):
    """An argument without a key (:data:`UNCACHED`), met by a generated key function."""


def _keyed(value: Any) -> Any:
    """:func:`argument_key`, raising :class:`_NoKey` where it has none, or for a tensor: a key
    function keys a tensor in one place as three parts (its dtype, alignment and
    ``is_cuda``, as :func:`slow_key` does), and a tensor met in the place of a descriptor or a
    float keyed as one part would give the same launch a second key, so a second miss."""
    part = argument_key(value)
    if part is UNCACHED or isinstance(value, torch.Tensor):
        raise _NoKey
    return part


def key_function(constexpr: tuple[bool, ...], args: tuple) -> Any:
    """Python source made into a function of the positional arguments that returns their part
    of a launch's key and the arguments for the launcher, for launches whose arguments are of
    the kinds of ``args``.

    A constexpr or an integer is itself; a tensor is its dtype, alignment and ``is_cuda`` in
    the key and its address (read once, for both) in the launcher's arguments; anything else
    is :func:`argument_key`'s in the key and itself for the launcher. All of it is written out
    in one expression (a loop over 50 arguments costs a decoding call microseconds). The
    function returns ``None`` when an integer's place holds something else, and raises
    ``AttributeError`` (a tensor's place), ``TypeError`` (another count) or :class:`_NoKey`:
    those launches are keyed by :func:`slow_key`, which gives every launch the key this
    function gives it.

    Examples
    --------
    >>> key_of = key_function((False, False, True), (torch.zeros(2), 7, 64))
    >>> x = torch.ones(3)
    >>> part, launch_args = key_of(x, 7, 64)
    >>> part == (torch.float32, True, False, 7, 64), launch_args == (x.data_ptr(), 7, 64)
    (True, True)
    >>> key_of(x, 7.0, 64) is None
    True
    """
    names = [f"a{i}" for i in range(len(args))]
    parts, values, ints = [], [], []
    for name, value, fixed in zip(names, args, constexpr, strict=False):
        if fixed:
            parts.append(name)
        elif type(value) is int:
            parts.append(name)
            ints.append(f"type({name})")
        elif isinstance(value, torch.Tensor):
            parts.append(f"{name}.dtype, (p{name} := {name}.data_ptr()) % 16 == 0, "
                         f"{name}.is_cuda")
            values.append(f"p{name}")
            continue
        else:
            parts.append(f"keyed({name})")
        values.append(name)
    check = f"    if ({', '.join(ints)},) != INTS:\n        return None\n" if ints else ""
    source = (f"def key_of({', '.join(names)}):\n{check}"
              f"    return ({', '.join(parts)},), ({', '.join(values)},)\n")
    namespace = {"keyed": _keyed, "INTS": (int,) * len(ints)}
    exec(source, namespace)
    return namespace["key_of"]


def slow_key(constexpr: tuple[bool, ...], args: tuple) -> tuple | None:
    """The arguments' part of a launch's key, one argument at a time with
    :func:`argument_key` (a tensor's three parts spread out, as :func:`key_function` writes
    them), or None when one has no key.

    Examples
    --------
    >>> slow_key((False, False, True), (torch.zeros(2), 7, 64)) == (
    ...     torch.float32, True, False, 7, 64)
    True
    """
    if len(args) > len(constexpr):
        return None
    parts: list = []
    for value, fixed in zip(args, constexpr, strict=False):
        part = value if fixed else argument_key(value)
        if part is UNCACHED:
            return None
        if isinstance(value, torch.Tensor) and not fixed:
            parts += part
        else:
            parts.append(part)
    return tuple(parts)


def launch_settings() -> tuple[Any, Any, bool]:
    """What besides its arguments decides how a cached launch may be made, read anew on every
    call since a user may change it at any time: Triton's debug and instrumentation settings
    (each compiles other code) and whether no profiler hook wants to see launches (a hook's
    chain is empty; a hook set some other way than a ``HookChain`` counts as one).

    >>> debug, instrumentation, hooks_free = launch_settings()
    >>> hooks_free
    True
    """
    return knobs.runtime.debug, knobs.compilation.instrumentation_mode, hooks_free()


def hooks_free() -> bool:
    """True when no profiler hook wants to see launches: Triton's launch hook chains are empty
    (a hook set some other way than a ``HookChain`` counts as one)."""
    runtime = knobs.runtime
    return not (getattr(runtime.launch_enter_hook, "calls", True)
                or getattr(runtime.launch_exit_hook, "calls", True))


def _per_call(arg: Any) -> bool:
    """Whether a launch argument is one a :class:`LaunchReplay` takes anew on every call: a
    tensor (its address) or a TMA descriptor (itself, which holds its tensor)."""
    return isinstance(arg, torch.Tensor) or type(arg) in (TensorDescriptor, GluonTensorDescriptor)


class LaunchReplay(NamedTuple):
    """The call of Triton's launcher that one launch through :class:`CachedRun`'s short path
    makes, kept to be made again on other tensors of the same kinds
    (:meth:`CachedRun.replay`): ``launch(*grid, stream, *head, *addresses, *tail)``, in the
    places of the launch's leading tensor arguments what the launcher takes for each (a
    tensor's address, a TMA descriptor itself), and the current CUDA stream of the device it is
    called with (``stream(device)``).

    An entry point whose call decides every other argument (the shape's integers, the
    constexprs) from a few properties of its inputs keys its replays by those properties and
    so skips the launch cache's key, which reads every argument. A pre-run hook added to the
    kernel later (``add_pre_run_hook``) is not called by a replay kept before it: add hooks
    before the first call, or empty the entry point's table."""

    launch: Callable[..., Any]
    grid: tuple[int, int, int]
    head: tuple
    tail: tuple
    stream: Callable[[int], int]
    compiled: Any = None
    """The compiled kernel whose function ``head`` names, held as long as the replay is."""

    def __call__(self, device: int, *addresses: int) -> None:
        grid = self.grid
        self.launch(grid[0], grid[1], grid[2], self.stream(device), *self.head, *addresses,
                    *self.tail)


class CachedRun:
    """The ``run`` that :func:`cached_launch` gives a kernel: ``kernel[grid](...)`` calls it.

    ``compiled`` maps a launch's key to ``(compiled kernel, launcher, the launcher's arguments
    between the stream and the kernel's, values of the parameters after the positional
    arguments)``; ``hits`` and ``misses`` count the launches that took
    the short path and those that went through ``JITFunction.run``.
    """

    def __init__(self, kernel: Any) -> None:
        import triton
        from triton.runtime import driver
        from triton.runtime.jit import JITFunction

        self.kernel = kernel
        self.compiled: dict[tuple, tuple] = {}
        self.hits = 0
        self.misses = 0
        self._constexpr = tuple(p.is_constexpr for p in kernel.params)
        self._key_of: Any = None  # key_function of the kinds of arguments last missed with
        self._current_device: Any = None
        self._current_stream: Any = None
        self._full_run = JITFunction.run
        self._driver = driver
        self._direct = triton.__version__.startswith(DIRECT_LAUNCH_VERSIONS)


    def key(self, device: int, args: tuple, kwargs: dict) -> tuple[tuple | None, tuple]:
        """The launch's key and the positional arguments to give the launcher.

        The key is the device, Triton's debug settings, the keywords (constexprs and options:
        their names and values decide the kernel) and the arguments' part; it is None when an
        argument has no :func:`argument_key`. The launcher's arguments are the key function's
        (tensors as their addresses) or, where it steps aside, ``args`` as they are.
        """
        found = None
        if self._key_of is not None:
            try:
                found = self._key_of(*args)
            except (AttributeError, TypeError, _NoKey):
                found = None
        if found is None:
            part = slow_key(self._constexpr, args)
            if part is None:
                return None, args
            found = part, args
        part, values = found
        return (device, knobs.runtime.debug, knobs.compilation.instrumentation_mode,
                tuple(kwargs), tuple(kwargs.values()), part), values

    def _remember(self, key: tuple, compiled: Any, device: int, args: tuple,
                  kwargs: dict) -> None:
        """Keep what a hit on ``key`` needs: the compiled kernel, the launcher to call and the
        values of the parameters after the positional ones (constexprs given by keyword, or
        defaults: both decided by the key). The key function now follows these arguments'
        kinds."""
        kernel = self.kernel
        bound = kernel.device_caches[device][-1](*args, **kwargs)[0]
        names = tuple(bound)
        rest = names[len(args):]
        if any(not self._constexpr[names.index(n)] and n in kwargs for n in rest):
            return  # a non-constexpr parameter given by keyword: its value is not in the key
        launcher = compiled.run
        if (self._direct and getattr(launcher, "global_scratch_size", 1) == 0
                and getattr(launcher, "profile_scratch_size", 1) == 0):
            # the C function and the arguments the wrapper would put before the kernel's
            head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
                    None, None, compiled.packed_metadata, None, None, None)
            launch = launcher.launch
        else:  # the wrapper: (function, metadata, launch metadata, enter and exit hooks)
            head = (compiled.function, compiled.packed_metadata, None, None, None)
            launch = launcher
        if len(self.compiled) >= MAX_KEYS:
            self.compiled.clear()
        self.compiled[key] = (compiled, launch, head, tuple(bound[n] for n in rest))
        self._key_of = key_function(self._constexpr, args)

    def replay(self, grid: tuple, args: tuple, kwargs: dict) -> LaunchReplay | None:
        """The launcher call that ``kernel[grid](*args, **kwargs)`` makes on a hit of the short
        path, as a :class:`LaunchReplay` on the current device; ``None`` where that launch
        would not take it (not launched before, a profiler hook, a pre-run hook, a grid
        function) or where a tensor (or a TMA descriptor) follows an argument of another kind.
        Launches nothing."""
        if (callable(grid) or self.kernel.pre_run_hooks or not hooks_free()
                or self._current_device is None):
            return None
        device = self._current_device()
        key, values = self.key(device, args, kwargs)
        try:
            hit = self.compiled.get(key) if key is not None else None
        except (TypeError, RuntimeError):  # an unhashable (or uncomparable) keyword value
            return None
        leading = next((i for i, arg in enumerate(args) if not _per_call(arg)), len(args))
        if hit is None or any(_per_call(arg) for arg in args[leading:]):
            return None
        compiled, launch, head, rest = hit
        grid = (*grid, 1, 1)[:3]
        return LaunchReplay(launch, grid, head, (*values[leading:], *rest), self._current_stream,
                            compiled)

    def __call__(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        kernel = self.kernel
        if warmup or callable(grid) or kernel.pre_run_hooks or not hooks_free():
            return self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
        if self._current_device is None:  # Triton's driver's functions, looked up once
            self._current_device = self._driver.active.get_current_device
            self._current_stream = self._driver.active.get_current_stream
            if self._current_device is torch.cuda.current_device:
                # which checks that CUDA is initialised; the miss before any hit has
                # initialised it, so ask without the check
                self._current_device = current_gpu
        device = self._current_device()
        key, values = self.key(device, args, kwargs)
        try:
            hit = self.compiled.get(key) if key is not None else None
        except (TypeError, RuntimeError):  # an unhashable (or uncomparable) keyword value
            key = hit = None
        if hit is None:
            self.misses += 1
            compiled = self._full_run(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            if key is not None and compiled is not None and not hasattr(compiled, "result"):
                self._remember(key, compiled, device, args, kwargs)
            return compiled
        self.hits += 1
        compiled, launch, head, rest = hit
        n = len(grid)
        launch(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1,
               self._current_stream(device), *head, *values, *rest)
        return compiled


def tensor_key(t: torch.Tensor) -> tuple:
    """What an entry point's replay key holds of a tensor argument (:func:`replay_table`):
    its dtype, shape, strides, whether its address is a multiple of 16 bytes and its GPU,
    everything about it that decides a launch but its address.

    >>> tensor_key(torch.zeros(2, 3))
    (torch.float32, torch.Size([2, 3]), (3, 1), True, -1)
    """
    if t.layout is not torch.strided or t.is_nested:  # no strides, no address of its own
        return (t.layout, t.is_nested)  # such a call is refused by the checks that follow
    return t.dtype, t.shape, t.stride(), t.data_ptr() % 16 == 0, t.get_device()


REPLAY_TABLES: list[dict[Any, Any]] = []
"""Every entry point's dictionary of kept launches (:func:`replay_table`): each value a
:class:`LaunchReplay`, or a named tuple holding some (a decoding call's split and merge
launches), for tools that swap launchers, such as ``python -m teachkit.bench host``."""


def replay_table() -> dict[Any, Any]:
    """A new, empty dictionary for an entry point's kept launches, registered in
    :data:`REPLAY_TABLES`; :func:`keep` adds to it."""
    table: dict[Any, Any] = {}
    REPLAY_TABLES.append(table)
    return table


def keep(table: dict[Any, Any], key: Any, replay: Any) -> None:
    """Put ``replay`` in an entry point's ``table`` (:func:`replay_table`) under ``key``. At most
    :data:`MAX_KEYS` keys, as a kernel's own dictionary: the next new one empties it first.

    >>> table = {}
    >>> keep(table, "a kind", "its launch")
    >>> table
    {'a kind': 'its launch'}
    """
    if len(table) >= MAX_KEYS:
        table.clear()
    table[key] = replay


def launch_replay(kernel: Any, grid: tuple, args: tuple, kwargs: dict) -> LaunchReplay | None:
    """``kernel``'s :meth:`CachedRun.replay` of ``kernel[grid](*args, **kwargs)``, or ``None``
    for a kernel without the launch cache (Triton's interpreter)."""
    run = vars(kernel).get("run") if hasattr(kernel, "__dict__") else None
    return run.replay(grid, args, kwargs) if isinstance(run, CachedRun) else None


def cached_launch(kernel: K) -> K:
    """Give a ``@triton.jit`` kernel the short host path of :class:`CachedRun`; returns it.

    Written above ``@triton.jit``. The kernel is the same object, launched the same way
    (``kernel[grid](...)``); only its ``run`` is replaced. Under the interpreter, or for
    anything that is not a ``JITFunction``, the kernel is returned untouched.
    """
    if INTERPRETED:
        return kernel
    from triton.runtime.jit import JITFunction

    if not isinstance(kernel, JITFunction):
        return kernel
    kernel.run = CachedRun(kernel)  # an instance attribute: ``kernel[grid]`` looks it up first
    return kernel
