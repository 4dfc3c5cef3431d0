"""The contextfold command line: every path, including bad lines, empty input, standard
input, Anthropic and Responses input, exact and provider sizing, and -o."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold import cli
from contextfold.cli import main
from contextfold.synthetic import responses_items

from .conftest import IMPLS, anthropic_corpus, corpus_file, openai_corpus
from .offline_tiktoken import tiktoken_encoding


def run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")))
    try:
        code = main(argv)
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, out, err


def test_pack_corpus_in_budget_and_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_file("transcripts.jsonl")
    rows = openai_corpus()
    code, out, err = run(["pack", str(path), "--context-tokens", "2000", "--reserve-output-tokens", "200"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(rows)
    for line, original in zip(lines, rows, strict=True):
        packed = json.loads(line)["messages"]
        pack = cf.pack_handoff(original, target_context_tokens=2000, reserve_output_tokens=200)
        assert [m.get("role") for m in packed] == [m.get("role") for m in pack.messages]
        assert not pack.fits or cf.tokens_of(packed) <= 1800
    assert f"packed {len(rows)} transcript(s)" in err
    before = sum(cf.tokens_of(r) for r in rows)
    assert f"tokens {before:,} ->" in err


@pytest.mark.parametrize("block", [cli.BLOCK, 7])  # 7: every line ends in a later read
def test_bad_lines_are_reported_and_the_run_goes_on(
    block: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "BLOCK", block)
    good = [{"role": "user", "content": "hello"}]
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({"x": 1}),
        "",
        json.dumps([{"content": "no role"}]),
        json.dumps(good),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(["pack", str(path), "--context-tokens", "100"], capsys)
    assert code == 1
    assert out.splitlines() == [json.dumps(good), json.dumps(good)]
    assert "line 2: not JSON" in err
    assert "line 3: expected a list of messages" in err
    assert "line 5: message 0, field 'role': missing" in err
    assert "3 bad line(s)" in err


def test_standard_error_is_whole_lines_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('[{"role": "user", "content": "hi"}]\n{"messages": [], "tools": [1]}\n', encoding="utf-8")
    code, _, err = run(["pack", str(path), "--context-tokens", "100"], capsys)
    # One line a bad line and one for the summary, never wrapped: logs are grepped.
    assert code == 1
    assert err.splitlines()[0] == "line 2: tools[0]: expected a dict, got int"
    assert re.fullmatch(
        r"packed 1 transcript\(s\) in [0-9.]+s \([0-9,]+/s, \w+ backend\): tokens 5 -> 5, "
        r"0 message\(s\) dropped, 0 did not fit, 1 bad line\(s\)",
        err.splitlines()[1],
    )
    assert len(err.splitlines()) == 2


def test_progress_shows_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    path = tmp_path / "in.jsonl"
    path.write_text('[{"role": "user", "content": "hi"}]\n', encoding="utf-8")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, out, _ = run(["pack", str(path), "--context-tokens", "100"], capsys)
    assert (code, out) == (0, '[{"role": "user", "content": "hi"}]\n')
    assert "packing" in terminal.getvalue() and "packed 1 transcript(s)" in terminal.getvalue()


def test_a_read_cut_in_a_line_packs_as_the_whole_text(impl: Any) -> None:
    long = [
        {"role": "user", "content": "q " * 300},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "ok"},
    ]
    text = f'{json.dumps(long)}\n \n{{bad\n{{"messages": [], "id": 2}}\n\n{json.dumps(long)}'.encode()
    options = (cf.PackOptions(target_context_tokens=20), 2)
    whole = impl.pack_lines(text, b"", *options)
    assert whole[1:3] == (5, 3) and [index for index, _ in whole[-1]] == [2]
    for at in range(len(text) + 1):
        # A large read stops at `at`; `rest` is what readline() gives for the line after.
        block, after = text[:at], text[at:]
        rest = after[: after.find(b"\n") + 1] if b"\n" in after else after
        cut = impl.pack_lines(block, rest, *options)
        later = impl.pack_lines(after[len(rest) :], b"", *options)
        assert cut[0] + later[0] == whole[0], at
        assert cut[1] + later[1] == whole[1], at
        assert cut[-1] + [(cut[1] + index, error) for index, error in later[-1]] == whole[-1], at


def _with_unsizable_middle() -> list[dict[str, Any]]:
    """A long run whose message 60, in the middle a 3,000-token pack drops unread, has no role."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"step {i} " + "x" * 400} for i in range(200)]
    messages[60] = {"content": "no role"}
    return [*messages, {"role": "user", "content": "go on"}]


