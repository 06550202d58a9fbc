"""The ``ModelBackend`` contract.

Its spec form round-trips, a missing key is one clear line, and the client retries transient
faults through it (on the scripted server).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from saag_opt.errors import ModelUnavailableError
from saag_opt.lm.backends import ModelBackend, parse_model_spec
from saag_opt.lm.client import open_lm
from saag_opt.lm.scripted_server import Fault, Reply, ScriptedOpenAIServer

NOT_A_SPEC = "\u2205 not a model spec \u2205"


def check_spec_round_trip(kind: str, backend: ModelBackend, texts: Sequence[str]) -> None:
    """Each text parses to a spec of ``kind`` whose canonical text parses back to it; foreign text is not claimed.

    ``backend`` must be registered as ``kind`` (``parse_model_spec`` is checked too).
    """
    assert backend.parse(NOT_A_SPEC) is None, "parse claimed text that is not its form (return None)"
    for text in texts:
        spec = backend.parse(text)
        assert spec is not None, f"parse did not claim its own form {text!r}"
        assert spec.kind == kind, f"parse({text!r}).kind is {spec.kind!r}, registered as {kind!r}"
        assert backend.parse(backend.spec_text(spec)) == spec, f"{text!r}: spec_text does not parse back"
        assert parse_model_spec(text) == spec, f"{text!r}: another registered backend claims it first"
        assert spec.label and "/" not in spec.label and ":" not in spec.label, f"{text!r}: label not filename-safe"


def check_missing_key(backend: ModelBackend, text: str, env: str) -> str:
    """With ``env`` unset, ``endpoint`` raises ``ModelUnavailableError`` with one line naming ``env``."""
    spec = backend.parse(text)
    assert spec is not None, f"parse did not claim {text!r}"
    saved = os.environ.pop(env, None)
    try:
        backend.endpoint(spec)
    except ModelUnavailableError as exc:
        message = str(exc)
        assert "\n" not in message and env in message, f"missing-key message must be one line naming {env}: {message!r}"
        return message
    else:
        raise AssertionError(f"endpoint({text!r}) did not fail without {env}")
    finally:
        if saved is not None:
            os.environ[env] = saved


def check_retries(spec_at: Callable[[str], str]) -> None:
    """Through this backend, transient faults (429, 500, a dropped connection) are retried to success.

    ``spec_at(url)`` is a spec of this backend that talks to the OpenAI-compatible server at ``url``.
    """
    with ScriptedOpenAIServer(lambda request: Reply(text="pong")) as server:
        server.inject([Fault(429, retry_after=0), Fault(500), Fault("reset")])
        lm = open_lm(spec_at(server.url), role="base", retries=3, retry_base_delay=0.0, cache=False)
        assert lm(messages=[{"role": "user", "content": "ping"}]) == ["pong"], "no answer after the faults"
        outcomes = [r.outcome for r in server.chat_requests]
        assert outcomes == ["429", "500", "reset", "ok"], f"unexpected request sequence {outcomes}"


__all__ = ["NOT_A_SPEC", "check_missing_key", "check_retries", "check_spec_round_trip"]
