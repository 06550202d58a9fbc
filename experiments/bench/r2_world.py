"""The scripted r2 world that the concurrency and batch-cost benchmarks share (no model, offline).

The base agent's first answer is deterministic per example (a hash of the query): one example in
three calls the first tool with no arguments, which the scripted reviewer rejects; the revision adds
an argument and is approved. ``examples(n)`` tops shipped:bfcl up with query variants, so no two
examples share an LM reply.
"""

from __future__ import annotations

import zlib

from saag_opt.data import load_dataset
from saag_opt.model import Example
from saag_opt.testing import Reply


def examples(n: int) -> list[Example]:
    """shipped:bfcl, topped up to ``n`` with variants whose query differs (so no LM reply is shared)."""
    base = load_dataset("shipped:bfcl")
    out = list(base[:n])
    k = 0
    while len(out) < n:
        ex = base[k % len(base)]
        variant = len(out) // len(base)
        messages = tuple({**m, "content": f"{m.get('content')} (variant {variant})"} if m.get("role") == "user"
                         else m for m in ex.messages)
        out.append(Example(f"{ex.id}-v{variant}", ex.category, messages, ex.registry, ex.gold, ex.expect,
                           ex.split, ex.source))
        k += 1
    return out


def _chat(fields: dict[str, str]) -> Reply:
    return Reply(text="".join(f"[[ ## {k} ## ]]\n{v}\n\n" for k, v in fields.items()) + "[[ ## completed ## ]]")


def handler(request: dict) -> Reply:
    """Base: 1 in 3 first answers lack arguments; any revision has one. Reviewer: reject empty arguments."""
    messages = request["messages"]
    if "tools" in request:
        revised = any(m["role"] == "system" and "Reviewer feedback" in str(m["content"]) for m in messages[1:])
        user = next(str(m["content"]) for m in messages if m["role"] == "user")
        name = request["tools"][0]["function"]["name"]
        bad = not revised and zlib.crc32(user.encode()) % 3 == 0
        return Reply(tool_calls=[{"name": name, "arguments": {} if bad else {"value": 1}}])
    tentative = str(messages[-1]["content"]).split("[[ ## tentative_calls ## ]]")[-1]
    reject = '"arguments": {}' in tentative
    return _chat({"error": str(reject), "feedback": "Add the missing arguments." if reject else ""})
