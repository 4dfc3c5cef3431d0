"""LiteLLM: a proxy hook that packs every chat request, and drop-in trim and count functions.

``pip install 'contextfold[litellm]'``.

Proxy (``config.yaml``)::

    litellm_settings:
      callbacks: ["contextfold.integrations.litellm.proxy_handler_instance"]
    callback_settings:
      contextfold:                 # all optional
        cut: chunked               # greedy (default) or chunked: prompt-cache-stable cut points
        # tokenizer: o200k_base    # exact counts (o200k_base, cl100k_base: native; other
                                   # tiktoken encodings through tiktoken); default ⌈UTF-16 length / 4⌉
        sizing: provider           # provider (default): images a flat image_tokens,
                                   # signatures and encrypted reasoning left out, whatever
                                   # counts the rest; seed: everything by length
        image_tokens: 1600         # what an image costs with provider sizing
        pinned: [1]                # message indices kept with their exchanges, in every request
        summary: null              # the note's body instead of the listed turns
        edits:                     # context edits before folding (contextfold.ClearToolUses, ClearThinking)
          - clear_tool_uses: {keep: 3}
          - clear_thinking: {keep: 1}
        fallback_window: 32000     # for models whose window LiteLLM does not know
        windows: {my-model: 8000}  # per-model windows, over LiteLLM's model map
        window: null               # one window for every model, over all of the above
        default_reserve: 0         # output reserve when a request sets no max_tokens
        window_cache_seconds: 60   # how long a model's looked-up window is reused
        count_tokens_in: true      # report a folded request's tokens in (a pass over all of it)

:class:`ContextfoldHook`'s ``async_pre_call_hook`` packs ``data["messages"]`` for chat
completions (OpenAI shape) and Anthropic ``/v1/messages`` requests (with their top-level
``system``), and ``data["input"]`` for Responses requests (``/v1/responses``, call type
``aresponses``: the items packed as ``shape="responses"``, their ``instructions``
counted); every other call type passes untouched. The window is the request model's
``max_input_tokens`` from the proxy's model list (``model_info``) or LiteLLM's model map,
unless the settings override it; the output reserve is the request's
``max_completion_tokens``, ``max_tokens`` or ``max_output_tokens``; the request's ``tools`` are counted as
:func:`contextfold.pack_handoff`'s ``tools=`` (never dropped), and a ``tool_choice``
naming one by its compact JSON, added to the reserve.
A request that already fits is left as it came, and so is one whose messages contextfold
cannot read (logged; the provider answers it as it would have). A request whose must-keep
part (system, latest user message and its tool exchange) is over the window is sent
packed to that core (the provider will refuse it either way). Packing runs on the event
loop: native code, 30 µs for an 88,000-token request with chars/4, about 0.5 ms with
o200k_base, plus a pass over the whole request when a folded one's tokens in are reported
(``count_tokens_in``; the figures are in docs/integrations.md).

Each packed request is reported (:meth:`ContextfoldHook.report`): in its metadata as
``metadata["contextfold"]`` for LiteLLM's loggers, as a ``contextfold.gateway`` log record,
and in :attr:`ContextfoldHook.counters`.

Library drop-ins, same parameters and return shapes as LiteLLM's:
``from contextfold.integrations.litellm import trim_messages, token_counter``.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import contextfold as cf
from contextfold._contract import DEFAULT_IMAGE_TOKENS, EncodingName, SizingName, whole
from contextfold._edits import Edit, iterable_of
from contextfold._js import (  # JSON.stringify, as the packer sizes tools; errors name the field
    compact_json,
    is_str,
    mapping_get,
    quoted,
)

from ._common import (
    Estimator,
    RequestOptions,
    edits_from_settings,
    gateway_sizing,
    missing_extra,
    output_reserve,
    per_model,
    text_tokens,
)
from ._report import PackCounters, PackReport, printable, tokens_in, whole_request_options

try:
    import litellm
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise missing_extra("litellm", exc) from exc

__all__ = ["ContextfoldHook", "proxy_handler_instance", "token_counter", "trim_messages"]

log = logging.getLogger("contextfold.integrations.litellm")

_WINDOWS_KEPT = 1_024
"""Model windows the hook remembers at most: model names come from clients."""

DEFAULT_TRIM_RATIO = 0.75
"""LiteLLM's ``trim_messages`` default: pack into 75% of the model's input window."""

SETTINGS_KEY = "contextfold"
"""The ``callback_settings`` entry of the proxy's ``config.yaml`` the hook reads."""

