"""``ScriptedWorld``: a scripted server handler that knows who is asking, so a test scripts roles, not prompts.

Why: a test drives the base agent, the reviewer, the reflection and tau2's user simulator through one
scripted server (``ScriptedOpenAIServer``). Working out who sent a request, and reading the reviewer's
inputs out of dspy's prompt, in every test broke every test on each change of dspy's prompt format;
here it is done once. The role is read from what the project controls first:

* ``edit``: the edit proposer's JSON schema response format named ``rule_edit``;
* ``review`` / ``select`` / ``grade`` / ``reflect``: a dspy request whose input sections are the input
  fields of the reviewer's signatures (``agents.reviewer``; ``review`` with or without ``saag_report``)
  or of dspy's GEPA rewrite proposer (``ProposeInstruction``), read from the signature classes;
* ``base``: the base agent's fixed system prompt, its OpenAI ``tools`` or its JSON schema (``calls``;
  tau2's agent: ``reply``);
* ``user``: tau2's user simulator, by tau2's own system prompt template (``<scenario>``).

Anything else raises ``UnknownRequest`` naming what the request carried. The only code that reads dspy's
``[[ ## field ## ]]`` sections, or writes a dspy reply (with dspy's own adapters), is in this module.

Example:
    world = ScriptedWorld(
        base=lambda r: [{"name": "get_weather", "arguments": {"city": "Paris" if r.revising else "Rome"}}],
        review=lambda r: ("Rome" in r.tentative_calls, "the user asked about Paris"))  # (error, feedback)
    with ScriptedOpenAIServer(world) as server:
        ...
    assert world.count("review") == 4

dspy, the reviewer and tau2 are imported on first use, so ``saag_opt.testing`` stays light.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from saag_opt.lm.scripted_server import Fault, Reply

Role = Literal["base", "review", "select", "grade", "reflect", "edit", "user"]
ROLES: tuple[Role, ...] = ("base", "review", "select", "grade", "reflect", "edit", "user")

_SECTION = re.compile(r"^\[\[ ## (\w+) ## \]\]$", re.M)
"""A dspy ChatAdapter/JSONAdapter input section header (the one place that spells it)."""
_EDIT_SCHEMA = "rule_edit"
_BASE_SCHEMAS = ("calls", "reply")  # the base agent's JSON mode; tau2's agent (``agents.tau2``)


class UnknownRequest(LookupError):
    """A request no role of the world recognises, or one whose role the test did not script."""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


# -- views -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One chat request and the role it was recognised as."""

    role: Role
    body: Mapping[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages."""
        return list(self.body.get("messages") or [])

    @property
    def system(self) -> str:
        """The first message's text when it is a system message, else ""."""
        first = self.messages[:1]
        return _text(first[0].get("content")) if first and first[0].get("role") == "system" else ""

    @property
    def text(self) -> str:
        """Every message's text, one per line (for finding which example a request is about)."""
        return "\n".join(_text(m.get("content")) for m in self.messages)


@dataclass(frozen=True)
class BaseRequest(Request):
    """The base agent's request (``agents.base``): the example's messages, plus feedback when revising."""

    tools: tuple[str, ...] = ()
    feedback: tuple[str, ...] = ()
    """Reviewer feedback the base agent is shown, one per review round (empty: a first proposal)."""

    @property
    def revising(self) -> bool:
        """True when the request carries reviewer feedback (a revision, not a first proposal)."""
        return bool(self.feedback)

    @property
    def user_text(self) -> str:
        """The user messages' text, one per line."""
        return "\n".join(_text(m.get("content")) for m in self.messages if m.get("role") == "user")


@dataclass(frozen=True)
class PredictorRequest(Request):
    """A dspy predictor's request: its decoded input fields and its instructions."""

    fields: Mapping[str, str] = field(default_factory=dict)
    instructions: str = ""
    signature: Any = None
    as_json: bool = False
    """dspy's JSONAdapter asked (its output requirements end the request): the reply is a JSON object."""


@dataclass(frozen=True)
class ReviewRequest(PredictorRequest):
    """The reviewer's review predictor (``ReviewSignature``, ``SaagReviewSignature``)."""

    @property
    def conversation(self) -> str:
        """The conversation as the reviewer renders it (``role: content`` lines)."""
        return self.fields["conversation"]

    @property
    def tool_docs(self) -> str:
        """The functions' JSON documentation the reviewer is shown."""
        return self.fields["tool_docs"]

    @property
    def tentative_calls(self) -> str:
        """The calls under review as the reviewer is shown them (with the traced value sources, if any)."""
        return self.fields["tentative_calls"]

    @property
    def saag_report(self) -> str | None:
        """The SAAG report the informed reviewer shows; None for the plain reviewer."""
        return self.fields.get("saag_report")


@dataclass(frozen=True)
class SelectRequest(PredictorRequest):
    """The reviewer's selector (``SelectSignature``)."""

    @property
    def conversation(self) -> str:
        """The conversation as the reviewer renders it (``role: content`` lines)."""
        return self.fields["conversation"]

    @property
    def candidates(self) -> str:
        """The numbered candidates, ``[i] <calls>`` per line."""
        return self.fields["candidates"]


@dataclass(frozen=True)
class GradeRequest(PredictorRequest):
    """The reviewer's grader (``GradeSignature``)."""

    @property
    def conversation(self) -> str:
        """The conversation as the reviewer renders it (``role: content`` lines)."""
        return self.fields["conversation"]

    @property
    def candidate(self) -> str:
        """The candidate's calls as the grader is shown them."""
        return self.fields["candidate"]


@dataclass(frozen=True)
class ReflectRequest(PredictorRequest):
    """dspy's GEPA rewrite proposer (``ProposeInstruction``): the instruction and the examples it reflects on."""

    @property
    def current_instruction(self) -> str:
        """The instruction being rewritten."""
        return self.fields["current_instruction"]

    @property
    def examples(self) -> list[dict[str, Any]]:
        """The examples with feedback, as dspy serialised them."""
        value = json.loads(self.fields["examples_with_feedback"])
        return list(value)


@dataclass(frozen=True)
class EditRequest(Request):
    """The edit proposer's request (``optimize.edit_proposer``): its prompt and the edit schema."""

    @property
    def prompt(self) -> str:
        """The user message: the rules, the cases and the edits refused before."""
        return "\n".join(_text(m.get("content")) for m in self.messages if m.get("role") == "user")

    @property
    def schema(self) -> dict[str, Any]:
        """The JSON schema the edit must follow."""
        return dict(self.body["response_format"]["json_schema"]["schema"])


@dataclass(frozen=True)
class UserRequest(Request):
    """tau2's user simulator: the scenario in the system prompt, the agent's turns as ``user`` messages."""


# -- recognising a request -------------------------------------------------------------------------


@functools.cache
def _signatures() -> tuple[tuple[Role, Any, bool], ...]:
    """(role, signature, exact) per dspy predictor the world answers; ``exact``: the input fields match exactly."""
    from dspy.teleprompt.gepa.instruction_proposal import (  # noqa: PLC0415 - keeps saag_opt.testing light
        ProposeInstruction,
    )

    from saag_opt.agents.reviewer import (  # noqa: PLC0415 - the reviewer loads dspy
        GradeSignature,
        ReviewSignature,
        SaagReviewSignature,
        SelectSignature,
    )

    # The rewrite proposer prepends inputs of its own (additional instructions, a length limit): a superset
    return (("review", ReviewSignature, True), ("review", SaagReviewSignature, True),
            ("select", SelectSignature, True), ("grade", GradeSignature, True),
            ("reflect", ProposeInstruction, False))


@functools.cache
def _base_prompts() -> tuple[str, ...]:
    from saag_opt.agents.base import (  # noqa: PLC0415 - the base agent loads the LM client
        BASE_SYSTEM_PROMPT,
        CONVERSATION_SYSTEM_PROMPT,
    )

    return BASE_SYSTEM_PROMPT, CONVERSATION_SYSTEM_PROMPT


@functools.cache
def _revision_instruction() -> str:
    from saag_opt.agents.base import REVISION_INSTRUCTION  # noqa: PLC0415 - the base agent loads the LM client

    return REVISION_INSTRUCTION


@functools.cache
def _tau2_user_marks() -> tuple[str, str] | None:
    """The text around the scenario in tau2's user-simulator system prompt; None without tau2."""
    try:
        from tau2.user.user_simulator import SYSTEM_PROMPT  # noqa: PLC0415 - tau2 is optional and slow to import
    except ImportError:
        return None
    head, tail = SYSTEM_PROMPT.split("{instructions}")
    return head.split("{global_user_sim_guidelines}")[1], tail


def _schema_name(body: Mapping[str, Any]) -> str | None:
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and isinstance(fmt.get("json_schema"), Mapping):
        name = fmt["json_schema"].get("name")
        return str(name) if name is not None else None
    return None


def _sections(text: str) -> dict[str, str]:
    """The ``[[ ## name ## ]]`` sections of a dspy user message, in order (the last one with the trailer)."""
    heads = list(_SECTION.finditer(text))
    return {m.group(1): text[m.end() + 1:(heads[i + 1].start() if i + 1 < len(heads) else len(text))]
            for i, m in enumerate(heads)}


def _decode_predictor(body: Mapping[str, Any], messages: list[dict[str, Any]]) -> PredictorRequest | None:
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return None
    raw = _sections(_text(users[-1].get("content")))
    if not raw:
        return None
    for role, signature, exact in _signatures():
        wanted = set(signature.input_fields)
        if not (set(raw) == wanted if exact else wanted <= set(raw)):
            continue
        as_json = _asks_json(raw, signature, body)
        fields = _strip_trailer(raw, signature, as_json)
        system = _text(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
        view = {"review": ReviewRequest, "select": SelectRequest, "grade": GradeRequest,
                "reflect": ReflectRequest}[role]
        return view(role, body, fields=fields, instructions=_instructions(system, signature),
                    signature=signature, as_json=as_json)
    return None


def _adapter(as_json: bool) -> Any:
    import dspy  # noqa: PLC0415 - keeps saag_opt.testing light

    return dspy.JSONAdapter() if as_json else dspy.ChatAdapter()


def _asks_json(raw: dict[str, str], signature: Any, body: Mapping[str, Any]) -> bool:
    """Whether dspy's JSONAdapter wrote the request: its output requirements end the last section."""
    last = list(raw.values())[-1].rstrip("\n")
    for as_json in (True, False):
        if last.endswith(_adapter(as_json).user_message_output_requirements(signature)):
            return as_json
    return body.get("response_format") is not None


def _strip_trailer(raw: dict[str, str], signature: Any, as_json: bool) -> dict[str, str]:
    """Section values without the blank line before the next section and the output requirements after the last."""
    trailer = _adapter(as_json).user_message_output_requirements(signature)
    fields = {name: value.removesuffix("\n\n") for name, value in raw.items()}
    last = list(raw)[-1]
    fields[last] = fields[last].rstrip("\n").removesuffix(trailer).rstrip("\n")
    return fields


def _instructions(system: str, signature: Any) -> str:
    """The predictor's instructions, read back from its system message by dspy's own task description."""
    adapter = _adapter(False)
    sample = adapter.format_task_description(signature.with_instructions("\x00A\nB\x00"))
    head, rest = sample.split("\x00A")
    joiner = rest.split("B\x00")[0]
    at = system.rfind(head)
    return "" if at < 0 else system[at + len(head):].replace(joiner, "\n")


def _feedback(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    revise = _revision_instruction()
    out = []
    for message in messages[1:]:
        content = _text(message.get("content"))
        if message.get("role") == "system" and content.endswith(revise):
            out.append(content[:-len(revise)].rstrip("\n").removeprefix("Reviewer feedback: "))
    return tuple(out)


def _is_tau2_user(system: str) -> bool:
    if "</scenario>" not in system:  # a cheap look before importing tau2 (seconds) to read its template
        return False
    marks = _tau2_user_marks()
    return marks is not None and marks[0] in system and system.rstrip().endswith(marks[1].strip())


def read_request(body: Mapping[str, Any]) -> Request:
    """The role of one chat request and its decoded view (``UnknownRequest`` when no role fits).

    Also for a test's assertions on a server's log: ``read_request(r.body).role == "review"``.
    """
    messages = list(body.get("messages") or [])
    system = _text(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    if _schema_name(body) == _EDIT_SCHEMA:
        return EditRequest("edit", body)
    predictor = _decode_predictor(body, messages)
    if predictor is not None:
        return predictor
    tools = tuple(str(t.get("function", {}).get("name")) for t in body.get("tools") or [])
    if system.startswith(_base_prompts()):
        return BaseRequest("base", body, tools=tools, feedback=_feedback(messages))
    if _is_tau2_user(system):
        return UserRequest("user", body)
    if tools or _schema_name(body) in _BASE_SCHEMAS:
        return BaseRequest("base", body, tools=tools, feedback=_feedback(messages))
    raise UnknownRequest(_describe(body, messages))


def tentative_calls(body: Mapping[str, Any]) -> str:
    """The calls a review request puts before the reviewer, as it shows them (a handler's one-line check).

    Raises:
        UnknownRequest: ``body`` is not a review request.
    """
    request = read_request(body)
    if not isinstance(request, ReviewRequest):
        raise UnknownRequest(f"a {request.role} request carries no tentative calls")
    return request.tentative_calls


def _describe(body: Mapping[str, Any], messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    sections = sorted(_sections(_text(users[-1].get("content")))) if users else []
    first = _text(messages[0].get("content"))[:160] if messages else ""
    return (f"no role of ScriptedWorld ({', '.join(ROLES)}) fits this request: tools="
            f"{[t.get('function', {}).get('name') for t in body.get('tools') or []]}, response_format schema="
            f"{_schema_name(body)!r}, roles={[m.get('role') for m in messages]}, dspy input sections={sections}, "
            f"first message={first!r}")


# -- the world -------------------------------------------------------------------------------------

Hook = Callable[[Any], Any]


class ScriptedWorld:
    """A ``ScriptedOpenAIServer`` handler that answers each role with its hook.

    Pass hooks as keyword arguments or override the methods of the same name in a subclass. Each gets
    the request's view and returns what that role answers, or a ``Reply``/``Fault`` sent as is:

    * ``base(BaseRequest)``: a ``Reply``, a text (``str``) or the calls (``list`` of ``{"name", "arguments"}``);
    * ``review(ReviewRequest)``: ``error`` (``bool``) or ``(error, feedback)``;
    * ``select(SelectRequest)``: the index; ``grade(GradeRequest)``: the score or ``(score, rationale)``;
    * ``reflect(ReflectRequest)``: the new instruction;
    * ``edit(EditRequest)``: the edit (a ``dict``, sent as JSON) or the raw reply text;
    * ``user(UserRequest)``: the user's message (``str``) or a ``Reply``.

    A dict answers a dspy predictor with its output fields as they are. dspy replies are written with
    dspy's own adapter (ChatAdapter sections, or JSON when dspy asked for JSON). ``respond`` dispatches a
    recognised request; override it to answer before the role matters (a fault for one example).
    Every recognised request is kept in ``seen`` (thread-safe).
    """

    def __init__(self, **hooks: Hook) -> None:
        unknown = sorted(set(hooks) - set(ROLES))
        if unknown:
            raise TypeError(f"ScriptedWorld: unknown role hook(s) {unknown}; roles are {list(ROLES)}")
        self._hooks = hooks
        self._lock = threading.Lock()
        self.seen: list[Request] = []

    def __call__(self, body: dict) -> Reply | Fault | str | dict:
        """The server's handler: recognise, keep, answer."""
        request = read_request(body)
        with self._lock:
            self.seen.append(request)
        return self.respond(request)

    def respond(self, request: Request) -> Reply | Fault | str | dict:
        """The reply to a recognised request: its role's hook, encoded for the wire."""
        answer = getattr(self, request.role)(request)
        return encode(request, answer)

    def of(self, role: Role) -> list[Request]:
        """The requests seen in ``role``, in arrival order."""
        with self._lock:
            return [r for r in self.seen if r.role == role]

    def count(self, role: Role) -> int:
        """How many requests were seen in ``role``."""
        return len(self.of(role))

    def _hook(self, role: Role, request: Request) -> Any:
        hook = self._hooks.get(role)
        if hook is None:
            raise UnknownRequest(f"ScriptedWorld got a {role!r} request but has no {role} script; "
                                 f"pass {role}=... or override {role}()")
        return hook(request)

    def base(self, request: BaseRequest) -> Any:
        """The answer to a base request (the ``base`` hook by default)."""
        return self._hook("base", request)

    def review(self, request: ReviewRequest) -> Any:
        """The answer to a review request (the ``review`` hook by default)."""
        return self._hook("review", request)

    def select(self, request: SelectRequest) -> Any:
        """The answer to a select request (the ``select`` hook by default)."""
        return self._hook("select", request)

    def grade(self, request: GradeRequest) -> Any:
        """The answer to a grade request (the ``grade`` hook by default)."""
        return self._hook("grade", request)

    def reflect(self, request: ReflectRequest) -> Any:
        """The answer to a reflect request (the ``reflect`` hook by default)."""
        return self._hook("reflect", request)

    def edit(self, request: EditRequest) -> Any:
        """The answer to a edit request (the ``edit`` hook by default)."""
        return self._hook("edit", request)

    def user(self, request: UserRequest) -> Any:
        """The answer to a user request (the ``user`` hook by default)."""
        return self._hook("user", request)


def encode(request: Request, answer: Any) -> Reply | Fault | str | dict:
    """A hook's answer as the wire reply for ``request``'s role (``ScriptedWorld``'s rules)."""
    if isinstance(answer, (Reply, Fault)):
        return answer
    if isinstance(request, PredictorRequest):
        return Reply(text=predictor_reply(request, _outputs(request.role, answer)))
    if request.role == "edit" and isinstance(answer, Mapping):
        return Reply(text=json.dumps(dict(answer)))
    if request.role == "base" and isinstance(answer, list):
        return Reply(tool_calls=answer)
    if isinstance(answer, str):
        return Reply(text=answer)
    raise TypeError(f"ScriptedWorld: a {request.role} hook returned {type(answer).__name__}; see ScriptedWorld's doc")


def _outputs(role: Role, answer: Any) -> dict[str, Any]:
    if isinstance(answer, Mapping):
        return dict(answer)
    if role == "review":
        error, feedback = answer if isinstance(answer, tuple) else (answer, "")
        return {"error": bool(error), "feedback": feedback}
    if role == "select":
        return {"index": int(answer)}
    if role == "grade":
        score, rationale = answer if isinstance(answer, tuple) else (answer, "")
        return {"score": float(score), "rationale": rationale}
    if role == "reflect":
        return {"new_instruction": str(answer)}
    raise TypeError(f"ScriptedWorld: no outputs for a {role} request from {answer!r}")


def predictor_reply(request: PredictorRequest, outputs: Mapping[str, Any]) -> str:
    """``outputs`` as dspy's adapter writes a reply to ``request`` (sections, or JSON when it asked for JSON)."""
    return str(_adapter(request.as_json).format_assistant_message_content(request.signature, dict(outputs)))


def dspy_reply(outputs: Mapping[str, Any], *, as_json: bool = False, **reply: Any) -> Reply:
    """A reply any dspy predictor with these output fields reads: ``outputs`` as dspy's adapter writes them.

    For a script that answers without ``ScriptedWorld`` (one predictor, or a client test); ``reply``: the
    other ``Reply`` fields (token counts, a delay).
    """
    import dspy  # noqa: PLC0415 - keeps saag_opt.testing light

    signature = dspy.Signature(f"request -> {', '.join(outputs)}")
    return Reply(text=str(_adapter(as_json).format_assistant_message_content(signature, dict(outputs))), **reply)


__all__ = ["ROLES", "BaseRequest", "EditRequest", "GradeRequest", "PredictorRequest", "ReflectRequest", "Request",
           "ReviewRequest", "Role", "ScriptedWorld", "SelectRequest", "UnknownRequest", "UserRequest", "dspy_reply", "encode",
           "predictor_reply", "read_request", "tentative_calls"]
