"""The Gluon resident softmax whose next chunk arrives by TMA (``teachkit.kernels.softmax_tma``):
its rule and its refusals everywhere, and its results on a Hopper GPU
(``gpu_checks/resident_tma_gpu.py`` checks more rows and times it; what it compiles to for sm_90
is in ``tests/test_compiled_evidence.py``)."""

from __future__ import annotations

import pytest
import torch

import teachkit

pytest.importorskip("teachkit.kernels")
st = pytest.importorskip("teachkit.kernels.softmax_tma")  # Gluon: Triton 3.6 to 3.9 have it

from teachkit.kernels import softmax_kernels as ks  # noqa: E402

HOPPER = teachkit.ON_GPU and torch.cuda.get_device_capability()[0] == 9


def test_the_rule_takes_every_row_by_its_dtype_and_length():
    """float32 rows take chunks of 8192 columns written behind up to 2M columns, past 2M up to
    3M the same chunks written behind with each one's pair taken from its buffer, past 3M
    chunks of 16384 with pauses; 16-bit rows take 8192 held as float32, from 1M columns 16384
    as words, from 8M 32768 as words with pauses, the words rounding two results with one
    instruction and reading each element with one; other dtypes none. Not writing behind, as the
    rule was before, float32 rows below 3M columns take chunks of 8192."""
    behind = st.TMA_BEHIND_CONFIGS[4]
    assert behind.write_behind and behind.chunk == 8192 and behind.num_warps == 8
    for cols in (1 << 15, 1 << 20, 1 << 21):
        assert st.tma_config(cols, torch.float32) == behind
    from_buffer = st.TMA_PAIR_FROM_BUFFER_CONFIGS[4]
    assert from_buffer == st.PAIR_FROM_BUFFER_CONFIGS[0] and from_buffer.num_warps == 4
    for cols in ((1 << 21) + 256, 5 << 19, 3 << 20):
        assert st.tma_config(cols, torch.float32) == from_buffer
    for cols in (1 << 20, 5 << 19):  # the rule before it wrote rows behind
        assert st.tma_config(cols, torch.float32, write_behind=False) == st.TMA_CONFIGS[4]
    assert st.tma_config(3 << 20, torch.float32, write_behind=False) == st.TMA_LONG_ROW_CONFIGS[4]
    long = st.tma_config((3 << 20) + 256, torch.float32)
    assert long == st.TMA_LONG_ROW_CONFIGS[4] and long.chunk == 16384 and long.backoff
    for dtype in (torch.float16, torch.bfloat16):
        assert st.tma_config((1 << 20) - 256, dtype) == st.TMA_CONFIGS[2]
        assert st.tma_config(1 << 20, dtype) == st.TmaConfig(32, 4, 4, words=True, cvt_x2=True,
                                                             prmt=True)
        longest = st.tma_config(1 << 23, dtype)
        assert longest.words and longest.backoff and longest.chunk == 32768
        assert longest.cvt_x2 and longest.prmt and not longest.log2_d
    assert st.tma_config(1 << 16, torch.float64) is None