OPENAI_CHAT_CALLS = frozenset({"completion", "acompletion"})
ANTHROPIC_CHAT_CALLS = frozenset({"anthropic_messages", "aanthropic_messages"})
RESPONSES_CALLS = frozenset({"responses", "aresponses"})

RequestShape = Literal["openai", "anthropic", "responses"]
SHAPE_OF_CALL: dict[str, RequestShape] = {
    **{call: "openai" for call in OPENAI_CHAT_CALLS},
    **{call: "anthropic" for call in ANTHROPIC_CHAT_CALLS},
    **{call: "responses" for call in RESPONSES_CALLS},
}
"""The LiteLLM call types the hook packs, and the shape of each one's transcript."""
_SETTINGS = (
    "cut",
    "chunk_tokens",
    "tokenizer",
    "sizing",
    "image_tokens",
    "pinned",
    "summary",
    "edits",
    "fallback_window",
    "windows",
    "window",
    "default_reserve",
    "window_cache_seconds",
    "count_tokens_in",
)


def model_window(model: str) -> int | None:
    """``max_input_tokens`` of ``model``: the proxy's model group first, then LiteLLM's map."""
    router = _proxy_router()
    if router is not None:
        group = router.get_model_group_info(model)
        if group is not None and group.max_input_tokens:
            return int(group.max_input_tokens)
    try:
        info = litellm.get_model_info(model)
    except Exception:  # LiteLLM raises a bare Exception for a model it does not map
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def _proxy_router() -> Any:
    """The running proxy's router, or None outside the proxy (never imports the proxy)."""
    server = sys.modules.get("litellm.proxy.proxy_server")
    return getattr(server, "llm_router", None)


def named_estimator(tokenizer: str | None) -> Estimator | None:
    """The estimator for a tokenizer name: None for the default; ``o200k_base`` and
    ``cl100k_base`` counted natively; any other tiktoken encoding through tiktoken."""
    if tokenizer is None:
        return None
    if tokenizer in ("o200k_base", "cl100k_base"):
        return tokenizer  # type: ignore[return-value]  # checked just above
    from contextfold.estimators import tiktoken_estimator

    return tiktoken_estimator(tokenizer)


def tools_tokens(data: Mapping[str, Any], estimate: Estimator | None) -> int:
    """Tokens of a request's ``tools`` and ``tool_choice`` as sent (their compact JSON);
    a value JSON cannot hold raises :class:`~contextfold.MessageError` naming its key."""
    total = 0
    for key in ("tools", "tool_choice"):
        value = data.get(key)
        if isinstance(value, (list, dict)) and value:
            total += text_tokens(compact_json(value, key), estimate)
    return total


