"""The Triton softmax kernels against torch.softmax and float64 (interpreter on CPU, GPU if any)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inputs import randn

import teachkit
from teachkit.compare import relative_error

K = pytest.importorskip("teachkit.kernels")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from teachkit.kernels import softmax_kernels as ks  # noqa: E402

DEV = teachkit.DEVICE
RTOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
INF, NAN = float("inf"), float("nan")
# Small chunks so the split kernels cut short rows into several chunks under the interpreter.
VARIANTS = {
    "fused": ks.softmax_fused,
    "blog": lambda x, dim=-1: ks.softmax_blog(x, dim, block=64),
    "online": lambda x, dim=-1: ks.softmax_online(x, dim, block=32),
    "split": lambda x, dim=-1: ks.softmax_split(x, dim, chunk=64, block=32),
    "resident": lambda x, dim=-1: ks.softmax_resident(x, dim, config=ks.ResidentConfig(32, 4, 1)),
    "entry": ks.softmax,
}


def ref(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x.double(), dim=dim)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("dtype", list(RTOL))
@pytest.mark.parametrize("n", [1, 7, 63, 64, 65, 200])
def test_rows_of_any_length(name, dtype, n, gen):
    x = randn(5, n, gen=gen, dtype=dtype, scale=3).to(DEV)
    y = VARIANTS[name](x)
    assert y.dtype == dtype and y.shape == x.shape
    assert relative_error(y, ref(x)) < RTOL[dtype]


@pytest.mark.parametrize("name", VARIANTS)
def test_torch_semantics_for_masks_inf_nan_and_huge(name, gen):
    x = randn(6, 150, gen=gen, scale=1000).to(DEV)  # huge magnitudes
    x[1] = -INF                 # all masked: NaN
    x[2, 77] = INF              # +inf: NaN
    x[3, 5] = NAN               # NaN: NaN
    x[4, :130] = -INF           # masked prefix longer than a block and a chunk
    y = VARIANTS[name](x)
    r = ref(x)
    assert torch.equal(torch.isnan(y.cpu()), torch.isnan(r.cpu()))
    assert torch.all(y[4, :130] == 0)
    assert relative_error(y, r) < RTOL[torch.float32]


@pytest.mark.parametrize("name", VARIANTS)
def test_dims_strides_and_shapes(name, gen):
    f = VARIANTS[name]
    x = randn(3, 10, 6, gen=gen).to(DEV)  # 60 rows along dim 0, a program each
    for dim in (0, 1, -1):
        assert relative_error(f(x, dim=dim), ref(x, dim)) < RTOL[torch.float32]
    t = randn(70, 9, gen=gen).to(DEV).t()  # non-contiguous rows
    assert relative_error(f(t), ref(t)) < RTOL[torch.float32]
    s = x[:, ::3, 2]  # strided both ways
    assert relative_error(f(s), ref(s)) < RTOL[torch.float32]
    assert f(torch.tensor(3.0, device=DEV)).item() == 1.0
    for shape in [(0, 5), (5, 0), (0,)]:
        assert f(torch.empty(shape, device=DEV)).shape == shape


def test_entry_point_picks_split_for_long_rows(gen, monkeypatch):
    monkeypatch.setattr(ks, "FUSED_MAX_COLS", 64)
    monkeypatch.setattr(ks, "SPLIT_CHUNK", 128)
    x = randn(3, 1000, gen=gen, dtype=torch.bfloat16).to(DEV)
    assert relative_error(ks.softmax(x), ref(x)) < RTOL[torch.bfloat16]
    with pytest.raises(ValueError, match="softmax_split"):
        ks.softmax_fused(x)


def test_bad_input_says_what_to_pass():
    with pytest.raises(TypeError, match="floating-point"):
        ks.softmax(torch.arange(6, device=DEV))
    with pytest.raises(TypeError, match="float64"):
        ks.softmax(torch.randn(3, 4, dtype=torch.float64, device=DEV))
    with pytest.raises(ValueError, match="out of range"):
        ks.softmax(torch.randn(3, 4, device=DEV), dim=3)
    with pytest.raises(ValueError, match="chunk must be a power of two"):
        ks.softmax_split(torch.randn(3, 4, device=DEV), chunk=96, block=64)
    with pytest.raises(ValueError, match="multiple of block"):
        ks.softmax_split(torch.randn(3, 4, device=DEV), chunk=64, block=128)
    for bad in (0, -4, 48):
        with pytest.raises(ValueError, match="block must be a power of two"):
            ks.softmax_split(torch.randn(3, 4, device=DEV), chunk=128, block=bad)
        with pytest.raises(ValueError, match="block must be a power of two"):
            ks.softmax_online(torch.randn(3, 4, device=DEV), block=bad)
        with pytest.raises(ValueError, match="block must be a power of two"):
            ks.softmax_blog(torch.randn(3, 4, device=DEV), block=bad)
    with pytest.raises(ValueError, match="chunk must be a power of two"):
        ks.softmax_split(torch.randn(3, 4, device=DEV), chunk=0)
    with pytest.raises(TypeError, match="block must be an int"):
        ks.softmax_online(torch.randn(3, 4, device=DEV), block=True)
    for f in (ks.softmax, ks.softmax_fused, ks.softmax_online, ks.softmax_split):
        with pytest.raises(ValueError, match="out of range"):  # was an IndexError in fused
            f(torch.randn(3, 4, device=DEV), dim=2)
        with pytest.raises(TypeError, match="dim must be an int"):
            f(torch.randn(3, 4, device=DEV), dim=1.0)
    if teachkit.ON_GPU:
        with pytest.raises(ValueError, match="cuda"):
            ks.softmax(torch.randn(3, 4))


def test_resident_rows_without_the_exchange(gen):
    """Every program of the resident kernel that finds its row's pairs missing (here: all of
    them, no polls allowed) reads the row itself and still gets the softmax; with the next
    chunk loaded ahead too."""
    x = randn(4, 300, gen=gen, scale=30).to(DEV)
    x[1, :100] = -INF
    chunk, g = 64, 5
    for prefetch in (False, True):
        y = torch.empty_like(x)
        slots = torch.full((4 * g,), ks.EMPTY_SLOT.value, dtype=torch.int64, device=DEV)
        ks.resident_kernel[(g,)](x, y, slots, 4, 300, x.stride(0), y.stride(0), g, G=g,
                                 G_POW2=8, CHUNK=chunk, BLOCK=32, MAX_SPIN=0, PREFETCH=prefetch,
                                 num_warps=4)
        assert relative_error(y, ref(x)) < RTOL[torch.float32]
        assert (slots != ks.EMPTY_SLOT.value).all()  # every chunk still wrote its pair
        m = slots.view(torch.int32).view(4, g, 2)[..., 1].view(torch.float32)
        chunks = torch.nn.functional.pad(x, (0, g * chunk - 300), value=-INF).view(4, g, chunk)
        assert torch.equal(m, chunks.amax(-1))  # the high half of each word is the chunk's max


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bits=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
                     min_size=1, max_size=16))
def test_pairs_pack_into_one_word_and_back(bits):
    """For any two float32 bit patterns (-inf, 0, NaNs, subnormals included), pack_pair puts
    m's bits in the high half and d's in the low half of an int64, unpack_pair gives both back
    bit for bit, and only the pair of all-ones NaNs packs to the empty slot's word."""
    n = len(bits)
    as_int32 = [[b - 2**32 if b >= 2**31 else b for b in half] for half in zip(*bits, strict=True)]
    m, d = (torch.tensor(h, dtype=torch.int32).view(torch.float32).to(DEV) for h in as_int32)
    words = torch.empty(n, dtype=torch.int64, device=DEV)
    back = torch.empty(2, n, dtype=torch.float32, device=DEV)
    _pack_unpack[(1,)](m, d, words, back, n, N=16)
    halves = words.view(torch.int32).view(n, 2).cpu()  # little-endian: [low, high]
    assert torch.equal(halves[:, 1], m.view(torch.int32).cpu())
    assert torch.equal(halves[:, 0], d.view(torch.int32).cpu())
    assert torch.equal(back.view(torch.int32).cpu(), torch.stack([m, d]).view(torch.int32).cpu())
    empty = [pair == (2**32 - 1, 2**32 - 1) for pair in bits]
    assert (words.cpu() == ks.EMPTY_SLOT.value).tolist() == empty