def test_a_line_pack_request_packs_is_packed_with_its_count_before_unknown(
    impl: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The count of the tokens a line came with sizes every message, and refused the line
    # for the one message packing drops unread: what pack_request packs was a "bad line".
    messages = _with_unsizable_middle()
    bodies = [json.dumps(messages).encode(), json.dumps({"messages": messages}).encode()]
    good = [{"role": "user", "content": "hi"}]
    options = cf.PackOptions(target_context_tokens=3_000)
    lines = impl.pack_lines(b"\n".join([*bodies, json.dumps(good).encode()]), b"", options, 1)
    # Message 60 is neither kept nor in the note: the lines pack as with a good one there.
    fine = [{**m, "role": "assistant"} if i == 60 else m for i, m in enumerate(messages)]
    expected = impl.pack_lines(f"{json.dumps(fine)}\n{json.dumps({'messages': fine})}\n".encode(), b"", options, 1)[0]
    assert expected.split(b"\n")[1] == cf.pack_request(bodies[1], options=options).body
    assert lines[0] == expected + json.dumps(good).encode() + b"\n"
    packed, before, after, dropped, unfit, uncounted, errors = lines[2:]
    assert (packed, before, dropped, unfit, uncounted, errors) == (3, cf.tokens_of(good), 2 * 174, 0, 2, [])
    assert after == 2 * cf.pack_request(bodies[1], options=options).tokens + cf.tokens_of(good)
    path = tmp_path / "middle.jsonl"
    path.write_bytes(b"\n".join(bodies) + b"\n")
    code, out, err = run(["pack", str(path), "--context-tokens", "3000"], capsys)
    assert (code, out.encode()) == (0, expected)
    assert "tokens 0 -> " in err and "tokens before left out 2 line(s)" in err


@pytest.mark.parametrize("edits", [(), (cf.ClearToolUses(keep=0, trigger=0),)])
def test_the_tokens_a_line_came_with_are_counted_as_tokens_of_counts_them(impl: Any, edits: Any) -> None:
    # Natively the count took the format the pack decided from what it read (chat, the
    # Responses item being in the dropped middle), so a line tokens_of sizes was
    # "uncounted"; with edits, every bare list of Responses items was.
    mixed: list[dict[str, Any]] = [{"role": "user", "content": "task"}, {"type": "reasoning", "id": "r", "summary": []}]
    mixed += [{"role": "assistant" if i % 2 else "user", "content": "m" * 400} for i in range(20)]
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    mixed += [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "tool_call_id": "c"}]
    mixed.append({"role": "user", "content": "go"})
    items = responses_items(openai_corpus()[0])
    options = cf.PackOptions(target_context_tokens=500, edits=edits)
    for line in (mixed, items):
        packed = impl.pack_lines(json.dumps(line).encode(), b"", options, 1)
        assert (packed[2], packed[3], packed[7], packed[8]) == (1, cf.tokens_of(line), 0, []), line[:2]


def test_every_command_reads_a_line_as_pack_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # window and bench read lines with json.loads(bytes), which takes a surrogate encoded
    # in UTF-8 that pack refuses as not UTF-8; a byte-order mark all three take.
    path = tmp_path / "lines.jsonl"
    surrogate = b'[{"role": "user", "content": "\xed\xa0\x80"}]'
    path.write_bytes(surrogate + b'\n\xef\xbb\xbf[{"role": "user", "content": "bom"}]\n')
    for command in (["pack", str(path), "--context-tokens", "100"], ["window", str(path)]):
        code, out, err = run(command, capsys)
        assert (code, len(out.splitlines())) == (1, 1 + (command[0] == "window")), command
        assert re.search(r"^line 1: not UTF-8: .* at byte 30$", err, re.MULTILINE), (command, err)
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b'\xef\xbb\xbf[{"role": "user", "content": "\xff"}]\n')  # counted from the mark
    for command in (["pack", str(marked), "--context-tokens", "100"], ["window", str(marked)]):
        assert run(command, capsys)[2].startswith("line 1: not UTF-8: invalid byte at byte 33\n"), command


