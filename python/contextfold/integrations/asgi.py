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
Everything else passes untouched: other paths and methods, compressed bodies
(``Content-Encoding``), bodies over ``max_body_bytes``, and bodies contextfold cannot read
(logged; the server behind answers them as it would have).

The body's ``tools`` are counted and never dropped. The window is fixed per middleware,
since the body is not parsed: set ``target_context_tokens`` to the served model's window
and ``reserve_output_tokens`` to the largest ``max_tokens`` your clients ask for (vLLM
refuses a prompt whose tokens plus ``max_tokens`` exceed ``max_model_len``).
``estimate_tokens="o200k_base"`` (or ``"cl100k_base"``) counts exactly, natively.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Literal

import contextfold as cf

__all__ = ["PackingMiddleware"]

log = logging.getLogger("contextfold.integrations.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

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
        chat_paths: Sequence[str] = CHAT_PATHS,
        messages_paths: Sequence[str] = MESSAGES_PATHS,
        responses_paths: Sequence[str] = RESPONSES_PATHS,
        max_body_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        cf.handoff_budget(target_context_tokens, reserve_output_tokens)  # bad numbers fail here
        self.app = app
        self.options: dict[str, Any] = {
            "target_context_tokens": target_context_tokens,
            "reserve_output_tokens": reserve_output_tokens,
            "cut": cut,
            "chunk_tokens": chunk_tokens,
            "estimate_tokens": estimate_tokens,
        }
        self.shapes = {
            **{p: "openai" for p in chat_paths},
            **{p: "anthropic" for p in messages_paths},
            **{p: "responses" for p in responses_paths},
        }
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shape = self.shapes.get(scope.get("path", "")) if scope["type"] == "http" else None
        if shape is None or scope.get("method") != "POST" or _header(scope, b"content-encoding") is not None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive, self.max_body_bytes)
        if complete:
            body = self._packed(body, shape, scope.get("path", ""))
            scope = {**scope, "headers": _with_length(scope.get("headers", []), len(body))}
        await self.app(scope, _replay(body, receive, more_body=not complete), send)

    def _packed(self, body: bytes, shape: str, path: str) -> bytes:
        try:
            packed = cf.pack_request(body, shape=shape, **self.options)  # type: ignore[arg-type]
        except cf.ContextfoldError as exc:  # unreadable: the server behind answers it, as it would have
            log.warning("contextfold: %s body forwarded unpacked: %s", path, exc)
            return body
        if not packed.fits:
            log.warning("contextfold: %s request's core alone exceeds %d tokens", path, packed.budget)
        return packed.body


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return None


def _with_length(headers: Sequence[tuple[bytes, bytes]], length: int) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"transfer-encoding")]
    return [*kept, (b"content-length", str(length).encode())]


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, and whether it is all of it (False past ``limit`` or on a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive, *, more_body: bool) -> Receive:
    """A ``receive`` that hands over ``body`` first, then the rest of the original stream."""
    pending = [{"type": "http.request", "body": body, "more_body": more_body}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
