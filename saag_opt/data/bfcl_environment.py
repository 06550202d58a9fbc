"""The ``bfcl`` environment: BFCL's executable backends run the calls, BFCL's checkers judge the run.

Everything that decides is bfcl-eval's own code, called, never re-implemented:

* calls run through ``multi_turn_utils.execute_multi_turn_func_call`` on BFCL's backend classes;
* a run is judged by ``multi_turn_checker`` (state and response checks after each turn) and
  ``multi_turn_irrelevance_checker`` (no call at a turn whose gold is empty: ``miss_func`` /
  ``miss_param``). ``Judgement.valid`` is both; ``checks`` keeps each. bfcl-eval 2026.3.23's
  ``eval_runner`` imports the irrelevance checker but calls only the first, so its leaderboard
  number is ``checks["multi_turn_checker"]``;
* the one rule of ``eval_runner._evaluate_single_multi_turn_entry`` before the checker (it imports
  every provider SDK, so it cannot be called): fewer turns than the gold = force-terminated.

Decoding is BFCL's FC convention (``model_handler/utils.py: convert_to_function_call``): a call is
``name(k=repr(v),...)``. BFCL ``eval``s that string, so a call is handed over only when ``name`` is
a public method of the entry's classes (what BFCL's own name mapping covers) and every argument name
is a Python identifier; anything else would be an unknown name at best (a NameError result in
BFCL) and code at worst (``open``, an argument name holding an expression). Such a call runs
nothing: its result says why, and the checker never sees it, as it never ran.

BFCL keeps backend instances in ``multi_turn_utils``' module globals, keyed by a model name and
the entry id, and reuses them on the next call with the same key. Every reset and every check
takes a fresh name, and ``close`` (and each check, when done) deletes its instances, so runs of one
entry (base and reviewed, a resume, a test) never see each other's state.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import json
import keyword
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from saag_opt.episodes import Episode, Judgement, ToolResult, Transcript
from saag_opt.model import Registry, ToolCall

_NAMES = itertools.count()
_NAMES_LOCK = threading.Lock()
_TURN = re.compile(r"\bturn (\d+)\b")


def _fresh_name(kind: str) -> str:
    with _NAMES_LOCK:
        return f"saag_{kind}{next(_NAMES)}"


def _utils() -> Any:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils  # noqa: PLC0415 - optional: bfcl-eval is installed apart (--no-deps)

    return multi_turn_utils


def _forget(name: str) -> None:
    """Delete every backend instance BFCL keeps for model names starting with ``name``."""
    store = vars(_utils())
    prefix = re.sub(r"[-./:]", "_", name) + "_"
    for key in [k for k in list(store) if k.startswith(prefix)]:
        store.pop(key, None)


def bfcl_call_string(call: ToolCall) -> str:
    """BFCL's FC decoding of one call (``convert_to_function_call``): ``name(k=repr(v),...)``."""
    return f"{call.name}({','.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


