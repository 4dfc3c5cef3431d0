"""What every adapter shares: the missing-extra error, its packing options (a
:class:`contextfold.PackOptions`), and packing a transcript converted to dicts with the
result mapped back to the caller's objects."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, NamedTuple, TypeVar

import contextfold as cf
from contextfold._contract import OUTPUT_CAPS, SizingName, first_count, read_items, whole
from contextfold._edits import Edit
from contextfold._js import is_str, quoted

from ._report import report_pack

T = TypeVar("T")

Estimator = Callable[[str], int] | Literal["o200k_base", "cl100k_base"]
"""What ``estimate_tokens=`` takes: a ``callable(text) -> int``, or the name of an OpenAI
encoding that contextfold counts natively."""


def missing_extra(extra: str, exc: ImportError) -> ImportError:
    """The error an adapter raises when its framework is not installed."""
    package = (exc.name or "a dependency").split(".")[0]
    return ImportError(f"{package} is not installed: pip install 'contextfold[{extra}]'")


_BOM = b"\xef\xbb\xbf"


def row_refusal(row: bytes, options: cf.PackOptions) -> Exception:
    """The exception for a JSONL line or Arrow row the batch path refused:
    :func:`contextfold.pack_request`'s for it. A bare list refused with no offset was
    read whole (refused for being a list, or by the reference for its depth or a long
    number): the error is then that of the body holding it as its ``messages``, which
    names the bad message (or repeats the refusal)."""
    try:
        cf.pack_request(row, options=options)
    except cf.RequestError as exc:
        array = row.removeprefix(_BOM).lstrip(b" \t\r\n")
        if exc.offset is not None or not array.startswith(b"["):
            return exc
        try:
            cf.pack_request(b'{"messages":' + array + b"}", options=options)
        except (cf.ContextfoldError, TypeError) as refused:
            return refused
    except (cf.ContextfoldError, TypeError) as exc:
        return exc
    # Cannot happen (the batch path and pack_request read a row alike); were it to, the
    # row's record still says so, and the batch goes on.
    return cf.ContextfoldError(f"internal error: the batch path refused a row pack_request packs: {row[:200]!r}")


def error_record(error: Exception) -> dict[str, Any]:
    """What a batch's record of a refused row says of its error: ``type``, ``message``
    and ``offset`` (the byte a :class:`contextfold.RequestError` names, or None)."""
    return {"type": type(error).__name__, "message": str(error), "offset": getattr(error, "offset", None)}


def json_text(value: Any) -> str:
    """Compact JSON as the packer measures it (no spaces, non-ASCII kept)."""
    return _COMPACT.encode(value)


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with these arguments builds an encoder each call, a third of
its time on a tool call's arguments."""


def text_tokens(text: str, estimate_tokens: Estimator | None) -> int:
    """``text``'s tokens by ``estimate_tokens``, or by the default estimate."""
    if estimate_tokens is None:
        return cf.estimate_tokens(text)
    if isinstance(estimate_tokens, str):
        return cf.count_tokens(text, estimate_tokens)
    return estimate_tokens(text)


def gateway_sizing(sizing: SizingName | None) -> SizingName:
    """What a gateway adapter sizes with: ``sizing`` when given; else ``"provider"``
    (images a flat count, signatures and encrypted reasoning left out: a gateway sees
    screenshots, which cost a provider a fixed amount, not their base64 length), whatever
    counts the text."""
    return "provider" if sizing is None else sizing


EDITS_BY_NAME: dict[str, type[cf.ClearToolUses] | type[cf.ClearThinking]] = {
    "clear_tool_uses": cf.ClearToolUses,
    "clear_thinking": cf.ClearThinking,
}
"""The edits a configuration file names, each by its key (``{clear_tool_uses: {keep: 3}}``)."""


