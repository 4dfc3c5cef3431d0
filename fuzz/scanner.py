"""The bytes path against the reference backend and ``json.loads``, on mutated request
bodies, for as long as it is given.

    python fuzz/scanner.py --seconds 60            # CI runs a minute (.ci/run)
    python fuzz/scanner.py --seconds 3600 --seed 7  # longer, on demand

Bodies are the shared corpus (chat, Anthropic and Responses requests) written in several
JSON styles, then mutated: bytes flipped, inserted, deleted or repeated, spans spliced
from another body, a key repeated, nesting deepened, the text cut short. Each is packed
by both backends under random options (budget, cut, edits) and the outcomes must be
equal: the same `PackedRequest`, bytes for bytes, or the same exception class, message
and offset. A body whose strict UTF-8 text `json.loads` refuses must be refused by both
(a `RequestError`); one it loads must not be refused for its JSON. A mismatch is printed
with its seed and body (base64) and exits 1; a clean run prints how many bodies it tried.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import contextfold as cf
from contextfold import _backend, reference
from contextfold.synthetic import responses_items

SHARED = Path(os.environ.get("CONTEXTFOLD_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TOKENS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b" ", b"0", b"-1.5e3", b"null", b"true", b"\xc3\xa9"]


def seeds() -> list[bytes]:
    """The corpus as request bodies, in four styles."""
    corpus = SHARED / "corpus"
    chats = [json.loads(line)["messages"] for line in (corpus / "transcripts.jsonl").read_text().splitlines()]
    anthropic = [json.loads(line) for line in (corpus / "anthropic.jsonl").read_text().splitlines()]
    requests: list[Any] = [{"model": "m", "messages": m} for m in chats[:20]] + anthropic[:10]
    requests += [{"model": "m", "input": responses_items(m), "instructions": "be brief"} for m in chats[:10]]
    styles: list[dict[str, Any]] = [
        {"separators": (",", ":"), "ensure_ascii": False},
        {"ensure_ascii": True},
        {"indent": 2, "ensure_ascii": False},
        {},
    ]
    return [json.dumps(r, **styles[i % len(styles)]).encode() for i, r in enumerate(requests)]


def mutate(rng: random.Random, body: bytes, other: bytes) -> bytes:
    out = bytearray(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        at = rng.randrange(len(out) + 1)
        kind = rng.randrange(8)
        if kind == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at:at] = rng.choice(TOKENS)
        elif kind == 2:
            del out[at : at + rng.randrange(1, 64)]
        elif kind == 3:
            out[at:at] = out[at : at + rng.randrange(1, 256)]
        elif kind == 4 and other:
            start = rng.randrange(len(other))
            out[at:at] = other[start : start + rng.randrange(1, 512)]
        elif kind == 5:
            out[at:at] = b'"role":"user",' * rng.randrange(1, 3)
        elif kind == 6:
            depth = rng.choice([10, 500, 1_000])
            out[at:at] = b"[" * depth + b"]" * depth
        else:
            del out[at:]
    return bytes(out)


def options(rng: random.Random) -> cf.PackOptions:
    every = (cf.ClearToolUses(keep=1, clear_tool_inputs=True), cf.ClearThinking())
    edits = rng.choice([(), (cf.ClearToolUses(),), every])
    return cf.PackOptions(
        target_context_tokens=rng.choice([0, 300, 2_000, 8_000, 10**6]),
        cut=rng.choice(["greedy", "chunked"]),
        edits=edits,
    )


def outcome(impl: Any, body: bytes, opts: cf.PackOptions) -> tuple[Any, ...]:
    with _backend.using(impl):
        try:
            packed = cf.pack_request(body, options=opts)
        except RecursionError:
            return ("recursion",)
        except Exception as exc:
            return (type(exc).__name__, str(exc), getattr(exc, "offset", None))
    return ("packed", *packed)


def loads(body: bytes) -> bool | None:
    """Whether ``json.loads`` takes the body's strict UTF-8 text (None: Python's own
    limits, which the native scanner does not share)."""
    try:
        text = body.decode("utf-8")
        json.loads(text[1:] if text.startswith("\ufeff") else text)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    except (RecursionError, ValueError):
        return None
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    native = _backend.implementation("native")
    pool = seeds()
    tried = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        body = mutate(rng, rng.choice(pool), rng.choice(pool))
        opts = options(rng)
        ours, theirs = outcome(native, body, opts), outcome(reference, body, opts)
        valid = loads(body)
        # Refused as text: not UTF-8, or not JSON json.loads would load.
        as_text = ours[0] == "RequestError" and ours[1].startswith(("not JSON", "not UTF-8"))
        python_limit = theirs[0] == "recursion" or (theirs[0] == "RequestError" and "recursion" in theirs[1])
        agree = (ours == theirs or python_limit) and (valid is None or valid != as_text)
        if not agree:
            kept = Path(f"scanner-mismatch-{seed}-{tried}.json")
            kept.write_bytes(body)
            print(f"mismatch (seed {seed}, body {tried}, {opts}):\n native    {ours!r}\n reference {theirs!r}"[:4000])
            print(f" json.loads takes it: {valid}; the body is in {kept}")
            return 1
        tried += 1
    print(f"scanner fuzz: {tried} bodies, native == reference == json.loads (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
