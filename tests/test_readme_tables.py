"""The README's softmax tables against the records they name: every figure in them is the
record's, rounded as shown, so a table cannot drift from the run it says it comes from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from teachkit.bench.core import copy_shares, load_record

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SUFFIX = {"": 1, "k": 1 << 10, "M": 1 << 20}


def table_after(record: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of the first table after the README names ``record``'s file."""
    start = README.index(f"teachkit/benchmarks/{record}.json")
    lines = README[start:].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[0], rows[2:]


def problem(label: str) -> tuple[str, str | None]:
    """``"64 × 1M fp32"`` as the record's problem, ``("64x1048576", "fp32")``; ``"16384 ×
    1024"`` as ``("16384x1024", None)``."""
    rows, cols, dtype = re.fullmatch(r"(\d+) × ([\d.]+[kM]?)(?: (\w+))?", label).groups()
    number, suffix = re.fullmatch(r"([\d.]+)([kM]?)", cols).groups()
    return f"{rows}x{round(float(number) * SUFFIX[suffix])}", dtype


def shares_by_row(record: str) -> tuple[list[str], list[tuple[list[str], str, str | None,
                                                                dict[str, float]]]]:
    """The header of the first table after the README names ``record``'s file, and each of its
    rows with the record's problem and dtype it names (:func:`problem`) and the record's shares
    of the copy for them (``copy_shares``): one row for each of the record's problems."""
    shares, _ = copy_shares(record)
    header, rows = table_after(record)
    assert len(rows) == len(shares)
    found = []
    for row in rows:
        name, dtype = problem(row[0])
        found.append((row, name, dtype, shares[name, dtype]))
    return header, found


def assert_row_is_shares(header: list[str], row: list[str], shares: dict[str, float]) -> None:
    """Each cell of ``row`` after the first is its column's provider's share of the copy in
    ``shares`` (`softmax`: the entry point), or — where the record has no such provider."""
    for column, cell in zip(header[1:], row[1:], strict=True):
        provider = "entry point" if column == "`softmax`" else column
        if cell == "—":
            assert provider not in shares, (row[0], column)
        else:
            assert close(cell, shares[provider]), (row[0], column)


def close(shown: str, value: float) -> bool:
    """Whether ``value`` rounds to ``shown`` (as many decimals as ``shown`` has)."""
    decimals = len(shown.partition(".")[2])
    return abs(value - float(shown)) <= 0.5 * 10 ** -decimals + 1e-9


@pytest.mark.parametrize("record", ["softmax_nvidia_h100", "softmax_nvidia_h200"])
def test_softmax_tables_are_their_records(record):
    """``| rows × cols | fp32 torch | fp32 teachkit | ... |``: GB/s, with the share of the copy
    bandwidth in brackets where shown."""
    results, meta = load_record(record)
    copy = meta["ceilings"]["copy_gbps"]
    providers = {"torch": "torch", "teachkit": "teachkit.kernels.softmax",
                 "copy, same bytes": "copy, same bytes"}
    found = {(m.problem, m.dtype, m.provider): m.value for m in results}
    header, rows = table_after(record)
    for row in rows:
        name, _ = problem(row[0])
        for column, cell in zip(header[1:], row[1:], strict=True):
            dtype, _, provider = column.partition(" ")
            value = found[name, dtype, providers[provider]]
            gbps, share = re.fullmatch(r"(\d+)(?: \((\d+) %\))?", cell).groups()
            assert close(gbps, value), (record, row[0], column, cell, value)
            assert share is None or close(share, 100 * value / copy), (record, row[0], column)