@triton.jit
def _pack_unpack(M, D, WORDS, BACK, n, N: tl.constexpr):
    offs = tl.arange(0, N)
    mask = offs < n
    words = ks.pack_pair(tl.load(M + offs, mask=mask), tl.load(D + offs, mask=mask))
    tl.store(WORDS + offs, words, mask=mask)
    m, d = ks.unpack_pair(tl.load(WORDS + offs, mask=mask, other=0))
    tl.store(BACK + offs, m, mask=mask)
    tl.store(BACK + n + offs, d, mask=mask)


WORDS = ks.ResidentConfig(32, 4, 1, words=True)
"""The words kernel with small chunks, so the rows below are cut into several."""


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [2, 130, 200])
def test_resident_words_rows_of_any_even_length(dtype, n, gen):
    """The resident kernel that keeps a 2-byte chunk as the input's 32-bit words: rows whose
    last chunk is part padding, and rows of a wider tensor (a row stride that is not the
    length)."""
    x = randn(5, n, gen=gen, dtype=dtype, scale=3).to(DEV)
    y = ks.softmax_resident(x, config=WORDS)
    assert y.dtype == dtype and relative_error(y, ref(x)) < RTOL[dtype]
    wide = randn(3, n + 6, gen=gen, dtype=dtype, scale=3).to(DEV)[:, 2:n + 2]
    assert relative_error(ks.softmax_resident(wide, config=WORDS), ref(wide)) < RTOL[dtype]


