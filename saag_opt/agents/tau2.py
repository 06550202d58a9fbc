"""tau2-bench with the reviewer inside its agent: tau2's orchestrator, user simulator and evaluator decide.

tau2's ``Orchestrator`` runs a task: its user simulator writes the user's turns, the agent answers,
the agent's tool calls run on the domain's environment, and ``evaluate_simulation`` scores the whole
conversation (DB hash, env assertions, actions, communicated facts). The agent here is a subclass
of tau2's ``LLMAgent`` (``reviewed_agent_class``; tau2's own runner dispatches on that class) whose
every step is one ``Mechanism.run`` of the project (the same mechanisms and review set-up as
``evaluate``), on the conversation so far rendered as a ``StepExample`` (``agents/conversation.py``):

* the final prediction makes calls: they are tau2's next ``AssistantMessage`` (ids minted here),
  so tau2 executes exactly what the review let through, and their results come back as the next
  input;
* it makes none, and the agent had proposed none: its text is the message to the user;
* it makes none, but calls were proposed (a ``guard+r<N>`` block, a rejection revised into no
  call): nothing runs and **nothing enters tau2's trajectory** (its evaluator replays every
  trajectory call on a fresh environment and raises when an output differs). The withheld call and
  the review's feedback stay in this agent's private conversation (``Not executed: ...``) and the
  agent takes another step, at most ``max_withheld`` times in a row; then its text (or
  ``NO_REPLY``) goes to the user.

The base agent speaks tau2's prompt (``Tau2BaseAgent``: tau2's agent instructions and the domain
policy in place of the project's function-calling prompt) and may answer in text. The user simulator
is tau2's ``UserSimulator`` on a model of its own, through the project's LM (``simulated_user``). Each
run is recorded in the
project's episode form (``EpisodeOutcome``: turns = user messages, steps = mechanism runs) next to
tau2's ``SimulationRun`` and a ``Judgement`` made of tau2's ``RewardInfo``.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from saag_opt.agents.base import BASE_PROMPT_HASH, BaseAgent, FeedbackTurn, registry_json_schema, render_calls_json
from saag_opt.agents.conversation import Conversation
from saag_opt.agents.episode import EpisodeOutcome, StepOutcome, TurnOutcome
from saag_opt.agents.mechanisms.base import Mechanism, MechanismContext, MechanismOutcome
from saag_opt.agents.reviewer import Reviewer
from saag_opt.choices import UserReminder
from saag_opt.data.tau2 import domain_of, domain_tools, task_of
from saag_opt.data.tau2_package import tau2
from saag_opt.episodes import Episode, Judgement, ToolResult
from saag_opt.events import note_step
from saag_opt.lm import CostLedger, ModelSpec, chat_completion, open_lm, parse_model_spec
from saag_opt.model import Example, Prediction, Registry, ToolCall

DEFAULT_SEED = 300
"""tau2's ``DEFAULT_SEED`` (``tau2/config.py``)."""
DEFAULT_MAX_STEPS = 100
"""tau2's orchestrator default (NVIDIA's ``framework.yml`` uses 100 too; its CLI 200)."""
DEFAULT_MAX_ERRORS = 10
"""tau2's ``DEFAULT_MAX_ERRORS``: tool errors before the run ends (``TOO_MANY_ERRORS``, reward 0)."""
MAX_WITHHELD = 3
"""Withheld steps in a row before the agent must answer the user in text."""
NO_REPLY = "I am sorry, I cannot complete that request."
"""Sent to the user when the agent's last word after withheld steps is no text at all (tau2 needs a message)."""
TAU2_JSON_SUFFIX = (
    "\n\nReply with a single JSON object {\"calls\": [{\"name\": <function name>, \"arguments\": {...}}, ...], "
    "\"message\": <text>}. Either make tool calls (and leave \"message\" empty) or send a message to the user "
    "(with \"calls\": []), not both.\n\nAvailable functions:\n")
"""Appended to tau2's agent prompt in ``json`` mode, followed by the function documentation."""
USER_ROLE_REMINDER = (
    "You are the customer described in the scenario above, not the customer service agent. "
    "Write only the customer's next message to the agent.")