def test_long_row_table_is_its_record():
    """``| rows × cols, dtype | split rows | table's config | long-row config | softmax |``:
    shares of the copy bandwidth, one decimal."""
    record = "softmax_resident_long_nvidia_h100"
    results, meta = load_record(record)
    copy = meta["ceilings"]["copy_gbps"]
    providers = {"split rows": "split rows", "table's config": "table",
                 "long-row config": "long rows", "`softmax`": "entry point"}
    found = {(m.problem, m.dtype, m.provider): m.value for m in results}
    header, rows = table_after(record)
    assert rows
    for row in rows:
        name, dtype = problem(row[0])
        for column, cell in zip(header[1:], row[1:], strict=True):
            value = 100 * found[name, dtype, providers[column]] / copy
            assert close(cell, value), (row[0], column, cell, value)


def test_attention_table_is_its_record():
    """``| D, mask | L = S | teachkit | Triton kernel | SDPA ... | teachkit / flash | teachkit /
    cuDNN |``: TFLOP/s, and the ratios of teachkit's to flash's and cuDNN's."""
    record = "attention_nvidia_h100"
    results, _ = load_record(record)
    providers = {"teachkit": "teachkit flash", "Triton kernel": "teachkit triton",
                 "SDPA flash": "sdpa flash", "SDPA cuDNN": "sdpa cudnn",
                 "SDPA efficient": "sdpa efficient"}
    found = {(m.problem, m.provider): m.value for m in results}
    header, rows = table_after(record)
    assert rows
    for row in rows:
        d, _, mask = row[0].partition(", ")
        name = f"D={d} L={row[1]}" + (" causal" if mask == "causal" else "")
        for column, cell in zip(header[2:], row[2:], strict=True):
            if column.startswith("teachkit / "):  # teachkit's rate over another's
                under = {"flash": "sdpa flash", "cuDNN": "sdpa cudnn"}[column.split(" / ")[1]]
                value = found[name, providers["teachkit"]] / found[name, under]
                assert close(cell.removesuffix("x"), value), (row[:2], column, cell, value)
            else:
                assert close(cell, found[name, providers[column]]), (row[:2], column, cell)


def test_decode_table_is_its_records():
    """``| batch, cache | split-KV, default | ... | SDPA cuDNN |``: GB/s of the plain launch /
    of the CUDA-graph replay, from the two records."""
    record = "decode_nvidia_h100"
    plain, graph = (load_record(name)[0] for name in (record, f"{record}_cudagraph"))
    providers = {"split-KV, default": "teachkit split-KV, default",
                 "split-KV, one launch": "teachkit split-KV, one launch",
                 "split-KV, merge kernel": "teachkit split-KV", "unsplit": "teachkit unsplit",
                 "paged (pages of 16)": "teachkit paged", "SDPA flash": "SDPA flash",
                 "SDPA cuDNN": "SDPA cuDNN"}
    found = [{(m.problem, m.provider): m.value for m in results} for results in (plain, graph)]
    header, rows = table_after(record)
    assert rows
    for row in rows:
        batch, cache = row[0].split(", ")
        name, _ = problem(f"{batch} × {cache}")
        name = "B={} S={}".format(*name.split("x"))
        for column, cell in zip(header[1:], row[1:], strict=True):
            for shown, each in zip(cell.split(" / "), found, strict=True):
                assert close(shown, each[name, providers[column]]), (row[0], column, cell)


def test_attention_summary_is_its_record():
    """The sentence after the table: teachkit's ranges over SDPA flash on every problem of the
    record, over cuDNN from L = 4096 on and at L = 1024."""
    results, _ = load_record("attention_nvidia_h100")
    rate = {(m.problem, m.provider): m.value for m in results}
    problems = {m.problem: m.params for m in results}
    text = " ".join(README[README.index("Over the record's 20 problems"):].split()[:40])
    flash, long_cudnn, short_cudnn = (
        tuple(map(float, pair)) for pair in re.findall(r"(\d\.\d\d)-(\d\.\d\d)x", text)[:3])
    assert len(problems) == 20

    def span(under: str, keep) -> tuple[float, float]:
        ratios = [rate[p, "teachkit flash"] / rate[p, under]
                  for p, params in problems.items() if keep(params["L"])]
        return min(ratios), max(ratios)

    for shown, found in ((flash, span("sdpa flash", lambda n: True)),
                         (long_cudnn, span("sdpa cudnn", lambda n: n >= 4096)),
                         (short_cudnn, span("sdpa cudnn", lambda n: n == 1024))):
        assert all(close(f"{s:.2f}", f) for s, f in zip(shown, found, strict=True)), \
            (shown, found)