def test_resident_words_follow_torch_semantics(gen):
    x = randn(6, 150, gen=gen, scale=1000).to(DEV).to(torch.bfloat16)
    x[1] = -INF
    x[2, 77] = INF
    x[3, 5] = NAN
    x[4, :130] = -INF
    y = ks.softmax_resident(x, config=WORDS)
    r = ref(x)
    assert torch.equal(torch.isnan(y.cpu()), torch.isnan(r.cpu()))
    assert torch.all(y[4, :130] == 0)
    assert relative_error(y, r) < RTOL[torch.bfloat16]


def test_resident_words_need_rows_they_can_read_as_words(gen):
    """Odd lengths, rows starting at odd elements and float32 get a ValueError that names the
    need and what to pass; softmax takes such rows elsewhere."""
    odd = randn(2, 65, gen=gen, dtype=torch.bfloat16).to(DEV)
    shifted = randn(2, 67, gen=gen, dtype=torch.bfloat16).to(DEV)[:, 1:]  # 2-byte aligned
    for x in (odd, shifted, randn(2, 64, gen=gen).to(DEV)):
        with pytest.raises(ValueError, match="even number of columns.*words=False"):
            ks.softmax_resident(x, config=WORDS)
        assert relative_error(ks.softmax(x), ref(x)) < RTOL[x.dtype]
    if teachkit.ON_GPU:  # long odd rows: the resident kernel with float32 weights
        vocab = randn(3, 50257, gen=gen, dtype=torch.bfloat16, scale=3).to(DEV)
        assert relative_error(ks.softmax(vocab), ref(vocab)) < RTOL[torch.bfloat16]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=st.lists(st.integers(-2**31, 2**31 - 1), min_size=1, max_size=16),
       half=st.sampled_from([torch.float16, torch.bfloat16]))
