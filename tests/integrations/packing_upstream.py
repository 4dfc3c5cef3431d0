"""The fake upstream behind contextfold's ASGI middleware (window and reserve from the env)."""

from __future__ import annotations

import os

import fake_upstream  # run with --app-dir pointing at this folder
from contextfold.integrations.asgi import PackingMiddleware

app = PackingMiddleware(
    fake_upstream.app,
    target_context_tokens=int(os.environ["CONTEXTFOLD_WINDOW"]),
    reserve_output_tokens=int(os.environ["CONTEXTFOLD_RESERVE"]),
)