def test_empty_input_and_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["pack", "-", "--context-tokens", "100"], capsys, stdin="")
    assert (code, out) == (0, "")
    assert "packed 0 transcript(s)" in err
    transcript = [{"role": "user", "content": "x" * 800}, {"role": "assistant", "content": "ok"}]
    code, out, _ = run(["pack", "-", "--context-tokens", "100"], capsys, stdin=json.dumps(transcript) + "\n")
    assert code == 0 and json.loads(out) == cf.pack_handoff(transcript, target_context_tokens=100).messages


def test_anthropic_rows_keep_their_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = anthropic_corpus()
    path = tmp_path / "anthropic.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    out_path = tmp_path / "out.jsonl"
    code, out, _ = run(
        ["pack", str(path), "--context-tokens", "3000", "--shape", "anthropic", "-o", str(out_path)], capsys
    )
    assert code == 0 and out == ""
    packed = [json.loads(line) for line in out_path.read_text(encoding="utf-8").splitlines()]
    assert len(packed) == len(rows)
    for row, result in zip(rows, packed, strict=True):
        assert result["id"] == row["id"] and result.get("system") == row.get("system")
        pack = cf.pack_handoff(row["messages"], target_context_tokens=3000, system=row.get("system"), shape="anthropic")
        assert result["messages"] == json.loads(json.dumps(pack.messages))


def test_lone_surrogates_are_written_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    transcript: list[dict[str, Any]] = [{"role": "user", "content": "a\ud800b"}]
    code, out, _ = run(["pack", "-", "--context-tokens", "100"], capsys, stdin=json.dumps(transcript) + "\n")
    assert code == 0 and "\\ud800" in out


def test_missing_file_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["pack", "/nonexistent.jsonl", "--context-tokens", "100"], capsys)
    assert code == 2 and "nonexistent" in err


def test_window_command(capsys: pytest.CaptureFixture[str]) -> None:
    transcript = [{"role": "user", "content": "x"}] * 100
    code, out, _ = run(["window", "-"], capsys, stdin=json.dumps(transcript) + "\n[1]\n")
    assert code == 1
    assert out.splitlines()[1].split("\t")[:4] == ["1", "100", "500", "20"]


def test_demo_shows_before_and_after(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["demo", "--turns", "12", "--context-tokens", "2000"], capsys)
    assert code == 0
    assert "dropped" in out and "kept" in out and "fits=True" in out
    assert "Earlier conversation, folded to fit the context window" in out


def test_bench_writes_a_table_and_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "bench.png"
    code, out, err = run(["bench", "--sizes", "20,40", "--repeat", "1", "--plot", str(plot)], capsys)
    assert code == 0 and f"plot written to {plot}" in err
    assert "pack_handoff (native)" in out or cf.backend == "python"
    assert "pack_handoff (reference)" in out and "vs native" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_says_what_it_left_out_and_writes_no_file_unasked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["bench", "--sizes", "20", "--repeat", "1"], capsys)
    assert code == 0 and "pack_handoff (reference)" in out
    assert "no plot written: pass --plot FILE.png to draw one" in err
    assert list(tmp_path.iterdir()) == []  # nothing in the current folder
    # A plain install: neither LangChain nor matplotlib.
    for module in ("langchain_core", "langchain_core.messages", "langchain_core.messages.utils"):
        monkeypatch.setitem(sys.modules, module, None)
    for module in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, module, None)
    code, out, err = run(["bench", "--sizes", "20", "--repeat", "1", "--plot", "bench.png"], capsys)
    assert code == 0 and "langchain" not in out
    assert "trim_messages (langchain) left out: langchain-core is not installed" in err
    assert "no plot written: matplotlib is not installed" in err
    assert list(tmp_path.iterdir()) == []


def test_help_is_plain_text_and_the_version_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "``" not in out and "contextfold pack runs.jsonl" in out
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert (done.value.code, capsys.readouterr().out) == (0, f"contextfold {cf.__version__}\n")


@pytest.mark.parametrize("command", ["pack", "window"])
def test_running_out_of_memory_is_one_message(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # /dev/zero, one line without end: a MemoryError traceback and exit 1 ("a line was bad").
    class Endless(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise MemoryError

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(Endless())))
    argv = [command, "-"] + (["--context-tokens", "100"] if command == "pack" else [])
    code, out, err = run(argv, capsys)
    assert (code, err) == (2, "contextfold: out of memory (is a line too long?)\n")
    assert len(out.splitlines()) == (command == "window")  # window's header, no data


