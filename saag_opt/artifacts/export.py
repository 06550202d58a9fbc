"""Export a prompt version to other tools' formats: txt | md | json | dspy | openai | mlflow.

Each format is an ``Exporter`` in a small registry (``get_exporter``, ``exporter_names``,
``register_exporter``). Nothing here imports dspy or mlflow: the ``dspy`` format is DSPy's
``Module.save`` state JSON written by hand, and ``mlflow`` is the keyword arguments of
``mlflow.genai.register_prompt``, so exporting works without either installed.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import metadata as importlib_metadata
from typing import TYPE_CHECKING, Any, Protocol

from saag_opt.artifacts.render import render_markdown
from saag_opt.artifacts.version import PromptVersion
from saag_opt.errors import ConfigError


class Exporter(Protocol):
    """Turns one prompt version into the text of a file another tool reads.

    Contract:
        * ``export`` is pure and deterministic for a given version and environment: no I/O, no
          mutation of ``version``; the caller decides where the text goes.
        * The result is complete text (ends with a newline) covering every predictor.
        * It raises only for a version the format cannot represent, with ``ConfigError`` saying why.
    """

    def export(self, version: PromptVersion) -> str:
        """Return the exported file content."""
        ...


class TextExporter:
    """Plain instructions; one block per predictor, headed ``[name]`` when there are several."""

    def export(self, version: PromptVersion) -> str:
        """Instructions as plain text."""
        items = list(version.instructions.items())
        if len(items) == 1:
            return items[0][1].rstrip("\n") + "\n"
        return "\n\n".join(f"[{name}]\n{text.rstrip()}" for name, text in items) + "\n"


class MarkdownExporter:
    """The same page as the store's rendered ``.md``."""

    def export(self, version: PromptVersion) -> str:
        """The rendered Markdown page."""
        return render_markdown(version)


class JsonExporter:
    """The artifact itself (identical to the stored ``.json``)."""

    def export(self, version: PromptVersion) -> str:
        """The artifact JSON."""
        return version.model_dump_json(indent=2) + "\n"


def _dspy_dependency_versions() -> dict[str, str]:
    """What ``dspy.utils.saving.get_dependency_versions`` records, read without importing dspy.

    ``Module.load`` looks every saved key up in the running environment, so only its own keys
    (python, dspy, cloudpickle) may appear; a mismatch there is only a warning.
    """
    versions = {"python": f"{sys.version_info.major}.{sys.version_info.minor}"}
    for package, digits in (("dspy", None), ("cloudpickle", 2)):
        try:
            versions[package] = ".".join(importlib_metadata.version(package).split(".")[:digits])
        except importlib_metadata.PackageNotFoundError:
            continue
    return versions


class DspyExporter:
    """DSPy ``Module.save`` state JSON that ``Reviewer().load(path)`` accepts (dspy 3.4.1).

    ``Predict.load_state`` needs ``signature`` and ``lm``; ``Signature.load_state`` zips the saved
    ``fields`` with the module's own fields, so an empty list keeps the code's field prefixes and
    descriptions and replaces only the instructions. ``Module.load_state`` requires a key for every
    named predictor of the module, so the version must cover all of them (``named_predictors()``
    spelling, e.g. ``review`` or ``review.predict`` for a ChainOfThought).
    """

    def export(self, version: PromptVersion) -> str:
        """DSPy ``Module.save`` state JSON."""
        state: dict[str, Any] = {
            name: {"traces": [], "train": [], "demos": [],
                   "signature": {"instructions": text, "fields": []}, "lm": None}
            for name, text in version.instructions.items()
        }
        if "metadata" in state:
            raise ConfigError(f"{version.ref}: a predictor named 'metadata' clashes with DSPy's state key")
        state["metadata"] = {"dependency_versions": _dspy_dependency_versions()}
        return json.dumps(state, indent=2, ensure_ascii=False) + "\n"


class OpenAIMessagesExporter:
    """Chat messages per predictor: ``{name: [{"role": "system", "content": instructions}]}``."""

    def export(self, version: PromptVersion) -> str:
        """OpenAI chat messages per predictor (JSON)."""
        messages = {name: [{"role": "system", "content": text}] for name, text in version.instructions.items()}
        return json.dumps(messages, indent=2, ensure_ascii=False) + "\n"


def mlflow_prompt_name(program: str, predictor: str) -> str:
    """``reviewer-review``: one MLflow prompt per predictor, with only safe characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{program}-{predictor}")


class MlflowExporter:
    """A list of ``mlflow.genai.register_prompt`` keyword arguments, one per predictor.

    Register with ``for kw in json.load(f): mlflow.genai.register_prompt(**kw)``. Tag values are
    strings (MLflow requires it). MLflow reads ``{{name}}`` in a template as a variable.
    """

    def export(self, version: PromptVersion) -> str:
        """``mlflow.genai.register_prompt`` keyword arguments (JSON list)."""
        tags = {
            "saag_opt.program": version.program, "saag_opt.version": version.version,
            "saag_opt.sha256": version.sha256, "saag_opt.source": version.source,
            "saag_opt.parents": ",".join(version.parents), "saag_opt.created": version.created,
        }
        calls = [
            {"name": mlflow_prompt_name(version.program, name), "template": text,
             "commit_message": f"saag-opt {version.ref} ({version.source}) predictor {name}",
             "tags": {**tags, "saag_opt.predictor": name}}
            for name, text in version.instructions.items()
        ]
        return json.dumps(calls, indent=2, ensure_ascii=False) + "\n"


_EXPORTERS: dict[str, Exporter] = {
    "txt": TextExporter(),
    "md": MarkdownExporter(),
    "json": JsonExporter(),
    "dspy": DspyExporter(),
    "openai": OpenAIMessagesExporter(),
    "mlflow": MlflowExporter(),
}


def register_exporter(name: str, exporter: Exporter) -> None:
    """Add (or replace) a format."""
    _EXPORTERS[name] = exporter


def exporter_names() -> list[str]:
    """Registered format names, in registration order."""
    return list(_EXPORTERS)


def get_exporter(name: str) -> Exporter:
    """The exporter for ``name``.

    Raises:
        ConfigError: unknown format, listing the available ones.
    """
    try:
        return _EXPORTERS[name]
    except KeyError:
        raise ConfigError(f"unknown export format {name!r}. Available: {', '.join(_EXPORTERS)}") from None


def export_version(version: PromptVersion, fmt: str) -> str:
    """Export ``version`` in format ``fmt`` (see ``exporter_names``)."""
    return get_exporter(fmt).export(version)


if TYPE_CHECKING:
    _txt: Exporter = TextExporter()
    _md: Exporter = MarkdownExporter()
    _json: Exporter = JsonExporter()
    _dspy: Exporter = DspyExporter()
    _openai: Exporter = OpenAIMessagesExporter()
    _mlflow: Exporter = MlflowExporter()