@pytest.mark.parametrize("record", ["host_nvidia_h100", "host_nvidia_h200"])
def test_host_tables_are_their_records(record):
    """``| call | torch | teachkit | ... | teachkit / torch |``: µs per call, one decimal, and
    teachkit's time over torch's. A row is the record's op its label names (the Gluon kernel's
    is ``flash_attention_d128``)."""
    results, _ = load_record(record)
    found = {(m.problem, m.provider): m.value for m in results}
    header, rows = table_after(record)
    assert len(rows) == len({m.problem for m in results})
    for row in rows:
        op = re.match(r"`(\w+)`", row[0]).group(1)
        op += "_d128" if row[0].endswith("Gluon kernel") else ""
        for column, cell in zip(header[1:], row[1:], strict=True):
            if column == "teachkit / torch":
                value = found[op, "teachkit"] / found[op, "torch"]
                assert close(cell.removesuffix("x"), value), (record, op, cell, value)
            else:
                assert close(cell, found[op, column]), (record, op, column, cell)


def test_exchange_table_is_its_record():
    """``| rows × cols, dtype | table's config | cut rows | wait | long-row config | cut rows |
    wait | grid filled | bell |``: shares of the copy, the wait as the cut rows' share less the
    rows', and the better configuration's gain over ``softmax`` with the grid filled and with
    the bell, in points."""
    _, rows = shares_by_row("softmax_resident_exchange_nvidia_h100")
    for row, _, _, s in rows:
        want = []
        for config in ("table", "long rows"):
            cut = s[f"{config}, cut to chunks"]
            want += [s[config], cut, cut - s[config]]
        want += [max(s[f"table, {way}"], s[f"long rows, {way}"]) - s["entry point"]
                 for way in ("grid filled", "bell")]
        for cell, value in zip(row[1:], want, strict=True):
            assert close(cell.lstrip("+"), value), (row[0], cell, value)


def test_tma_table_is_its_record():
    """``| rows × cols, dtype | split rows | Triton, table | ... | `softmax` |``: shares of the
    copy, one decimal, from the record's results; `softmax` is the column of the configuration
    ``tma_config`` took for the row when the record was timed, before float32 rows were written
    behind (``TMA_BEHIND_CONFIGS`` and ``TMA_PAIR_FROM_BUFFER_CONFIGS``, their own records):
    ``TMA_CONFIGS``, and from ``TMA_LONG_ROW_FROM`` columns ``TMA_LONG_ROW_CONFIGS``."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    named = {st.TMA_CONFIGS[4]: "TMA 8k", st.TMA_LONG_ROW_CONFIGS[4]: "TMA 16k, pauses",
             st.TMA_WORDS_CONFIGS[2]: "TMA words 16k",
             st.TMA_LONG_ROW_CONFIGS[2]: "TMA words 32k, pauses"}
    header, rows = shares_by_row("softmax_resident_tma_nvidia_h100")
    for row, name, dtype, s in rows:
        config = st.tma_config(int(name.split("x")[1]),
                               torch.float32 if dtype == "fp32" else torch.bfloat16,
                               write_behind=False)
        for column, cell in zip(header[1:], row[1:], strict=True):
            value = s[named[config]] if column == "`softmax`" else s.get(column)
            assert (cell == "–") if value is None else close(cell, value), (row[0], column)


def test_write_behind_table_is_its_record():
    """``| rows × cols, dtype | Triton, table | TMA 8k | ... | `softmax` |``: shares of the copy,
    one decimal, from the record's results; `softmax` is the column of the configuration
    ``tma_config`` takes for the row now (``TMA_BEHIND_CONFIGS``)."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    header, rows = shares_by_row("softmax_resident_tma_write_behind_nvidia_h100")
    for row, name, _, s in rows:
        assert st.tma_config(int(name.split("x")[1]), torch.float32) == st.TMA_BEHIND_CONFIGS[4]
        for column, cell in zip(header[1:], row[1:], strict=True):
            value = s["TMA 8k, 8 warps, behind, pauses"] if column == "`softmax`" else s[column]
            assert close(cell, value), (row[0], column)


