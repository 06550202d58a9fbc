"""Models: spec strings -> ``dspy.LM`` (OpenAI, compatible servers, the embedded model), costs, retries."""

from __future__ import annotations

from saag_opt.lm.accounting import CostLedger, RoleAccount, price_call, usage_numbers
from saag_opt.lm.backends import (
    Endpoint,
    ModelBackend,
    backend_names,
    get_backend,
    register_backend,
)
from saag_opt.lm.client import CallInfo, ChatChoice, ChatResult, SaagLM, chat_completion, open_lm
from saag_opt.lm.embedded import (
    LOCAL_MODELS,
    EmbeddedServer,
    LocalModel,
    embedded_servers,
    ensure_model_file,
    local_base_url,
    stop_embedded_servers,
)
from saag_opt.lm.retry import LMCallError, RetryPolicy, is_transient, with_retries
from saag_opt.lm.specs import ModelSpec, default_workers, is_reasoning_model, parse_model_spec

__all__ = [
    "LOCAL_MODELS",
    "CallInfo",
    "ChatChoice",
    "ChatResult",
    "CostLedger",
    "EmbeddedServer",
    "Endpoint",
    "LMCallError",
    "LocalModel",
    "ModelBackend",
    "ModelSpec",
    "RetryPolicy",
    "RoleAccount",
    "SaagLM",
    "backend_names",
    "chat_completion",
    "embedded_servers",
    "ensure_model_file",
    "get_backend",
    "default_workers",
    "is_reasoning_model",
    "is_transient",
    "local_base_url",
    "open_lm",
    "parse_model_spec",
    "price_call",
    "register_backend",
    "stop_embedded_servers",
    "usage_numbers",
    "with_retries",
]