class ContextfoldHook(CustomLogger):
    """A LiteLLM ``CustomLogger`` whose pre-call hook packs chat requests into the window.

    Arguments given here win over the proxy's ``callback_settings.contextfold`` entry
    (the module doc lists the keys), which is read when the hook is built: the proxy sets
    ``callback_settings`` before it loads its callbacks. Every setting is checked then: a
    bad one raises :class:`~contextfold.ArgumentError` naming it, at the proxy's start-up,
    rather than failing each request.
    """

    def __init__(
        self,
        *,
        cut: Literal["greedy", "chunked"] | None = None,
        chunk_tokens: int | None = None,
        tokenizer: str | None = None,
        sizing: SizingName | None = None,
        image_tokens: int | None = None,
        pinned: Sequence[int] | None = None,
        summary: str | None = None,
        edits: Sequence[Edit | Mapping[str, Any]] | None = None,
        fallback_window: int | None = None,
        windows: Mapping[str, int] | None = None,
        window: int | None = None,
        default_reserve: int | None = None,
        window_cache_seconds: float | None = None,
        count_tokens_in: bool | None = None,
    ) -> None:
        super().__init__()
        given = {
            "cut": cut,
            "chunk_tokens": chunk_tokens,
            "tokenizer": tokenizer,
            "sizing": sizing,
            "image_tokens": image_tokens,
            "pinned": pinned,
            "summary": summary,
            "edits": edits,
            "fallback_window": fallback_window,
            "windows": windows,
            "window": window,
            "default_reserve": default_reserve,
            "window_cache_seconds": window_cache_seconds,
            "count_tokens_in": count_tokens_in,
        }
        configured = dict(litellm.callback_settings.get(SETTINGS_KEY) or {})
        unknown = sorted(set(configured) - set(_SETTINGS))
        if unknown:
            raise cf.ArgumentError(f"callback_settings.{SETTINGS_KEY}: unknown keys {unknown}; known: {_SETTINGS}")
        settings: dict[str, Any] = {
            "cut": "greedy",
            "chunk_tokens": None,
            "tokenizer": None,
            "sizing": None,
            "image_tokens": DEFAULT_IMAGE_TOKENS,
            "pinned": (),
            "summary": None,
            "edits": (),
            "windows": {},
            "default_reserve": 0,
            "window_cache_seconds": 60.0,
            "count_tokens_in": True,
        }
        settings.update(configured)
        settings.update({k: v for k, v in given.items() if v is not None})
        self._estimate = named_estimator(settings["tokenizer"])
        self._settings, self._template = _checked(settings, self._estimate)
        self._options = RequestOptions(self._template)
        self.counters = PackCounters()
        """What this hook packed since it was built (:meth:`PackCounters.snapshot`)."""
        self._windows: dict[str, tuple[int | None, float]] = {}

    def settings(self) -> dict[str, Any]:
        """The settings in force (checked): the arguments over ``callback_settings.contextfold``,
        ``sizing`` resolved (``"provider"`` unless given, whatever counts the text)."""
        return self._settings

    def window_for(self, model: str) -> int | None:
        """The window a request for ``model`` is packed into, or None (left as it came)."""
        settings = self._settings
        if settings.get("window") is not None:
            return int(settings["window"])
        if model in settings["windows"]:
            return int(settings["windows"][model])
        found = self._looked_up(model) if model else None
        return found if found is not None else settings.get("fallback_window")

    def _looked_up(self, model: str) -> int | None:
        """:func:`model_window`, remembered for ``window_cache_seconds`` per model name.

        The proxy's model-group lookup costs 0.2 ms a call, up to 13 ms at p99 (measured),
        ten times the packing itself; model lists change rarely, so it is not redone per
        request.
        """
        now = time.monotonic()
        cached = self._windows.get(model)
        if cached is not None and now - cached[1] < self._settings["window_cache_seconds"]:
            return cached[0]
        window = model_window(model)
        if len(self._windows) >= _WINDOWS_KEPT:  # model names come from clients: bounded
            self._windows.clear()
        self._windows[model] = (window, now)
        return window

    def pack_request(
        self, data: dict[str, Any], *, shape: RequestShape = "openai", call_type: str | None = None
    ) -> cf.HandoffPack | None:
        """Packs the request's transcript in place of its list (the message objects are reused).

        The transcript is ``data["messages"]`` for a chat request (``shape="openai"``) and
        an Anthropic one (``"anthropic"``, its top-level ``system`` counted), and
        ``data["input"]`` for a Responses request (``"responses"``, its ``instructions``
        counted). Returns the pack, or None when the request was left as it came: no list
        to pack (a Responses ``input`` that is a plain string), no known window, or a
        reserve that leaves no room.

        A packed request is reported (:meth:`report`) under ``call_type`` (default: the shape).
        """
        key, system = ("input", data.get("instructions")) if shape == "responses" else ("messages", data.get("system"))
        transcript = data.get(key)
        window = self.window_for(str(data.get("model") or ""))
        if not isinstance(transcript, list) or window is None:
            return None
        settings = self._settings
        choice = tools_tokens({"tool_choice": data.get("tool_choice")}, self._estimate)
        reserve = output_reserve(data, settings["default_reserve"]) + choice
        if reserve >= window:
            log.warning("contextfold: output reserve %d leaves no room in the %d-token window", reserve, window)
            return None
        options = self._options.get(window, reserve, shape, len(transcript))
        system = system if shape != "openai" else None
        tools = data.get("tools") or None
        pack = cf.pack_handoff(transcript, options=options, system=system, tools=tools)
        counted: int | None = pack.tokens
        if pack.dropped or pack.applied_edits:
            whole = whole_request_options(options)
            count = lambda: cf.pack_handoff(transcript, options=whole, system=system, tools=tools).tokens  # noqa: E731
            counted = tokens_in(count) if settings["count_tokens_in"] else None
            data[key] = pack.messages
        model = str(data.get("model") or "") or None
        report = PackReport.of(pack, adapter="litellm", model=model, route=call_type or shape, tokens_in=counted)
        self.report(data, report)
        return pack

    def report(self, data: dict[str, Any], report: PackReport) -> None:
        """Reports a packed request: into its metadata, as ``metadata["contextfold"]``
        (``litellm_metadata`` on the routes where the proxy keeps it there: Responses,
        ``/v1/messages``), where LiteLLM's loggers read it (a ``CustomLogger`` finds it in
        ``kwargs["litellm_params"]["metadata"]``); as a ``contextfold.gateway`` log record;
        and in :attr:`counters`."""
        key = "litellm_metadata" if isinstance(data.get("litellm_metadata"), dict) else "metadata"
        metadata = data.get(key)
        if not isinstance(metadata, dict):
            metadata = data[key] = {}
        metadata[SETTINGS_KEY] = report.as_dict()
        self.counters.record(report)

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        kind = str(getattr(call_type, "value", call_type))
        shape = SHAPE_OF_CALL.get(kind)
        if shape is not None:
            try:
                self.pack_request(data, shape=shape, call_type=kind)
            except cf.MessageError as exc:  # malformed messages: the provider answers them, as it would
                log.warning("contextfold: %s request forwarded unpacked: %s", printable(str(data.get("model"))), exc)
        return data


