"""What the adapters report of each pack: one :class:`PackReport`, logged as a record
(the report's fields in its ``contextfold`` attribute) and set as attributes of the current
OpenTelemetry span (``contextfold.<field>``) when OpenTelemetry's API is installed and a
span is recording. The gateway adapters (the LiteLLM hook, the ASGI middleware) log from
``contextfold.gateway`` and add each report to their :class:`PackCounters`, which an
operator reads (``hook.counters.snapshot()``); the framework adapters (LangChain,
LangGraph, Pydantic AI, the Agents SDK) log from ``contextfold.adapter``
(:func:`report_pack`)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import contextfold as cf
from contextfold._contract import I64_MAX, U64_MAX

__all__ = ["ADAPTER_LOG", "GATEWAY_LOG", "PackCounters", "PackReport", "report_pack", "whole_request_options"]

GATEWAY_LOG = logging.getLogger("contextfold.gateway")
"""One record a packed request: INFO, or WARNING when its must-keep part did not fit."""

ADAPTER_LOG = logging.getLogger("contextfold.adapter")
"""One record a framework adapter's pack, at the same levels."""


@dataclass(frozen=True, slots=True)
class PackReport:
    """What packing did to one request."""

    adapter: str
    """``"litellm"`` or ``"asgi"``; ``"langchain"``, ``"langgraph"``, ``"pydantic-ai"`` or
    ``"openai-agents"``."""
    model: str | None
    """The request's ``model`` (None when it has none that is a string)."""
    route: str
    """The LiteLLM call type, the request's path, or the framework adapter's entry point
    (``"pack_messages"``, ``"middleware"``, ``"pre_model_hook"``, …)."""
    messages_in: int
    """Messages (Responses items) the request came with."""
    messages_out: int
    """Messages sent on: the kept ones, plus the note."""
    tokens_in: int | None
    """The request's tokens as packing counts them (system, instructions and tools included);
    None for a folded request when the adapter was told not to count them (the count is a
    pass over the whole request: 70 µs more for an 88,000-token request with chars/4, 6.6 ms
    with o200k_base)."""
    tokens_out: int
    """The packed request's tokens, counted the same way."""
    budget: int
    """The window minus the output reserve."""
    folded: bool
    """Whether the request was changed (messages dropped into a note, or edited)."""
    fits: bool
    """False when the must-keep part alone is over ``budget`` (sent anyway)."""
    dropped: int
    """Input messages not sent on: folded into the note, or removed by an edit (the
    reasoning items ``ClearThinking`` removes from a Responses transcript)."""
    cleared_tool_uses: int
    """Tool uses whose result (or call input) an edit cleared."""
    cleared_thinking_turns: int
    """Assistant turns whose thinking an edit removed."""

    @classmethod
    def of(
        cls,
        pack: cf.HandoffPack | cf.PackedRequest,
        *,
        adapter: str,
        model: str | None,
        route: str,
        tokens_in: int | None,
    ) -> PackReport:
        """The report of ``pack``, a request packed (``tokens_in``: see the field)."""
        edits = pack.applied_edits
        return cls(
            adapter=adapter,
            model=model,
            route=route,
            messages_in=len(pack.kept) + pack.dropped,
            messages_out=len(pack.kept) + (pack.note is not None),
            tokens_in=tokens_in,
            tokens_out=pack.tokens,
            budget=pack.budget,
            folded=bool(pack.dropped or edits),
            fits=pack.fits,
            dropped=pack.dropped,
            cleared_tool_uses=sum(edit.cleared_tool_uses for edit in edits),
            cleared_thinking_turns=sum(edit.cleared_thinking_turns for edit in edits),
        )

    def as_dict(self) -> dict[str, Any]:
        """The report as a plain dict (what goes into LiteLLM's metadata and the log record)."""
        return asdict(self)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The report as HTTP headers, ``x-contextfold-<field>`` (dashes for underscores):
        its counts and flags only (the model and route are the client's own; a tokens in
        not counted is left out)."""
        return [
            (f"x-contextfold-{name.replace('_', '-')}".encode(), _header_value(value))
            for name, value in self.as_dict().items()
            if name not in ("adapter", "model", "route") and value is not None
        ]

    def annotate_span(self) -> None:
        """Sets the report's fields on the current OpenTelemetry span, when OpenTelemetry's
        API is installed and the span is recording (else nothing). What the tracer raises
        is dropped: telemetry never fails a request."""
        try:
            span = _recording_span()
            if span is not None:
                # OpenTelemetry's ints are 64-bit signed: a budget of "no limit" (2**64 - 1) is capped.
                fields = self.as_dict().items()
                span.set_attributes({f"contextfold.{k}": _span_value(v) for k, v in fields if v is not None})
        except Exception:  # a broken exporter must not fail the model call
            pass

    def log(self, logger: logging.Logger = GATEWAY_LOG) -> None:
        """Logs the report from ``logger``, its fields as ``record.contextfold``. What a
        logging filter raises is dropped: telemetry never fails a request."""
        level = logging.INFO if self.fits else logging.WARNING
        if not logger.isEnabledFor(level):
            return
        try:
            self._log(logger, level)
        except Exception:  # a broken filter must not fail the model call
            pass

    def _log(self, logger: logging.Logger, level: int) -> None:
        logger.log(
            level,
            "contextfold %s %s %s: %d -> %d messages, %s -> %d tokens (budget %d)%s%s",
            self.adapter,
            printable(self.route),
            printable(self.model or "-"),
            self.messages_in,
            self.messages_out,
            self.tokens_in,
            self.tokens_out,
            self.budget,
            ", folded" if self.folded else "",
            "" if self.fits else ", must-keep part over the budget",
            extra={"contextfold": self.as_dict()},
        )


def _recording_span() -> Any:
    """The current OpenTelemetry span when OpenTelemetry's API is installed and the span is
    recording, else None (so too when the tracer raises: telemetry never fails a request)."""
    trace = _opentelemetry_trace()
    if trace is None:
        return None
    try:
        span = trace.get_current_span()
        return span if span.is_recording() else None
    except Exception:  # a broken tracer or span
        return None


def _span_value(value: Any) -> Any:
    return min(value, I64_MAX) if type(value) is int else value


def _header_value(value: int | bool) -> bytes:
    return (str(value).lower() if isinstance(value, bool) else str(value)).encode()


@functools.cache
def _opentelemetry_trace() -> Any:
    """``opentelemetry.trace``, or None when OpenTelemetry's API is not installed (looked
    for once: a failed import searches the whole path)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