def refusal(call: ToolCall, methods: frozenset[str]) -> str | None:
    """Why ``call`` must not be handed to BFCL's ``eval`` (None: it may)."""
    if not isinstance(call.name, str) or call.name not in methods:
        return f"{call.name!r} is not a function of this environment"
    bad = [k for k in call.arguments if not isinstance(k, str) or not k.isidentifier() or keyword.iskeyword(k)]
    if bad:
        return f"argument name {bad[0]!r} is not a Python identifier"
    return None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class BfclEnvironment:
    """BFCL's backends for one episode at a time (module docstring); one per run, never shared."""

    def __init__(self) -> None:
        self._episode: Episode | None = None
        self._name: str | None = None
        self._methods: frozenset[str] = frozenset()

    @property
    def episode(self) -> Episode:
        """The episode of the last ``reset``."""
        if self._episode is None:
            raise RuntimeError("BfclEnvironment: reset(episode) first")
        return self._episode

    def _run(self, strings: list[str], name: str) -> tuple[list[str], dict[str, Any]]:
        episode = self.episode
        results, instances = _utils().execute_multi_turn_func_call(
            strings, dict(episode.setup["initial_config"]), list(episode.setup["involved_classes"]), name, episode.id,
            long_context=bool(episode.setup.get("long_context")), is_evaL_run=False)
        return list(results), dict(instances)

    def reset(self, episode: Episode) -> None:
        """Fresh backend instances in the entry's initial state."""
        self.close()
        self._episode, self._name = episode, _fresh_name("run")
        _, instances = self._run([], self._name)
        self._methods = frozenset(name for instance in instances.values()
                                  for name, _ in inspect.getmembers(instance, predicate=inspect.ismethod)
                                  if not name.startswith("_"))

    def tools(self, turn: int) -> Registry:
        """The entry's tools at ``turn`` (held-out ``miss_func`` functions from their turn on)."""
        return self.episode.tools_at(turn)

    def execute(self, calls: Sequence[ToolCall]) -> tuple[ToolResult, ...]:
        """Run the calls in order on the live instances; a refused call runs nothing (module docstring)."""
        if self._name is None:
            raise RuntimeError("BfclEnvironment: reset(episode) first")
        why = [refusal(call, self._methods) for call in calls]
        ran = iter(self._run([bfcl_call_string(c) for c, w in zip(calls, why) if w is None], self._name)[0])
        return tuple(ToolResult(call.name, next(ran)) if w is None
                     else ToolResult(call.name, f"Error during execution: {w}", executed=False)
                     for call, w in zip(calls, why))

    def decoded(self, transcript: Transcript) -> list[list[list[str]]]:
        """The transcript as BFCL's checker reads it: per turn, per step, call strings (empty steps left out)."""
        turns = []
        for turn in transcript:
            steps = [[bfcl_call_string(c) for c in step if refusal(c, self._methods) is None] for step in turn]
            turns.append([step for step in steps if step])
        return turns

    def _checker(self, decoded: list[list[list[str]]], gold: list[list[str]]) -> dict[str, Any]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker  # noqa: PLC0415 - optional: bfcl-eval is installed apart (--no-deps)

        episode, name = self.episode, _fresh_name("check")
        entry = {"id": episode.id, "initial_config": dict(episode.setup["initial_config"]),
                 "involved_classes": list(episode.setup["involved_classes"])}
        try:
            return dict(multi_turn_checker(decoded, gold, entry, episode.category, name))
        finally:
            _forget(name)

    def check(self, transcript: Transcript) -> Judgement:
        """BFCL's verdict on the executed calls (module docstring), with the first failing turn."""
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_irrelevance_checker  # noqa: PLC0415 - optional: bfcl-eval is installed apart (--no-deps)

        gold = [list(turn) for turn in self.episode.gold]
        abstain = tuple(i for i, turn in enumerate(gold) if not turn)
        if len(transcript) != len(gold):
            return Judgement(False, "multi_turn:force_terminated",
                             f"the run has {len(transcript)} turns, the gold {len(gold)}: force-terminated",
                             failed_turn=len(transcript) - 1 if transcript else 0, abstain_turns=abstain,
                             checks={"multi_turn_checker": False})
        decoded = self.decoded(transcript)
        state = self._checker(decoded, gold)
        relevance = dict(multi_turn_irrelevance_checker(decoded, gold))
        checks = {"multi_turn_checker": bool(state["valid"]), "multi_turn_irrelevance_checker": bool(relevance["valid"])}
        if all(checks.values()):
            return Judgement(True, abstain_turns=abstain, checks=checks)
        failed = state if not state["valid"] else relevance
        return Judgement(False, failed.get("error_type"), failed.get("error_message"),
                         self._failed_turn(decoded, gold, failed), abstain, checks, self._details(failed))

    def _failed_turn(self, decoded: list[list[list[str]]], gold: list[list[str]], failed: Mapping[str, Any]) -> int:
        """The turn named in BFCL's message, else the first prefix of turns the checker fails."""
        named = _TURN.search(str(failed.get("error_message") or ""))
        if named:
            return int(named[1])
        for end in range(1, len(gold) + 1):
            if not self._checker(decoded[:end], gold[:end])["valid"]:
                return end - 1
        return len(gold) - 1

    @staticmethod
    def _details(failed: Mapping[str, Any]) -> dict[str, Any]:
        details = failed.get("details")
        keep = {k: v for k, v in details.items() if k in ("differences", "missing_items", "model response decoded")} \
            if isinstance(details, Mapping) else {}
        return _jsonable(keep)

    def close(self) -> None:
        """Delete this run's backend instances from BFCL's module globals."""
        if self._name is not None:
            _forget(self._name)
        self._name = None


# -- gold replay (the oracle: reads gold, which no agent does) -------------------------------------


def _signatures(episode: Episode) -> dict[str, inspect.Signature]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING  # noqa: PLC0415 - optional: bfcl-eval is installed apart (--no-deps)

    out: dict[str, inspect.Signature] = {}
    for class_name in episode.setup["involved_classes"]:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                out.setdefault(name, inspect.signature(method))
    return out