def _is_number(value: Any) -> bool:
    """Whether ``value`` is an int or a float (a subclass included) but no bool, by its
    type: an object whose ``__class__`` claims one is none."""
    kind = type(value)
    return kind is not bool and issubclass(kind, (int, float))


def _checked(settings: dict[str, Any], estimate: Estimator | None) -> tuple[dict[str, Any], cf.PackOptions]:
    """``settings`` with each value checked, an error naming its key, and the packing
    options they make (window and reserve still 0: each request sets its own). The pack
    options are checked as :class:`contextfold.PackOptions` checks them, ``sizing``
    resolved for a gateway (:func:`~._common.gateway_sizing`)."""
    settings["sizing"] = gateway_sizing(settings["sizing"])
    if not isinstance(settings["pinned"], Sequence) or isinstance(settings["pinned"], (str, bytes)):
        raise cf.ArgumentError(f"pinned must be a list of message indices, got {quoted(settings['pinned'])}")
    settings["edits"] = edits_from_settings(settings["edits"])
    template = cf.PackOptions(
        target_context_tokens=0,
        estimate_tokens=estimate,
        pinned=settings["pinned"],
        summary=settings["summary"],
        cut=settings["cut"],
        chunk_tokens=settings["chunk_tokens"],
        sizing=settings["sizing"],
        image_tokens=settings["image_tokens"],
        edits=settings["edits"],
    )
    settings["pinned"] = template.pinned
    for key in ("window", "fallback_window"):
        if settings.get(key) is not None:
            settings[key] = whole(key, settings[key], 1)
    settings["windows"] = per_model("windows", settings["windows"], 1)
    settings["default_reserve"] = whole("default_reserve", settings["default_reserve"])
    if type(settings["count_tokens_in"]) is not bool:  # by its type: `__class__` may claim bool
        raise cf.ArgumentError(f"count_tokens_in must be true or false, got {quoted(settings['count_tokens_in'])}")
    seconds = settings["window_cache_seconds"]
    if not _is_number(seconds) or not seconds >= 0:
        raise cf.ArgumentError(f"window_cache_seconds must be a number of seconds from 0, got {quoted(seconds)}")
    return settings, template


