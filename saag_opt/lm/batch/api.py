"""OpenAI's Batch API through the ``openai`` SDK: upload a round of chat requests, poll, read the answers.

Why the SDK: the Batch API is two uploads and a poll (a JSONL file with ``purpose=batch``, a batch
that references it, ``GET /batches/{id}`` until it ends, then the output and error files); the SDK
speaks it (multipart upload, retries of 429/5xx) and is already a dependency. This module knows the
wire format only; rounds, waiting workers and the run directory are ``batching``'s.

A line of the input file is ``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}``
with the body exactly as a direct call would send it. No key, header or URL is in it: the key
travels in the SDK's Authorization header only.

Created once: the Batch API takes no idempotency key, so the caller chooses one (an *intent*), writes
it down, and it goes into the batch's ``metadata``. A create whose answer is lost (a reset, a
timeout, a 5xx: the batch may exist) is not blindly sent again (the SDK's own retries would do that):
the server's batches are listed, newest first, for one carrying that intent (``find``), and only
if there is none is the create asked again. A run that died before it wrote a batch's id finds it
the same way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from saag_opt.errors import ModelUnavailableError
from saag_opt.lm.retry import with_retries

CHAT_ENDPOINT: Literal["/v1/chat/completions"] = "/v1/chat/completions"
OPENAI_URL = "https://api.openai.com/v1"
DONE = frozenset({"completed", "expired", "failed", "cancelled"})
"""Statuses after which a batch changes no more."""
INTENT_KEY = "saag_intent"
"""The batch ``metadata`` key that carries its intent (the key its creator chose and wrote down first)."""
LOOKBACK = 600.0
"""Seconds before an intent was written from which ``find`` still reads the server's batches (clocks differ)."""
CREATE_ATTEMPTS, CREATE_DELAY = 5, 1.0
"""Creates of one batch at most (before each again, ``find`` checks that the one before did not make it),
and the first delay between them in seconds (``retry.with_retries``: doubling, jittered)."""


class NotCreated(ModelUnavailableError):
    """The server refused the batch (no Batch API, a rejected key): it does not exist, nothing is paid."""


class UnknownBatch(Exception):
    """The server does not know this batch id (404): deleted, past its retention, or another key's or project's."""


@dataclass(frozen=True)
class BatchStatus:
    """One poll: the status and request counts, and where the answers are once it is done."""

    id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        """The batch changes no more (its files, if any, can be read)."""
        return self.status in DONE


