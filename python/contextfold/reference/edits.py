"""Context editing, in pure Python: the reference for ``contextfold-core``'s edits.rs.

:func:`apply_edits` applies edits in order to a transcript as read, each over the
previous one's output, before folding; a ClearToolUses plans on the transcript as given
(below). It never mutates its input: an edited message is a shallow copy of the one it
replaces (and of the nested dicts and lists on the way to the changed value); every
other message is the caller's own object. Edits replace values inside messages; they
never add, drop or reorder messages, except that :class:`ClearThinking` removes
Responses ``reasoning`` items whole (their input indices are returned, so the caller
does not note them as dropped). A Responses ``compaction`` item and an Anthropic
``compaction`` block are never touched, nor what precedes the newest one (``hidden``: it
goes first when packing, so it counts toward no trigger either).

Cost is the caller's: ``cost(i, message)`` for message ``i`` as packing sizes it and ``base``
for what never changes (system prompt, tools). What an edit frees is the cost of the
messages it changed before, less after (a removed item's whole cost).

ClearToolUses
    Plans on the transcript as given, not on the earlier edits' output: its trigger, its
    cut points and ``clear_at_least`` are read there, so that an earlier edit cannot move
    them as the transcript grows (a ClearThinking freeing more of the trigger's cost, an
    earlier ClearToolUses moving where the walk starts); the values it clears are then
    replaced over the earlier edits' output, and it reports what that changed (a value an
    earlier edit already replaced by the same placeholder is not counted again). Runs only
    when the transcript costs more than ``trigger`` (None: ``budget``). A tool
    use is one result paired with its call: an OpenAI ``tool`` message (by
    ``tool_call_id``), an Anthropic ``tool_result`` block (by ``tool_use_id``), a
    Responses ``function_call_output`` or ``custom_tool_call_output`` item (by
    ``call_id``), each answering the nearest earlier call with that id (a result with
    none is still a tool use, of no known tool). Tool uses are ordered by their result's
    position. The newest ``keep`` are never edited, nor one calling a tool named in
    ``exclude_tools``.

    A value is replaced only when its replacement is shorter, as sizing measures it (a
    message's own ``content`` string by its UTF-16 length, ``None`` as 2, anything else
    and any nested value by its compact JSON length): so a result already cleared, or
    shorter than the placeholder, is left as it is, and under the default sizing (chars/4)
    an edit never makes a message cost more. Under an exact encoding or provider sizing
    the test is still length, so a short result can cost a token or two more as the
    placeholder (forty dashes are fewer tokens than ``[cleared]``), or an image more than
    its flat price; the edit as a whole still frees at least ``clear_at_least`` or does
    nothing. An absent value is never added. A tool use
    for which clearing would change nothing (so replaced, too short, or excluded) is
    *settled*.

    Steps, for prompt caching: the cleared set is the eligible tool uses before a
    *boundary*, which only moves forward, by whole steps, as a transcript grows. Walk the
    tool uses oldest first from the first one not settled, summing the cost of each one's
    result (an OpenAI or Responses result: its message's cost; an Anthropic result: what
    its message would cost holding that block alone). A cut point sits after each tool
    use at which the sum crosses a multiple of ``step``; the walk's start is a cut point
    too. The boundary is the last cut point at or before the first of the newest ``keep``
    tool uses. All of it reads the transcript alone: a grown transcript has the same
    settled prefix and the same sums, so the same cut points and a boundary no earlier;
    and re-run on its own output (the cleared tool uses now settled, the walk starting at
    the boundary, what follows it less than a step) the edit changes nothing.

    Clearing a result replaces the OpenAI message's ``content``, the Anthropic block's
    ``content`` or the Responses item's ``output`` by ``placeholder``; with
    ``clear_tool_inputs`` the call's input is emptied: OpenAI ``function.arguments`` and
    Responses ``function_call.arguments`` to ``"{}"``, Anthropic ``tool_use.input`` to
    ``{}``, ``custom_tool_call.input`` to ``""`` (a call answered by several results, as
    reused ids allow, is emptied with the oldest of them cleared: what a tool use is
    never depends on where the boundary lies). Ids, names, types and pairing stay.
    ``cleared_tool_uses`` counts the tool uses whose result or call input changed. When
    that frees fewer than ``clear_at_least`` tokens (or less than nothing), the edit does
    nothing.

    Several ClearToolUses edits in one list are idempotent together when they share a
    placeholder; a later one with a longer placeholder than an earlier one's leaves
    results for the earlier one to shorten on a second run.

ClearThinking
    A turn runs from one user-authored message (a ``user`` message that is not made only
    of ``tool_result`` blocks; for Responses a ``message`` item with role ``user``) to the
    next; what precedes the first is a turn too. Thinking is an assistant message's
    ``thinking`` and ``redacted_thinking`` blocks, and Responses ``reasoning`` items. The
    newest ``keep`` turns holding thinking keep it, and so does every turn with a call no
    later message answers (an id-less call is not one). Other turns lose it: blocks are
    filtered out, reasoning items removed; an assistant message made only of thinking
    keeps it (content must stay non-empty), and a reasoning item stays when the first
    item after it that is no reasoning carries a str ``id`` (OpenAI refuses that item
    without its reasoning). ``cleared_thinking_turns`` counts the turns that lost some.

An edit is reported only when it changed something.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, cast

from .._edits import AppliedEdit, ClearThinking, ClearToolUses, Edit
from .._js import entry, has_entry, is_dict, is_list, json_length, list_value, listed, str_value, utf16_len
from ..errors import ArgumentError
from .items import CALL, MESSAGE, OUTPUT, REASONING, peek_item

MESSAGE_CHANGED = "a message changed while it was being packed: its edits no longer apply"
"""What a call raises when Python code it ran changed a message so that the edits planned
for it no longer fit it (the native core's ``MESSAGE_CHANGED``)."""

__all__ = ["apply_edits", "frozen"]

Cost = Callable[[int, Any], int]
"""What one message costs, as packing sizes it."""

_RESULT_ITEMS = ("function_call_output", "custom_tool_call_output")
"""Responses outputs that are tool uses."""
_CALL_INPUTS = {"function_call": ("arguments", "{}"), "custom_tool_call": ("input", "")}
"""What emptying a Responses call's input writes, by the call's type."""
_THINKING = ("thinking", "redacted_thinking")


def apply_edits(
    messages: list[Any],
    edits: Sequence[Edit],
    *,
    cost: Cost,
    base: int,
    budget: int,
    step: int,
    responses: bool,
    hidden: range = range(0),
    known: Sequence[int | None] = (),
) -> tuple[list[Any], list[int], list[AppliedEdit]]:
    """``(edited, removed, applied)``: the messages after ``edits`` (removed items left
    out), the input indices of the removed Responses reasoning items, and the edits that
    changed something. ``responses`` says whether the entries are Responses items (else
    OpenAI or Anthropic chat messages, both read); ``step`` is ClearToolUses' step (at
    least 1), ``budget`` its default trigger; the entries in ``hidden`` (what precedes a
    provider's compaction) are left out, neither counted nor edited; ``known`` gives
    costs ``cost`` gave the messages already, by index (None: not sized)."""
    given = _State(list(messages), cost, responses, hidden=hidden)  # never edited: what ClearToolUses plans on
    if known:
        given.costs = list(known)
    state = _State(list(messages), cost, responses, given, hidden)
    applied: list[AppliedEdit] = []
    for edit in edits:
        if isinstance(edit, ClearToolUses):
            done = _clear_tool_uses(given, state, edit, base, budget, max(step, 1))
        else:
            done = _clear_thinking(state, edit)
        if done is not None:
            applied.append(done)
    kept = [m for m, gone in zip(state.messages, state.removed, strict=True) if not gone]
    return kept, [i for i, gone in enumerate(state.removed) if gone], applied


def frozen(messages: list[Any]) -> list[Any]:
    """The messages as packing with edits reads them. One whose ``content`` or
    ``tool_calls`` is a list is a copy (of its storage) holding copies of those lists, so
    the block and call positions the edits plan index lists that other code (another
    thread, a custom estimator, a key's ``__eq__``) cannot reorder; every other message is
    the caller's own (``edited::frozen`` in the binding)."""
    out = []
    for m in messages:
        if issubclass(type(m), dict):
            content, calls = entry(m, "content"), entry(m, "tool_calls")
            content = listed(content) if is_list(content) else None
            calls = listed(calls) if is_list(calls) else None
            if content is not None or calls is not None:
                # An exact dict merged into one made first (`dict.copy` sizes a split
                # table's copy before it allocates it, as `listed` says of lists); a
                # subclass's through its storage.
                m = {**m} if type(m) is dict else dict(list(dict.items(m)))
                if content is not None:
                    m["content"] = content
                if calls is not None:
                    m["tool_calls"] = calls
        out.append(m)
    return out


class _State:
    """The transcript as edited so far, and each message's cost, computed once (a message
    still as ``given`` holds it sized there)."""

    def __init__(
        self, messages: list[Any], cost: Cost, responses: bool, given: _State | None = None, hidden: range = range(0)
    ) -> None:
        self.messages = messages
        self.hidden = hidden
        self.removed = [False] * len(messages)
        self.costs: list[int | None] = [None] * len(messages)
        self.cost = cost
        self.responses = responses
        self.given = given
        self.edited = False
        """Whether an edit changed or removed a message."""
        self.blocks: dict[int, list[int | None]] = {}
        """For a message whose blocks ClearThinking took out: each given block's position
        now (None: taken out)."""

    def cost_of(self, i: int) -> int:
        size = self.costs[i]
        if size is None:
            given = self.given
            if given is not None and self.messages[i] is given.messages[i]:
                size = given.cost_of(i)
            else:
                size = self.cost(i, self.messages[i])
            self.costs[i] = size
        return size

    def live(self) -> list[int]:
        """The indices of the messages not removed (nor hidden)."""
        hidden = self.hidden
        return [i for i, gone in enumerate(self.removed) if not gone and i not in hidden]

    def sized(self, changed: dict[int, Any], gone: Sequence[int] = ()) -> tuple[dict[int, int], int]:
        """The cost of each ``changed`` message, and what putting them in place of the
        messages at their indices and removing ``gone`` frees (sized by index, each
        message before its replacement)."""
        after: dict[int, int] = {}
        freed = 0
        for i in sorted({*changed, *gone}):
            freed += self.cost_of(i)
            if i in changed:
                after[i] = self.cost(i, changed[i])
                freed -= after[i]
        return after, freed

    def commit(self, changed: dict[int, Any], after: dict[int, int], gone: Sequence[int]) -> None:
        self.edited = self.edited or bool(changed or gone)
        for i, m in changed.items():
            self.messages[i], self.costs[i] = m, after[i]
        for i in gone:
            self.removed[i] = True

    def take_blocks(self, i: int, taken: set[int], count: int) -> None:
        """Notes that message ``i``'s blocks at positions ``taken`` (of ``count``) were taken out."""
        now = self.blocks.get(i) or list(range(count))
        kept = [j for j in range(count) if j not in taken]
        place = {j: k for k, j in enumerate(kept)}
        self.blocks[i] = [None if p is None else place.get(p) for p in now]

    def block_now(self, i: int, j: int) -> int:
        """Where given block ``j`` of message ``i`` sits now (ClearThinking takes out only
        thinking, never a block an edit of tool uses reads)."""
        places = self.blocks.get(i)
        place = j if places is None else places[j]
        assert place is not None
        return place

    def use_now(self, u: _Use) -> _Use:
        return u if u.block is None else u._replace(block=self.block_now(u.at, u.block))

    def call_now(self, call: _Call | None) -> _Call | None:
        if call is None or not call.block or call.slot is None:
            return call
        return call._replace(slot=self.block_now(call.at, call.slot))


# Reading ------------------------------------------------------------------------------


def _with(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``obj`` (read from its storage) with ``key``'s value replaced, in place."""
    if not issubclass(type(obj), dict):
        raise ArgumentError(MESSAGE_CHANGED)
    # The entries as they are now (a key's __eq__, run while they are inserted, may change
    # the dict they come from).
    out = dict(list(dict.items(obj)))
    out[key] = value
    return out


def _items(m: Any, key: str, j: int) -> list[Any]:
    """Message ``m``'s list ``key``, holding the item ``j`` (a dict) the plan found there:
    Python code the call ran (an estimator, a key's ``__eq__``) may have changed it since."""
    items = list_value(entry(m, key))
    if items is None or j >= len(items) or not issubclass(type(items[j]), dict):
        raise ArgumentError(MESSAGE_CHANGED)
    return items


def _kind(obj: Any) -> str | None:
    return str_value(entry(obj, "type")) if issubclass(type(obj), dict) else None


def _role(message: Any) -> str | None:
    return str_value(entry(message, "role")) if issubclass(type(message), dict) else None


def _top_units(value: Any, index: int) -> int:
    """A message's own content as sizing measures it: a str by its length, None as 2
    (what it holds with no JSON form named as message ``index``'s content)."""
    text = str_value(value)  # a str subclass measured as its storage, not its methods
    if text is not None:
        return utf16_len(text)
    return 2 if value is None else json_length(value, "content", index)


class _Call(NamedTuple):
    at: int
    slot: int | None
    """The ``tool_calls`` entry or ``tool_use`` block; None for a Responses item."""
    block: bool
    excluded: bool


class _Use(NamedTuple):
    at: int
    block: int | None
    """The ``tool_result`` block; None when the result is the whole message."""
    call: _Call | None
    excluded: bool


class _CallSeen(NamedTuple):
    at: int
    slot: int | None
    block: bool
    call_id: str | None
    name: str | None


class _ResultSeen(NamedTuple):
    at: int
    block: int | None
    call_id: str | None
    tool_use: bool
    """Any Responses output answers a call; only a function's or custom tool's is a tool use."""


def _exchanges(state: _State) -> Iterator[_CallSeen | _ResultSeen]:
    """Every call and every result, in order (a message's ``tool_calls`` before its
    blocks), read leniently: what pairing tool uses and finding unanswered calls read."""
    # Hidden entries too: a result after the compaction pairs with its call before it.
    for i in (i for i, gone in enumerate(state.removed) if not gone):
        m = state.messages[i]
        if state.responses:
            kind = peek_item(m)[1]
            if kind == CALL:
                yield _CallSeen(i, None, False, str_value(entry(m, "call_id")), str_value(entry(m, "name")))
            elif kind == OUTPUT:
                yield _ResultSeen(i, None, str_value(entry(m, "call_id")), _kind(m) in _RESULT_ITEMS)
            continue
        if not issubclass(type(m), dict):
            continue
        role = _role(m)
        if role == "tool":
            yield _ResultSeen(i, None, str_value(entry(m, "tool_call_id")), True)
            continue
        tool_calls = list_value(entry(m, "tool_calls")) if role == "assistant" else None
        for j, c in enumerate(tool_calls or ()):
            if issubclass(type(c), dict):
                function: Any = entry(c, "function")
                name = str_value(entry(function, "name")) if issubclass(type(function), dict) else None
                yield _CallSeen(i, j, False, str_value(entry(c, "id")), name)
        for j, block in enumerate(list_value(entry(m, "content")) or ()):
            block_kind = _kind(block)
            if block_kind == "tool_use":
                yield _CallSeen(i, j, True, str_value(entry(block, "id")), str_value(entry(block, "name")))
            elif block_kind == "tool_result":
                yield _ResultSeen(i, j, str_value(entry(block, "tool_use_id")), True)


def _tool_uses(state: _State, exclude: tuple[str, ...]) -> list[_Use]:
    """Every tool use not hidden, in its result's order, each paired with the nearest
    earlier call (a hidden one too, whose input is then left as it is)."""
    calls: dict[str, _Call] = {}
    uses: list[_Use] = []
    for seen in _exchanges(state):
        if isinstance(seen, _CallSeen):
            if seen.call_id is not None:
                excluded = seen.name is not None and seen.name in exclude
                calls[seen.call_id] = _Call(seen.at, seen.slot, seen.block, excluded)
        elif seen.tool_use and seen.at not in state.hidden:
            call = None if seen.call_id is None else calls.get(seen.call_id)
            uses.append(_Use(seen.at, seen.block, call, call is not None and call.excluded))
    return uses


# ClearToolUses ------------------------------------------------------------------------


def _result_shorter(state: _State, u: _Use, placeholder: str) -> bool:
    """Whether replacing the result by ``placeholder`` makes it shorter (absent: no)."""
    m = state.messages[u.at]
    if u.block is not None:
        block = _items(m, "content", u.block)[u.block]
        if not has_entry(block, "content"):
            return False
        return json_length(entry(block, "content"), "content", u.at) > json_length(placeholder)
    if state.responses:
        return has_entry(m, "output") and json_length(entry(m, "output"), "output", u.at) > json_length(placeholder)
    return has_entry(m, "content") and _top_units(entry(m, "content"), u.at) > utf16_len(placeholder)


def _call_input(state: _State, c: _Call) -> tuple[Any, Any] | None:
    """A call's input and what emptying it writes; None when there is none to empty."""
    m = state.messages[c.at]
    if c.slot is None:
        key, empty = _CALL_INPUTS.get(_kind(m) or "", ("", None))
        return (entry(m, key), empty) if key and has_entry(m, key) else None
    if c.block:
        block = _items(m, "content", c.slot)[c.slot]
        return (entry(block, "input"), {}) if has_entry(block, "input") else None
    function = entry(_items(m, "tool_calls", c.slot)[c.slot], "function")
    if is_dict(function) and has_entry(function, "arguments"):
        return entry(function, "arguments"), "{}"
    return None


def _input_longer(state: _State, c: _Call | None) -> bool:
    if c is None:
        return False
    found = _call_input(state, c)
    return found is not None and json_length(found[0], "input", c.at) > json_length(found[1])


def _weight(state: _State, u: _Use) -> int:
    """What a tool use's result costs: its message, or (a block) its message holding it alone."""
    if u.block is None:
        return state.cost_of(u.at)
    m = state.messages[u.at]
    return state.cost(u.at, _with(m, "content", [_items(m, "content", u.block)[u.block]]))


def _costs_more_than(state: _State, base: int, limit: int) -> bool:
    """Whether ``base`` and the live messages cost more than ``limit``: summed from the
    newest, so no more are sized than it takes (as folding sizes only what it reaches)."""
    total = base
    for i in reversed(state.live()):
        if total > limit:
            return True
        total += state.cost_of(i)
    return total > limit


def _clear_tool_uses(
    given: _State, state: _State, edit: ClearToolUses, base: int, budget: int, step: int
) -> AppliedEdit | None:
    """Plans on the transcript as given (its trigger, cut points and ``clear_at_least``
    read there, so neither an earlier edit nor what a grown transcript lets it clear can
    move them) and clears over ``state``, the earlier edits' output."""
    if not _costs_more_than(given, base, budget if edit.trigger is None else edit.trigger):
        return None
    uses = _tool_uses(given, edit.exclude_tools)
    protected = max(len(uses) - edit.keep, 0)
    inputs = edit.clear_tool_inputs
    shorter = [not u.excluded and _result_shorter(given, u, edit.placeholder) for u in uses]
    emptier = [
        not u.excluded
        and inputs
        and u.call is not None
        and u.call.at not in given.hidden
        and _input_longer(given, u.call)
        for u in uses
    ]
    start = next((k for k in range(len(uses)) if shorter[k] or emptier[k]), len(uses))
    boundary = min(start, protected)
    running = 0
    for k in range(start, protected):
        before = running
        running += _weight(given, uses[k])
        if running // step > before // step:
            boundary = k + 1
    planned = [k for k in range(boundary) if shorter[k] or emptier[k]]
    if not planned:
        return None
    results = [uses[k] for k in planned if shorter[k]]
    calls = [uses[k].call for k in planned if emptier[k]]
    changed = _clearing(given, results, calls, edit.placeholder)
    after, freed = given.sized(changed)
    if freed < edit.clear_at_least:
        return None
    if not state.edited:  # no earlier edit changed anything: the plan is the change
        state.commit(changed, after, [])
        return AppliedEdit("clear_tool_uses", len(planned), 0, freed)
    # Over the earlier edits' output: what they left to change.
    now = [
        (
            uses[k],
            shorter[k] and _result_shorter(state, state.use_now(uses[k]), edit.placeholder),
            emptier[k] and _input_longer(state, state.call_now(uses[k].call)),
        )
        for k in planned
    ]
    now = [(u, result, call_input) for u, result, call_input in now if result or call_input]
    if not now:
        return None
    changed = _clearing(
        state,
        [state.use_now(u) for u, result, _ in now if result],
        [state.call_now(u.call) for u, _, i in now if i],
        edit.placeholder,
    )
    after, freed = state.sized(changed)
    state.commit(changed, after, [])
    return AppliedEdit("clear_tool_uses", len(now), 0, freed)


def _clearing(state: _State, results: list[_Use], calls: list[_Call | None], placeholder: str) -> dict[int, Any]:
    """The messages of ``state`` with ``results`` replaced by ``placeholder`` and ``calls``'
    inputs emptied (each call once, in order)."""
    changed: dict[int, Any] = {}
    copied: dict[tuple[int, str], list[Any]] = {}  # each list a changed message holds: copied once

    def current(i: int) -> Any:
        return changed.get(i, state.messages[i])

    def replace(at: int, key: str, value: Any) -> None:
        changed[at] = _with(current(at), key, value)
        copied.pop((at, key), None)

    def edit_item(at: int, key: str, j: int, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        items = copied.get((at, key))
        if items is None:
            items = copied[at, key] = list(_items(current(at), key, j))
            changed[at] = _with(current(at), key, items)
        items[j] = edit(items[j])

    for u in results:
        if u.block is None:
            replace(u.at, "output" if state.responses else "content", placeholder)
        else:
            edit_item(u.at, "content", u.block, lambda block: _with(block, "content", placeholder))
    for c in dict.fromkeys(calls):
        assert c is not None  # emptier holds only for a tool use with a call
        if c.slot is None:
            replace(c.at, *_CALL_INPUTS[_kind(current(c.at)) or ""])
        elif c.block:
            edit_item(c.at, "content", c.slot, lambda block: _with(block, "input", {}))
        else:
            edit_item(c.at, "tool_calls", c.slot, _without_arguments)
    return changed


def _without_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = cast("dict[str, Any]", entry(call, "function"))  # measured: _with says if it changed
    return _with(call, "function", _with(function, "arguments", "{}"))


# ClearThinking ------------------------------------------------------------------------


def _user_authored(state: _State, m: Any) -> bool:
    if state.responses:
        return peek_item(m) == ("user", MESSAGE)
    if _role(m) != "user":
        return False
    blocks = list_value(entry(m, "content"))
    return not blocks or not all(_kind(b) == "tool_result" for b in blocks)


def _unanswered(state: _State) -> set[int]:
    """Messages holding a call no later message answers."""
    calls: list[tuple[int, str]] = []
    answered: dict[str, int] = {}  # id -> the last message answering it
    for seen in _exchanges(state):
        if seen.call_id is None:
            continue
        if isinstance(seen, _CallSeen):
            calls.append((seen.at, seen.call_id))
        else:
            answered[seen.call_id] = seen.at
    return {i for i, call_id in calls if answered.get(call_id, -1) <= i}


def _reasoning_required(state: _State, i: int) -> bool:
    """Whether reasoning item ``i`` is required by the item its segment holds (the first
    after it that is no reasoning): one sent with its ``id`` (``fc_…``, ``msg_…``), which
    OpenAI refuses without the reasoning item before it."""
    following = next((m for m in state.messages[i + 1 :] if peek_item(m)[1] != REASONING), None)
    return is_dict(following) and str_value(entry(following, "id")) is not None


def _thinking(state: _State, m: Any) -> list[int] | None:
    """Indices of an assistant message's thinking blocks; None for a reasoning item."""
    if state.responses:
        return None if peek_item(m)[1] == REASONING else []
    if _role(m) != "assistant":
        return []
    return [j for j, block in enumerate(list_value(entry(m, "content")) or ()) if _kind(block) in _THINKING]


def _clear_thinking(state: _State, edit: ClearThinking) -> AppliedEdit | None:
    turn = 0
    turns_of: dict[int, int] = {}
    found: list[tuple[int, int, list[int] | None]] = []  # (message, turn, thinking blocks)
    for i in state.live():
        m = state.messages[i]
        if _user_authored(state, m):
            turn += 1
        turns_of[i] = turn
        blocks = _thinking(state, m)
        if blocks is None or blocks:
            found.append((i, turn, blocks))
    with_thinking = sorted({t for _, t, _ in found})
    held = set(with_thinking[max(len(with_thinking) - edit.keep, 0) :])
    held.update(turns_of[i] for i in _unanswered(state) if i in turns_of)  # not hidden
    changed: dict[int, Any] = {}
    taken: dict[int, tuple[set[int], int]] = {}
    gone: list[int] = []
    turns: set[int] = set()
    for i, t, blocks in found:
        if t in held:
            continue
        if blocks is None:
            if _reasoning_required(state, i):
                continue
            gone.append(i)
        else:
            content = list_value(entry(state.messages[i], "content")) or []
            if len(blocks) == len(content):
                continue
            skip = set(blocks)
            changed[i] = _with(state.messages[i], "content", [b for j, b in enumerate(content) if j not in skip])
            taken[i] = (skip, len(content))
        turns.add(t)
    if not turns:
        return None
    after, freed = state.sized(changed, gone)
    state.commit(changed, after, gone)
    for i, (skip, count) in taken.items():
        state.take_blocks(i, skip, count)
    return AppliedEdit("clear_thinking", 0, len(turns), freed)
