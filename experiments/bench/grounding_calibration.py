"""Benchmark: how often the gold-free cascade cries wolf on correct calls, paper vs calibrated stage 3.

Data: every gold-bearing example of BFCL's non-live and live single-turn categories (from the
installed ``bfcl-eval``; irrelevance/relevance have no gold call and are skipped).

* **Gold calls** (should pass): ``saag_opt.data.perturb.gold_calls``, the way the agreement test
  and ``score_vs_bfcl.py`` build them: per parameter the *first* acceptable value that is not
  ``""`` (BFCL's "may be omitted" marker); a parameter whose only acceptable value is ``""`` is
  left out. BFCL's checker accepts every such call.
* **Invalid calls** (should be flagged): every ``perturbed_calls`` variant (seed ``<seed>:<id>``)
  that our BFCL-equivalent ``check_truth`` rejects; the harmless variants BFCL accepts (case,
  punctuation, an alternative acceptable value, reordering, ...) are left out.

A call set is *flagged* when ``check_calls`` (registry + query only, what mechanisms use) does not
pass it. Printed per category and for non-live / live / all: false alarms (share of gold calls
flagged) and recall (share of invalid calls flagged), per mode; the recall by error family (what
the cascade is able to see: names, structure, values; types and call counts it does not check);
the taxonomy of *why* each gold value the paper's stage 3 rejects is not verbatim in the query;
the ablation (calibrated with each rule removed); and the development / held-out split (rules
were developed looking at even-indexed examples of each category; odd-indexed ones are held out).

``help = recall - false_alarm`` (Youden's J) summarises a trigger: the share of invalid calls it
sends to repair minus the share of correct calls it sends to repair.

The injection check of the runtime guard (``saag.injection``) is measured on the same gold
calls: a gold call counts as flagged when the calibrated cascade flags it *or* the injection check
blocks it, with the sources the guard reads (``runtime.inputs.read_input``: the query as the user's
message). BFCL single-turn has no tool result, so the check has nothing to read and the rise is 0
by construction; the line shows it measured. A stress line (information only) moves each query
into a tool result the user hands the request over to ("Please take care of the request in the
note.") and counts the gold calls the check blocks there: benign text that the span detector reads
as instructions to the model, with a gold value inside.

Run: ``python experiments/bench/grounding_calibration.py`` (about a minute). The last line is
``false_alarm=<x> recall=<y>`` for the calibrated mode over all categories.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from saag_opt.data.bfcl import bfcl_available, load_bfcl
from saag_opt.data.perturb import gold_calls, perturbed_calls
from saag_opt.model import Example, ToolCall
from saag_opt.runtime.inputs import read_input
from saag_opt.saag import check_calls, clear_caches
from saag_opt.saag.calibration import calibrate
from saag_opt.saag.grounding import ground_arguments, query_context
from saag_opt.saag.injection import check_injection, instruction_spans
from saag_opt.saag.modes import CALIBRATION_RULES, GroundingMode
from saag_opt.saag.structure import allowed_params
from saag_opt.saag.truth import check_truth

NON_LIVE = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")

FAMILIES = {
    "name": ("name_typo", "name_case", "fabricated_name", "safe_name", "wrong_function"),
    "structure": ("missing_required", "drop_param", "spurious_param", "misspelt_param", "abstain"),
    "value": ("string_change", "number_change", "list_change", "dict_change", "case_change", "punct_change",
              "alt_value"),
    "type": ("int_to_str", "int_to_float", "float_to_int", "number_to_str", "str_to_list", "bool_flip",
             "bool_to_str", "list_to_str", "list_elems_to_str", "list_elems_to_float", "tuple_value",
             "null_value"),
    "call count": ("extra_call", "drop_call", "duplicate_call", "reorder_calls", "omit_optional"),
}
_FAMILY_OF = {kind: family for family, kinds in FAMILIES.items() for kind in kinds}

TAXONOMY = {
    "default": "default value (schema default or stated default)",
    "format": "format: case, punctuation, spacing",
    "inflection": "format: plural/singular",
    "date": "format: date",
    "time": "format: time",
    "template": "format: the description's template filled from the request",
    "number_word": "number-as-word",
    "scaled_number": "derived: percent, magnitude word, SI prefix, x10^n",
    "relative_date": "derived: date relative to a stated date",
    "qualifier": "alias: qualifier added (\"City, ST\", \"Region/City\")",
    "unit": "alias: unit symbol or name",
    "code": "alias: currency or US state code",
    "described_code": "alias: id the description maps to a stated label",
    "alias": "alias: code or abbreviation (not accepted)",
    "derived_number": "derived: number not stated (not accepted)",
    "derived_text": "derived: text not stated (not accepted)",
    "other": "other (not accepted)",
}


@dataclass(frozen=True)
class Item:
    category: str
    index: int
    example: Example
    calls: tuple[ToolCall, ...]
    gold: bool
    kind: str


def build_items(categories: Sequence[str], seed: int) -> list[Item]:
    """Gold calls and truth-invalid perturbations of every gold-bearing example."""
    items: list[Item] = []
    for category in categories:
        for index, example in enumerate(load_bfcl(category)):
            if not example.gold:
                continue
            items.append(Item(category, index, example, tuple(gold_calls(example)), True, "gold"))
            for kind, calls in perturbed_calls(example, random.Random(f"{seed}:{example.id}")):
                if kind != "gold" and not check_truth(calls, example).correct:
                    items.append(Item(category, index, example, tuple(calls), False, kind))
    return items


def flags(items: Sequence[Item], mode: GroundingMode) -> list[bool]:
    return [not check_calls(it.calls, it.example.registry, it.example.query, corrections=False,
                            grounding=mode).passed for it in items]


@dataclass(frozen=True)
class Rates:
    n_gold: int
    false_alarm: float
    n_invalid: int
    recall: float

    @property
    def help(self) -> float:
        return self.recall - self.false_alarm


def rates(items: Sequence[Item], flagged: Sequence[bool], keep: Iterable[int]) -> Rates:
    gold = invalid = gold_flagged = invalid_flagged = 0
    for i in keep:
        if items[i].gold:
            gold += 1
            gold_flagged += flagged[i]
        else:
            invalid += 1
            invalid_flagged += flagged[i]
    return Rates(gold, gold_flagged / gold if gold else float("nan"), invalid,
                 invalid_flagged / invalid if invalid else float("nan"))


def _row(label: str, by_mode: dict[str, Rates]) -> str:
    paper, cal = by_mode["paper"], by_mode["calibrated"]
    return (f"{label:24s} {paper.n_gold:5d} {paper.false_alarm:7.3f} {cal.false_alarm:7.3f}   "
            f"{paper.n_invalid:6d} {paper.recall:7.3f} {cal.recall:7.3f}   {paper.help:6.3f} {cal.help:6.3f}")


def _header(title: str) -> str:
    return (f"\n{title}\n{'':24s} {'gold':>5s} {'FA pap':>7s} {'FA cal':>7s}   {'invalid':>6s} {'rec pap':>7s} "
            f"{'rec cal':>7s}   {'J pap':>6s} {'J cal':>6s}")


_CODE = re.compile(r"^[A-Z0-9][A-Z0-9.\-/]{1,6}$")


def why(value: object, rule: str | None) -> str:
    """The taxonomy bucket of a gold value the paper's stage 3 rejected."""
    if rule is not None:
        return rule
    if isinstance(value, str):
        if _CODE.match(value.strip()):
            return "alias"
        return "derived_text"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "derived_number"
    if isinstance(value, (list, tuple)):
        return why(value[0], None) if value else "other"
    return "other"


