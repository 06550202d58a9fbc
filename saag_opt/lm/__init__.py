"""Models: spec strings -> ``dspy.LM`` (OpenAI, compatible servers, the embedded model), costs, retries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

if TYPE_CHECKING:
    from saag_opt.lm.backends import (
        Endpoint,
        ModelBackend,
        backend_names,
        default_workers,
        get_backend,
        parse_model_spec,
        register_backend,
    )
    from saag_opt.lm.client import CallInfo, ChatChoice, ChatResult, SaagLM, chat_completion, open_lm
    from saag_opt.lm.embedded.model_file import LOCAL_MODELS, LocalModel, ensure_model_file
    from saag_opt.lm.embedded.server import EmbeddedServer, embedded_servers, local_base_url, stop_embedded_servers
    from saag_opt.lm.request_rules import check_model, efforts_of, is_reasoning_model, shape_request
    from saag_opt.lm.retry import LMCallError, RetryPolicy, is_transient, with_retries
    from saag_opt.lm.specs import ModelSpec
    from saag_opt.lm.spend.accounting import CostLedger, RoleAccount, price_call, usage_numbers
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "spend.accounting": ("CostLedger", "RoleAccount", "price_call", "usage_numbers"),
        "backends": ("Endpoint", "ModelBackend", "backend_names", "default_workers", "get_backend", "parse_model_spec",
                     "register_backend"),
        "client": ("CallInfo", "ChatChoice", "ChatResult", "SaagLM", "chat_completion", "open_lm"),
        "embedded.model_file": ("LOCAL_MODELS", "LocalModel", "ensure_model_file"),
        "embedded.server": ("EmbeddedServer", "embedded_servers", "local_base_url", "stop_embedded_servers"),
        "request_rules": ("check_model", "efforts_of", "is_reasoning_model", "shape_request"),
        "retry": ("LMCallError", "RetryPolicy", "is_transient", "with_retries"),
        "specs": ("ModelSpec",),
    })

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
    "check_model",
    "default_workers",
    "efforts_of",
    "embedded_servers",
    "ensure_model_file",
    "get_backend",
    "is_reasoning_model",
    "is_transient",
    "local_base_url",
    "open_lm",
    "parse_model_spec",
    "price_call",
    "register_backend",
    "shape_request",
    "stop_embedded_servers",
    "usage_numbers",
    "with_retries",
]
