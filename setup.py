"""Build hook: carry the repository's top-level ``datasets/`` and ``prompts/`` into the wheel.

The repository keeps the shipped datasets and the seed prompts at its top level (where users and
docs/design.md §1 expect them); an installed package must still find them, so the build copies them to
``saag_opt/_shipped/`` where ``saag_opt.paths.shipped`` reads them through ``importlib.resources``.
Everything else about the build is in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = {"datasets": ("README.md", "*.jsonl"), "prompts": ("aliases.json", "*/*.json", "*/*.md")}
"""Top-level folder -> the files of it that ship (never a store's lock or tmp files)."""


class BuildPyWithShipped(build_py):
    """``build_py`` plus the copy of the shipped folders into ``<build_lib>/saag_opt/_shipped``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folders directly
            return
        target = Path(self.build_lib) / "saag_opt" / "_shipped"
        for folder, patterns in SHIPPED.items():
            for pattern in patterns:
                for source in sorted((ROOT / folder).glob(pattern)):
                    dest = target / folder / source.relative_to(ROOT / folder)
                    self.mkpath(str(dest.parent))
                    self.copy_file(str(source), str(dest))


setup(cmdclass={"build_py": BuildPyWithShipped})
