"""Reports: terminal tables (rich) and the self-contained HTML report.

The HTML report is ``saag_opt.report.html`` (``write_report(run_dir)``, ``render_report(paths)``;
jinja2 templates in ``templates/``). Only this package and the CLI import rich.
"""

from saag_opt.report.score_tables import (
    METRIC_LABELS,
    STAGE_NAMES,
    abstentions_text,
    accuracy_table,
    datasets_table,
    funnel_table,
    metrics_table,
    print_score_report,
    rejections_panel,
)

__all__ = [
    "METRIC_LABELS",
    "STAGE_NAMES",
    "abstentions_text",
    "accuracy_table",
    "datasets_table",
    "funnel_table",
    "metrics_table",
    "print_score_report",
    "rejections_panel",
]