def test_every_configuration_fits_a_multiprocessor():
    """Each configuration's programs share a multiprocessor of 64k registers and 2048 threads as
    it wants them: ``max_registers`` a thread for ``per_sm`` programs."""
    for config in (*st.TMA_CONFIGS.values(), *st.TMA_LONG_ROW_CONFIGS.values(),
                   *st.TMA_BEHIND_CONFIGS.values(), *st.TMA_WORDS_CONFIGS.values(),
                   *st.PAIR_FROM_BUFFER_CONFIGS, *st.PAIR_FROM_BUFFER_WORDS_CONFIGS):
        assert config.per_sm * config.num_warps * 32 * config.max_registers <= 65536, config
        assert config.chunk % (4 * 32 * config.num_warps) == 0, config  # 4 elements a thread


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
def test_the_rule_writes_behind_only_where_it_fits():
    """On this GPU, rows written behind fit (their chunks, at most the programs): a GPU with
    too few multiprocessors for a 2M row's 256 chunks in registers takes the pair from the
    buffer instead, and one with too few for that chunks of 8192 not written behind
    (``tma_config`` with the device); so for a 3M row, and else chunks of 16384."""
    device = torch.cuda.current_device()
    behind, from_buffer = st.TMA_BEHIND_CONFIGS[4], st.TMA_PAIR_FROM_BUFFER_CONFIGS[4]
    for cols, last in ((1 << 21, st.TMA_CONFIGS[4]), (3 << 20, st.TMA_LONG_ROW_CONFIGS[4])):
        taken = st.tma_config(cols, torch.float32, device)
        fitting = [c for c in (behind, from_buffer) if st.tma_fits(cols, c, torch.float32, device)
                   and cols <= (st.TMA_BEHIND_UNTIL if c == behind
                                else st.TMA_PAIR_FROM_BUFFER_UNTIL)[4]]
        assert taken == (fitting[0] if fitting else last), cols


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
def test_reading_again_is_only_for_writing_behind():
    x = torch.randn(2, 1024, device="cuda")
    with pytest.raises(ValueError, match="write_behind=True or reread=False"):
        ks.softmax_resident_tma(x, config=st.TmaConfig(32, 4, 4, reread=True))


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
def test_the_pair_from_the_buffer_is_only_for_chunks_written_behind_and_kept():
    """Taking the pair from the buffer writes behind from the chunk it keeps: refused without
    ``write_behind``, with ``reread`` and with weights kept as words, saying what to pass."""
    x = torch.randn(2, 1024, device="cuda", dtype=torch.bfloat16)
    for taken in (st.PAIR_FROM_BUFFER_CONFIGS[0], *st.PAIR_FROM_BUFFER_WORDS_CONFIGS):
        for config in (taken._replace(write_behind=False), taken._replace(reread=True),
                       taken._replace(words=True, keep_weights=True)):
            with pytest.raises(ValueError, match="pair_from_buffer=False"):
                ks.softmax_resident_tma(x, config=config)


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fewer_instructions_an_element_give_the_same_results(dtype):
    """Rounding two results with one instruction (``cvt_x2``) and reading the halves with
    ``PRMT`` (``prmt``) change no bit of the words kernel's results; folding the division into
    the exponent (``log2_d``) rounds one step differently, so it stays within a unit in the last
    place of the plain words' results and of the exact softmax's 16-bit rounding."""
    x = torch.randn(6, 4 * 16384 + 1024, device="cuda", dtype=dtype) * 8
    x[1, ::7] = float("-inf")
    words = st.TMA_WORDS_CONFIGS[2]
    plain = ks.softmax_resident_tma(x, config=words)
    for change in ({"cvt_x2": True}, {"cvt_x2": True, "prmt": True}):
        assert torch.equal(ks.softmax_resident_tma(x, config=words._replace(**change)), plain)
    lean = ks.softmax_resident_tma(x, config=words._replace(cvt_x2=True, prmt=True,
                                                            log2_d=True))
    exact = torch.softmax(x.double(), -1).to(dtype)
    for want in (plain, exact):
        apart = (lean.view(torch.int16).int() - want.view(torch.int16).int()).abs()
        assert apart.max().item() <= 1


@pytest.mark.skipif(HOPPER, reason="off a Hopper GPU only")
def test_it_refuses_off_a_hopper_gpu_and_says_what_to_use():
    x = torch.randn(2, 512, device=teachkit.DEVICE)
    assert "Hopper" in st.tma_not_ready(x, torch.empty_like(x))
    with pytest.raises(ValueError, match="Hopper.*use softmax"):
        ks.softmax_resident_tma(x)
    torch.testing.assert_close(ks.softmax(x), torch.softmax(x, -1))  # softmax picks another


def test_a_config_of_another_kind_is_a_type_error():
    with pytest.raises(TypeError, match="TmaConfig"):
        ks.softmax_resident_tma(torch.randn(2, 512), config=ks.RESIDENT_CONFIGS[4])


def test_words_take_16_bit_rows_of_whole_lines_of_words():
    """A configuration with ``words`` holds twice the columns in the same lines, and refuses
    float32 rows, rows not a whole number of lines of words, writing behind without reading
    again or taking the pair from the buffer, and keeping weights while reading again, saying
    what to pass."""
    words = st.TmaConfig(32, 4, 4, words=True)
    assert words.chunk == 2 * st.TmaConfig(32, 4, 4).chunk == 16384
    if not HOPPER:
        return
    x = torch.randn(2, 3 * st.TMA_WIDTH, device="cuda", dtype=torch.bfloat16)
    assert "multiple of 512" in st.tma_not_ready(x, torch.empty_like(x), words)
    assert st.tma_not_ready(x, torch.empty_like(x)) is None
    f = torch.randn(2, 1024, device="cuda")
    with pytest.raises(ValueError, match="words=False"):
        ks.softmax_resident_tma(f, config=words)
    for config, rows, say in ((words._replace(keep_weights=True), x.half(), "keep_weights=False"),
                              (st.TmaConfig(32, 4, 4, keep_weights=True), f, "words=True"),
                              (words._replace(write_behind=True), x,
                               "reread=True, pair_from_buffer=True or write_behind"),
                              (words._replace(keep_weights=True, write_behind=True, reread=True), x,
                               "keeps nothing.*keep_weights=False")):
        with pytest.raises(ValueError, match=say):
            ks.softmax_resident_tma(rows[:, :512], config=config)