proxy_handler_instance = ContextfoldHook()
"""The instance ``config.yaml`` names in ``litellm_settings.callbacks``."""


def _tokenizer_estimator(custom_tokenizer: Any) -> Callable[[str], int] | None:
    """An estimator from a LiteLLM ``custom_tokenizer`` ({"type", "tokenizer"}), or None."""
    if custom_tokenizer is None:
        return None
    get = mapping_get(custom_tokenizer)
    kind = get("type") if get is not None else None
    tokenizer: Any = get("tokenizer") if get is not None else None
    if kind == "openai_tokenizer":
        return lambda text: len(tokenizer.encode(text, disallowed_special=()))
    if kind == "huggingface_tokenizer":
        return lambda text: len(tokenizer.encode(text).ids)
    expected = "LiteLLM's {'type': 'openai_tokenizer' | 'huggingface_tokenizer', 'tokenizer': ...}"
    raise cf.ArgumentError(f"custom_tokenizer: expected {expected}, got {quoted(custom_tokenizer)}")


_O200K_MODELS = re.compile(r"(?:chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4)(?:[-.:@]|$)")
_CL100K_MODELS = re.compile(r"(?:gpt-4|gpt-3\.5|gpt-35)(?:[-.:@]|$)")


def model_encoding(model: str | None) -> EncodingName | None:
    """The OpenAI encoding ``model`` counts in: ``o200k_base`` for the gpt-4o, gpt-4.1,
    gpt-4.5, gpt-5 and o1/o3/o4 families, ``cl100k_base`` for gpt-4 and gpt-3.5, None for
    any other model (a provider prefix such as ``openai/`` or ``azure/`` is ignored)."""
    if model is not None and not is_str(model):
        raise cf.ArgumentTypeError(f"model must be a str or None, got {type(model).__name__}")
    name = (model or "").rsplit("/", 1)[-1].lower()
    if _O200K_MODELS.match(name):
        return "o200k_base"
    if _CL100K_MODELS.match(name):
        return "cl100k_base"
    return None


REPLY_PRIMING = 3
"""Tokens OpenAI adds to a chat request to prime the reply, which ``litellm.token_counter``
counts with the messages (``<|start|>assistant<|message|>``)."""


def token_counter(
    model: str = "",
    custom_tokenizer: Any = None,
    text: str | list[str] | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    count_response_tokens: bool | None = False,
    tools: list[Any] | None = None,
    tool_choice: Any = None,
    use_default_image_token_count: bool | None = False,
    default_token_count: int | None = None,
    *,
    image_tokens: int = DEFAULT_IMAGE_TOKENS,
) -> int:
    """``litellm.token_counter``'s signature, counted as contextfold packs.

    Counts in the encoding ``model`` uses (:func:`model_encoding`: o200k_base for
    gpt-4o, 4.1, 5 and the o-series, cl100k_base for gpt-4 and gpt-3.5, exactly, natively),
    else by a ``custom_tokenizer``, else ⌈UTF-16 length / 4⌉. A message costs its text's
    count + 4 (:func:`contextfold.tokens_of`), and messages prime the reply with 3 more, as
    LiteLLM counts them (not with ``count_response_tokens``); ``text`` is counted bare;
    ``tools`` and ``tool_choice`` add their compact JSON (LiteLLM formats the tools its own
    way). On text-only messages it equals LiteLLM's count wherever LiteLLM counts exactly:
    from 1.10x LiteLLM counts a text in 1,024-character pieces (about a token off a
    piece), where this counts it whole, as tiktoken does; and LiteLLM also counts every
    other string field of a message (a tool message's ``tool_call_id``, a ``name``), where
    this counts what packing counts. Images and documents are sized as a provider
    bills them, a flat ``image_tokens`` each (not by their base64), and thinking
    signatures and encrypted reasoning cost nothing (``sizing="provider"``, whatever
    counts). LiteLLM's image and default-count
    options are accepted and not used.
    """
    del use_default_image_token_count, default_token_count
    if text is None and messages is None:
        raise ValueError("text and messages cannot both be None")
    encoding = model_encoding(model)
    estimate: Estimator | None = _tokenizer_estimator(custom_tokenizer) or encoding
    total = 0
    if messages is not None:
        sized: Any = _message_dicts(list(messages))
        total += cf.tokens_of(sized, estimate_tokens=estimate, sizing="provider", image_tokens=image_tokens)
        total += REPLY_PRIMING if count_response_tokens is False else 0  # LiteLLM's own test
    if text is not None:
        texts = [text] if is_str(text) else iterable_of("text", text, "str")
        total += sum(text_tokens(t, estimate) for t in texts)
    return total + tools_tokens({"tools": tools, "tool_choice": tool_choice}, estimate)


