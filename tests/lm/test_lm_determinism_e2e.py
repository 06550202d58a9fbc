"""The embedded server answers a greedy request the same way cold or warm (README, Models: reproducibility).

Upstream llama-cpp-python reuses any cached prefix, so a warm server decodes the prompt in other
batches than a cold one and the last bits of the logits differ; on this prompt pair the greedy reply
changed (measured with the 0.5B: different text and logits). ``saag_opt.lm.prompt_cache`` reuses only
whole-batch prefixes, which makes the decode identical.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from saag_opt.lm.embedded import EmbeddedServer, ensure_model_file, get_local_model

pytestmark = pytest.mark.e2e

SHARED = "Tools: " + " ".join(f"tool_{i}(arg{i % 7}: int) returns v{i * 31 % 97}" for i in range(90))
PROMPT = SHARED + "\nUser: call the tool whose index is the number of letters in 'parallel' and explain why."
OTHERS = [SHARED + "\nOther user: list three tools.", SHARED + "\nUser: call the tool whose index is seven."]


def _reply(server: EmbeddedServer, text: str) -> str:
    body = {"model": server.model.alias, "temperature": 0, "max_tokens": 40,
            "messages": [{"role": "user", "content": text}]}
    req = urllib.request.Request(server.url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as resp:
        return json.loads(resp.read())["choices"][0]["message"]["content"]


def test_same_prompt_same_reply_on_a_cold_and_a_warm_server(local_spec: str) -> None:
    name = local_spec.split(":", 1)[1]
    model, path = get_local_model(name), ensure_model_file(name)
    cold = EmbeddedServer(model, path).start()
    try:
        cold_reply = _reply(cold, PROMPT)
    finally:
        cold.stop()
    warm = EmbeddedServer(model, path).start()
    try:
        for other in OTHERS:  # the context and the prompt cache now hold prefixes of PROMPT
            _reply(warm, other)
        warm_reply = _reply(warm, PROMPT)
        again = _reply(warm, PROMPT)
    finally:
        warm.stop()
    assert cold_reply.strip(), "empty reply proves nothing"
    assert warm_reply == cold_reply
    assert again == cold_reply