def test_python_dash_m_runs_the_command() -> None:
    # `python -m contextfold` said "No module named contextfold.__main__".
    done = subprocess.run([sys.executable, "-m", "contextfold", "--version"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"contextfold {cf.__version__}\n"), done.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["bench", "--sizes", "20,abc"], "--sizes"),
        (["bench", "--sizes", "0"], "--sizes"),
        (["demo", "--turns", str(10**23)], "--turns"),
        (["demo", "--turns", "-1"], "--turns"),
        (["demo", "--context-tokens", "-1"], "--context-tokens"),
        (["demo", "--reserve-output-tokens", "-1"], "--reserve-output-tokens"),
        (["bench", "--sizes", "20", "--context-tokens", "-1"], "--context-tokens"),
        (["bench", "--sizes", "20", "--repeat", "-3"], "--repeat"),  # timed nothing, silently
        (["bench", "--sizes", "20", "--repeat", "0"], "--repeat"),
    ],
)
def test_bench_and_demo_options_are_named(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, "") and err.startswith(f"contextfold: {named} ")


def test_demo_mentions_a_note_only_when_there_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["demo", "--turns", "0"], capsys)
    assert code == 0 and "(3 kept)" in " ".join(out.split()) and "the note" not in out


def test_lines_are_copied_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = anthropic_corpus()
    lines = [json.dumps(r, indent=None, separators=(", ", ": "), ensure_ascii=k % 2 == 0) for k, r in enumerate(rows)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    code, out, _ = run(["pack", str(path), "--context-tokens", "1500"], capsys)
    assert code == 0
    for line, result, row in zip(lines, out.splitlines(), rows, strict=True):
        head, tail = line.split('"messages": [', 1)[0], line.rsplit("]", 1)[1]
        assert result.startswith(head + '"messages": [') and result.endswith("]" + tail)
        pack = cf.pack_handoff(row["messages"], target_context_tokens=1500, system=row.get("system"))
        assert json.loads(result)["messages"] == json.loads(json.dumps(pack.messages))
        separators = (", ", ": ")
        for i in pack.kept:  # each kept message exactly as the input wrote it
            assert json.dumps(row["messages"][i], separators=separators, ensure_ascii="\\u" in line) in result


def test_threads_and_block_size_do_not_change_the_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(corpus_file("transcripts.jsonl"))
    _, reference_out, _ = run(["pack", path, "--context-tokens", "3000"], capsys)
    monkeypatch.setattr(cli, "BLOCK", 5_000)  # lines cross many block boundaries
    for threads in ("1", "2", "5"):
        code, out, err = run(["pack", path, "--context-tokens", "3000", "--threads", threads], capsys)
        assert (code, out) == (0, reference_out), threads
        assert f"packed {len(openai_corpus())} transcript(s)" in err


def test_hostile_lines_lose_no_good_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps([{"role": "user", "content": "hello"}])
    deep = '[{"role": "user", "content": ' + "[" * 1_000 + "]" * 1_000 + "}]"
    huge = '[{"role": "user", "content": "x", "n": ' + "9" * 5_000 + "}]"
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([good, deep, huge, good, "\ufeff" + good]) + "\n", encoding="utf-8")
    code, out, err = run(["pack", str(path), "--context-tokens", "100"], capsys)
    assert code == 1 and "Traceback" not in err
    assert "line 3: not JSON" in err
    # 1,000 deep loads natively (the limit is 100,000), not through Python's json.
    native = cf.backend == "native"
    assert ("line 2: " in err) != native
    assert out.splitlines() == [good, *([deep] if native else []), good, "\ufeff" + good]