def test_reread_table_is_its_record():
    """``| rows × cols, dtype | split rows | ... | `softmax` |``: shares of the copy, one decimal,
    from the record's results (— where the record has no such provider); `softmax` is its entry
    point, and the rule does not read again for these rows."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    header, rows = shares_by_row("softmax_resident_tma_reread_nvidia_h100")
    for row, name, dtype, s in rows:
        rule = st.tma_config(int(name.split("x")[1]),
                             torch.float32 if dtype == "fp32" else torch.bfloat16)
        assert not rule.reread
        assert_row_is_shares(header, row, s)


def test_pair_from_buffer_table_is_its_record():
    """``| rows × cols, dtype | split rows | ... | `softmax` |``: shares of the copy, one decimal,
    from the record's results (— where the record has no such provider); `softmax` is its entry
    point, the rule when it ran, and the rule now takes the pair from the buffer past 2M
    columns (``TMA_PAIR_FROM_BUFFER_CONFIGS``)."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    header, rows = shares_by_row("softmax_resident_tma_pair_from_buffer_nvidia_h100")
    assert "TMA 8k, 4 warps x3, pair from buffer" in header
    for row, name, _, s in rows:
        cols = int(name.split("x")[1])
        rule = st.tma_config(cols, torch.float32)
        assert rule == (st.TMA_BEHIND_CONFIGS[4] if cols <= st.TMA_BEHIND_UNTIL[4]
                        else st.TMA_PAIR_FROM_BUFFER_CONFIGS[4]), name
        assert_row_is_shares(header, row, s)


@pytest.mark.parametrize("record", ["softmax_resident_tma_words_pair_from_buffer_nvidia_h100",
                                    "softmax_resident_tma_bf16_behind_nvidia_h100"])
def test_16_bit_written_behind_tables_are_their_records(record):
    """``| rows × cols, dtype | ... | `softmax` |``: shares of the copy, one decimal, from the
    record's results (— where the record has no such provider); `softmax` is its entry point,
    and the rule writes no 16-bit row behind."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    header, rows = shares_by_row(record)
    for row, name, dtype, s in rows:
        assert dtype == "bf16"
        assert not st.tma_config(int(name.split("x")[1]), torch.bfloat16).write_behind
        assert_row_is_shares(header, row, s)


def test_fewer_instructions_table_is_its_record():
    """``| rows × cols, dtype | split rows | TMA words 16k | ... | `softmax` |``: shares of the
    copy, one decimal, from the record's results; the record ran before the rule took
    ``cvt_x2`` and ``prmt``, which its ``, PRMT`` providers have, and the rule's words
    configurations now set both (and not ``log2_d``)."""
    import torch

    st = pytest.importorskip("teachkit.kernels.softmax_tma")
    header, rows = shares_by_row("softmax_resident_tma_fewer_instructions_nvidia_h100")
    assert "TMA words 16k, PRMT" in header and "TMA words 32k, pauses, PRMT" in header
    for row, name, dtype, s in rows:
        rule = st.tma_config(int(name.split("x")[1]), torch.bfloat16)
        assert dtype == "bf16" and rule.words and rule.cvt_x2 and rule.prmt and not rule.log2_d
        assert_row_is_shares(header, row, s)
