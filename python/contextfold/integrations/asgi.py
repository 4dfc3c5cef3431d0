"""ASGI: pack chat request bodies on their way through a raw-body proxy (vLLM, SGLang, …).

No framework needed (plain ASGI; any server runs it)::

    from contextfold.integrations.asgi import PackingMiddleware
    app = PackingMiddleware(proxy_app, target_context_tokens=32_768, reserve_output_tokens=2_048)

``POST`` requests to a chat-completions path (OpenAI shape), a messages path (Anthropic
shape, its top-level ``system`` counted) or a responses path (Responses API ``input``
items, ``instructions`` counted) have their JSON body packed on the bytes path,
:func:`contextfold.pack_request`: the body is never loaded into Python objects, and every
byte outside the dropped messages is forwarded as it came (kept messages byte for byte,
so prompt caches keyed on bytes keep hitting); ``Content-Length`` is set to the new size.
Only JSON bodies are packed (``Content-Type`` ``application/json`` or a ``+json`` type,
parameters such as ``charset`` aside). Everything else passes untouched, its messages
replayed as they came: other paths and methods, other or missing content types, compressed
bodies (``Content-Encoding``), bodies over ``max_body_bytes`` (however they are split into
chunks), and bodies contextfold cannot read (logged; the server behind answers them as it
would have). Bad settings raise :class:`~contextfold.ArgumentError` when the middleware is
built, not at each request.

Every packing option of :class:`contextfold.PackOptions` is taken (the shape comes from
the path). Images are sized as providers bill them by default (``sizing="provider"``: a
flat ``image_tokens`` each, signatures and encrypted reasoning left out), whatever counts
the rest (``estimate_tokens``).

Each packed body is reported: a record of the ``contextfold.gateway`` logger (its fields
in the record's ``contextfold`` attribute), the current OpenTelemetry span's attributes
(when OpenTelemetry is installed), :attr:`PackingMiddleware.counters`, and, with
``report_headers=True``, headers of the response (``x-contextfold-tokens-in``,
``-tokens-out``, ``-dropped``, ``-fits``, …: see :meth:`PackReport.headers`).

The body's ``tools`` are counted and never dropped. The window is the body's ``model``'s
in ``windows``, else (``model_map=True``, with litellm installed) its ``max_input_tokens``
in LiteLLM's model map, else ``target_context_tokens``; the output reserve is the body's
``max_completion_tokens``, ``max_tokens`` or ``max_output_tokens``, else its model's in
``reserves``, else ``reserve_output_tokens`` (vLLM refuses a prompt whose tokens plus
``max_tokens`` exceed ``max_model_len``). ``estimate_tokens="o200k_base"`` (or
``"cl100k_base"``) counts exactly, natively; a body over ``offload_bytes`` is read and
packed in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any, Literal, TypeVar

import contextfold as cf
from contextfold import _backend
from contextfold._contract import (
    DEFAULT_IMAGE_TOKENS,
    RequestHead,
    SizingName,
    bytes_options,
    first_count,
    loaded_head,
    whole,
)
from contextfold._edits import Edit, iterable_of, text_field
from contextfold._js import quoted

from ._common import RequestOptions, gateway_sizing, per_model
from ._report import PackCounters, PackReport, printable, tokens_in, whole_request_options

__all__ = ["PackingMiddleware"]

log = logging.getLogger("contextfold.integrations.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

RequestShape = Literal["openai", "anthropic", "responses"]
_T = TypeVar("_T")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MESSAGES_PATHS = ("/v1/messages", "/messages")
RESPONSES_PATHS = ("/v1/responses", "/responses")


class PackingMiddleware:
    """Packs the bodies of chat-completion, messages and responses requests before ``app``
    sees them."""

    def __init__(
        self,
        app: App,
        *,
        target_context_tokens: int,
        reserve_output_tokens: int = 0,
        cut: Literal["greedy", "chunked"] = "greedy",
        chunk_tokens: int | None = None,
        estimate_tokens: Literal["o200k_base", "cl100k_base"] | None = None,
        sizing: SizingName | None = None,
        image_tokens: int = DEFAULT_IMAGE_TOKENS,
        pinned: Sequence[int] = (),
        summary: str | None = None,
        edits: Sequence[Edit] = (),
        chat_paths: Sequence[str] = CHAT_PATHS,
        messages_paths: Sequence[str] = MESSAGES_PATHS,
        responses_paths: Sequence[str] = RESPONSES_PATHS,
        max_body_bytes: int = 64 * 1024 * 1024,
        windows: Mapping[str, int] | None = None,
        reserves: Mapping[str, int] | None = None,
        model_map: bool = False,
        offload_bytes: int = 256 * 1024,
        count_tokens_in: bool = True,
        report_headers: bool = False,
    ) -> None:
        self.app = app
        # Checked once, here, as every request checks them: a bad one would leave every
        # request unpacked, each with a warning.
        self.options = cf.PackOptions(
            target_context_tokens=target_context_tokens,
            reserve_output_tokens=reserve_output_tokens,
            cut=cut,
            chunk_tokens=chunk_tokens,
            estimate_tokens=estimate_tokens,
            sizing=gateway_sizing(sizing),
            image_tokens=image_tokens,
            pinned=pinned,
            summary=summary,
            edits=edits,
        )
        bytes_options(self.options)  # the bytes path counts with chars/4 or an embedded encoding only
        self.request_options = RequestOptions(self.options)
        self.windows = per_model("windows", windows, 1)
        self.reserves = per_model("reserves", reserves, 0)
        self.offload_bytes = whole("offload_bytes", offload_bytes)
        for name, flag in (
            ("count_tokens_in", count_tokens_in),
            ("report_headers", report_headers),
            ("model_map", model_map),
        ):
            if type(flag) is not bool:  # by its type: `__class__` may claim bool
                raise cf.ArgumentError(f"{name} must be True or False, got {quoted(flag)}")
        self.count_tokens_in = count_tokens_in
        self.report_headers = report_headers
        self.mapped_window: Callable[[str], int | None] = _no_window
        if model_map:
            try:
                importlib.import_module("litellm")  # checked now, not at the first request
                from .litellm import model_window
            except ImportError as exc:
                raise cf.ArgumentError(f"model_map=True needs litellm (the litellm extra): {exc}") from None
            self.mapped_window = functools.lru_cache(maxsize=1_024)(model_window)
        self.shapes: dict[str, RequestShape] = {
            **{p: "openai" for p in _paths("chat_paths", chat_paths)},
            **{p: "anthropic" for p in _paths("messages_paths", messages_paths)},
            **{p: "responses" for p in _paths("responses_paths", responses_paths)},
        }
        self.max_body_bytes = whole("max_body_bytes", max_body_bytes)
        self.counters = PackCounters()
        """What this middleware packed since it was built (:meth:`PackCounters.snapshot`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shape = self.shapes.get(scope.get("path", "")) if scope["type"] == "http" else None
        if (
            shape is None
            or scope.get("method") != "POST"
            or _header(scope, b"content-encoding") is not None
            or not _is_json(_header(scope, b"content-type"))
        ):
            await self.app(scope, receive, send)
            return
        messages, body = await _read_body(receive, self.max_body_bytes)
        if body is not None:
            path = scope.get("path", "")
            if len(body) > self.offload_bytes:  # reading and counting a large body: off the event loop
                sent, report = await _in_worker_thread(self._packed, body, shape, path)
            else:
                sent, report = self._packed(body, shape, path)
            scope = {**scope, "headers": _with_length(scope.get("headers", []), len(sent))}
            messages = [{"type": "http.request", "body": sent, "more_body": False}]
            if report is not None and self.report_headers:
                send = _with_headers(send, report.headers())
        await self.app(scope, _replay(messages, receive), send)

    def _packed(self, body: bytes, shape: RequestShape, path: str) -> tuple[bytes, PackReport | None]:
        """The body packed for its model's window and its own output cap, and the report
        (the body as it came and None when it cannot be read, or its cap leaves no room)."""
        model, caps, messages, items = _request_head(body)
        window, reserve = self.options.target_context_tokens, self.options.reserve_output_tokens
        if model is not None:
            window = self.windows.get(model) or self.mapped_window(model) or window
            reserve = self.reserves.get(model, reserve)
        reserve = first_count(caps, reserve)  # the body's own cap
        if reserve >= window:
            log.warning(
                "contextfold: %s output reserve %d leaves no room in the %d-token window", path, reserve, window
            )
            return body, None
        length = items if shape == "responses" else messages
        if length is None:
            # A Responses `input` that is no list is one message (a plain string); any
            # other body it cannot read as a list keeps every pin (packing says why).
            length = 1 if shape == "responses" else sys.maxsize
        options = self.request_options.get(window, reserve, shape, length)
        try:
            packed = cf.pack_request(body, options=options)
        except cf.ContextfoldError as exc:  # unreadable: the server behind answers it, as it would have
            log.warning("contextfold: %s body forwarded unpacked: %s", printable(path), exc)
            return body, None
        counted: int | None = packed.tokens
        if packed.dropped or packed.applied_edits:
            whole = whole_request_options(options)
            counted = tokens_in(lambda: cf.pack_request(body, options=whole).tokens) if self.count_tokens_in else None
        report = PackReport.of(packed, adapter="asgi", model=model, route=path, tokens_in=counted)
        return packed.body, self.counters.record(report)


def _paths(name: str, paths: Any) -> list[str]:
    """``paths`` checked: a collection of URL paths, each a str (a single str is refused:
    it would be taken letter by letter)."""
    each = enumerate(iterable_of(name, paths, "paths"))
    return [text_field("PackingMiddleware", f"{name}[{index}]", path) for index, path in each]


def _no_window(model: str) -> None:
    """No window for any model (no model map asked for)."""
    del model


def _request_head(body: bytes) -> RequestHead:
    """The body's ``model``, its output caps (``OUTPUT_CAPS``: each when a count), and the
    lengths of its ``messages`` and ``input`` (see :func:`contextfold.reference.request_head`),
    read on the bytes path with the GIL released (a body it cannot read: all None; packing
    then says why). A cap past 2**63 - 1 is read with ``json.loads``, which alone gives it
    exactly."""
    head = _backend.impl.request_head(body)
    return loaded_head(body) if head is None else head


async def _in_worker_thread(work: Callable[..., _T], *args: Any) -> _T:
    """``work(*args)`` in a worker thread of the running event loop's library (anyio's, which
    serves asyncio and trio, when it is installed; else asyncio's): the native packer
    releases the GIL, so the loop goes on serving other requests meanwhile."""
    try:
        from anyio import to_thread
    except ImportError:
        return await asyncio.to_thread(work, *args)
    return await to_thread.run_sync(work, *args)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return None


def _is_json(content_type: bytes | None) -> bool:
    """Whether ``Content-Type`` names JSON: ``application/json`` or an ``application/…+json``
    type, whatever its parameters."""
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _with_length(headers: Sequence[tuple[bytes, bytes]], length: int) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"transfer-encoding")]
    return [*kept, (b"content-length", str(length).encode())]


async def _read_body(receive: Receive, limit: int) -> tuple[list[Message], bytes | None]:
    """The request's messages as they came, and its body when it is all there and at most
    ``limit`` bytes (None past ``limit`` or on a disconnect: the messages go on untouched)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > limit:
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """A ``send`` that adds ``headers`` to the response's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return sending


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that hands over ``messages`` first, then the rest of the original stream."""
    pending = deque(messages)

    async def replayed() -> Message:
        return pending.popleft() if pending else await receive()

    return replayed
