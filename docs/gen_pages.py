"""Pages the docs site generates at build time (mkdocs-gen-files): the CLI reference and the results pages.

The results pages are the committed experiment notebooks (``experiments/results/exp*.md``, written by
``experiments/recompute.py``), copied as they are so the site and the records cannot disagree.
"""

from pathlib import Path

import mkdocs_gen_files

from saag_opt.cli.reference import cli_reference

REPO = Path(__file__).resolve().parents[1]

with mkdocs_gen_files.open("reference/cli.md", "w") as page:
    page.write(cli_reference())

for notebook in sorted((REPO / "experiments" / "results").glob("exp*.*")):
    with mkdocs_gen_files.open(f"results/{notebook.name}", "w") as page:
        page.write(notebook.read_text(encoding="utf-8"))

with mkdocs_gen_files.open("changelog.md", "w") as page:
    page.write((REPO / "CHANGELOG.md").read_text(encoding="utf-8"))