def taxonomy(items: Sequence[Item], keep: Iterable[int]) -> Counter[str]:
    """Why each gold value the paper rejects is not verbatim, by the calibrated rule that accepts it.

    Counts values (one per parameter) of gold calls that reached stage 3 (all of them do on BFCL).
    """
    counts: Counter[str] = Counter()
    rules = frozenset(CALIBRATION_RULES)
    for i in keep:
        item = items[i]
        if not item.gold:
            continue
        ctx = query_context(item.example.query)
        for call in item.calls:
            tool = item.example.registry.get(call.name)
            if tool is None:
                continue
            schema = allowed_params(tool)
            misses = ground_arguments(call.arguments, ctx, schema)[4]
            accepted, _ = calibrate(misses, ctx, schema, rules)
            for param, value, _partial in misses:
                counts[why(value, accepted.get(param))] += 1
    return counts


STRESS_REQUEST = "Please take care of the request in the note."


def injection_blocks(items: Sequence[Item], stress: bool = False) -> list[bool]:
    """Per item: the guard's injection check blocks its calls (sources as the guard reads them)."""
    out = []
    for it in items:
        tools = [t.to_openai_tool() for t in it.example.registry]
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                 for i, c in enumerate(it.calls)]
        messages = list(it.example.messages)
        if stress:
            messages = [{"role": "user", "content": STRESS_REQUEST},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "note", "type": "function", "function": {"name": "read_note", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "note", "content": it.example.query}]
        inp = read_input(messages, tools, calls)
        calls_read = [c.as_tool_call() for c in inp.calls]
        out.append(check_injection(calls_read, inp.registry, inp.sources).blocked)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not bfcl_available():
        sys.exit("bfcl-eval is not installed: pip install --no-deps bfcl-eval==2026.3.23")
    items = build_items(NON_LIVE + LIVE, args.seed)
    modes: dict[str, GroundingMode] = {"paper": "paper", "calibrated": "calibrated"}
    for rule in CALIBRATION_RULES:
        modes[f"-{rule}"] = frozenset(CALIBRATION_RULES) - {rule}
    flagged: dict[str, list[bool]] = {}
    seconds: dict[str, float] = {}
    for name, mode in modes.items():
        clear_caches()
        start = time.perf_counter()
        flagged[name] = flags(items, mode)
        seconds[name] = time.perf_counter() - start
    groups = {"non-live": [i for i, it in enumerate(items) if it.category in NON_LIVE],
              "live": [i for i, it in enumerate(items) if it.category in LIVE],
              "all": list(range(len(items)))}

    print(f"gold calls: first acceptable non-\"\" value per parameter (data.perturb.gold_calls); invalid calls: "
          f"perturbations (seed {args.seed}) that check_truth rejects. FA = share of gold calls flagged, "
          f"rec = share of invalid calls flagged, J = rec - FA.")
    print(_header("per category (all examples)"))
    for category in NON_LIVE + LIVE:
        keep = [i for i, it in enumerate(items) if it.category == category]
        print(_row(category, {m: rates(items, flagged[m], keep) for m in ("paper", "calibrated")}))
    print(_header("overall"))
    for name, keep in groups.items():
        print(_row(name, {m: rates(items, flagged[m], keep) for m in ("paper", "calibrated")}))

    print(_header("development half (even example index) / held-out half (odd example index)"))
    for name, keep in groups.items():
        for half, parity in (("dev", 0), ("held-out", 1)):
            part = [i for i in keep if items[i].index % 2 == parity]
            print(_row(f"{name} {half}", {m: rates(items, flagged[m], part) for m in ("paper", "calibrated")}))

    print("\nrecall by error family (paper / calibrated; the cascade checks names, structure and values, "
          "not JSON types or call counts)")
    for name in ("non-live", "live"):
        parts = []
        for family in FAMILIES:
            keep = [i for i in groups[name] if not items[i].gold and _FAMILY_OF.get(items[i].kind) == family]
            if keep:
                p, c = rates(items, flagged["paper"], keep), rates(items, flagged["calibrated"], keep)
                parts.append(f"{family} n={p.n_invalid} {p.recall:.3f}/{c.recall:.3f}")
        print(f"  {name:9s} " + "; ".join(parts))

    clean = {(items[i].category, items[i].index) for i in range(len(items))
             if items[i].gold and not flagged["paper"][i] and not flagged["calibrated"][i]}
    print("\nthe same, only over examples whose gold call passes in both modes (recall for the right reason)")
    for name in ("non-live", "live"):
        parts = []
        for family in FAMILIES:
            keep = [i for i in groups[name] if not items[i].gold and _FAMILY_OF.get(items[i].kind) == family
                    and (items[i].category, items[i].index) in clean]
            if keep:
                p, c = rates(items, flagged["paper"], keep), rates(items, flagged["calibrated"], keep)
                parts.append(f"{family} n={p.n_invalid} {p.recall:.3f}/{c.recall:.3f}")
        keep = [i for i in groups[name] if not items[i].gold and (items[i].category, items[i].index) in clean]
        p, c = rates(items, flagged["paper"], keep), rates(items, flagged["calibrated"], keep)
        print(f"  {name:9s} all n={p.n_invalid} {p.recall:.3f}/{c.recall:.3f}; " + "; ".join(parts))

    print("\ntaxonomy: why a gold value fails the paper's verbatim test (values, by the calibrated rule "
          "that accepts it; the last buckets stay flagged)")
    counts = {name: taxonomy(items, keep) for name, keep in groups.items() if name != "all"}
    print(f"  {'':58s} {'non-live':>9s} {'live':>9s}")
    for bucket, text in TAXONOMY.items():
        print(f"  {text:58s} {counts['non-live'][bucket]:9d} {counts['live'][bucket]:9d}")
    print(f"  {'total':58s} {sum(counts['non-live'].values()):9d} {sum(counts['live'].values()):9d}")

    print("\nablation: calibrated with one rule removed (FA / recall)")
    print(f"  {'mode':18s} {'non-live FA':>11s} {'rec':>6s} {'live FA':>8s} {'rec':>6s} {'all FA':>7s} {'rec':>6s}")
    for name in ("paper", "calibrated", *(f"-{r}" for r in CALIBRATION_RULES)):
        cells = [rates(items, flagged[name], groups[g]) for g in ("non-live", "live", "all")]
        print(f"  {name:18s} {cells[0].false_alarm:11.3f} {cells[0].recall:6.3f} {cells[1].false_alarm:8.3f} "
              f"{cells[1].recall:6.3f} {cells[2].false_alarm:7.3f} {cells[2].recall:6.3f}")
    print(f"\nspeed (cold caches, one pass over {len(items)} call sets, info only): paper "
          f"{len(items) / seconds['paper']:,.0f}/s, calibrated {len(items) / seconds['calibrated']:,.0f}/s")
    gold = [i for i, it in enumerate(items) if it.gold]
    blocked = injection_blocks([items[i] for i in gold])
    stressed = injection_blocks([items[i] for i in gold], stress=True)
    with_check = [flagged["calibrated"][i] or b for i, b in zip(gold, blocked)]
    spanned = sum(bool(instruction_spans(items[i].example.query)) for i in gold)
    before = sum(flagged["calibrated"][i] for i in gold) / len(gold)
    after = sum(with_check) / len(gold)
    print(f"\ninjection check on {len(gold)} gold call sets: false alarms calibrated {before:.4f} -> calibrated + "
          f"injection check {after:.4f} (rise {100 * (after - before):.2f} points); stress (query as a tool result the "
          f"user hands over): {spanned} queries read as holding an instruction to the model, {sum(stressed)} call sets "
          f"blocked ({sum(stressed) / len(gold):.4f})")
    print(f"injection_false_alarm_rise={100 * (after - before):.2f}")
    final = rates(items, flagged["calibrated"], groups["all"])
    print(f"false_alarm={final.false_alarm:.3f} recall={final.recall:.3f}")


if __name__ == "__main__":
    main()
