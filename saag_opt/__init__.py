"""saag-opt: measure and improve the reviewer of a tool-calling LLM agent.

The Python API of the command line's verbs, each the very function the command calls::

    import saag_opt

    result = saag_opt.evaluate(saag_opt.EvaluateConfig(base="gpt-4o", reviewer="gpt-5-mini", limit=20))
    print(result.run_dir, result.summary.help_harm)

Each name loads its module on first use (``saag_opt.lazy``), so ``import saag_opt`` stays cheap.
``evaluate``, ``compare``, ``score``, ``optimize`` and ``tune`` are functions here; their packages are
imported by their full names (``from saag_opt.optimize.config import OptimizeConfig``).
"""

from typing import TYPE_CHECKING

from saag_opt.lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    from saag_opt.agents.setup import ReviewSetup
    from saag_opt.compare.run import CompareConfig
    from saag_opt.compare.run import run_compare as compare
    from saag_opt.evaluate.config import EvaluateConfig
    from saag_opt.evaluate.run import run_evaluation as evaluate
    from saag_opt.optimize.config import OptimizeConfig
    from saag_opt.optimize.run import run_optimize as optimize
    from saag_opt.runfiles import read_run
    from saag_opt.runtime.guard import Guard
    from saag_opt.score.calls import score_predictions as score
    from saag_opt.tune.run import TuneConfig
    from saag_opt.tune.run import run_tune as tune
else:
    __getattr__, __dir__ = lazy_exports(__name__, {
        "agents.setup": ("ReviewSetup",),
        "compare.run": ("CompareConfig", ("compare", "run_compare")),
        "evaluate.config": ("EvaluateConfig",),
        "evaluate.run": (("evaluate", "run_evaluation"),),
        "score.calls": (("score", "score_predictions"),),
        "optimize.config": ("OptimizeConfig",),
        "optimize.run": (("optimize", "run_optimize"),),
        "runfiles": ("read_run",),
        "runtime.guard": ("Guard",),
        "tune.run": ("TuneConfig", ("tune", "run_tune")),
    }, shadowing=("compare", "evaluate", "optimize", "score", "tune"))

__all__ = [
    "CompareConfig",
    "EvaluateConfig",
    "Guard",
    "OptimizeConfig",
    "ReviewSetup",
    "TuneConfig",
    "compare",
    "evaluate",
    "optimize",
    "read_run",
    "score",
    "tune",
]