def edits_from_settings(value: Any, setting: str = "edits") -> tuple[Edit, ...]:
    """Edits from a configuration value: a list whose entries are edit objects or one-key
    mappings ``{name: {field: value, …}}`` (names in :data:`EDITS_BY_NAME`, fields the
    edit class's keywords). A bad entry raises :class:`~contextfold.ArgumentError` naming
    ``setting[index]``."""
    kind = type(value)  # by its type: `__class__` may claim one it is not
    if issubclass(kind, (str, bytes, Mapping)) or not issubclass(kind, Sequence):
        raise cf.ArgumentError(f"{setting} must be a list of edits, got {type(value).__name__}")
    edits: list[Any] = []
    for index, entry in enumerate(value):
        if issubclass(type(entry), Mapping):
            if len(entry) != 1 or next(iter(entry)) not in EDITS_BY_NAME:
                raise cf.ArgumentError(
                    f"{setting}[{index}] must name one edit of {sorted(EDITS_BY_NAME)}, got {sorted(entry)}"
                )
            ((name, fields),) = entry.items()
            if fields is not None and not issubclass(type(fields), Mapping):
                raise cf.ArgumentError(f"{setting}[{index}].{name} must map fields to values, got {quoted(fields)}")
            try:
                entry = EDITS_BY_NAME[name](**dict(fields or {}))
            except cf.ArgumentError as exc:
                raise type(exc)(f"{setting}[{index}]: {exc}") from None
            except TypeError as exc:  # a field the edit does not have
                raise cf.ArgumentError(f"{setting}[{index}].{name}: {exc}") from None
        edits.append(entry)
    return tuple(edits)


def per_model(name: str, values: Any, minimum: int) -> dict[str, int]:
    """``values`` checked: a mapping (or None: empty) of model names, each a str, to whole
    numbers of at least ``minimum``; an error names ``name`` and the model."""
    if values is None:
        return {}
    if not issubclass(type(values), Mapping):
        raise cf.ArgumentError(f"{name} must map model names to token counts, got {type(values).__name__}")
    out = {}
    for model, size in values.items():
        if not is_str(model):
            kind = type(model).__name__
            raise cf.ArgumentTypeError(f"{name} must map model names to token counts, got a key of type {kind}")
        model = str.__str__(model)
        out[model] = whole(f"{name}[{model!r}]", size, minimum)
    return out


def output_reserve(request: Mapping[str, Any], default: int) -> int:
    """A request's own output cap (``max_completion_tokens``, else ``max_tokens``, else a
    Responses request's ``max_output_tokens``: the first that is a count), or ``default``."""
    return first_count((request.get(key) for key in OUTPUT_CAPS), default)


class RequestOptions:
    """A gateway's packing options for each request: its ``template`` with the request's
    window, reserve and shape, and only the pins its transcript reaches (a pin past a short
    request's end holds from the turn it exists on), each combination built (and checked)
    once and kept; a handful of models make a handful. Past ``limit`` combinations the kept
    ones are dropped."""

    def __init__(self, template: cf.PackOptions, limit: int = 1_024) -> None:
        self.template = template
        self.limit = limit
        self._built: dict[tuple[int, int, str, int], cf.PackOptions] = {}

    def get(
        self, window: int, reserve: int, shape: Literal["openai", "anthropic", "responses"], length: int
    ) -> cf.PackOptions:
        """The options for a request of ``length`` messages packed into ``window`` with
        ``reserve`` kept free."""
        reached = sum(p < length for p in self.template.pinned)
        key = (window, reserve, shape, reached)
        options = self._built.get(key)
        if options is None:
            if len(self._built) >= self.limit:
                self._built.clear()
            pinned = [p for p in self.template.pinned if p < length]
            options = replace(
                self.template, target_context_tokens=window, reserve_output_tokens=reserve, shape=shape, pinned=pinned
            )
            self._built[key] = options
        return options


def window_options(max_tokens: int, options: Mapping[str, Any], conversion: Conversion) -> cf.PackOptions:
    """The options an adapter packs with: a window of ``max_tokens`` (the name the
    frameworks' own trimmers use) and any other :class:`contextfold.PackOptions` field
    (``reserve_output_tokens``, ``estimate_tokens``, ``cut``, ``edits``, ``sizing``, …);
    bad values fail here, when the adapter is built, a ``shape`` too (see
    :func:`check_shape`)."""
    return check_shape(cf.PackOptions(target_context_tokens=max_tokens, **options), conversion)


class Conversion(NamedTuple):
    """The shape an adapter converts its framework's messages to, and the adapter's name."""

    shape: Literal["openai", "anthropic", "responses"]
    adapter: str


