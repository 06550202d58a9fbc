"""Prompt artifacts: immutable, content-hashed prompt versions, aliases, diff and export."""

from __future__ import annotations

from saag_opt.artifacts.export import (
    DspyExporter,
    Exporter,
    JsonExporter,
    MarkdownExporter,
    MlflowExporter,
    OpenAIMessagesExporter,
    TextExporter,
    export_version,
    exporter_names,
    get_exporter,
    register_exporter,
)
from saag_opt.artifacts.render import diff_versions, render_markdown
from saag_opt.artifacts.store import PROMPTS_ENV, PromptStore, default_root, resolve_ref
from saag_opt.artifacts.version import PromptVersion, content_hash, load_version_file, validate_name

__all__ = [
    "PROMPTS_ENV",
    "DspyExporter",
    "Exporter",
    "JsonExporter",
    "MarkdownExporter",
    "MlflowExporter",
    "OpenAIMessagesExporter",
    "PromptStore",
    "PromptVersion",
    "TextExporter",
    "content_hash",
    "default_root",
    "diff_versions",
    "export_version",
    "exporter_names",
    "get_exporter",
    "load_version_file",
    "register_exporter",
    "render_markdown",
    "resolve_ref",
    "validate_name",
]