"""Sent as a last system message after the user simulator's conversation when the reminder is on
(``user_reminder_on``). Measured on the embedded 1.5B at commit 87842d8 (2026-12-02): given tau2's prompt and the agent's
greeting, it answered as the agent ("Hello! How can I assist you today?") or stopped at once on 8 of
8 first turns (2 mock, 3 airline, 3 retail tasks), so no conversation ever started; with this reminder
it stated its request on all 8. Kept outside tau2's prompt so an API model's user gets tau2's own."""
TAU2_PROMPT_HASH = "tau2-" + hashlib.sha256((BASE_PROMPT_HASH + TAU2_JSON_SUFFIX).encode()).hexdigest()[:16]
"""Part of the base-prediction cache key of ``Tau2BaseAgent`` (the prompt is tau2's, from the example)."""


def trial_seeds(seed: int, num_trials: int) -> list[int]:
    """The seed of each trial, drawn as tau2's ``run_tasks`` draws them.

    That is ``random.seed(seed)``, then ``randint(0, 1000000)`` per trial, so trial k of a run here
    is trial k of ``tau2 run --seed``.
    """
    draw = random.Random(seed)
    return [draw.randint(0, 1000000) for _ in range(num_trials)]


class Tau2BaseAgent(BaseAgent):
    """The base agent with tau2's prompt, whose text replies are messages to the user.

    The step example's first (system) message, tau2's agent instructions and policy, replaces the
    project's function-calling prompt. In ``json`` mode (the embedded model: no native tool calls)
    the reply is constrained to ``{"calls": [...], "message": "..."}`` (``tau2_json_schema``): calls,
    or no call and the message to the user, as tau2's agent answers with one or the other.
    """

    @property
    def prompt_hash(self) -> str:
        """The prompt is the example's (tau2's, hashed in its fingerprint); the feedback wording is ours."""
        return f"{TAU2_PROMPT_HASH}-{self.mode}"

    def build_messages(self, example: Example, feedback: Sequence[FeedbackTurn] = ()) -> list[dict[str, Any]]:
        """tau2's system prompt (plus the JSON reply format in json mode), the conversation, the feedback turns."""
        messages = super().build_messages(example, feedback)[1:]
        if self.mode == "json" and messages and messages[0]["role"] == "system":
            tools = json.dumps([t.to_openai_tool()["function"] | {"name": t.name} for t in example.registry],
                               ensure_ascii=False, indent=1)
            messages[0] = {"role": "system", "content": messages[0]["content"] + TAU2_JSON_SUFFIX + tools}
        return messages

    def _call(self, example: Example, messages: list[dict[str, Any]], temperature: float) -> Any:
        if self.mode != "json":
            return super()._call(example, messages, temperature)
        return chat_completion(self.lm, messages, temperature=temperature, role=self.role, ledger=self.ledger,
                               response_format={"type": "json_schema", "json_schema": {
                                   "name": "reply", "schema": tau2_json_schema(example)}})

    def _read(self, example: Example, result: Any) -> Prediction:
        text = getattr(result, "text", None) or ""
        if self.mode == "native" and not getattr(result, "tool_calls", None):
            return Prediction(raw=text, status="empty")
        if self.mode == "json":
            reply = _json_reply(text)
            if reply is not None and not reply[0]:
                return Prediction(raw=reply[1], status="empty")
        return super()._read(example, result)




def tau2_json_schema(example: Example) -> dict[str, Any]:
    """The project's ``{"calls": [anyOf per tool]}`` schema plus the ``message`` to the user."""
    schema = registry_json_schema(example)
    return schema | {"properties": dict(schema["properties"]) | {"message": {"type": "string"}},
                     "required": ["calls", "message"]}


def _json_reply(text: str) -> tuple[list[Any], str] | None:
    """``(calls, message)`` of a JSON-mode reply, or None when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("calls", []), list):
        return None
    return list(data.get("calls") or []), str(data.get("message") or "")


@dataclass
class _Turn:
    user: str
    steps: list[StepOutcome] = field(default_factory=list)


@dataclass
class _Pending:
    outcome: MechanismOutcome | None
    """None: a call of the task's message history (not the agent's, not recorded)."""
    turn: int
    index: int
    calls: tuple[ToolCall, ...]
    ids: tuple[str, ...]


@dataclass
class _Log:
    """What the agent did, in the project's episode form (built as tau2 runs it)."""

    turns: list[_Turn] = field(default_factory=list)
    pending: _Pending | None = None

    def step(self, step: StepOutcome) -> None:
        if not self.turns:  # an agent step before any user message (a task's message history)
            self.turns.append(_Turn(""))
        self.turns[-1].steps.append(step)

    def outcome(self, episode_id: str, category: str, mechanism: str, *, cut_off: bool) -> EpisodeOutcome:
        turns = [TurnOutcome(i, tuple(t.steps), messages=({"role": "user", "content": t.user},) if t.user else ())
                 for i, t in enumerate(self.turns)]
        if cut_off and turns:
            last = turns[-1]
            turns[-1] = TurnOutcome(last.index, last.steps, last.added_tools, True, last.messages)
        return EpisodeOutcome(episode_id, category, mechanism, tuple(turns))