def check_shape(options: cf.PackOptions, conversion: Conversion) -> cf.PackOptions:
    """``options``, unless their ``shape`` is neither ``"auto"`` nor the one the adapter
    converts to (:class:`~contextfold.ArgumentError`: no other shape can apply)."""
    if options.shape not in ("auto", conversion.shape):
        raise cf.ArgumentError(
            f"{conversion.adapter} packs its messages as shape={conversion.shape!r}, not shape={options.shape!r}"
        )
    return options


class Packed(NamedTuple):
    """A framework transcript packed: its own objects plus the note, and the pack itself."""

    messages: list[Any]
    """The caller's kept message objects in order, with the note as a framework message."""
    pack: cf.HandoffPack
    """The pack of the converted dicts: ``kept``, ``dropped``, ``fits``, ``tokens``, ``note``."""


MakeEdited = Callable[[Any, dict[str, Any], dict[str, Any]], Any]
"""``(original, converted, edited)``: the caller's message as a context edit changed its
converted dict (``converted`` before the edit, ``edited`` after)."""


def pack_converted(
    originals: Iterable[T],
    convert: Callable[[Sequence[T]], list[dict[str, Any]]],
    make_note: Callable[[dict[str, Any]], Any],
    make_edited: MakeEdited,
    options: cf.PackOptions,
    conversion: Conversion,
    *,
    system: str | list[Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    route: str,
) -> Packed:
    """Packs the originals, read once (any iterable), as ``convert`` makes them dicts (one
    per original, same order, in ``conversion.shape``), with what is sent beside them
    (``system``, ``tools``: counted as packing counts them), and maps the result back
    (:func:`originals_of`). A pin past the end of a short
    transcript (an agent's first turns) waits for the message it names. The pack is
    reported (:func:`~contextfold.integrations._report.report_pack`) as
    ``conversion.adapter``'s at ``route``.
    """
    check_shape(options, conversion)
    # Read once, then converted: an iterator is not read empty a second time, and an
    # estimator (or another thread) that changes the caller's list while packing runs
    # changes nothing mapped back.
    if isinstance(originals, Mapping):  # one message as a dict, or a state: its keys are no messages
        raise cf.ArgumentTypeError(f"messages must be an iterable of messages, not a {type(originals).__name__}")
    listed = read_items("messages", originals, "messages")
    converted = convert(listed)
    n = len(converted)
    if any(p >= n for p in options.pinned):
        options = replace(options, pinned=[p for p in options.pinned if p < n])
    pack = cf.pack_handoff(converted, options=options, shape=conversion.shape, system=system, tools=tools)
    report_pack(pack, adapter=conversion.adapter, route=route)
    return Packed(originals_of(pack, listed, converted, make_note, make_edited), pack)


def originals_of(
    pack: cf.HandoffPack,
    originals: Sequence[Any],
    converted: Sequence[Any],
    make_note: Callable[[dict[str, Any]], Any],
    make_edited: MakeEdited,
) -> list[Any]:
    """``pack.messages`` (a pack of ``converted``) in the caller's objects: a kept message
    the pack returns as it was given becomes its original; one a context edit changed (a
    new dict) becomes ``make_edited(original, converted, edited)``; the note (the message
    whose content is ``pack.note`` itself) becomes ``make_note(note)``."""
    out: list[Any] = []
    kept = iter(pack.kept)
    for message in pack.messages:
        if pack.note is not None and message.get("content") is pack.note:
            out.append(make_note(message))
            continue
        k = next(kept)
        original, before = originals[k], converted[k]
        out.append(original if message is before else make_edited(original, before, message))
    return out


def edited_items(before: Sequence[Any], after: Sequence[Any]) -> list[tuple[Any, Any]]:
    """Each item of ``before`` (a content or call list a context edit changed) with what it
    became in ``after``: itself when unchanged, its replacement, or None when removed (an
    edit removes only ``thinking`` and ``redacted_thinking`` blocks, and replaces the rest
    in place)."""
    out = []
    rest = iter(after)
    current = next(rest, None)
    for item in before:
        if current is not item and isinstance(item, dict) and item.get("type") in _REMOVABLE:
            out.append((item, None))
            continue
        out.append((item, current))
        current = next(rest, None)
    return out


_REMOVABLE = ("thinking", "redacted_thinking")
