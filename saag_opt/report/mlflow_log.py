"""Hand what saag-opt wrote to MLflow: prompt versions to its prompt registry, runs to its tracking store.

MLflow is optional (``pip install 'saag-opt[mlflow]'``) and imported only here, when a command is
given ``--mlflow URI`` (docs/design.md §20). Nothing is re-derived: a prompt version goes in as
``prompts export --format mlflow`` spells it (``MlflowExporter``: one MLflow prompt per predictor,
lineage and content hash as tags), and a run is read back through ``runfiles.read_run``, so its
params, metrics and artifacts are what the run directory holds.

* ``push_prompt``: one MLflow prompt version per predictor; the store's aliases of the version become
  MLflow aliases. Pushing the same content again registers nothing new (matched by content hash).
* ``log_runs``: each run directory (and every run nested in it: a compare's passes, a tune's trials,
  an optimize's TEST comparison) becomes one MLflow run, nested ones as child runs. Config as params,
  accuracy / help / harm / cost / latency as metrics (a compare's per version and per pair), ``report.html``, ``summary.json`` and
  ``run.json`` as artifacts. Logging the same run again updates that MLflow run (a resumed run stays
  one MLflow run; params keep the value first logged, MLflow forbids changing one).

Secrets never reach the store: every text sent (params, tags, artifacts) has the values of the
environment's secret variables (``OPENAI_API_KEY`` ...) and the credentials of any URL masked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from saag_opt.artifacts.export import export_version
from saag_opt.artifacts.version import PromptVersion
from saag_opt.compare.comparison import CompareSummary, SideSummary
from saag_opt.credentials import MASK, is_secret_param, redacted_url
from saag_opt.errors import ConfigError, ModelUnavailableError, RunError
from saag_opt.evaluation.results import PairedSummary
from saag_opt.optimize.summary import OptimizeSummary
from saag_opt.runfiles import SUMMARY_FILE, Run, read_costs, read_header, read_run
from saag_opt.tune.results import TuneSummary

EXPERIMENT = "saag-opt"
"""The MLflow experiment runs go to, unless ``MLFLOW_EXPERIMENT_NAME`` names another."""
ARTIFACTS = ("report.html", SUMMARY_FILE, "run.json")
"""Files of a run directory logged as artifacts (those that exist)."""
INSTALL_HINT = "pip install 'saag-opt[mlflow]'"

_TAG = "saag_opt."
_STATUS = {"success": "FINISHED", "error": "FAILED", "interrupted": "KILLED", "stopped": "KILLED",
           "cancelled": "KILLED", "started": "RUNNING"}
"""saag-opt run status -> MLflow run status."""
_MLFLOW_ALIAS = re.compile(r"[\w-]+")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
_PARAM_MAX, _TAG_MAX, _BATCH = 6000, 8000, 100  # MLflow's limits: param / tag value length, params+tags per batch


def tracking_uri(text: str) -> str:
    """``--mlflow`` as MLflow takes it: a path ending ``.db`` becomes ``sqlite:///ABSOLUTE``, anything else is kept.

    Raises:
        ConfigError: an empty value.
    """
    raw = (text or "").strip()
    if not raw:
        raise ConfigError("--mlflow: give a tracking URI, e.g. sqlite:///mlflow.db or http://127.0.0.1:5000")
    if raw.endswith(".db") and "://" not in raw:
        return f"sqlite:///{Path(raw).expanduser().resolve()}"
    return raw


def _import_mlflow() -> Any:
    try:
        import mlflow  # noqa: PLC0415 - optional: the [mlflow] extra, loaded only for --mlflow
    except ImportError as exc:
        raise ConfigError(f"--mlflow needs MLflow, which is not installed ({exc}); {INSTALL_HINT}") from None
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # its "creating tables" INFO lines are not ours to print
    return mlflow


# -- secrets ---------------------------------------------------------------------------------------


def _env_secrets() -> list[str]:
    """Values of environment variables named like a secret (``OPENAI_API_KEY``, ``HF_TOKEN``), longest first."""
    found = {value for name, value in os.environ.items() if is_secret_param(name) and len(value) >= 8}
    return sorted(found, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` and every URL credential masked (``saag_opt.credentials``)."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return _URL.sub(lambda m: redacted_url(m.group(0)), text)


# -- prompts ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PushedPrompt:
    """One predictor of a prompt version as MLflow holds it."""

    name: str
    """MLflow prompt name (``reviewer-review``)."""
    version: int
    """MLflow's version number."""
    aliases: tuple[str, ...]
    """MLflow aliases now pointing at it."""
    new: bool
    """Registered by this push (False: the same content was there already)."""

    @property
    def uri(self) -> str:
        """What ``mlflow.genai.load_prompt`` takes."""
        return f"prompts:/{self.name}/{self.version}"