def trim_messages(
    messages: list[dict[str, Any]],
    model: str | None = None,
    trim_ratio: float = DEFAULT_TRIM_RATIO,
    return_response_tokens: bool = False,
    max_tokens: int | None = None,
) -> Any:
    """``litellm.utils.trim_messages``' signature, packed by :func:`contextfold.pack_handoff`.

    Packs into ``max_tokens``, or ``trim_ratio`` of the model's ``max_input_tokens`` in
    LiteLLM's model map; a model LiteLLM does not know, with no ``max_tokens``, leaves the
    messages as they are and returns just them (as LiteLLM does). Unlike LiteLLM's, tool calls stay with their
    results, the latest user message is kept, the dropped middle becomes one note, and the
    returned list holds the caller's own message objects (a LiteLLM ``Message``, as a reply's
    ``choices[0].message`` is, read as the dict it dumps to). Sized as :func:`token_counter`
    sizes them for ``model``: in its encoding (:func:`model_encoding`), else by
    ⌈UTF-16 length / 4⌉, images a flat ``DEFAULT_IMAGE_TOKENS`` each (not their base64),
    the reply's priming included. With ``return_response_tokens``, returns
    ``(messages, max_tokens - token_counter of the result)``.
    """
    encoding = model_encoding(model)
    if not _is_number(trim_ratio) or not 0 <= trim_ratio < math.inf:
        raise cf.ArgumentError(f"trim_ratio must be a number from 0 up, got {quoted(trim_ratio)}")
    if max_tokens is None:
        window = model_window(model) if model else None
        if window is None:
            return messages  # LiteLLM's shape here, even with return_response_tokens
        share = window * trim_ratio
        if share >= 2**64:  # inf included
            ratio = quoted(trim_ratio)
            raise cf.ArgumentError(f"trim_ratio {ratio} of {model}'s {window}-token window is past 2**64 - 1")
        max_tokens = int(share)
    else:
        max_tokens = whole("max_tokens", max_tokens)
    sized = _message_dicts(messages)
    pack = cf.pack_handoff(
        sized,
        target_context_tokens=max(max_tokens - REPLY_PRIMING, 0),
        shape="openai",
        sizing="provider",
        estimate_tokens=encoding,
    )
    packed = pack.messages
    if sized is not messages:  # the caller's own Message objects back, the note as a dict
        given = {id(dumped): message for dumped, message in zip(sized, messages, strict=True)}
        packed = [given.get(id(m), m) for m in packed]
    if return_response_tokens:
        return packed, max_tokens - pack.tokens - REPLY_PRIMING
    return packed


def _message_dicts(messages: Any) -> Any:
    """``messages`` with each LiteLLM ``Message`` (a reply's ``choices[0].message``, which
    LiteLLM's own functions take) as the dict it dumps to; anything else as it is."""
    if not isinstance(messages, list) or not any(isinstance(m, litellm.Message) for m in messages):
        return messages
    return [m.model_dump() if isinstance(m, litellm.Message) else m for m in messages]
