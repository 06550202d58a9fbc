"""Geometry of the HTML report's inline SVG charts: pure functions from numbers to shapes.

Each function returns a plain dict (sizes, positioned bars/points/lines, axis ticks, legend) that
one jinja2 macro in ``templates/charts.html.j2`` draws. Keeping the arithmetic here keeps the
templates declarative and lets tests check a chart's shapes without parsing SVG. Series are told
apart by a fill *pattern* as well as a colour (``style`` = ``s0``, ``s1``, ...), and every bar and
point carries its number as text, so colour is never the only carrier of meaning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

LABEL_W = 235
"""Width of the category-label column of horizontal bar charts."""


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [low, high]."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0, 1.0]
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = [round(math.floor(low / step + 1e-9) * step, 10)]
    while ticks[-1] < high - 1e-9:  # the last tick is the first one at or above ``high``
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def hbars(groups: Sequence[Mapping[str, Any]], series: Sequence[Mapping[str, str]], *, vmax: float | None = None,
          width: int = 780, fmt: str = "{:.1%}", ticks_fmt: str = "{:.0%}") -> dict[str, Any]:
    """Grouped horizontal bars with optional CI whiskers.

    ``groups``: ``[{"label": str, "values": {series_key: value | None}, "cis": {series_key: (lo, hi)},
    "texts": {series_key: str}}]``; ``series``: ``[{"key", "label"}]`` in drawing order. A None
    value draws no bar and the text ``n/a``.
    """
    bar_h, gap, group_gap, top = 14, 3, 12, 34
    plot_w = width - LABEL_W - 170
    values = [v for g in groups for v in g["values"].values() if v is not None]
    values += [hi for g in groups for ci in (g.get("cis") or {}).values() if ci for hi in ci[1:]]
    top_value = vmax if vmax is not None else (max(values) if values else 1.0) or 1.0
    scale = plot_w / top_value
    rows, y = [], top
    for group in groups:
        bars = []
        for index, spec in enumerate(series):
            key = spec["key"]
            value = group["values"].get(key)
            ci = (group.get("cis") or {}).get(key)
            text = (group.get("texts") or {}).get(key) or ("n/a" if value is None else fmt.format(value))
            w = 0.0 if value is None else max(0.0, min(value, top_value)) * scale
            bar: dict[str, Any] = {"y": y, "w": round(w, 2), "style": f"s{index}", "text": text,
                                   "tx": LABEL_W + w + 4, "label": spec["label"], "ci": None}
            if ci and ci[0] is not None and ci[1] is not None:
                lo, hi = (LABEL_W + max(0.0, min(c, top_value)) * scale for c in ci)
                bar["ci"] = {"x1": round(lo, 2), "x2": round(hi, 2), "y": y + bar_h / 2}
                bar["tx"] = max(bar["tx"], hi + 4)
            bars.append(bar)
            y += bar_h + gap
        rows.append({"label": group["label"], "y": y - (bar_h + gap) * len(series) / 2 - gap, "bars": bars})
        y += group_gap
    ticks = [{"x": round(LABEL_W + t * scale, 2), "text": ticks_fmt.format(t)}
             for t in nice_ticks(0.0, top_value) if t <= top_value + 1e-9]
    return {"width": width, "height": y + 16, "top": top, "bottom": y - group_gap, "label_w": LABEL_W,
            "bar_h": bar_h, "rows": rows, "ticks": ticks,
            "legend": legend(series, LABEL_W)}


def legend(series: Sequence[Mapping[str, str]], x0: float) -> list[dict[str, Any]]:
    """Legend entries placed left to right, each as wide as its label (about 6.3 px per character)."""
    out, x = [], x0
    for i, spec in enumerate(series):
        out.append({"style": f"s{i}", "label": spec["label"], "x": round(x, 1)})
        x += 18 + 6.3 * len(spec["label"]) + 18
    return out


def histogram(values: Sequence[float], *, bins: int = 10, low: float = 0.0, high: float = 1.0,
              width: int = 220, height: int = 120) -> dict[str, Any]:
    """Counts of ``values`` in ``bins`` equal bins over [low, high] (the last bin closed)."""
    counts = [0] * bins
    for value in values:
        index = int((min(max(value, low), high) - low) / (high - low) * bins)
        counts[min(index, bins - 1)] += 1
    left, bottom, plot_h = 8, height - 22, height - 44
    bin_w = (width - 2 * left) / bins
    peak = max(counts) or 1
    bars = [{"x": round(left + i * bin_w + 1, 2), "w": round(bin_w - 2, 2),
             "h": round(c / peak * plot_h, 2), "y": round(bottom - c / peak * plot_h, 2), "count": c,
             "range": f"{low + i * (high - low) / bins:.1f}-{low + (i + 1) * (high - low) / bins:.1f}"}
            for i, c in enumerate(counts)]
    return {"width": width, "height": height, "bottom": bottom, "left": left, "right": width - left,
            "bars": bars, "peak": max(counts), "low": low, "high": high, "n": len(values)}


def scatter(points: Sequence[Mapping[str, Any]], *, x_label: str, y_label: str, width: int = 720,
            height: int = 380, x_range: tuple[float, float] | None = None,
            y_range: tuple[float, float] | None = None, lines: Sequence[Sequence[tuple[float, float]]] = (),
            links: Sequence[Sequence[tuple[float, float]]] = (), legend: Sequence[tuple[str, str]] = (),
            x_fmt: str = "{:g}", y_fmt: str = "{:g}") -> dict[str, Any]:
    """Points (``{"x", "y", "shape", "label", "title"}``) on linear axes.

    Optional extras: polylines (dashed, e.g. a front or a running best), links (dotted, e.g.
    val -> test) and a legend of the point shapes.
    """
    left, right, top, bottom = 64, 24, 20, 48
    xs = [p["x"] for p in points] + [x for line in lines for x, _ in line]
    ys = [p["y"] for p in points] + [y for line in lines for _, y in line]
    x0, x1 = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    y0, y1 = y_range or ((min(ys), max(ys)) if ys else (0.0, 1.0))
    x_ticks, y_ticks = nice_ticks(x0, x1), nice_ticks(y0, y1)
    x0, x1 = min(x0, x_ticks[0]), max(x1, x_ticks[-1])
    y0, y1 = min(y0, y_ticks[0]), max(y1, y_ticks[-1])
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return round(left + (x - x0) / ((x1 - x0) or 1.0) * plot_w, 2)

    def py(y: float) -> float:
        return round(top + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h, 2)

    placed = [dict(p, px=px(p["x"]), py=py(p["y"])) for p in points]
    return {"width": width, "height": height, "left": left, "top": top, "plot_w": plot_w, "plot_h": plot_h,
            "x_label": x_label, "y_label": y_label, "points": placed,
            "x_ticks": [{"x": px(t), "text": x_fmt.format(t)} for t in x_ticks],
            "y_ticks": [{"y": py(t), "text": y_fmt.format(t)} for t in y_ticks],
            "lines": [" ".join(f"{px(x)},{py(y)}" for x, y in line) for line in lines if line],
            "links": [" ".join(f"{px(x)},{py(y)}" for x, y in link) for link in links if link],
            "legend": [{"shape": shape, "label": label, "px": left + 14 + i * 120, "py": top + 14}
                       for i, (shape, label) in enumerate(legend)]}


def layered_dag(nodes: Sequence[Mapping[str, Any]], *, node_w: int = 150, node_h: int = 46, h_gap: int = 26,
                v_gap: int = 42) -> dict[str, Any]:
    """Top-down layered layout of a lineage: a node's layer is 1 + its deepest parent's layer.

    ``nodes``: ``[{"id", "parents": [...], ...}]`` in creation order (parents first). Unknown
    parents are ignored; edges go from the bottom of a parent to the top of its child.
    """
    layer: dict[str, int] = {}
    for node in nodes:
        parents = [p for p in node.get("parents") or [] if p in layer]
        layer[node["id"]] = 1 + max((layer[p] for p in parents), default=-1)
    rows: dict[int, list[str]] = {}
    for node in nodes:
        rows.setdefault(layer[node["id"]], []).append(node["id"])
    widest = max((len(r) for r in rows.values()), default=1)
    width = max(widest * (node_w + h_gap) + h_gap, 320)
    pos: dict[str, tuple[float, float]] = {}
    for depth, ids in rows.items():
        span = len(ids) * (node_w + h_gap) - h_gap
        start = (width - span) / 2
        for i, node_id in enumerate(ids):
            pos[node_id] = (start + i * (node_w + h_gap), 12 + depth * (node_h + v_gap))
    placed = [dict(n, x=round(pos[n["id"]][0], 2), y=round(pos[n["id"]][1], 2), layer=layer[n["id"]]) for n in nodes]
    edges = []
    for node in nodes:
        cx, cy = pos[node["id"]]
        for parent in node.get("parents") or []:
            if parent in pos:
                px_, py_ = pos[parent]
                x1, y1, x2, y2 = px_ + node_w / 2, py_ + node_h, cx + node_w / 2, cy
                mid = (y1 + y2) / 2
                edges.append({"d": f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2 - 4:.1f}",
                              "parent": parent, "child": node["id"]})
    height = 12 + (max(rows, default=0) + 1) * (node_h + v_gap)
    return {"width": round(width), "height": round(height), "node_w": node_w, "node_h": node_h,
            "nodes": placed, "edges": edges}


__all__ = ["hbars", "histogram", "layered_dag", "legend", "nice_ticks", "scatter"]
