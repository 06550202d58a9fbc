"""The runtime guard inside AgentDojo (``pip install 'saag-opt[agentdojo]'``; agentdojo==0.1.35).

AgentDojo (Debenedetti et al., 2024) runs a tool-calling agent as a pipeline of elements over four
suites (workspace, slack, travel, banking) and scores utility and attack success with its own
checks. The guard plugs in where a proposed call meets its execution:

* ``elements``: ``GuardElement`` (before ``ToolsExecutor`` inside the tool loop: allow, revise, or
  block with feedback to the model), ``StripBlocked`` (keeps blocked calls out of the traces
  AgentDojo scores, which count *proposed* calls), ``Tap`` and ``guarded_pipeline``;
* ``trace``: ``Tracer``, what a record keeps of a run (the blocks; the conversation, the guard's
  decision on each call, what was scored, where the injected text sits);
* ``scripted``: ``ObedientAgent``, the deterministic worst case (the user task's ground truth, plus
  every injected instruction it reads), so security is measured without an LLM;
* ``llm``: ``SaagLLM``, saag-opt's own LLM element (the embedded model or any OpenAI-compatible
  server; system role and plain-string content, which local servers accept);
* ``suites``: the runs ``experiments/bench/agentdojo_guard.py`` reports (utility without attack,
  utility under attack, attack success; per suite, attack and arm);
* ``adaptive``: attacks written by an attacker who knows the guard (no markers, the user's voice, an
  argument swap, a note to the reviewer, laundering through a note), registered with AgentDojo.

Only this package imports agentdojo; importing it without the extra raises one ImportError that
says what to install.
"""

from __future__ import annotations

AGENTDOJO_VERSION = "0.1.35"
"""The AgentDojo release the adapter is written and measured against (pyproject's [agentdojo] extra)."""
BENCHMARK_VERSION = "v1.2.2"
"""AgentDojo's default benchmark version in 0.1.35: 97 user tasks, 35 injection tasks, 949 pairs."""


def require() -> None:
    """Import agentdojo, or raise an ImportError naming the extra."""
    try:
        import agentdojo  # noqa: F401, PLC0415 - optional: the agentdojo extra
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("the AgentDojo adapter needs: pip install 'saag-opt[agentdojo]' "
                          f"(agentdojo=={AGENTDOJO_VERSION})") from exc


__all__ = ["AGENTDOJO_VERSION", "BENCHMARK_VERSION", "require"]