@pytest.mark.parametrize("command", ["pack", "window", "bench"])
def test_every_subcommand_keeps_every_good_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    deep = '[{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}]"  # past every backend's limit
    digits = '[{"role": "user", "content": "x", "n": ' + "9" * 5_000 + "}]"
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join([good, deep, digits, "{bad", json.dumps({"x": 1}), good]) + "\n", encoding="utf-8")
    options = {
        "pack": ["--context-tokens", "100"],
        "window": [],
        "bench": ["--repeat", "1", "--plot", str(tmp_path / "bench.png")],
    }
    code, out, err = run([command, str(path), *options[command]], capsys)
    assert code == 1 and "Traceback" not in err
    assert [n for n in range(1, 7) if f"line {n}: " in err] == [2, 3, 4, 5]
    if command == "pack":
        assert out.splitlines() == [good, good]
    elif command == "window":
        assert [row.split("\t")[:2] for row in out.splitlines()[1:]] == [["1", "2"], ["6", "2"]]
    else:
        assert "2 transcript(s), 4 messages" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--context-tokens", "-5"], "--context-tokens must be at least 0, got -5"),
        (
            ["--context-tokens", "100", "--reserve-output-tokens", "200"],
            "--reserve-output-tokens (200) exceeds --context-tokens (100)",
        ),
        (["--context-tokens", "100", "--threads", "0"], "--threads must be at least 1, got 0"),
        (
            ["--context-tokens", "100", "--sizing", "provider", "--image-tokens", "-1"],
            "--image-tokens must be at least 0, got -1",
        ),
        (["--context-tokens", "100", "--chunk-tokens", "0"], "--chunk-tokens must be at least 1, got 0"),
        (
            ["--context-tokens", "100", "--clear-tool-uses", "--keep-tool-uses", "-1"],
            f"--keep-tool-uses must be from 0 to {2**64 - 1}, got -1",
        ),
        (
            ["--context-tokens", "100", "--clear-tool-uses", "--clear-at-least", "-1"],
            f"--clear-at-least must be from 0 to {2**64 - 1}, got -1",
        ),
        (
            ["--context-tokens", "100", "--clear-thinking", "-1"],
            f"--clear-thinking must be from 0 to {2**64 - 1}, got -1",
        ),
    ],
)
def test_bad_options_are_one_message_naming_the_flag(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The options' own names were said ("image_tokens must be ..."), not the flags typed.
    path = tmp_path / "in.jsonl"
    path.write_text("[]\n[]\n[]\n", encoding="utf-8")
    code, out, err = run(["pack", str(path), *argv], capsys)
    assert (code, out, err) == (2, "", f"contextfold: {said}\n")


def test_what_the_user_typed_is_quoted_as_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Naming flags rewrote every error: a file or a value spelled like an option's name too.
    monkeypatch.chdir(tmp_path)
    Path("image_tokens.jsonl").write_text("[]\n", encoding="utf-8")
    code, _, err = run(["pack", "image_tokens.jsonl", "--context-tokens", "9", "-o", "image_tokens.jsonl"], capsys)
    assert code == 2 and "image_tokens.jsonl" in err and "--image-tokens" not in err
    code, _, err = run(["bench", "--sizes", "chunk_tokens"], capsys)
    assert code == 2 and "'chunk_tokens'" in err


def test_an_output_that_is_the_input_is_refused_before_it_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Opening the output truncated it before a line was read: the input was lost and
    # the run said "packed 0 transcript(s)" with exit 0. A link to it is the same file.
    path = tmp_path / "in.jsonl"
    text = json.dumps([{"role": "user", "content": "x" * 200}, {"role": "user", "content": "y"}]) + "\n"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "link.jsonl").symlink_to(path)
    (tmp_path / "hard.jsonl").hardlink_to(path)
    for output in ("in.jsonl", "link.jsonl", "hard.jsonl"):
        code, out, err = run(["pack", str(path), "--context-tokens", "30", "-o", str(tmp_path / output)], capsys)
        assert (code, out) == (2, ""), output
        assert "is the input file" in err and err.count("contextfold:") == 1
        assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize("command", [["pack", "--context-tokens", "30"], ["window"]])
def test_standard_output_appending_to_the_input_is_refused(tmp_path: Path, command: list[str]) -> None:
    # `pack F >> F` read each line it had written, without end (1.7 GB in 10 s), as
    # `window F >> F` did; GNU cat refuses the same ("input file is output file").
    path = tmp_path / "in.jsonl"
    text = json.dumps([{"role": "user", "content": "x" * 200}, {"role": "user", "content": "y"}]) + "\n"
    path.write_text(text, encoding="utf-8")
    cli_command = [sys.executable, "-m", "contextfold.cli", command[0], str(path), *command[1:]]
    with path.open("ab") as appended:
        done = subprocess.run(cli_command, stdout=appended, stderr=subprocess.PIPE, timeout=120, check=False)
    assert done.returncode == 2 and b"standard output is the input file" in done.stderr
    assert path.read_text(encoding="utf-8") == text