@dataclass(frozen=True)
class LoggedRun:
    """A run directory as an MLflow run."""

    path: Path
    run_id: str
    """MLflow run id."""
    parent: str | None
    """MLflow run id of the run it is nested in."""
    new: bool
    """Created now (False: an earlier log of the same run was updated)."""


class MlflowTarget:
    """One MLflow tracking / registry store (``--mlflow URI``); the client is MLflow's own.

    Raises (constructor):
        ConfigError: MLflow is not installed, or an empty URI.
        ModelUnavailableError: a URI MLflow does not support.
    """

    def __init__(self, uri: str) -> None:
        self.uri = tracking_uri(uri)
        self.shown = redacted_url(self.uri)
        """The URI for messages (credentials masked)."""
        mlflow = _import_mlflow()
        self._entities = mlflow.entities
        self._error = mlflow.exceptions.MlflowException
        try:
            self.client = mlflow.MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        except self._error as exc:
            raise self._fail("cannot open the store", exc) from exc
        self._experiment: str | None = None
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
        """Where runs go: ``MLFLOW_EXPERIMENT_NAME`` (MLflow's own variable), else ``saag-opt``."""

    def _fail(self, what: str, exc: BaseException) -> ModelUnavailableError:
        """One line: what failed, and MLflow's first line of why (secrets masked)."""
        lines = str(getattr(exc, "message", None) or exc).strip().splitlines()
        reason = lines[0] if lines else type(exc).__name__
        return ModelUnavailableError(f"--mlflow {self.shown}: {what}: {scrub(reason, _env_secrets())}")

    # -- prompt registry ---------------------------------------------------------------------------

    def push_prompt(self, version: PromptVersion, aliases: Iterable[str] = ()) -> list[PushedPrompt]:
        """Register ``version`` (one MLflow prompt per predictor) and point ``aliases`` at it.

        Raises:
            ConfigError: an alias MLflow cannot hold (checked before anything is registered).
            ModelUnavailableError: the store refused or could not be reached.
        """
        names = sorted(set(aliases))
        for alias in names:
            if not _MLFLOW_ALIAS.fullmatch(alias) or alias.lower() == "latest" or re.fullmatch(r"[vV]\d+", alias):
                raise ConfigError(f"alias {alias!r} of {version.ref} cannot be an MLflow alias (MLflow allows letters, "
                                  "digits, '_' and '-', and reserves 'latest' and v<N>)")
        out = []
        for call in json.loads(export_version(version, "mlflow")):
            try:
                found = self._same_content(call["name"], call["tags"])
                registered = found if found is not None else self.client.register_prompt(**call)
                for alias in names:
                    self.client.set_prompt_alias(call["name"], alias, int(registered.version))
            except self._error as exc:
                raise self._fail(f"cannot register {call['name']}", exc) from exc
            out.append(PushedPrompt(call["name"], int(registered.version), tuple(names), found is None))
        return out

    def _same_content(self, name: str, tags: Mapping[str, str]) -> Any:
        """The MLflow version of prompt ``name`` that already holds this predictor of this content, else None."""
        if self.client.get_prompt(name) is None:
            return None
        keys = (f"{_TAG}sha256", f"{_TAG}predictor")
        token = None
        while True:
            page = self.client.search_prompt_versions(name, max_results=1000, page_token=token)
            for found in page:
                if all(found.tags.get(k) == tags[k] for k in keys):
                    return found
            token = getattr(page, "token", None)
            if not token:
                return None

    # -- tracking ----------------------------------------------------------------------------------

    def experiment_id(self) -> str:
        """The id of the experiment runs go to, created on first use.

        A new experiment on a sqlite store keeps its artifacts beside the database
        (``<db>-artifacts/``), not in MLflow's default ``./mlruns`` under whatever folder the command ran in.

        Raises:
            ModelUnavailableError: the store cannot be opened or written.
        """
        if self._experiment is not None:
            return self._experiment
        name = self.experiment_name
        try:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                self._experiment = str(found.experiment_id)
            else:
                location = None
                if self.uri.startswith("sqlite:///"):
                    db = Path(self.uri.removeprefix("sqlite:///"))
                    location = db.with_name(f"{db.stem}-artifacts").resolve().as_uri()
                self._experiment = str(self.client.create_experiment(name, artifact_location=location))
        except self._error as exc:
            raise self._fail(f"cannot open experiment {name!r}", exc) from exc
        return self._experiment

    def log_runs(self, run_dirs: Iterable[str | os.PathLike[str]]) -> list[LoggedRun]:
        """Log each run directory and the runs nested in it (children of the nearest enclosing run).

        Raises:
            RunError: a run directory that cannot be read.
            ModelUnavailableError: the store refused or could not be reached.
        """
        out: list[LoggedRun] = []
        for root in outermost(Path(p) for p in run_dirs):
            out += self._log_tree(root.resolve())
        return out

    def _log_tree(self, root: Path) -> list[LoggedRun]:
        root_key = _run_key(root, read_header(root).created)
        experiment = self.experiment_id()
        try:
            existing = {r.data.tags.get(f"{_TAG}run_key"): r for r in self.client.search_runs(
                [experiment], filter_string=f"tags.`{_TAG}root_key` = '{root_key}'", max_results=50000)}
        except self._error as exc:
            raise self._fail("cannot search runs", exc) from exc
        secrets = _env_secrets()
        ids: dict[Path, str] = {}
        out = []
        for path in nested_runs(root):
            parent = next((ids[p] for p in path.parents if p in ids), None)
            logged = self._log_one(path, root_key, experiment, parent, existing, secrets)
            ids[path] = logged.run_id
            out.append(logged)
        return out

    def _log_one(self, path: Path, root_key: str, experiment: str, parent: str | None, existing: Mapping[str | None, Any],
                 secrets: list[str]) -> LoggedRun:
        run = _read(path)
        header = run.header
        key = _run_key(path, header.created)
        tags = {f"{_TAG}run_key": key, f"{_TAG}root_key": root_key, f"{_TAG}verb": header.verb,
                f"{_TAG}status": header.status, f"{_TAG}run_id": header.run_id, f"{_TAG}run_dir": str(path),
                "mlflow.runName": header.run_id, "mlflow.source.type": "LOCAL", "mlflow.source.name": "saag-opt"}
        if header.git_revision:
            tags["mlflow.source.git.commit"] = header.git_revision
        tags |= {f"{_TAG}package.{k}": v for k, v in header.packages.items()}
        if header.error is not None:
            tags[f"{_TAG}error"] = header.error.message
        if parent is not None:
            tags["mlflow.parentRunId"] = parent
        previous = existing.get(key)
        try:
            if previous is None:
                mlflow_run = self.client.create_run(experiment, start_time=_millis(header.created), run_name=header.run_id)
                run_id, old_params = mlflow_run.info.run_id, {}
            else:
                run_id, old_params = previous.info.run_id, dict(previous.data.params)
            params = {k: v for k, v in run_params(run).items() if k not in old_params}
            stamp = _millis(header.finished or header.created)
            self._batch(run_id, params={k: scrub(v, secrets)[:_PARAM_MAX] for k, v in params.items()},
                        tags={k: scrub(v, secrets)[:_TAG_MAX] for k, v in tags.items()},
                        metrics=run_metrics(run), stamp=stamp)
            for name in ARTIFACTS:
                if (path / name).is_file():
                    text = (path / name).read_text(encoding="utf-8", errors="replace")
                    self.client.log_text(run_id, scrub(text, secrets), name)
            self.client.set_terminated(run_id, _STATUS.get(header.status, "FINISHED"),
                                       end_time=_millis(header.finished) if header.finished else None)
        except self._error as exc:
            raise self._fail(f"cannot log run {header.run_id}", exc) from exc
        return LoggedRun(path, run_id, parent, previous is None)

    def _batch(self, run_id: str, *, params: Mapping[str, str], tags: Mapping[str, str], metrics: Mapping[str, float],
               stamp: int) -> None:
        entities = self._entities
        items = [entities.Param(k, v) for k, v in params.items()]
        marks = [entities.RunTag(k, v) for k, v in tags.items()]
        for start in range(0, max(len(items), len(marks), 1), _BATCH):
            self.client.log_batch(run_id, params=items[start:start + _BATCH], tags=marks[start:start + _BATCH])
        self.client.log_batch(run_id, metrics=[entities.Metric(k, v, stamp, 0) for k, v in metrics.items()])


