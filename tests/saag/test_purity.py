"""The SAAG core stays pure: importing it pulls in no LM, network, CLI or I/O library."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("dspy", "openai", "litellm", "jsonlines", "typer", "rich", "pydantic", "httpx", "requests")


def test_import_saag_leaves_heavy_packages_out() -> None:
    code = (
        "import json, sys\n"
        "import saag_opt.saag\n"
        f"print(json.dumps(sorted(m for m in {FORBIDDEN!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_saag_modules_import_only_model_stdlib_and_rapidfuzz() -> None:
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "import saag_opt.saag\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "print(json.dumps(sorted(new)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    new = set(json.loads(out.stdout.strip().splitlines()[-1]))
    third_party = {m for m in new if m not in sys.stdlib_module_names and not m.startswith("_")}
    assert third_party <= {"saag_opt", "rapidfuzz", "cython_runtime"}, third_party  # rapidfuzz is Cython
