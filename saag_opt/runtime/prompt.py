"""The reviewer prompt a guard runs: a store reference, a version file, or an exported prompt file.

``reviewer@best`` resolves through the same ``PromptStore`` as the CLI (``--root`` /
``$SAAG_OPT_PROMPTS``, default ``./prompts``). A path may be a version JSON or a file written by
``saag-opt prompts export`` in the formats that keep the instructions verbatim: ``txt``, ``dspy``,
``openai`` and ``mlflow`` (``md`` is for humans and is refused with a hint).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from saag_opt.artifacts import (
    PromptStore,
    PromptVersion,
    content_hash,
    load_version_file,
)
from saag_opt.artifacts.export import mlflow_prompt_name
from saag_opt.errors import ArtifactError

PROGRAM = "reviewer"
_FORMATS = "a version .json, or an export in txt, dspy, openai or mlflow format"


@dataclass(frozen=True)
class LoadedPrompt:
    """Instructions per predictor, their content hash (part of every review-cache key) and a label."""

    instructions: dict[str, str]
    sha256: str
    label: str


def load_prompt(ref: str | os.PathLike[str] | PromptVersion, store: str | os.PathLike[str] | None = None) -> LoadedPrompt:
    """Resolve ``ref`` (see the module docstring).

    Raises:
        ArtifactError: unknown reference, unreadable file, or a file in none of the accepted formats.
    """
    if isinstance(ref, PromptVersion):
        return LoadedPrompt(dict(ref.instructions), ref.sha256, ref.ref)
    path = Path(ref)
    if path.is_file():
        try:
            version = load_version_file(path)
        except ArtifactError:
            instructions = read_exported(path)
            return LoadedPrompt(instructions, content_hash(PROGRAM, instructions), str(path))
        return LoadedPrompt(dict(version.instructions), version.sha256, version.ref)
    version = PromptStore(store).resolve(str(ref))
    return LoadedPrompt(dict(version.instructions), version.sha256, version.ref)


def read_exported(path: Path) -> dict[str, str]:
    """Instructions from an exported prompt file (txt, dspy, openai or mlflow format)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{path}: cannot read prompt file ({getattr(exc, 'strerror', None) or exc})") from exc
    if path.suffix == ".md":
        raise ArtifactError(f"{path}: the md export is for reading; use {_FORMATS}")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    instructions = _from_json(data) if data is not None else _from_text(text)
    if not instructions:
        raise ArtifactError(f"{path}: no reviewer instructions found; expected {_FORMATS}")
    return instructions


def _from_json(data: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(data, Mapping):
        for name, value in data.items():
            if isinstance(value, Mapping) and isinstance(value.get("signature"), Mapping):  # dspy state
                text = value["signature"].get("instructions")
            elif isinstance(value, list) and value and isinstance(value[0], Mapping):  # openai messages
                text = value[0].get("content")
            else:
                continue
            if isinstance(text, str) and text.strip():
                out[name.removesuffix(".predict")] = text
    elif isinstance(data, list):  # mlflow register_prompt kwargs
        for item in data:
            if not isinstance(item, Mapping):
                continue
            predictor = (item.get("tags") or {}).get("saag_opt.predictor")
            if predictor is None and isinstance(item.get("name"), str):
                predictor = item["name"].removeprefix(mlflow_prompt_name(PROGRAM, ""))
            if isinstance(predictor, str) and isinstance(item.get("template"), str):
                out[predictor] = item["template"]
    return out


def _from_text(text: str) -> dict[str, str]:
    """The txt export: one block, or ``[name]`` headed blocks for several predictors."""
    lines = text.strip("\n").splitlines()
    if not lines:
        return {}
    if not (lines[0].startswith("[") and lines[0].endswith("]")):
        return {"review": text.strip("\n")}
    out: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if line.startswith("[") and line.endswith("]") and " " not in line:
            current = line[1:-1]
            out[current] = []
        elif current is not None:
            out[current].append(line)
    return {name: "\n".join(body).strip("\n") for name, body in out.items() if "".join(body).strip()}


__all__ = ["LoadedPrompt", "load_prompt", "read_exported"]
