"""Small server-side SVG charts for the health page, pure: no script, no front-end build, every
text escaped, so the page's CSP holds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT, PAD = 360, 120, 28
SERIES = (("p50", "#36c"), ("p99", "#c33"))


def _points(xs: Sequence[float], ys: Sequence[float], top: float) -> str:
    x0, x1 = min(xs), max(xs)
    span = (x1 - x0) or 1.0
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    return " ".join(f"{PAD + inner_w * (x - x0) / span:.1f},{HEIGHT - PAD - inner_h * y / top:.1f}"
                    for x, y in zip(xs, ys, strict=True))


def nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 x 10^n at or above `value` > 0 (the y axis' top)."""
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(m * magnitude for m in (1.0, 2.0, 5.0, 10.0) if m * magnitude >= value)


def latency_chart(app: str, records: Sequence[Mapping[str, Any]]) -> str:
    """Commit latency p50 and p99 (ms) over the records' times, as one inline SVG."""
    measured = [r for r in records if r.get("commitLatencyMs")]
    label = escape(app)
    if not measured:
        return f'<p class="muted latency-none" data-app="{label}">{label}: no commit measured yet</p>'
    xs = [float(r["atMs"]) for r in measured]
    values = {name: [float(r["commitLatencyMs"][name]) for r in measured] for name, _c in SERIES}
    top = nice_top(max(max(values["p99"]), 0.001))
    lines = "".join(
        f'<polyline class="series-{name}" fill="none" stroke="{color}" stroke-width="1.5" '
        f'points="{_points(xs, values[name], top) if len(xs) > 1 else _points([0.0, 1.0], values[name] * 2, top)}"/>'
        for name, color in SERIES)
    minutes = (max(xs) - min(xs)) / 60000
    last = measured[-1]["commitLatencyMs"]
    return (f'<svg class="latency-chart" role="img" data-app="{label}" data-points="{len(measured)}" '
            f'data-p50="{last["p50"]}" data-p99="{last["p99"]}" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
            f'<title>{label}: commit latency p50 {last["p50"]} ms, p99 {last["p99"]} ms</title>'
            f'<rect x="{PAD}" y="{PAD}" width="{WIDTH - 2 * PAD}" height="{HEIGHT - 2 * PAD}" fill="#fafafa" '
            f'stroke="#ccc"/>{lines}'
            f'<text x="2" y="{PAD + 4}" font-size="10">{top:g} ms</text>'
            f'<text x="2" y="{HEIGHT - PAD}" font-size="10">0</text>'
            f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="10">{label} · last {minutes:.1f} min · '
            f'<tspan fill="#36c">p50</tspan> <tspan fill="#c33">p99</tspan></text></svg>')