def _feedback(outcome: MechanismOutcome) -> str:
    if outcome.ruling is not None and outcome.ruling.feedback:
        return outcome.ruling.feedback
    texts = [r.feedback for r in outcome.rounds if r.feedback]
    return texts[-1] if texts else "the review did not let this call run"


@functools.lru_cache(maxsize=1)
def reviewed_agent_class() -> type:
    """tau2's ``LLMAgent`` with every step through a mechanism (module docstring); built on first use."""
    t = tau2()

    class ReviewedAgent(t.LLMAgent):  # type: ignore[misc,name-defined]
        """tau2's LLM agent whose proposals are the project's base agent's, reviewed by its mechanism."""

        def __init__(self, tools: list[Any], domain_policy: str, *, agent: BaseAgent, reviewer: Reviewer | None,
                     mechanism: Mechanism, ctx: MechanismContext, episode_id: str, category: str,
                     registry: Registry, max_withheld: int = MAX_WITHHELD) -> None:
            super().__init__(tools=tools, domain_policy=domain_policy, llm=None, llm_args=None)
            self.agent, self.reviewer, self.mechanism, self.ctx = agent, reviewer, mechanism, ctx
            self.episode_id, self.category, self.registry = episode_id, category, registry
            self.max_withheld = max_withheld
            self.seed: int | None = None
            self.log = _Log()
            self.conversation = Conversation(episode_id)
            self._ids = itertools.count()

        def set_seed(self, seed: int) -> None:
            """Recorded only: the project's agent LM runs at its set-up's temperature, without a seed."""
            self.seed = seed

        def get_init_state(self, message_history: list[Any] | None = None) -> Any:
            state = super().get_init_state(message_history)
            self.conversation = Conversation(self.episode_id)
            self.conversation.messages.append({"role": "system", "content": self.system_prompt})
            for message in state.messages:
                self._feed(message, record=False)
            return state

        def generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if isinstance(message, t.MultiToolMessage):
                state.messages.extend(message.tool_messages)
            else:
                state.messages.append(message)
            self._feed(message, record=True)
            reply = self._next()
            state.messages.append(reply)
            return reply, state

        def stop(self, message: Any = None, state: Any = None) -> None:
            """A step whose calls never came back (the run ended first) is kept, with no results."""
            p, self.log.pending = self.log.pending, None
            if p is not None and p.outcome is not None:
                self.log.step(StepOutcome(p.turn, p.index, p.outcome))

        # -- the project's side ------------------------------------------------------------------

        def _feed(self, message: Any, *, record: bool) -> None:
            if isinstance(message, t.UserMessage):
                text = message.content or ""
                self.conversation.user([{"role": "user", "content": text}])
                self.log.turns.append(_Turn(text))
            elif isinstance(message, t.AssistantMessage):
                if message.tool_calls:
                    calls = tuple(ToolCall(c.name, dict(c.arguments)) for c in message.tool_calls)
                    self.log.pending = _Pending(None, -1, -1, calls, tuple(c.id for c in message.tool_calls))
                elif message.content:
                    self.conversation.answered(Prediction(raw=message.content, status="empty"))
            elif isinstance(message, (t.ToolMessage, t.MultiToolMessage)):
                tool_messages = message.tool_messages if isinstance(message, t.MultiToolMessage) else [message]
                self._results(tool_messages, record=record)

        def _results(self, tool_messages: Sequence[Any], *, record: bool) -> None:
            pending, self.log.pending = self.log.pending, None
            if pending is None:
                return
            by_id = {m.id: m for m in tool_messages}
            results = tuple(ToolResult(call.name, str(by_id[i].content or "") if i in by_id else "", i in by_id)
                            for call, i in zip(pending.calls, pending.ids))
            self.conversation.executed(pending.calls, results)
            if record and pending.outcome is not None:
                self.log.step(StepOutcome(pending.turn, pending.index, pending.outcome, results))

        def _position(self) -> tuple[int, int]:
            turn = max(len(self.log.turns) - 1, 0)
            steps = len(self.log.turns[-1].steps) if self.log.turns else 0
            return turn, steps

        def _next(self) -> Any:
            withheld = 0
            while True:
                turn, index = self._position()
                example = self.conversation.step(turn, index, self.registry, self.category)
                note_step()
                outcome = self.mechanism.run(example, self.agent, self.reviewer, ctx=self.ctx)
                final = outcome.final
                if final.calls:
                    ids = tuple(f"call_{next(self._ids)}" for _ in final.calls)
                    self.log.pending = _Pending(outcome, turn, index, final.calls, ids)
                    return t.AssistantMessage(role="assistant", content=None, tool_calls=[
                        t.ToolCall(id=i, name=c.name or "", arguments=dict(c.arguments), requestor="assistant")
                        for c, i in zip(final.calls, ids)], raw_data={"saag": _summary(outcome)})
                self.log.step(StepOutcome(turn, index, outcome))
                proposed = outcome.base.prediction
                if proposed.calls and withheld < self.max_withheld:
                    withheld += 1
                    self.conversation.messages.append(
                        {"role": "assistant", "content": f"Tentative function calls: {render_calls_json(proposed)}"})
                    self.conversation.messages.append({"role": "system", "content": f"Not executed: {_feedback(outcome)}"})
                    continue
                text = (final.raw or "").strip()
                self.conversation.answered(Prediction(raw=text or NO_REPLY, status="empty"))
                return t.AssistantMessage(role="assistant", content=text or NO_REPLY, raw_data={"saag": _summary(outcome)})

    return ReviewedAgent