def test_halves_of_a_word_and_back(words, half):
    """halves gives the two 16-bit floats of each int32 word as float32 (low half first, the
    even column of a row), and pack_halves rounds them back to the same bits (words with a NaN
    or a subnormal half aside)."""
    w = torch.tensor(words, dtype=torch.int32)
    out = torch.empty(3, len(words), dtype=torch.int32, device=DEV)
    _halves_and_back[(1,)](w.to(DEV), out, len(words), N=16,
                           HALF=tl.bfloat16 if half == torch.bfloat16 else tl.float16)
    out = out.cpu()
    elements = w.view(half).float().view(-1, 2)
    subnormal = (elements != 0) & (elements.abs() < torch.finfo(half).tiny)  # the interpreter
    plain = ~(elements.isnan() | subnormal).any(-1)                           # flushes these
    assert torch.equal(out[0].view(torch.float32)[plain], elements[plain, 0])
    assert torch.equal(out[1].view(torch.float32)[plain], elements[plain, 1])
    assert torch.equal(out[2][plain], w[plain])


@triton.jit
def _halves_and_back(WORDS, OUT, n, N: tl.constexpr, HALF: tl.constexpr):
    offs = tl.arange(0, N)
    mask = offs < n
    low, high = ks.halves(tl.load(WORDS + offs, mask=mask), HALF)
    tl.store(OUT + offs, low.to(tl.int32, bitcast=True), mask=mask)
    tl.store(OUT + n + offs, high.to(tl.int32, bitcast=True), mask=mask)
    tl.store(OUT + 2 * n + offs, ks.pack_halves(low, high, HALF), mask=mask)


@pytest.mark.skipif(not teachkit.ON_GPU or not ks.cvt_x2(torch.cuda.get_device_capability()),
                    reason="pack_halves_x2 is PTX: a GPU of sm_80 or later")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bits=st.lists(st.integers(-2**31, 2**31 - 1), min_size=2, max_size=32),
       half=st.sampled_from([torch.float16, torch.bfloat16]))
