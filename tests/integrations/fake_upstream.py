"""A fake OpenAI-compatible upstream (plain ASGI, run by uvicorn on 127.0.0.1).

``POST .../chat/completions`` records the JSON body and answers a canned completion;
``POST .../responses`` answers a canned Responses API response;
``GET /recorded`` returns the recorded chat bodies as a JSON list; ``GET /recorded_raw``
returns every POST seen (any path) as ``{"path", "body"}`` with the body's bytes in
base64; anything else is a 404.
"""

from __future__ import annotations

import base64
import json
from typing import Any

recorded: list[Any] = []
recorded_raw: list[dict[str, str]] = []

CANNED = {
    "id": "chatcmpl-fake",
    "object": "chat.completion",
    "created": 0,
    "model": "fake",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
CANNED_RESPONSE = {
    "id": "resp_fake",
    "object": "response",
    "created_at": 0,
    "status": "completed",
    "model": "fake",
    "output": [
        {
            "type": "message",
            "id": "msg_fake",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 1,
        "output_tokens": 1,
        "total_tokens": 2,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    },
}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if scope["method"] == "POST":
        recorded_raw.append({"path": scope["path"], "body": base64.b64encode(body).decode()})
    if scope["method"] == "POST" and scope["path"].endswith("/chat/completions"):
        recorded.append(json.loads(body))
        await _answer(send, 200, CANNED)
    elif scope["method"] == "POST" and scope["path"].endswith("/responses"):
        await _answer(send, 200, CANNED_RESPONSE)
    elif scope["method"] == "GET" and scope["path"] == "/recorded":
        await _answer(send, 200, recorded)
    elif scope["method"] == "GET" and scope["path"] == "/recorded_raw":
        await _answer(send, 200, recorded_raw)
    else:
        await _answer(send, 404, {"error": {"message": f"no route {scope['path']}"}})


async def _answer(send: Any, status: int, payload: Any) -> None:
    data = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