def _summary(outcome: MechanismOutcome) -> dict[str, Any]:
    """What the review did at this step (tau2 keeps ``raw_data`` with the message; its evaluator ignores it)."""
    return {"mechanism": outcome.mechanism, "proposed": [c.to_dict() for c in outcome.base.prediction.calls],
            "verdicts": [r.verdict for r in outcome.rounds],
            "ruling": outcome.ruling.action if outcome.ruling is not None else None}


# -- the user simulator ----------------------------------------------------------------------------

UserFactory = Callable[[Any, Any], Any]
"""``(tau2 environment, tau2 task) -> a tau2 user`` (``BaseUser``): a fresh one per run."""


@functools.lru_cache(maxsize=1)
def user_simulator_class() -> type:
    """tau2's ``UserSimulator`` whose model calls go through the project's LM (built on first use).

    Everything that makes it tau2's user stays tau2's: the system prompt (the simulation guidelines
    and the task's scenario), the role flip of the conversation, tau2's message conversion, the
    user's own tools (telecom's phone) and the stop rule. Only the transport is the project's
    (``chat_completion`` on an ``open_lm`` LM, role ``user``): its calls are booked on the run's
    ledger (``--max-cost`` holds for them), retried and cached like the agent's and the reviewer's.
    The trial's seed (``set_seed``) is sent with each call, as tau2 sends it.
    """
    t = tau2()

    class LedgerUser(t.UserSimulator):  # type: ignore[misc,name-defined]
        """tau2's user simulator on a project LM (``user_simulator_class``)."""

        def __init__(self, tools: list[Any] | None, instructions: str, lm: Any, *, reminder: bool = False) -> None:
            super().__init__(tools=tools, instructions=instructions, llm=str(getattr(lm, "model", "user")),
                             llm_args=None)
            self.lm = lm
            self.reminder = reminder
            self.seed: int | None = None
            self._ids = itertools.count()

        def set_seed(self, seed: int) -> None:
            self.seed = seed

        def _generate_next_message(self, message: Any, state: Any) -> tuple[Any, Any]:
            if isinstance(message, t.MultiToolMessage):
                state.messages.extend(message.tool_messages)
            else:
                state.messages.append(message)
            wire = t.to_litellm_messages(state.system_messages + state.flip_roles())
            if self.reminder:
                wire.append({"role": "system", "content": USER_ROLE_REMINDER})
            tools = [tool.openai_schema for tool in self.tools] if self.tools else None
            result = chat_completion(self.lm, wire, tools=tools, tool_choice="auto" if tools else None,
                                     seed=self.seed, role="user")
            calls = [t.ToolCall(id=f"user_call_{next(self._ids)}", name=c["name"] or "",  # unique in the run
                                arguments=json.loads(c["arguments"] or "{}"), requestor="user")
                     for c in result.tool_calls]
            reply = t.UserMessage(role="user", content=result.text or None, tool_calls=calls or None,
                                  usage=dict(result.usage), cost=result.dollars)
            state.messages.append(reply)
            return reply, state

    return LedgerUser