@dataclass(frozen=True)
class LineResult:
    """The answer to one request of a batch: a chat.completion body, or why there is none."""

    body: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class BatchClient:
    """The Batch API of one server (``base_url`` None = api.openai.com) with one key (memory only)."""

    base_url: str | None
    api_key: str = field(repr=False)

    def __post_init__(self) -> None:
        import openai  # noqa: PLC0415 - the SDK takes seconds to import and only --batch needs it

        self._sdk = openai.OpenAI(api_key=self.api_key, base_url=self.base_url or OPENAI_URL, max_retries=4,
                                  timeout=300.0)
        self._once = self._sdk.with_options(max_retries=0)  # a create is retried here, after a lookup
        self._not_found, self._refused = openai.NotFoundError, openai.AuthenticationError
        self._transient = (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError)

    @property
    def where(self) -> str:
        """The server's URL (for messages and the run directory: never a key)."""
        return self.base_url or OPENAI_URL

    def submit(self, lines: list[dict[str, Any]], *, intent: str | None = None,
               metadata: dict[str, str] | None = None) -> str:
        """Upload ``lines`` and create their batch, once; returns its id.

        ``intent``: the caller's key for this batch, written down before this call; it goes into the
        batch's metadata and makes the create safe to repeat (see the module docstring). Without
        one, the create is the SDK's (retried blindly).

        Raises:
            NotCreated: the server has no Batch API (404), or rejects the key.
            ModelUnavailableError: whether a create whose answer was lost made the batch cannot be found out.
            openai.OpenAIError: any other failure, after the retries.
        """
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
        since = time.time()
        metadata = dict(metadata or {}) | ({INTENT_KEY: intent} if intent is not None else {})
        try:
            uploaded = self._sdk.files.create(file=("saag-opt-batch.jsonl", data, "application/jsonl"),
                                              purpose="batch")
            if intent is None:
                return self._sdk.batches.create(input_file_id=uploaded.id, endpoint=CHAT_ENDPOINT,
                                                completion_window="24h", metadata=metadata).id
            return self._create_once(uploaded.id, intent, since, metadata)
        except self._not_found as exc:
            raise NotCreated(f"{self.where} has no Batch API ({_first_line(exc)}); run without --batch") from exc
        except self._refused as exc:
            raise NotCreated(f"{self.where}: the Batch API rejected the API key") from exc

    def _create_once(self, file_id: str, intent: str, since: float, metadata: dict[str, str]) -> str:
        """Create the batch; before asking again after a failure, look for the one that failure may have made."""
        tried = False

        def create() -> str:
            nonlocal tried
            if tried and (found := self.find(intent, since=since)) is not None:
                return found
            tried = True
            return self._once.batches.create(input_file_id=file_id, endpoint=CHAT_ENDPOINT,
                                             completion_window="24h", metadata=metadata).id

        return with_retries(create, attempts=CREATE_ATTEMPTS, base_delay=CREATE_DELAY,
                            retry_on=self._transient)

    def find(self, intent: str, *, since: float) -> str | None:
        """The id of the batch whose metadata carries ``intent``, or None if the server has none.

        Reads the server's list newest first, back to ``LOOKBACK`` seconds before ``since`` (when the
        intent was written: no batch of it can be older).

        Raises:
            ModelUnavailableError: the server does not list its batches (so the answer is unknown).
            openai.OpenAIError: the server cannot be asked (after the SDK's retries).
        """
        try:
            for batch in self._sdk.batches.list(limit=100):
                if (batch.metadata or {}).get(INTENT_KEY) == intent:
                    return batch.id
                if batch.created_at < since - LOOKBACK:
                    return None
        except self._not_found as exc:
            raise ModelUnavailableError(f"{self.where} does not list its batches ({_first_line(exc)}), so whether "
                                        f"batch intent {intent} was created is unknown; to send its requests "
                                        "again (paying twice if it was), remove its row from batches.json") from exc
        return None

    def status(self, batch_id: str) -> BatchStatus:
        """Poll one batch.

        Raises:
            UnknownBatch: the server does not know ``batch_id``.
            openai.OpenAIError: the server cannot be asked (after the SDK's retries).
        """
        try:
            batch = self._sdk.batches.retrieve(batch_id)
        except self._not_found as exc:
            raise UnknownBatch(f"{self.where} does not know batch {batch_id} ({_first_line(exc)})") from exc
        counts = batch.request_counts
        errors = tuple(f"{e.code}: {e.message}" for e in (batch.errors.data or [])) if batch.errors else ()
        return BatchStatus(batch.id, batch.status, counts.total if counts else 0, counts.completed if counts else 0,
                           counts.failed if counts else 0, batch.output_file_id, batch.error_file_id, errors)

    def results(self, status: BatchStatus) -> dict[str, LineResult]:
        """Every answered or failed request of a finished batch, by ``custom_id``.

        A request in neither file (a cancelled or failed batch) is absent: the caller sends it again.
        """
        out: dict[str, LineResult] = {}
        for file_id in (status.error_file_id, status.output_file_id):  # an answer wins over an error
            if not file_id:
                continue
            for text in self._sdk.files.content(file_id).content.decode().splitlines():
                if text.strip():
                    custom_id, result = read_line(json.loads(text))
                    if custom_id is not None:
                        out[custom_id] = result
        return out


def request_line(custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """One line of a batch input file."""
    return {"custom_id": custom_id, "method": "POST", "url": CHAT_ENDPOINT, "body": body}


def read_line(row: dict[str, Any]) -> tuple[str | None, LineResult]:
    """``(custom_id, result)`` of one output or error file line."""
    custom_id = row.get("custom_id")
    response: dict[str, Any] = row.get("response") or {}
    error = row.get("error")
    if isinstance(error, dict) and error:
        return custom_id, LineResult(error=f"{error.get('code')}: {error.get('message')}")
    if response.get("status_code") == 200 and isinstance(response.get("body"), dict):
        return custom_id, LineResult(body=response["body"])
    body: dict[str, Any] = response["body"] if isinstance(response.get("body"), dict) else {}
    message = body["error"].get("message") if isinstance(body.get("error"), dict) else None
    return custom_id, LineResult(error=f"HTTP {response.get('status_code')}: {message or 'no answer'}")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["CHAT_ENDPOINT", "CREATE_ATTEMPTS", "DONE", "INTENT_KEY", "LOOKBACK", "BatchClient", "BatchStatus",
           "LineResult", "NotCreated", "UnknownBatch", "read_line", "request_line"]
