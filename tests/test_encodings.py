"""Exact token counts with the embedded OpenAI encodings (``estimate_tokens="o200k_base"``).

Counts must equal tiktoken's ``len(encode(text, disallowed_special=()))`` on every corpus
message text and on generated text; a message costs that count plus 4 on the SPEC §3
text; packing with an encoding name satisfies SPEC §5 and equals packing with the same
count passed as a Python callable, on both backends and in batches.
"""

from __future__ import annotations

import os
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import contextfold as cf
import pytest
from contextfold import _backend, reference
from contextfold._contract import estimator_text
from contextfold.errors import ArgumentError, EstimatorError, MessageTypeError
from contextfold.synthetic import agent_run
from hypothesis import given
from hypothesis import strategies as st

from .conftest import anthropic_corpus, examples, native_required, openai_corpus
from .offline_tiktoken import ENCODINGS, tiktoken_encoding
from .strategies import transcripts
from .test_pack import check_contract

pytestmark = pytest.mark.usefixtures("offline_tiktoken")  # the reference backend counts with tiktoken


def tiktoken_count(name: str) -> Any:
    encoding = tiktoken_encoding(name)
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def corpus_messages() -> list[dict[str, Any]]:
    rows = [m for t in openai_corpus() for m in t]
    for row in anthropic_corpus():
        rows += row["messages"]
        if row.get("system") is not None:
            rows.append({"role": "system", "content": row["system"]})
    return rows


@pytest.mark.parametrize("name", ENCODINGS)
def test_counts_equal_tiktoken_on_every_corpus_message(name: str) -> None:
    native_required()
    count = tiktoken_count(name)
    messages = corpus_messages()
    assert len(messages) > 1_000
    for m in messages:
        text = estimator_text(m)
        assert cf.count_tokens(text, name) == count(text), text[:200]
        assert cf.message_tokens(m, estimate_tokens=name) == count(text) + 4


# Text that stresses the split patterns: the classes they test, the runs they group, and
# what tiktoken treats specially when asked to (here: never).
_ALPHABET = st.sampled_from(
    [
        *string.printable,
        *"  \u00a0\u2028\u3000\ufeff\x85\x1c",
        *"éßİıǅ\u0301\u0345ΩЖ中文日本語한국어ٱ\u0663",
        "😀",
        "𝔘",
        "\U0010ffff",
        "\ud800",
        "\udfff",
        "\ud83d",
        "\ude00",
        "<|endoftext|>",
        "<|fim_prefix|>",
        "<|im_start|>",
        "<|endofprompt|>",
        "'s",
        "'LL",
        "'Re",
        " " * 7,
        "\t\n \n",
        "\r\n\r\n",
        "0123456789",
        "١٢٣",
        "!!!???...",
        "////",
        "```",
    ]
)
_TEXTS = st.lists(_ALPHABET, max_size=60).map("".join) | st.text(max_size=200)


@examples(1_500)
@given(_TEXTS)
def test_counts_equal_tiktoken_on_generated_text(text: str) -> None:
    native_required()
    for name in ENCODINGS:
        assert cf.count_tokens(text, name) == tiktoken_count(name)(text)


@pytest.mark.parametrize(
    "text",
    ["", " ", "x \n ", "a\n\n  b", "   \n", "\ud83d\ude00", "\ud800\ud800", "a" * 10_000, "9" * 1_001, " " * 5_000],
)
def test_edges_equal_tiktoken(text: str) -> None:
    native_required()
    for name in ENCODINGS:
        assert cf.count_tokens(text, name) == tiktoken_count(name)(text)


def test_the_reference_counts_through_tiktoken(backend: str) -> None:
    text = "The reference backend counts with tiktoken: <|endoftext|> \ud800 😀"
    for name in ENCODINGS:
        assert cf.count_tokens(text, name) == tiktoken_count(name)(text)


@given(st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": _TEXTS}), max_size=4))
@examples(200)
def test_message_costs_agree_across_backends(messages: list[dict[str, Any]]) -> None:
    native = native_required()
    for name in ENCODINGS:
        tiktoken_count(name)  # the reference needs tiktoken's encoding available
        assert native.tokens_of(messages, name) == reference.tokens_of(messages, name)


def test_tool_calls_and_parts_are_counted_as_their_compact_json(backend: str) -> None:
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "done.\ud800"}],
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"n": 1.0}'}}],
    }
    for name in ENCODINGS:
        expected = tiktoken_count(name)(estimator_text(message)) + 4
        assert cf.message_tokens(message, estimate_tokens=name) == expected
        assert cf.tokens_of([message, message], estimate_tokens=name) == 2 * expected


def test_keys_are_counted_in_javascripts_order(backend: str) -> None:
    # JSON.stringify writes array-index keys first, ascending: the count is of that text.
    message = {"role": "user", "content": [{"a": 1, "10": "x", "7": "y"}]}
    written = '[{"7":"y","10":"x","a":1}]'
    for name in ENCODINGS:
        count = tiktoken_count(name)
        assert count(written) != count('[{"a":1,"10":"x","7":"y"}]')  # the order shows
        assert cf.message_tokens(message, estimate_tokens=name) == count(written) + 4