class PackCounters:
    """Running totals of what an adapter packed, safe to update from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests = 0
        self._folded = 0
        self._not_fitting = 0
        self._tokens_dropped = 0

    def add(self, report: PackReport) -> None:
        """Counts one packed request."""
        with self._lock:
            self._requests += 1
            self._folded += report.folded
            self._not_fitting += not report.fits
            if report.tokens_in is not None:
                self._tokens_dropped += max(0, report.tokens_in - report.tokens_out)

    def snapshot(self) -> dict[str, int]:
        """``requests`` packed, how many were ``folded``, how many did not fit
        (``not_fitting``), and the ``tokens_dropped`` by folding (tokens in minus tokens
        out, the notes counted; requests whose tokens in were not counted left out), since
        the adapter was built."""
        with self._lock:
            return {
                "requests": self._requests,
                "folded": self._folded,
                "not_fitting": self._not_fitting,
                "tokens_dropped": self._tokens_dropped,
            }

    def record(self, report: PackReport) -> PackReport:
        """Counts ``report``, logs it and sets it on the current span; returns it."""
        self.add(report)
        report.log()
        report.annotate_span()
        return report


def report_pack(pack: cf.HandoffPack, *, adapter: str, route: str) -> None:
    """A framework adapter's report of ``pack``, logged from ``contextfold.adapter`` and
    set on the current span; nothing is made when neither listens. Its ``tokens_in`` is
    the pack's tokens when nothing was folded, else None: the adapter does not count a
    folded transcript whole again."""
    level = logging.INFO if pack.fits else logging.WARNING
    if not ADAPTER_LOG.isEnabledFor(level) and _recording_span() is None:
        return
    folded = bool(pack.dropped or pack.applied_edits)
    made = PackReport.of(pack, adapter=adapter, model=None, route=route, tokens_in=None if folded else pack.tokens)
    made.log(ADAPTER_LOG)
    made.annotate_span()


def tokens_in(count: Callable[[], int]) -> int | None:
    """The tokens a folded request came with, ``count()`` of it whole; None when that
    fails. Packing reads only what it keeps, so a request whose dropped middle holds a
    message no reader could size packs, and its whole size is unknown: telemetry, which
    never fails a request (nor leaves it half rewritten)."""
    try:
        return count()
    except Exception:
        return None


def printable(text: str) -> str:
    """``text`` on one line, as a log writes a caller's value: a line break or any other
    unprintable character escaped, so a request's ``model`` cannot forge a log line."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def whole_request_options(options: cf.PackOptions) -> cf.PackOptions:
    """``options`` with a window nothing exceeds and no edit: packing a request with them
    changes nothing and counts all of it, as ``options`` count (the tokens a folded
    request came with; one more pass over it, done only when it was folded)."""
    return replace(
        options,
        target_context_tokens=U64_MAX,
        reserve_output_tokens=0,
        edits=(),
        pinned=(),
        cut="greedy",
        chunk_tokens=None,
    )