WORD_CONFIGS = [st.TmaConfig(16, 2, 8, words=True), st.TmaConfig(32, 4, 4, words=True),
                st.TmaConfig(64, 8, 2, backoff=True, words=True),
                st.TmaConfig(32, 4, 4, words=True, keep_weights=True),
                st.TmaConfig(32, 4, 4, words=True, cvt_x2=True, prmt=True, log2_d=True),
                st.TMA_WORDS_CONFIGS[2], st.TMA_LONG_ROW_CONFIGS[2]]
TWO_IN_FLIGHT = [st.TmaConfig(32, 4, 3, depth=2), st.TmaConfig(32, 4, 3, words=True, depth=2)]
BOXED = [st.TmaConfig(16, 8, 2, backoff=True, boxes=3), st.TmaConfig(8, 8, 2, boxes=7),
         st.TmaConfig(16, 8, 2, words=True, boxes=3)]
WRITING_BEHIND = [st.TmaConfig(32, 8, 2, write_behind=True),
                  st.TmaConfig(16, 4, 4, backoff=True, write_behind=True),
                  st.TmaConfig(16, 4, 3, write_behind=True, depth=2),
                  st.TmaConfig(64, 8, 2, backoff=True, write_behind=True, reread=True),
                  st.TmaConfig(32, 4, 4, words=True, write_behind=True, reread=True),
                  st.TmaConfig(64, 8, 2, backoff=True, words=True, write_behind=True,
                               reread=True),
                  *st.PAIR_FROM_BUFFER_CONFIGS, *st.PAIR_FROM_BUFFER_WORDS_CONFIGS]