# -- what a run directory becomes ------------------------------------------------------------------


def outermost(paths: Iterable[Path]) -> list[Path]:
    """The run directories not inside another one given (a compare's passes are logged with the compare)."""
    resolved = sorted({p.resolve() for p in paths}, key=lambda p: (len(p.parts), str(p)))
    out: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(kept) for kept in out):
            out.append(path)
    return out


def nested_runs(root: Path) -> list[Path]:
    """``root`` and every run directory (a folder with ``run.json``) below it, parents before children."""
    found = {p.parent.resolve() for p in root.rglob("run.json")} | {root.resolve()}
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def _read(path: Path) -> Run:
    """The run typed (``read_run`` without its rows); a verb no module registered keeps its header alone."""
    try:
        return read_run(path, header_only=True)
    except RunError:
        return Run(path, read_header(path))


def _run_key(path: Path, created: str) -> str:
    """Which MLflow run a run directory is: its absolute path and start time, hashed."""
    return hashlib.sha256(f"{path.resolve()}|{created}".encode()).hexdigest()[:24]


def _millis(stamp: str | None) -> int:
    if not stamp:
        return int(time.time() * 1000)
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _flat(f"{prefix}.{key}" if prefix else str(key), item)
    elif value is not None:
        yield prefix, value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def run_params(run: Run) -> dict[str, str]:
    """The run's configuration as MLflow params: ``config.*`` flattened, ``models.<role>``, ``dataset.*``."""
    header = run.header
    params = dict(_flat("", header.config))
    params |= {f"models.{role}": spec for role, spec in header.models.items()}
    params |= {k: v for k, v in _flat("dataset", header.dataset) if not k.endswith(".ids")}
    return {k[:250]: v for k, v in params.items()}


