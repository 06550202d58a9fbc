"""Chart geometry (pure): what the SVG macros draw is computed here, so it is checked here."""

from __future__ import annotations

import pytest

from saag_opt.report import charts


def test_layered_dag_puts_each_version_one_layer_below_its_deepest_parent() -> None:
    nodes = [{"id": "v2", "parents": []}, {"id": "v3", "parents": ["v2"]}, {"id": "v4", "parents": ["v2"]},
             {"id": "v5", "parents": ["v3", "v4"]}, {"id": "v6", "parents": ["v5", "v2"]},
             {"id": "v7", "parents": ["missing"]}]
    dag = charts.layered_dag(nodes)
    layer = {n["id"]: n["layer"] for n in dag["nodes"]}
    assert layer == {"v2": 0, "v3": 1, "v4": 1, "v5": 2, "v6": 3, "v7": 0}
    y = {n["id"]: n["y"] for n in dag["nodes"]}
    assert y["v3"] == y["v4"] > y["v2"] and y["v6"] > y["v5"] > y["v3"]
    x = {n["id"]: n["x"] for n in dag["nodes"]}
    assert x["v3"] + dag["node_w"] <= x["v4"]  # siblings side by side, not overlapping
    assert [(e["parent"], e["child"]) for e in dag["edges"]] == [("v2", "v3"), ("v2", "v4"), ("v3", "v5"),
                                                                 ("v4", "v5"), ("v5", "v6"), ("v2", "v6")]
    assert all(0 <= n["x"] and n["x"] + dag["node_w"] <= dag["width"] for n in dag["nodes"])
    assert all(n["y"] + dag["node_h"] <= dag["height"] for n in dag["nodes"])


def test_hbars_scale_values_and_ci_whiskers_to_the_plot() -> None:
    chart = charts.hbars([{"label": "r2", "values": {"help": 0.5, "harm": None}, "cis": {"help": (0.25, 0.75)}}],
                         [{"key": "help", "label": "help"}, {"key": "harm", "label": "harm"}], vmax=1.0, width=780)
    plot_w = 780 - charts.LABEL_W - 170
    help_bar, harm_bar = chart["rows"][0]["bars"]
    assert help_bar["w"] == pytest.approx(plot_w / 2) and help_bar["text"] == "50.0%"
    assert help_bar["ci"]["x1"] == pytest.approx(charts.LABEL_W + plot_w / 4)
    assert help_bar["ci"]["x2"] == pytest.approx(charts.LABEL_W + 3 * plot_w / 4)
    assert harm_bar["w"] == 0 and harm_bar["text"] == "n/a" and harm_bar["ci"] is None
    assert help_bar["style"] != harm_bar["style"]  # series differ by pattern class, not only colour
    assert [t["text"] for t in chart["ticks"]] == ["0%", "25%", "50%", "75%", "100%"]
    assert chart["legend"][1]["x"] > chart["legend"][0]["x"] + 6 * len("help")


def test_histogram_bins_close_the_last_bin_and_clamp() -> None:
    h = charts.histogram([0.0, 0.05, 0.5, 0.99, 1.0, 1.7, -0.2], bins=10)
    assert [b["count"] for b in h["bars"]] == [3, 0, 0, 0, 0, 1, 0, 0, 0, 3]
    assert h["n"] == 7 and h["peak"] == 3
    tallest = max(h["bars"], key=lambda b: b["h"])
    assert tallest["y"] + tallest["h"] == pytest.approx(h["bottom"])


def test_scatter_maps_the_data_range_inside_the_frame() -> None:
    s = charts.scatter([{"x": 0.0, "y": 0.0, "shape": "dot", "label": "a", "title": "a"},
                        {"x": 0.08, "y": 1.0, "shape": "cross", "label": "b", "title": "b"}],
                       x_label="harm", y_label="help", lines=[[(0.0, 0.0), (0.08, 1.0)]])
    a, b = s["points"]
    assert a["px"] == s["left"] and a["py"] == s["top"] + s["plot_h"]
    assert b["px"] <= s["left"] + s["plot_w"] and b["py"] >= s["top"]
    assert s["lines"] == [f"{a['px']},{a['py']} {b['px']},{b['py']}"]


@pytest.mark.parametrize("low,high", [(0.0, 1.0), (0.0, 0.07), (3.0, 1234.0), (5.0, 5.0)])
def test_nice_ticks_cover_the_range(low: float, high: float) -> None:
    ticks = charts.nice_ticks(low, high)
    assert ticks[0] <= low and ticks[-1] >= high and 2 <= len(ticks) <= 8
    assert ticks == sorted(ticks)