def test_a_depth_below_one_is_refused_naming_it():
    """``depth`` counts the chunks a program has in flight, one buffer each: at least 1."""
    for depth, error in ((0, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="config.depth"):
            ks.softmax_resident_tma(torch.randn(2, 512), config=st.TmaConfig(32, 4, 3,
                                                                            depth=depth))


def test_a_chunk_of_boxes_need_not_be_a_power_of_two():
    """``boxes`` TMA boxes of ``lines`` lines make a chunk: 3 of 16 lines are 12288 columns, 256
    to a row of 3M, held as 16384 (the next power of two) in registers and the buffer; fewer
    than one box is refused, naming ``config.boxes``."""
    twelve = BOXED[0]
    assert (twelve.chunk, twelve.held) == (12288, 16384)
    assert (3 << 20) // twelve.chunk == 256
    assert (BOXED[1].chunk, BOXED[1].held, BOXED[2].chunk) == (14336, 16384, 24576)
    assert st.TMA_LONG_ROW_CONFIGS[4].held == st.TMA_LONG_ROW_CONFIGS[4].chunk == 16384
    assert [st.held_lines(16, boxes) for boxes in (1, 2, 3, 4, 5)] == [16, 32, 64, 64, 128]
    for boxes, error in ((0, ValueError), (2.0, TypeError)):
        with pytest.raises(error, match="config.boxes"):
            ks.softmax_resident_tma(torch.randn(2, 512), config=twelve._replace(boxes=boxes))


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("config", [st.TmaConfig(16, 2, 8), st.TMA_CONFIGS[4],
                                    st.TMA_LONG_ROW_CONFIGS[4], *WORD_CONFIGS, *TWO_IN_FLIGHT,
                                    *BOXED, *WRITING_BEHIND],
                         ids=["4k", "8k", "16k", "words 8k", "words 16k", "words 32k",
                              "words 16k, weights kept",
                              "words 16k, fewer instructions an element",
                              "words 16k, the rule's", "words 32k, the rule's",
                              "8k, two in flight",
                              "words 16k, two in flight", "12k in 3 boxes", "14k in 7 boxes",
                              "words 24k in 3 boxes", "8k, writing behind",
                              "4k, writing behind, pauses", "4k, writing behind, two in flight",
                              "16k, writing behind, read again",
                              "words 16k, writing behind, read again",
                              "words 32k, writing behind, read again",
                              "8k, 4 warps x3, pair from the buffer",
                              "8k, 8 warps x3, pair from the buffer",
                              "words 16k, 4 warps x3, pair from the buffer",
                              "words 16k, 4 warps x4, one buffer, pair from the buffer"])
def test_it_matches_torch_on_awkward_rows(dtype, config):
    """One chunk, chunks past the row's end, more rows than a round of programs, and rows of
    -inf, +inf, NaN and huge values: as ``torch.softmax`` (NaN where it gives NaN)."""
    if config.words and dtype == torch.float32:
        pytest.skip("words hold 16-bit rows")
    if config.keep_weights and dtype != torch.bfloat16:
        pytest.skip("weights are kept as bfloat16 for bfloat16 rows")
    c = config.chunk
    x = torch.randn(9, 3 * c + 2 * st.TMA_WIDTH, device="cuda", dtype=dtype) * 20
    x[0] = float("-inf")
    x[1, 5] = float("inf")
    x[2, 9] = float("nan")
    x[3, ::3] = float("-inf")
    for rows in (x, torch.randn(3, c, device="cuda", dtype=dtype),
                 torch.randn(1100, 4 * c, device="cuda", dtype=dtype),
                 torch.randn(4, 2 * c, device="cuda", dtype=dtype) * 1e4):
        got = ks.softmax_resident_tma(rows, config=config).float()
        torch.testing.assert_close(got, torch.softmax(rows.float(), -1), equal_nan=True,
                                   atol=1e-2 if dtype.itemsize == 2 else 1e-6,
                                   rtol=1e-2 if dtype.itemsize == 2 else 1e-4)


def test_the_rule_launches_every_program_that_fits_as_the_record_was_timed():
    """The rule's configurations fill the grid (rows straddle rounds) and keep the input, as the
    record timed them; ``fill_grid=False`` launches whole rows a round
    (``grid_math.resident_grid``)."""
    rule = [*st.TMA_CONFIGS.values(), *st.TMA_WORDS_CONFIGS.values(),
            *st.TMA_LONG_ROW_CONFIGS.values()]
    assert all(config.fill_grid and not config.keep_weights for config in rule)
    from teachkit.kernels.grid_math import resident_grid

    assert resident_grid(528, 384, 24) == 384  # 3M float32 columns in chunks of 8192
    assert resident_grid(528, 384, 24, fill_grid=True) == 528


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
@pytest.mark.parametrize("config", [st.TMA_CONFIGS[4], st.TMA_WORDS_CONFIGS[2]],
                         ids=["8k", "words 16k"])
def test_whole_rows_a_round_match_torch(config):
    """With ``fill_grid`` off the grid holds whole rows only (rows of 7 chunks: fewer programs
    than fit, more rows than a round): the same results, rounds apart."""
    config = config._replace(fill_grid=False)
    dtype = torch.bfloat16 if config.words else torch.float32
    rows = torch.randn(300, 7 * config.chunk, device="cuda", dtype=dtype)
    got = ks.softmax_resident_tma(rows, config=config).float()
    torch.testing.assert_close(got, torch.softmax(rows.float(), -1),
                               atol=1e-2 if dtype.itemsize == 2 else 1e-6,
                               rtol=1e-2 if dtype.itemsize == 2 else 1e-4)


def test_softmax_takes_it_on_hopper_where_it_was_measured_faster(monkeypatch):
    """``softmax`` sends long rows that the TMA kernel reads to it on a Hopper GPU, by its
    rule; rows it cannot read (a width not a multiple of 256, 16-bit rows from 1M columns not
    a whole number of lines of words), rows of other GPUs and the interpreter's stay on the
    Triton kernels."""
    taken = []
    monkeypatch.setattr(ks, "launch_resident_tma",
                        lambda x2, y2, config: taken.append(("tma", config.chunk)))
    monkeypatch.setattr(ks, "_launch_resident", lambda x2, y2, config: taken.append("triton"))
    monkeypatch.setattr(ks, "_launch_split", lambda *args: taken.append("triton"))
    dev = teachkit.DEVICE
    small = 1 << 16 if teachkit.ON_GPU else 1 << 14  # long enough to leave the fused kernel
    ks.softmax(torch.zeros(2, small, device=dev))
    ks.softmax(torch.zeros(2, small + 1, device=dev))
    if teachkit.ON_GPU:
        ks.softmax(torch.zeros(1, 3 << 20, device=dev))
        ks.softmax(torch.zeros(1, 1 << 21, dtype=torch.bfloat16, device=dev))  # as words
        ks.softmax(torch.zeros(1, (1 << 20) + 256, dtype=torch.bfloat16, device=dev))
    long_chunk = st.tma_config(3 << 20, torch.float32, torch.cuda.current_device()).chunk if (
        HOPPER) else None  # taking the pair from the buffer (8192) where 3M fits, else 16384
    want = ([("tma", 8192), "triton", ("tma", long_chunk), ("tma", 16384), "triton"] if HOPPER
            else ["triton"] * len(taken))
    assert taken == want