def test_window_with_standard_output_closed_says_so(tmp_path: Path) -> None:
    # It printed to nothing and exited 0, where pack says "standard output is closed".
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]) + "\n", encoding="utf-8")
    script = 'exec "$0" -m contextfold.cli window "$1" >&-'
    done = subprocess.run(
        ["sh", "-c", script, sys.executable, str(path)], capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 2 and b"standard output is closed" in done.stderr, done.stderr


def test_closed_streams_are_one_message(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    code, _, err = run(["pack", "-", "--context-tokens", "100"], capsys)
    assert code == 2 and "standard input is closed" in err
    monkeypatch.undo()
    path = str(corpus_file("transcripts.jsonl"))
    # A reader that has gone away: one message, exit 2, no traceback.
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextfold.cli", "pack", path, "--context-tokens", "3000", "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err_bytes = proc.stderr.read()
    assert proc.wait(timeout=60) == 2
    assert b"standard output was closed" in err_bytes and b"Traceback" not in err_bytes


def test_a_closed_standard_error_loses_the_messages_not_the_run(tmp_path: Path) -> None:
    good = json.dumps([{"role": "user", "content": "hello"}])
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    bad = "{bad" + "x" * 100  # 3 MB of them: the good line comes in a later read
    path.write_text("\n".join([bad] * 30_000 + [good]) + "\n", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextfold.cli", "pack", str(path), "--context-tokens", "100", "-o", str(out)],
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # the first bad line's message, then the reader goes away
    proc.stderr.close()
    assert proc.wait(timeout=60) == 1  # bad lines, as with standard error open
    assert out.read_text(encoding="utf-8") == good + "\n"


def test_window_with_standard_error_closed_keeps_its_data_clean(tmp_path: Path) -> None:
    # window wrote its bad lines with print(): with standard error closed (2>&-) they
    # went to standard output, into the data; a reader that went away ended the run.
    good = json.dumps([{"role": "user", "content": "hello"}])
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(["{bad" + "x" * 100] * 30_000 + [good]) + "\n", encoding="utf-8")
    header = "line\tmessages\ttokens\twindow_start\twindow_messages\twindow_tokens\n"
    last = f"30001\t1\t{cf.tokens_of(json.loads(good))}\t0\t1\t{cf.tokens_of(json.loads(good))}\n"
    command = [sys.executable, "-m", "contextfold.cli", "window", str(path)]
    closed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    no_stderr = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, runpy, sys; os.close(2); sys.argv = sys.argv[1:]; runpy.run_module("
            "'contextfold.cli', run_name='__main__')",
            *command[2:],
        ],
        stdout=subprocess.PIPE,
    )
    for result in (closed, no_stderr):
        assert (result.returncode, result.stdout.decode()) == (1, header + last)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None
    proc.stderr.readline()  # the first bad line's message, then the reader goes away
    proc.stderr.close()
    assert (proc.stdout.read().decode(), proc.wait(timeout=60)) == (header + last, 1)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('[{"role": "user"}]', "ValueError"),
        ('[{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]', "KeyError"),
    ],
)
def test_bench_leaves_out_a_peer_that_cannot_read_a_line(
    line: str, error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A line contextfold packs and LangChain cannot convert ended the bench in a traceback.
    pytest.importorskip("langchain_core")
    path = tmp_path / "lines.jsonl"
    path.write_text(f'{line}\n[{{"role": "user", "content": "hi"}}]\n', encoding="utf-8")
    code, out, err = run(["bench", str(path), "--repeat", "1"], capsys)
    assert code == 0 and "pack_handoff (reference)" in out and "langchain" not in out
    assert f"trim_messages (langchain) left out: it cannot read these transcripts ({error}: " in err


def test_threads_past_the_cpus_are_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Not an allocation sized by them: the reads follow the CPUs.
    path = tmp_path / "in.jsonl"
    path.write_text('[{"role": "user", "content": "hi"}]\n', encoding="utf-8")
    code, out, err = run(["pack", str(path), "--context-tokens", "100", "--threads", str(10**6)], capsys)
    assert (code, out) == (0, '[{"role": "user", "content": "hi"}]\n') and "Traceback" not in err


def test_threads_past_any_count_pack_as_the_cpus_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A maximum, as on every batch function: capped, not refused.
    path = tmp_path / "in.jsonl"
    path.write_text('[{"role": "user", "content": "hi"}]\n', encoding="utf-8")
    code, out, _ = run(["pack", str(path), "--context-tokens", "100", "--threads", str(10**20)], capsys)
    assert (code, out) == run(["pack", str(path), "--context-tokens", "100", "--threads", "1"], capsys)[:2]
    assert code == 0 and out


def test_window_with_a_huge_window_is_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    transcript = [{"role": "user", "content": "x"}] * 3
    code, _, err = run(["window", "-", "--window", "1" + "0" * 23], capsys, stdin=json.dumps(transcript) + "\n")
    assert code in (0, 2) and "Traceback" not in err
    assert code == 0 or err.count("contextfold:") == 1


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["--tokenizer", "o200k_base"], {"estimate_tokens": "o200k_base"}),
        (["--tokenizer", "cl100k_base", "--cut", "chunked"], {"estimate_tokens": "cl100k_base", "cut": "chunked"}),
        (["--sizing", "provider", "--image-tokens", "900"], {"sizing": "provider", "image_tokens": 900}),
        (
            ["--sizing", "provider", "--tokenizer", "o200k_base"],
            {"sizing": "provider", "estimate_tokens": "o200k_base"},
        ),
    ],
    ids=["o200k", "cl100k", "provider", "provider-o200k"],
)
def test_tokenizer_and_sizing_equal_pack_request(
    backend: str, argv: list[str], options: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiktoken_encoding("o200k_base"), tiktoken_encoding("cl100k_base")  # the reference counts through tiktoken
    tools = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]
    rows: list[Any] = [{"id": k, "messages": m} for k, m in enumerate(openai_corpus()[:8])]
    rows += anthropic_corpus()[:3]
    rows += [
        {"id": k, "instructions": "Be brief.", "tools": tools, "input": responses_items(m)}
        for k, m in enumerate(openai_corpus()[:4])
    ]
    rows.append({"input": "a plain string input", "tools": tools})
    lines = [json.dumps(r, ensure_ascii=k % 2 == 0).encode() for k, r in enumerate(rows)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = run(["pack", str(path), "--context-tokens", "2500", *argv], capsys)
    assert code == 0
    expected = [cf.pack_request(line, target_context_tokens=2500, **options) for line in lines]
    assert out.encode() == b"".join(p.body + b"\n" for p in expected)
    summary = " ".join(err.split())  # the console wraps long lines
    assert f"-> {sum(p.tokens for p in expected):,}," in summary
    assert f"{sum(p.dropped for p in expected):,} message(s) dropped" in summary


def test_a_tokenizer_that_cannot_load_is_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the reference backend without tiktoken's vocabulary, every line was a bad line,
    # each block of lines trying to load it again (from the network).
    from contextfold import _backend
    from contextfold.reference import count_cache

    loads = []

    def unavailable(name: str) -> Any:
        loads.append(name)
        raise cf.ArgumentError(f"tiktoken encoding {name!r} is not available offline: no network")

    monkeypatch.setattr(_backend, "impl", IMPLS["python"])
    monkeypatch.setattr(count_cache, "tiktoken_count", unavailable)
    forget = (count_cache.exact_count.cache_clear, count_cache._exact_sizers.cache_clear)  # what loaded before
    for clear in forget:
        clear()
    try:
        path = tmp_path / "in.jsonl"
        path.write_text('[{"role": "user", "content": "hi"}]\n' * 3, encoding="utf-8")
        code, out, err = run(["pack", str(path), "--context-tokens", "100", "--tokenizer", "o200k_base"], capsys)
    finally:
        for clear in forget:
            clear()
    assert (code, out, loads) == (2, "", ["o200k_base"])
    assert err == "contextfold: tiktoken encoding 'o200k_base' is not available offline: no network\n"


def test_edit_flags_pack_as_pack_request_with_edits(capsys: pytest.CaptureFixture[str]) -> None:
    convo = max(openai_corpus(), key=len)
    flags = ["--clear-tool-uses", "--keep-tool-uses", "2", "--exclude-tool", "memory", "--clear-thinking"]
    code, out, _ = run(["pack", "-", "--context-tokens", "8000", "--cut", "chunked", *flags], capsys, json.dumps(convo))
    edits = [cf.ClearToolUses(keep=2, exclude_tools=("memory",)), cf.ClearThinking(keep=1)]
    expected = cf.pack_handoff(convo, target_context_tokens=8000, cut="chunked", edits=edits)
    assert code == 0 and expected.applied_edits
    assert json.loads(out) == expected.messages