def run_metrics(run: Run) -> dict[str, float]:
    """Accuracy, help, harm, cost and latency of the run, named as tune names them; undefined ones left out."""
    summary = run.summary
    out: dict[str, float | None] = {}
    if isinstance(summary, PairedSummary):  # an evaluate run of either kind
        out |= _paired(summary)
        out["n_examples"] = summary.n_items
        out["errors"] = summary.errors
    elif isinstance(summary, CompareSummary):
        out |= _compare(summary)
    elif isinstance(summary, OptimizeSummary):
        out |= {"metric_calls": summary.metric_calls, "candidates": len(summary.val_scores),
                "seed_val_score": summary.val_scores[0] if summary.val_scores else None,
                "best_val_score": max(summary.val_scores) if summary.val_scores else None}
        if summary.test is not None and summary.test.comparison is not None:
            out |= {f"test.{k}": v for k, v in _compare(summary.test.comparison).items()}
    elif isinstance(summary, TuneSummary):
        out |= {f"trials.{state.lower()}": n for state, n in summary.states.items()}
        out |= {"pareto_size": len(summary.pareto), "distinct_configs": summary.distinct_configs,
                "duplicates": summary.duplicates, "spent_usd": summary.spent}
    costs = read_costs(run.path) or {}
    for role, account in (costs.get("roles") or {}).items():
        name = "" if role == "total" else f".{role}"
        out[f"cost_usd{name}"] = account.get("dollars")
        out[f"tokens{name}"] = (account.get("prompt_tokens") or 0) + (account.get("completion_tokens") or 0)
        out[f"lm_calls{name}"] = account.get("calls")
    n = out.get("n_examples")
    if n and out.get("cost_usd") is not None:
        out["cost_per_item_usd"] = float(out["cost_usd"] or 0.0) / float(n)
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def _paired(summary: PairedSummary) -> dict[str, float | None]:
    hh, latency = summary.help_harm, summary.latency
    return {"accuracy": summary.reviewed.accuracy, "base_accuracy": summary.base.accuracy, "help": hh.helpfulness,
            "harm": hh.harmfulness, "help_harm_ratio": hh.ratio, "net_change": hh.net_change, "mcnemar_p": hh.p_value,
            "seconds_per_item": latency.final_mean_seconds, "base_seconds_per_item": latency.base_mean_seconds,
            "latency_overhead_x": latency.overhead_x, "reviewer_calls_per_item": summary.reviewer_calls_per_item}


def _side(side: SideSummary) -> dict[str, float | None]:
    hh = side.help_harm
    return {"accuracy": side.accuracy.accuracy, "help": hh.helpfulness, "harm": hh.harmfulness,
            "net_change": hh.net_change, "seconds_per_item": side.latency.final_mean_seconds,
            "latency_overhead_x": side.latency.overhead_x, "cost_usd": side.dollars,
            "reviewer_calls_per_item": side.reviewer_calls_per_item}


def _compare(summary: CompareSummary) -> dict[str, float | None]:
    """Per version ``<key>.*`` (``a.accuracy``, ``c.help``), per pair ``<target>_vs_<ref>.*`` (McNemar, Holm)."""
    out: dict[str, float | None] = {"matched": summary.matched, "base_accuracy": summary.base.accuracy}
    for side in summary.sides:
        out |= {f"{side.key}.{k}": v for k, v in _side(side).items()}
    for pair in summary.pairs:
        name = f"{pair.target}_vs_{pair.ref}"
        out |= {f"{name}.net_change": pair.net_change, f"{name}.mcnemar_p": pair.mcnemar_p,
                f"{name}.holm_p": pair.holm_p}
    return out


__all__ = ["ARTIFACTS", "EXPERIMENT", "LoggedRun", "MlflowTarget", "PushedPrompt", "nested_runs", "outermost",
           "run_metrics", "run_params", "scrub", "tracking_uri"]