def test_pack_halves_x2_rounds_as_pack_halves(bits, half):
    """One cvt.rn.bf16x2.f32 (f16x2) a word gives the bits that Triton's conversion of each
    element does: round to nearest even (ties among the fixed values), overflow to inf,
    subnormals kept, on fixed edge values and drawn bit patterns (NaN aside)."""
    edges = torch.tensor([INF, -INF, 1e-40, -1e-42, 3.4e38, 70000.0, 65520.0, -0.0, 1.0 + 2**-8,
                          1.0 + 3 * 2**-8, 1.0 + 2**-11, 6e-8], dtype=torch.float32)
    drawn = torch.tensor(bits, dtype=torch.int32).view(torch.float32)
    values = torch.cat([edges, drawn[~drawn.isnan()]])  # infinities, subnormals, overflow, ties
    values = values[:len(values) // 2 * 2]
    out = torch.empty(2, len(values) // 2, dtype=torch.int32, device=DEV)
    _pack_both[(1,)](values.to(DEV), out, len(values) // 2, N=32,
                     HALF=tl.bfloat16 if half == torch.bfloat16 else tl.float16)
    assert torch.equal(out[0], out[1])


@triton.jit
def _pack_both(VALUES, OUT, n, N: tl.constexpr, HALF: tl.constexpr):
    offs = tl.arange(0, N)
    mask = offs < n
    low = tl.load(VALUES + 2 * offs, mask=mask)
    high = tl.load(VALUES + 2 * offs + 1, mask=mask)
    tl.store(OUT + offs, ks.pack_halves(low, high, HALF), mask=mask)
    tl.store(OUT + n + offs, ks.pack_halves_x2(low, high, HALF), mask=mask)


def test_resident_rows_that_do_not_fit_say_what_to_use(gen):
    config = ks.ResidentConfig(16, 4, 1)
    x = randn(2, 5000, gen=gen).to(DEV)  # 313 chunks a row: more than one program per SM
    assert ks.resident_fits(5000, x.dtype, 0) and not ks.resident_fits(1 << 34, x.dtype, 0)
    with pytest.raises(ValueError, match="use softmax_split or softmax"):
        ks.softmax_resident(x, config=config)
    with pytest.raises(TypeError, match="config must be a ResidentConfig"):
        ks.softmax_resident(x, config=(16, 4, 1))
    with pytest.raises(ValueError, match="config.chunk must be a power of two"):
        ks.softmax_resident(x, config=ks.ResidentConfig(48, 4, 1))


def test_entry_point_takes_resident_rows_where_they_were_measured_faster(gen, monkeypatch):
    """On a GPU: long rows that fit on chip go to the resident kernel, in every dtype (2-byte
    rows that cannot be read as words keep float32 weights), and rows that do not fit to the
    split kernels; under the interpreter long rows take the split kernels."""
    taken = []
    monkeypatch.setattr(ks, "_launch_resident", lambda x2, y2, config: taken.append(config))
    monkeypatch.setattr(ks, "_launch_split", lambda *args: taken.append("split"))
    monkeypatch.setattr(ks, "resident_fits",
                        lambda n_cols, dtype, device, config: n_cols < 60_000)
    for dtype in (torch.float32, torch.bfloat16):
        ks.softmax(torch.zeros(1, 50_000, dtype=dtype, device=DEV))
    ks.softmax(torch.zeros(1, 70_000, device=DEV))
    ks.softmax(torch.zeros(1, 50_257, dtype=torch.bfloat16, device=DEV))  # odd: not as words
    assert taken == ([ks.RESIDENT_CONFIGS[4], ks.RESIDENT_CONFIGS[2], "split",
                      ks.UNPAIRED_CONFIG] if teachkit.ON_GPU else ["split"] * 4)


def test_long_rows_take_the_long_row_configuration():
    """From ``LONG_ROW_FROM`` columns a row runs in ``LONG_ROW_CONFIGS`` (16-bit rows as words
    where they can be read so), shorter ones in ``RESIDENT_CONFIGS``."""
    for dtype in (torch.float32, torch.bfloat16):
        size = dtype.itemsize
        start = ks.LONG_ROW_FROM[size]
        for cols, want in ((start - 2, ks.RESIDENT_CONFIGS[size]),
                           (start, ks.LONG_ROW_CONFIGS[size])):
            x = torch.empty(1, cols, dtype=dtype)
            assert ks.resident_config(x, torch.empty_like(x)) == want
    odd = torch.empty(1, ks.LONG_ROW_FROM[2] + 1, dtype=torch.bfloat16)
    assert ks.resident_config(odd, torch.empty_like(odd)) == ks.UNPAIRED_CONFIG
    for config in ks.LONG_ROW_CONFIGS.values():  # both ways of waiting from the first chunk
        assert ks.wait_constants(config, 1, (9, 0)) == {"L2_PREFETCH": True, "BACKOFF": True}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_row_configurations_give_torch_s_softmax(dtype, gen):
    """``LONG_ROW_CONFIGS`` as shipped (16384 float32 columns a program; 32768 bfloat16 ones
    kept as words) on rows of three chunks, the last ragged, more rows than a round takes; a
    masked stretch and a row of -inf (NaN, as torch gives)."""
    config = ks.LONG_ROW_CONFIGS[dtype.itemsize]
    x = randn(5, 3 * config.chunk - 100, gen=gen, scale=10).to(DEV, dtype)
    x[1, 1000:config.chunk + 7] = -INF
    x[3] = -INF
    y = ks.softmax_resident(x, config=config)
    keep = torch.tensor([True, True, True, False, True])
    assert y.dtype == dtype and torch.isnan(y[3]).all()
    assert relative_error(y[keep], ref(x)[keep]) < RTOL[dtype]


@pytest.mark.parametrize("dtype, words", [(torch.float32, False), (torch.bfloat16, True)])
def test_resident_grid_filled_past_whole_rows(dtype, words, gen):
    """``fill_grid``: every program that fits is launched, so with rows of a number of chunks
    that does not divide the programs (5 for the interpreter's 8 or an H100's 132) a row's
    chunks fall in two rounds, and some programs wait for chunks of the next round. Masked
    stretches, a row of -inf (NaN, as torch gives), a ragged last chunk."""
    config = ks.ResidentConfig(64, 4, 1, words=words, fill_grid=True)
    fit = ks.resident_programs(dtype, config, 0)
    g = next(g for g in (5, 7, 3, 11) if fit % g)
    x = randn(41, g * 64 - 10, gen=gen, scale=10).to(DEV, dtype)
    x[3, 20:200] = -INF
    x[30] = -INF
    assert ks.resident_grid(fit, g, 41, fill_grid=True) == min(fit, 41 * g)
    y = ks.softmax_resident(x, config=config)
    keep = torch.ones(41, dtype=torch.bool)
    keep[30] = False
    assert y.dtype == dtype and torch.isnan(y[30]).all()
    assert relative_error(y[keep], ref(x)[keep]) < RTOL[dtype]


def run_resident_schedule(n_programs: int, g: int, n_rows: int, order: object) -> bool:
    """Play the resident kernel's schedule as a model: program ``p`` takes items ``p,
    p + n_programs, ...`` of ``n_rows`` rows of ``g`` chunks; each item's pair is published as
    soon as the program reaches it, and the program moves on once every pair of the item's row
    is published. ``order`` (a ``random.Random``) picks which program that can act acts next,
    as a GPU's scheduler might. True if every item is done, False if the programs that are left
    all wait."""
    n_items = n_rows * g
    at = {p: p for p in range(min(n_programs, n_items))}
    published: set[int] = set()
    while at:
        ready = [p for p, i in at.items() if i not in published
                 or all(j in published for j in range(i // g * g, i // g * g + g))]
        if not ready:
            return False
        p = order.choice(ready)
        if at[p] not in published:
            published.add(at[p])
        elif at[p] + n_programs < n_items:
            at[p] += n_programs
        else:
            del at[p]
    return True


@settings(max_examples=200, deadline=None)
@given(g=st.integers(1, 9), extra=st.integers(0, 12), n_rows=st.integers(1, 6),
       order=st.randoms(use_true_random=False))
def test_resident_schedule_finishes_with_any_grid_of_at_least_a_row(g, extra, n_rows, order):
    """The argument of ``resident_kernel``'s docstring, played out: with every program on the
    GPU, any grid of at least ``G`` programs finishes in any order of events, a multiple of
    ``G`` or not (``fill_grid``); a grid smaller than a row waits for ever, which is why
    ``resident_grid`` launches none and the entry point takes the split kernels."""
    assert run_resident_schedule(g + extra, g, n_rows, order)
    if g > 1:
        assert not run_resident_schedule(g - 1, g, n_rows, order)


def test_wait_constants_follow_the_row_length():
    """The L2 prefetch and the pauses between polls start at the configuration's row lengths,
    never under the interpreter (they are PTX), and not at all when the configuration says so."""
    config = ks.RESIDENT_CONFIGS[4]
    assert ks.wait_constants(config, 255, (9, 0)) == {"L2_PREFETCH": False, "BACKOFF": False}
    assert ks.wait_constants(config, 256, (8, 9)) == {"L2_PREFETCH": True, "BACKOFF": True}
    early = config._replace(l2_prefetch_from=64)
    assert ks.wait_constants(early, 64, (7, 5)) == {"L2_PREFETCH": True, "BACKOFF": False}
    assert ks.wait_constants(config, 4096, None) == {"L2_PREFETCH": False, "BACKOFF": False}
    idle = config._replace(l2_prefetch_from=None, backoff_from=None)
    assert ks.wait_constants(idle, 4096, (9, 0)) == {"L2_PREFETCH": False, "BACKOFF": False}


@pytest.mark.skipif(not teachkit.ON_GPU, reason="the prefetch and the pauses are PTX")
@pytest.mark.parametrize("dtype, words", [(torch.float32, False), (torch.bfloat16, True),
                                          (torch.bfloat16, False)])
def test_resident_rows_with_prefetch_and_pauses(dtype, words, gen):
    """Compiled: rows of 40 chunks of 1024 columns (both waits on from 2 chunks), more rows
    than a round takes and a last round that is not full, so some prefetches point past the
    last item; a masked stretch, a row of -inf (NaN, as torch gives) and a ragged last chunk;
    bfloat16 rows read as words and, with an odd length (rows starting at 2-byte boundaries,
    prefetched at such addresses), as float32 weights. Every way of waiting gives torch's
    softmax."""
    n_cols = 40 * 1024 - (300 if words or dtype == torch.float32 else 301)
    x = (randn(23, n_cols, gen=gen, scale=10)).to(DEV, dtype)
    x[2, 5000:20000] = -INF
    x[7] = -INF
    want = torch.softmax(x.double(), -1)
    base = ks.ResidentConfig(1024, 4, 2, words=words)
    for start in (None, 2):
        for backoff in (None, 2):
            y = ks.softmax_resident(x, config=base._replace(l2_prefetch_from=start,
                                                            backoff_from=backoff))
            assert y.dtype == dtype and torch.isnan(y[7]).all()
            keep = torch.ones(23, dtype=torch.bool)
            keep[7] = False
            assert relative_error(y[keep], want[keep]) < (1e-5 if dtype == torch.float32
                                                         else 1e-2)


@pytest.mark.parametrize("dtype, words", [(torch.float32, False), (torch.bfloat16, True),
                                          (torch.bfloat16, False)])
@pytest.mark.parametrize("fill_grid", [False, True])
def test_resident_rows_with_a_bell(dtype, words, fill_grid, gen):
    """``bell_from``: each program counts its pair at its row's word after the pairs and polls
    that word before it reads them; with the grid filled or not, rows of five chunks (the last
    ragged) in several rounds (on a GPU of 132 multiprocessors, a filled grid's rows straddle
    two), a masked stretch and a row of -inf (NaN, as torch gives). Under the interpreter only a
    row's last program finds the count complete; the others read their row themselves."""
    config = ks.ResidentConfig(256, 4, 1, words=words, bell_from=2, fill_grid=fill_grid)
    n_cols = 5 * 256 - (300 if words or dtype == torch.float32 else 301)
    rows = 2 * ks.resident_programs(dtype, config, 0) // 5 + 3 if teachkit.ON_GPU else 13
    x = randn(rows, n_cols, gen=gen, scale=10).to(DEV, dtype)
    x[2, 10:400] = -INF
    x[7] = -INF
    y = ks.softmax_resident(x, config=config)
    keep = torch.ones(rows, dtype=torch.bool)
    keep[7] = False
    assert y.dtype == dtype and torch.isnan(y[7]).all()
    assert relative_error(y[keep], ref(x)[keep]) < RTOL[dtype]


def test_ring_and_wait_counts_every_program_of_a_row(gen):
    """The bell's count after a launch: every row's word after its pairs holds ``G - 1`` (it
    starts at -1 and each of the row's ``G`` programs adds one), and no pair is left empty."""
    g, rows = 3, 5
    x = randn(rows, 3 * 64, gen=gen).to(DEV)
    y = torch.empty_like(x)
    slots = torch.full((rows * g + rows,), ks.EMPTY_SLOT.value, dtype=torch.int64, device=DEV)
    ks.resident_kernel[(g,)](x, y, slots, rows, x.shape[1], x.stride(0), y.stride(0), g, G=g,
                             G_POW2=4, CHUNK=64, BLOCK=32, MAX_SPIN=ks.MAX_SPIN, PREFETCH=False,
                             BELL=True, num_warps=4)
    assert relative_error(y, ref(x)) < RTOL[torch.float32]
    assert (slots[:rows * g] != ks.EMPTY_SLOT.value).all()
    assert torch.equal(slots[rows * g:].cpu(), torch.full((rows,), g - 1, dtype=torch.int64))