def parse_call_string(text: str, signatures: Mapping[str, inspect.Signature]) -> ToolCall:
    """A BFCL call string (``sort('a.pdf')``, ``cd(folder='x')``) as a ``ToolCall`` with named arguments.

    Positional arguments are named by the backend method's signature.

    Raises:
        ValueError: not a single call of a known method with literal arguments.
    """
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a function call: {text!r}")
    name = node.func.id
    if name not in signatures:
        raise ValueError(f"{name!r} is not a method of the entry's classes")
    params = [p for p in signatures[name].parameters if p != "self"]
    if len(node.args) > len(params):
        raise ValueError(f"{text!r}: more positional arguments than {name} takes")
    arguments = {params[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return ToolCall(name, arguments)


def gold_calls(episode: Episode) -> tuple[tuple[ToolCall, ...], ...]:
    """Per turn, the gold calls as ``ToolCall``s (gold replay in tests and experiments/bench only).

    Raises:
        ValueError: a gold string that is not a literal call of a method of the entry's classes.
    """
    signatures = _signatures(episode)
    return tuple(tuple(parse_call_string(text, signatures) for text in turn) for turn in episode.gold)


# -- BFCL result files (``score``): a model's per-turn, per-step output, decoded as BFCL does ----------


def signatures(episode: Episode) -> dict[str, inspect.Signature]:
    """The public methods of the entry's backend classes, by name (what BFCL's call strings may name)."""
    return _signatures(episode)


def _string_call(text: str, methods: Mapping[str, inspect.Signature], notes: list[str]) -> ToolCall | None:
    """A decoded call string as a call; one naming no method is kept by name only (the check refuses it)."""
    try:
        return parse_call_string(text, methods)
    except (ValueError, SyntaxError) as exc:
        node = _parsed(text)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in methods:
            notes.append(f"{node.func.id!r} is not a function of this entry (refused, as in evaluate)")
            return ToolCall(node.func.id, {})
        notes.append(f"{text[:120]!r}: {str(exc).splitlines()[0][:160]}")
        return None


def _parsed(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _step_calls(item: Any, methods: Mapping[str, inspect.Signature], notes: list[str]) -> list[ToolCall]:
    """One step of a BFCL result as calls (``result_transcript``'s rules); calls it cannot read are noted.

    Raises:
        ValueError: the step cannot be decoded at all (BFCL skips such a step).
    """
    if isinstance(item, str):  # a prompting model's raw text: a Python list of calls, as BFCL parses it
        text = item.strip("`\n ")
        node = _parsed(text if text.startswith("[") else f"[{text}]")
        if not isinstance(node, ast.List):
            raise ValueError("not a list of calls")
        parsed = [_string_call(ast.unparse(element), methods, notes) for element in node.elts]
        return [call for call in parsed if call is not None]
    steps = [item] if isinstance(item, Mapping) else item
    if not isinstance(steps, list):
        raise ValueError(f"a step is a list of calls, got {type(item).__name__}")
    calls: list[ToolCall] = []
    for call in steps:
        if isinstance(call, str):  # already decoded: BFCL's decode_execute output
            if (found := _string_call(call, methods, notes)) is not None:
                calls.append(found)
        elif isinstance(call, Mapping) and call:  # a FC model's {name: arguments (JSON text or object)}
            for name, arguments in call.items():
                value = json.loads(arguments) if isinstance(arguments, str) else arguments
                if not isinstance(value, Mapping):
                    raise ValueError(f"{name}: arguments are not an object")
                calls.append(ToolCall(str(name), dict(value)))
        else:
            raise ValueError(f"a call is a string or an object, got {type(call).__name__}")
    return calls


def result_transcript(episode: Episode, result: Any) -> tuple[Transcript, list[str]]:
    """A BFCL result entry's ``result`` (per turn, per step) as a transcript, and what was skipped.

    A step is what BFCL's ``decode_execute`` reads or returns: a list of call strings
    (``cd(folder='x')``, already decoded), a FC model's ``[{name: arguments}]`` (BFCL's
    ``convert_to_function_call`` input), or a prompting model's raw text (``[f(a=1), g()]``). As in
    ``eval_runner``, a step that cannot be decoded, or decodes to no call, is skipped (and noted). A
    call naming no method of the entry's classes is kept by name, and ``BfclEnvironment.check``
    refuses it, as in evaluate (BFCL would ``eval`` the string); a call with non-literal arguments
    is left out (noted).

    Raises:
        ValueError: ``result`` is not a list of turns, each a list of steps (BFCL's inference error).
    """
    if not isinstance(result, list) or not all(isinstance(turn, list) for turn in result):
        raise ValueError("'result' must be a list of turns, each a list of steps")
    methods = _signatures(episode)
    turns, skipped = [], []
    for t, turn in enumerate(result):
        steps = []
        for k, item in enumerate(turn):
            notes: list[str] = []
            try:
                calls = _step_calls(item, methods, notes)
            except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
                skipped.append(f"turn {t} step {k}: skipped, {str(exc).splitlines()[0][:200]}")
                continue
            skipped += [f"turn {t} step {k}: {note}" for note in notes]
            if calls:
                steps.append(tuple(calls))
        turns.append(tuple(steps))
    return tuple(turns), skipped


if TYPE_CHECKING:
    from saag_opt.episodes import Environment

    _: Environment = BfclEnvironment()

__all__ = ["BfclEnvironment", "bfcl_call_string", "gold_calls", "parse_call_string", "refusal", "result_transcript",
           "signatures"]