def test_the_first_bad_value_in_order_is_named(backend: str) -> None:
    # Keys are checked as the text reaches them, values too: the value before a bad key is named.
    for content, error in (
        ([{"a": object(), 1: "x"}], "expected a JSON value"),
        ([{1: object(), "a": "x"}], "expected str object keys, got int"),
        ([{(1,): object(), "a": "x"}], "expected str object keys, got tuple"),
    ):
        with pytest.raises(cf.MessageTypeError, match=error):
            cf.message_tokens({"role": "user", "content": content}, estimate_tokens="o200k_base")


def test_bad_names_and_texts_raise(backend: str) -> None:
    with pytest.raises(ArgumentError, match="unknown encoding 'gpt2'"):
        cf.count_tokens("x", "gpt2")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="unknown encoding 'O200K_BASE'"):
        cf.tokens_of([{"role": "user", "content": "x"}], estimate_tokens="O200K_BASE")  # type: ignore[arg-type]
    with pytest.raises(MessageTypeError, match="text: expected str, got bytes"):
        cf.count_tokens(b"x", "o200k_base")  # type: ignore[arg-type]
    with pytest.raises(EstimatorError, match="callable or an encoding name, got int"):
        cf.tokens_of([], estimate_tokens=3)  # type: ignore[arg-type]
    with pytest.raises(MessageTypeError, match="message 1, field 'content'"):
        cf.tokens_of([{"role": "user"}, {"role": "user", "content": 3}], estimate_tokens="o200k_base")


def _both(messages: list[dict[str, Any]], name: str, **kwargs: Any) -> cf.HandoffPack:
    """Packs by name on both backends and with the same count as a callable: all equal."""
    native = native_required()
    results = []
    for impl in (native, reference):
        with _backend.using(impl):
            results.append(cf.pack_handoff(messages, estimate_tokens=name, **kwargs))
    results.append(cf.pack_handoff(messages, estimate_tokens=tiktoken_count(name), **kwargs))
    first = results[0]
    for other in results[1:]:
        assert other == first
    return first


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("budget", [0, 1_000, 8_000, 200_000])
def test_packing_by_name_keeps_the_contract_on_the_corpus(name: str, budget: int) -> None:
    for messages in openai_corpus():
        for cut in ("greedy", "chunked"):
            check_contract(messages, budget, _both(messages, name, target_context_tokens=budget, cut=cut), [], name)
    for row in anthropic_corpus():
        pack = _both(row["messages"], name, target_context_tokens=budget, system=row.get("system"))
        assert pack.fits is False or pack.tokens <= budget


@examples(150)
@given(transcripts(), st.integers(0, 2_500), st.sampled_from(ENCODINGS))
def test_packing_by_name_keeps_the_contract_on_generated_transcripts(
    messages: list[dict[str, Any]], budget: int, name: str
) -> None:
    check_contract(messages, budget, _both(messages, name, target_context_tokens=budget), [], name)


@pytest.mark.parametrize("threads", [1, 2])
def test_pack_many_by_name_equals_one_by_one(threads: int) -> None:
    native_required()
    batch = [*openai_corpus(), agent_run(40), agent_run(80, seed=3)]
    for name in ENCODINGS:
        for budget in (2_000, 8_000):
            packs = cf.pack_many(batch, target_context_tokens=budget, estimate_tokens=name, threads=threads)
            one_by_one = [cf.pack_handoff(m, target_context_tokens=budget, estimate_tokens=name) for m in batch]
            assert packs == one_by_one
    systems = [row.get("system") for row in anthropic_corpus()]
    rows = [row["messages"] for row in anthropic_corpus()]
    options: dict[str, Any] = {"target_context_tokens": 500, "estimate_tokens": "o200k_base", "systems": systems}
    packs = cf.pack_many(rows, threads=threads, **options)
    with _backend.using(reference):
        expected = cf.pack_many(rows, **options)
    assert packs == expected


def test_windowing_takes_a_name(backend: str) -> None:
    run = agent_run(60)
    count = tiktoken_count("o200k_base")
    for window, budget in ((80, 64_000), (40, 4_000)):
        by_name = cf.window_start(run, window=window, token_budget=budget, estimate_tokens="o200k_base")
        assert by_name == cf.window_start(run, window=window, token_budget=budget, estimate_tokens=count)
    assert cf.compact_tail_start_for_budget(run, 3_000, estimate_tokens="o200k_base") == (
        cf.compact_tail_start_for_budget(run, 3_000, estimate_tokens=count)
    )
    assert list(cf.message_tokens_array(run, estimate_tokens="cl100k_base")) == [
        cf.message_tokens(m, estimate_tokens=tiktoken_count("cl100k_base")) for m in run
    ]


def test_the_offline_vocabularies_leave_no_file_behind(tmp_path: Path) -> None:
    tiktoken_encoding("cl100k_base")  # skips without tiktoken or the crate's file
    script = (
        "import os; from tests.offline_tiktoken import cache_folder, tiktoken_encoding; "
        "tiktoken_encoding('cl100k_base'); print(cache_folder(), len(os.listdir(cache_folder())))"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    folder, files = done.stdout.split()
    assert Path(folder).parent == tmp_path and files == "1"  # the vocabulary was there while it ran
    assert list(tmp_path.iterdir()) == []
