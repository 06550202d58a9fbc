"""``python -m saag_opt.cli`` = the ``saag-opt`` console script."""

from saag_opt.cli import main

main()
