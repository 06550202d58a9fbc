"""The embedded server's trace splits a request's time into prompt decode, generation and sampling."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import requires

_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
pytestmark = requires(None if _LLAMA_CPP else "llama-cpp-python is not installed (pip install 'saag-opt[local]')")
if _LLAMA_CPP:  # the module under test imports llama_cpp at its top
    from saag_opt.lm.embedded.server_trace import TracedLlama


def test_one_line_per_chat_completion_with_reused_decoded_and_generated_tokens(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_cpp.llama import Llama  # noqa: PLC0415 - optional: the local extra (llama-cpp-python)

    def fake_decode(self: Any, tokens: list[int]) -> None:  # upstream eval without llama.cpp
        self.n_tokens += len(tokens)

    def fake_chat(self: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
        self.eval([5] * 300)  # the prompt after a reused prefix
        for _ in range(4):  # four generated tokens, each sampled, then decoded
            self.sample(temp=0.0, idx=None)
            self.eval([6])
        self.sample(temp=0.0, idx=None)  # the last token is sampled and never decoded
        return {"ok": "yes"}

    class Unloaded(TracedLlama):
        def __del__(self) -> None:  # no model, nothing to free
            pass

    monkeypatch.setattr(Llama, "eval", fake_decode)
    monkeypatch.setattr(Llama, "sample", lambda self, *a, **k: 6)
    monkeypatch.setattr(Llama, "create_chat_completion", fake_chat)
    llm = Unloaded.__new__(Unloaded)
    llm.n_tokens, llm.n_batch, llm._clean_tokens = 256, 128, 256
    with open(tmp_path / "trace.jsonl", "w", encoding="utf-8") as out:
        llm.trace_file = out
        assert llm.create_chat_completion(messages=[{"role": "system", "content": "You are the reviewer."}],
                                          response_format={"type": "json_object"}) == {"ok": "yes"}
    (line,) = [json.loads(text) for text in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert line["kind"] == "chat" and line["head"] == "You are the reviewer." and line["grammar"] is True
    assert (line["prompt_tokens"], line["reused_tokens"], line["generated_tokens"], line["sampled_tokens"]) == (556, 256, 4, 5)
    parts = sum(line[k] for k in ("prompt_seconds", "generate_seconds", "sample_seconds", "cache_seconds"))
    assert 0 <= parts <= line["seconds"]
    assert line["start"] <= line["end"] and line["end"] - line["start"] == pytest.approx(line["seconds"], abs=0.01)