def user_reminder_on(spec: str | ModelSpec, choice: UserReminder = "auto") -> bool:
    """Whether the user simulator on ``spec`` gets ``USER_ROLE_REMINDER``: ``auto`` = the embedded model."""
    if choice == "auto":
        return parse_model_spec(spec).kind == "local"
    return choice == "on"


def simulated_user(spec: str | ModelSpec, *, ledger: CostLedger | None = None,
                   call_options: Mapping[str, Any] | None = None, reminder: UserReminder = "auto") -> UserFactory:
    """tau2's user simulator on ``spec`` (``user_simulator_class``), booked on ``ledger``, at temperature 0.

    Temperature 0 is tau2's default for the user; the user is built as tau2's ``run_task`` builds it
    (the task's scenario, the domain's user tools). ``reminder``: see ``user_reminder_on``.

    Raises:
        ModelUnavailableError: the model cannot be used (missing key, runtime or server).
    """
    model = parse_model_spec(spec)
    remind = user_reminder_on(model, reminder)
    lm = open_lm(model, role="user", ledger=ledger, temperature=0.0, **dict(call_options or {}))

    def make(environment: Any, task: Any) -> Any:
        try:
            tools = environment.get_user_tools()
        except Exception:  # tau2's run_task: a domain without user tools raises here
            tools = None
        return user_simulator_class()(tools or None, str(task.user_scenario), lm, reminder=remind)

    return make


# -- prompt sizes (--dry-run) ------------------------------------------------------------------------

@dataclass(frozen=True)
class Tau2Sizes:
    """What one task sends before its conversation grows (characters), for ``--dry-run``'s estimate."""

    agent_chars: int
    """tau2's agent system prompt (instructions + the domain's policy) and the tools' schemas."""
    user_chars: int
    """tau2's user simulator system prompt (its guidelines + the task's scenario) and the user's tools."""
    gold_actions: int
    """The actions of the task's evaluation criteria (what a right run must call)."""


def task_sizes(episodes: Sequence[Episode]) -> list[Tau2Sizes]:
    """``Tau2Sizes`` per episode, from the prompts tau2 itself builds (one environment per domain; no LM)."""
    t = tau2()
    agents: dict[str, tuple[int, Any]] = {}
    out = []
    for episode in episodes:
        domain = domain_of(episode)
        if domain not in agents:
            environment = t.registry.get_env_constructor(domain)()
            tools = environment.get_tools()
            agent = t.LLMAgent(tools=tools, domain_policy=environment.get_policy(), llm=None, llm_args=None)
            schemas = json.dumps([tool.openai_schema for tool in tools])
            agents[domain] = (len(agent.system_prompt) + len(schemas), environment)
        agent_chars, environment = agents[domain]
        task = task_of(episode)
        try:
            user_tools = environment.get_user_tools() or []
        except Exception:  # as simulated_user: a domain without user tools raises here
            user_tools = []
        user = user_simulator_class()(user_tools or None, str(task.user_scenario), None)
        criteria = task.evaluation_criteria
        out.append(Tau2Sizes(agent_chars, len(user.system_prompt) + len(json.dumps(
            [tool.openai_schema for tool in user_tools])), len((criteria.actions or []) if criteria else [])))
    return out


# -- one run -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tau2Run:
    """One run of a task: tau2's simulation (``reward_info`` set), the project's outcome and verdict."""

    simulation: Any
    outcome: EpisodeOutcome
    judgement: Judgement
    trial: int
    seed: int

    @property
    def reward(self) -> float:
        """tau2's reward."""
        return float(self.simulation.reward_info.reward)


_COMPONENTS = {"DB": "db", "ENV_ASSERTION": "env_assertion", "ACTION": "action", "COMMUNICATE": "communicate",
               "NL_ASSERTION": "nl_assertion"}


def judgement_of(reward_info: Any, termination: str) -> Judgement:
    """tau2's ``RewardInfo`` as a ``Judgement``.

    ``valid`` is tau2's ``is_successful`` of the reward; ``checks`` says per component of the reward
    basis whether it passed; ``details`` is the whole breakdown, as tau2 gave it.
    """
    t = tau2()
    breakdown = {(k.value if hasattr(k, "value") else str(k)): float(v)
                 for k, v in (reward_info.reward_breakdown or {}).items()}
    checks = {_COMPONENTS.get(k, k.lower()): t.is_successful(v) for k, v in breakdown.items()}
    valid = bool(t.is_successful(reward_info.reward))
    failed = [name for name, ok in checks.items() if not ok]
    error = None if valid else (f"tau2:{failed[0]}" if failed else f"tau2:{termination}")
    note = (reward_info.info or {}).get("note") if isinstance(reward_info.info, dict) else None
    details = reward_info.model_dump(mode="json") | {"termination_reason": termination}
    return Judgement(valid=valid, error_type=error, message=note, checks=checks, details=details,
                     reward=float(reward_info.reward))


