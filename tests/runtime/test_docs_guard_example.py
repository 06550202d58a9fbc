"""The runtime-guard guide's offline loop, run as the page shows it, on the embedded 0.5B model.

The page says the 0.5B is a weak reviewer, so this asserts the pipeline, not review quality: the loop
finishes, each decision is one of the three actions with a reason, and the misspelled call never runs
as written (revised to a call the tool takes, or blocked).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "guides" / "runtime-guard.md"


def _loop_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    [loop] = [b for b in blocks if "openai_turn" in b]
    return loop


def test_the_guides_offline_guard_loop_runs_as_shown(local_spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAAG_OPT_PROMPTS", str(REPO / "prompts"))
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(_loop_snippet(), str(PAGE), "exec"), namespace)  # noqa: S102 - the page's own code
    first, second = printed.getvalue().splitlines()[-2:]
    assert first.split(" - ")[0] in {"allow", "revise", "block"} and first.split(" - ")[1].strip()
    decision = namespace["decision"]
    assert decision.action in {"revise", "block"}, second
    if decision.action == "revise":
        assert all("citty" not in call["arguments"] for call in decision.calls), second
