"""Import BFCL's ``ast_checker`` without its provider SDKs (docs/design.md §4).

``bfcl_eval.constants.model_config`` imports every model handler; with ``--no-deps`` that fails.
The checker only needs ``MODEL_CONFIG_MAPPING[name].underscore_to_dot``, so a stub stands in: FC model
names (``...-FC``) expect OpenAI-safe names, others the original dotted ones, as in BFCL.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MODEL_NAME = "gpt-4o-2024-11-20"
"""A prompt-style model: BFCL compares the original (dotted) function names."""


@dataclass
class _ModelConfig:
    underscore_to_dot: bool = False


class _ConfigMapping(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> _ModelConfig:
        return _ModelConfig(underscore_to_dot=key.endswith("-FC"))


def load_ast_checker() -> tuple[Callable[..., dict[str, Any]], Any] | None:
    """``(ast_checker, Language)``, or None when ``bfcl_eval`` is not installed."""
    if importlib.util.find_spec("bfcl_eval") is None:
        return None
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stub = types.ModuleType(name)
        stub.MODEL_CONFIG_MAPPING = _ConfigMapping()  # type: ignore[attr-defined]
        sys.modules[name] = stub
    from bfcl_eval.constants.enums import Language  # noqa: PLC0415 - optional: bfcl-eval, once its stub is in place
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker  # noqa: PLC0415 - optional: bfcl-eval, once its stub is in place

    return ast_checker, Language