def run_task(episode: Episode, *, agent: BaseAgent, reviewer: Reviewer | None, mechanism: Mechanism,
             ctx: MechanismContext, user: UserFactory, trial: int | None = None, seed: int | None = None,
             max_steps: int = DEFAULT_MAX_STEPS, max_errors: int = DEFAULT_MAX_ERRORS,
             max_withheld: int = MAX_WITHHELD) -> Tau2Run:
    """One trial of one tau2 task under ``mechanism``, scored by tau2's ``evaluate_simulation`` (``ALL``).

    ``trial``: default the episode's (``data.tau2.with_trials``), else 0. ``seed``: the trial's seed
    (``trial_seeds``; default: trial ``trial`` of ``DEFAULT_SEED``), given to
    the agent and the user as tau2's orchestrator gives it. ``agent`` should be a ``Tau2BaseAgent``
    (anything with its ``propose``). LM failures propagate.

    Raises:
        ConfigError: not a tau2 episode.
    """
    t = tau2()
    domain = domain_of(episode)
    task = task_of(episode)
    trial = int(episode.setup.get("trial", 0)) if trial is None else trial
    run_seed = trial_seeds(DEFAULT_SEED, trial + 1)[trial] if seed is None else seed
    environment = t.registry.get_env_constructor(domain)()
    shell = reviewed_agent_class()(environment.get_tools(), environment.get_policy(), agent=agent, reviewer=reviewer,
                                   mechanism=mechanism, ctx=ctx, episode_id=f"{task.id}/trial{trial}",
                                   category=episode.category, registry=domain_tools(domain), max_withheld=max_withheld)
    orchestrator = t.Orchestrator(domain=domain, agent=shell, user=user(environment, task), environment=environment,
                                  task=task, max_steps=max_steps, max_errors=max_errors, seed=run_seed)
    simulation = orchestrator.run()
    simulation.trial = trial
    simulation.reward_info = t.evaluate_simulation(simulation=simulation, task=task,
                                                   evaluation_type=t.EvaluationType.ALL, solo_mode=False, domain=domain)
    termination = getattr(simulation.termination_reason, "value", str(simulation.termination_reason))
    outcome = shell.log.outcome(episode.id, episode.category, mechanism.spec, cut_off=termination == "max_steps")
    return Tau2Run(simulation, outcome, judgement_of(simulation.reward_info, termination), trial, run_seed)


def pass_hat_ks(rewards: Mapping[str, Sequence[float]]) -> dict[int, float]:
    """pass^k for k = 1 .. the fewest trials of a task, as tau2's ``compute_metrics`` computes it.

    Per task ``pass_hat_k(trials, successes, k)`` (``is_successful`` on each reward), averaged over tasks.
    """
    t = tau2()
    if not rewards:
        return {}
    width = min(len(r) for r in rewards.values())
    out = {}
    for k in range(1, width + 1):
        per_task = [t.pass_hat_k(len(r), sum(bool(t.is_successful(x)) for x in r), k) for r in rewards.values()]
        out[k] = sum(per_task) / len(per_task)
    return out


def transcript_json(run: Tau2Run) -> list[dict[str, Any]]:
    """tau2's trajectory as JSON (what its evaluator read)."""
    return [json.loads(m.model_dump_json()) for m in run.simulation.messages]


__all__ = ["DEFAULT_MAX_ERRORS", "DEFAULT_MAX_STEPS", "DEFAULT_SEED", "MAX_WITHHELD", "NO_REPLY", "TAU2_JSON_SUFFIX",
           "USER_ROLE_REMINDER",
           "Tau2BaseAgent", "tau2_json_schema",
           "Tau2Run", "Tau2Sizes", "UserFactory", "judgement_of", "pass_hat_ks", "reviewed_agent_class", "run_task",
           "simulated_user", "task_sizes", "trial_seeds", "transcript_json", "user_reminder_on",
           "user_simulator_class"]
