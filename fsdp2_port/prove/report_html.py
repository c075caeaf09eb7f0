"""One self-contained HTML page for a verdict: curves, relative differences, figures, settings.

No JavaScript and nothing fetched: charts are inline SVG, style is inline CSS, so the page
opens from a CI artifact or an email attachment. Used by ``fsdp2-port verify --html`` and
``fsdp2-port compare --html``. Every number on a chart is also in the figures table.

- The first series (the baseline: compare's OLD, verify's reference) is drawn first, as a
  wide band with hollow markers; the others are thin lines with dots over it, so a series
  equal to the baseline leaves it visible on both sides.
- A log axis draws no zero (an exact match, such as step 0's relative difference): the chart
  says at how many steps it left one out; the figures table has them.
- Nothing is wider than the page: charts shrink, the settings wrap, the figures table scrolls
  within its own box.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

Values = Sequence[float | None]  # one per step; None: not logged at that step

COLOURS = ("#1c5aa6", "#d9480f", "#2b8a3e", "#7b2cbf", "#5c5f66")
DASHES = ("none", "none", "8 4", "2 4", "10 4 2 4")
BAND_WIDTH = 6.0  # the baseline's stroke: 2 px of it show on each side of a 2 px line
WIDTH, HEIGHT = 560, 290
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 40, 42

_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1180px;
       color: #1d1d1f; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 8px; }
h2 { font-size: 17px; margin: 26px 0 6px; }
.verdict { font-size: 18px; font-weight: 600; padding: 10px 14px; border-radius: 6px; }
.pass { background: #e6f4ea; color: #1e6b34; }
.fail { background: #fde7e9; color: #a61b29; }
.error { background: #fff4e5; color: #8a4b00; }
h1, .verdict, .note { overflow-wrap: anywhere; }
pre { background: #f6f8fa; padding: 10px; overflow-x: auto; font-size: 13px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg { background: #fff; border: 1px solid #d0d7de; border-radius: 4px; max-width: 100%;
      height: auto; }
svg text { font: 12px system-ui, sans-serif; fill: #444; }
svg .title { font-size: 14px; font-weight: 600; fill: #1d1d1f; }
svg .skipped { font-size: 11px; fill: #666; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
td, th { border: 1px solid #d0d7de; padding: 3px 8px; text-align: right; }
td { white-space: nowrap; }
th { background: #f6f8fa; }
td.key, td.text, th.key { text-align: left; }
#settings { table-layout: fixed; width: 100%; }
#settings td.key { width: 12em; }
#settings td { white-space: normal; overflow-wrap: anywhere; }
.note { color: #555; }
"""


@dataclass(frozen=True)
class Payoff:
    """What a comparison measured besides its verdict, never judged: a ``note`` saying so, a
    ``table`` (its first row the header) and ``seconds``: per series, the seconds each step
    took, one value per step of the page (None: not timed)."""

    note: str
    table: Sequence[Sequence[str]]
    seconds: Mapping[str, Values] = field(default_factory=dict)


def render(
    *,
    title: str,
    verdict: str,
    outcome: str,
    details: Sequence[str] = (),
    steps: Sequence[int] = (),
    curves: Mapping[str, Mapping[str, Values]] | None = None,
    rel_diffs: Mapping[str, Mapping[str, Values]] | None = None,
    tolerance: Mapping[str, float] | None = None,
    baseline: str = "",
    settings: Mapping[str, object] | None = None,
    payoff: Payoff | None = None,
) -> str:
    """The page. ``outcome`` is ``pass``, ``fail`` or ``error`` (the verdict's colour);
    ``curves[metric][series]`` and ``rel_diffs[metric][series]`` (each series relative to
    ``baseline``) hold one value per step;
    ``tolerance[metric]`` is drawn as a line on that metric's relative differences. A series
    keeps its colour and dash on every chart; the first one named is the baseline's band."""
    curves, rel_diffs = curves or {}, rel_diffs or {}
    timed = {"seconds per step": payoff.seconds} if payoff and payoff.seconds else {}
    charts = (curves, rel_diffs, timed)
    names = [n for chart in charts for series in chart.values() for n in series]
    style = {name: i for i, name in enumerate(dict.fromkeys(names))}
    tolerance, settings = tolerance or {}, settings or {}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p id="verdict" class="verdict {escape(outcome)}">{escape(verdict)}</p>',
    ]
    if details:
        parts.append(f'<pre id="details">{escape(chr(10).join(details))}</pre>')
    for metric, series in curves.items():
        parts.append(f"<h2>{escape(metric)}</h2><div class='charts'>")
        parts.append(_chart(f"{metric} per step", "values", metric, steps, series, style))
        if metric in rel_diffs:
            rtol = tolerance.get(metric)
            name = f"{metric}: relative difference to {baseline}"
            parts.append(
                _chart(name, "rel_diff", metric, steps, rel_diffs[metric], style, limit=rtol)
            )
        parts.append("</div>")
    if payoff:
        parts.append(_payoff(payoff, steps, style))
    if curves:
        parts.append("<h2>Figures</h2>" + _figures(steps, charts))
    if settings:
        rows = "".join(
            f"<tr><td class='key'>{escape(str(k))}</td><td class='text'>{escape(str(v))}</td></tr>"
            for k, v in settings.items()
        )
        parts.append(f"<h2>Settings</h2><table id='settings'>{rows}</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _payoff(payoff: Payoff, steps: Sequence[int], style: Mapping[str, int]) -> str:
    """The payoff's heading, note, table and (where steps were timed) chart."""
    head, *rows = payoff.table
    cells = "".join(
        "<tr>"
        + "".join(
            f"<td class='{'key' if i == 0 else ''}'>{escape(c)}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    header = "".join(
        f"<th class='{'key' if i == 0 else ''}'>{escape(c)}</th>" for i, c in enumerate(head)
    )
    parts = [
        "<h2>Time and memory</h2>",
        f"<p class='note'>{escape(payoff.note)}</p>",
        f"<div class='scroll'><table id='payoff'><tr>{header}</tr>{cells}</table></div>",
    ]
    if payoff.seconds:
        chart = _chart("seconds per step", "time", "time", steps, payoff.seconds, style)
        parts.append(f"<div class='charts'>{chart}</div>")
    return "".join(parts)


def _figures(steps: Sequence[int], charts: Sequence[Mapping[str, Mapping[str, Values]]]) -> str:
    """Every value of every chart: a column per (chart, series), a row per step; in a box
    of its own that scrolls sideways when the columns outgrow the page."""
    curves, rel_diffs, timed = charts
    columns = [(f"{m} {s}", v, "") for m, ser in curves.items() for s, v in ser.items()]
    columns += [
        (f"{m} rel diff {s}", v, ".1e") for m, ser in rel_diffs.items() for s, v in ser.items()
    ]
    columns += [(f"s/step {s}", v, ".4g") for ser in timed.values() for s, v in ser.items()]
    head = "<tr><th>step</th>" + "".join(f"<th>{escape(c)}</th>" for c, _, _ in columns) + "</tr>"
    body = "".join(
        f"<tr><td>{step}</td>"
        + "".join(f"<td>{'' if v[i] is None else format(v[i], f)}</td>" for _, v, f in columns)
        + "</tr>"
        for i, step in enumerate(steps)
    )
    return f"<div class='scroll'><table id='figures'>{head}{body}</table></div>"


# -- charts -----------------------------------------------------------------------------------


def _look(n: int) -> tuple[str, float, str]:
    """(colour, stroke width, dash) of the series drawn ``n``-th: the first a wide band,
    the later ones thinner lines over it."""
    width = BAND_WIDTH if n == 0 else max(2.0 - 0.2 * (n - 1), 1.2)
    return COLOURS[n % len(COLOURS)], width, DASHES[n % len(DASHES)]


def _marker(n: int, x: float, y: float, title: str) -> str:
    """A point of the series drawn ``n``-th: a hollow ring for the band, a dot otherwise."""
    colour, width, _ = _look(n)
    if n == 0:
        shape = f'r="{BAND_WIDTH:.1f}" fill="none" stroke="{colour}" stroke-width="2"'
    else:
        shape = f'r="{width + 0.8:.1f}" fill="{colour}"'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" {shape}><title>{escape(title)}</title></circle>'


def _chart(
    title: str,
    kind: str,
    metric: str,
    steps: Sequence[int],
    series: Mapping[str, Values],
    style: Mapping[str, int],
    limit: float | None = None,
) -> str:
    """One SVG line chart, a series per line drawn in ``style[name]``'s look, each in a
    ``<g data-series=NAME>`` of its lines and markers; ``kind`` rel_diff: a log scale, with
    ``limit`` as a tolerance line, and zeros left out (a gap; the chart counts them)."""
    log, zeros = kind == "rel_diff", 0
    if log:
        zeros = sum(v == 0 for vs in series.values() for v in vs)
        series = {name: [None if v == 0 else v for v in vs] for name, vs in series.items()}
    values = [v for vs in series.values() for v in vs if v is not None]
    y_of, ticks = _log_axis(values, limit) if log else _linear_axis(values)
    x_of = _x_axis(steps)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" class="chart" data-metric="{escape(metric)}" '
        f'data-kind="{kind}" role="img" aria-label="{escape(title)}">',
        f'<text class="title" x="{LEFT}" y="18">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#d0d7de"/>',
    ]
    for value, label in ticks:
        y = TOP + plot_h * (1 - y_of(value))
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eef0f2"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>'
        )
    for step in _step_ticks(steps):
        x = LEFT + plot_w * x_of(step)
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{step}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 6}" text-anchor="middle">step</text>')
    if log and zeros:
        out.append(
            f'<text class="skipped" x="6" y="{HEIGHT - 6}">'
            f"{zeros} zero{'s' * (zeros != 1)} (equal) not drawn on a log scale</text>"
        )
    if limit:
        y = TOP + plot_h * (1 - y_of(limit))
        label_y = y - 5 if y - TOP > 18 else y + 15  # under the line near the top
        out.append(
            f'<line class="tolerance" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" '
            f'y2="{y:.1f}" stroke="#c92a2a" stroke-width="1.5" stroke-dasharray="6 3"/>'
            f'<text x="{LEFT + 6}" y="{label_y:.1f}" fill="#c92a2a">tolerance {limit:g}</text>'
        )
    for name, vs in sorted(series.items(), key=lambda item: style[item[0]]):
        n = style[name]
        colour, width, dash = _look(n)
        stroke = f'stroke="{colour}" stroke-width="{width:.1f}" stroke-dasharray="{dash}"'
        out.append(f'<g class="series" data-series="{escape(name)}">')
        segments: list[list[tuple[float, float, int, float]]] = [[]]
        for s, v in zip(steps, vs):
            if v is None:
                segments.append([])  # a step without a value: a gap in the line
            else:
                segments[-1].append((LEFT + plot_w * x_of(s), TOP + plot_h * (1 - y_of(v)), s, v))
        for segment in segments:
            if len(segment) > 1:
                coords = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in segment)
                out.append(
                    f'<polyline points="{coords}" fill="none" stroke-linejoin="round" {stroke}/>'
                )
            out.extend(_marker(n, x, y, f"{name}, step {s}: {v:.7g}") for x, y, s, v in segment)
        out.append("</g>")
    legend_x = LEFT + plot_w
    for name in reversed(list(series)):
        colour, width, dash = _look(style[name])
        legend_x -= 8 * len(name) + 34
        out.append(
            f'<line x1="{legend_x}" x2="{legend_x + 22}" y1="31" y2="31" stroke="{colour}" '
            f'stroke-width="{min(width, 4.0):.1f}" stroke-dasharray="{dash}"/>'
            f'<text x="{legend_x + 26}" y="35">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "".join(out)


def _x_axis(steps: Sequence[int]):
    lo, hi = (min(steps), max(steps)) if steps else (0, 1)
    return (lambda s: 0.5) if hi == lo else (lambda s: (s - lo) / (hi - lo))


def _step_ticks(steps: Sequence[int]) -> list[int]:
    if not steps:
        return []
    lo, hi = min(steps), max(steps)
    stride = max(1, math.ceil((hi - lo) / 10))
    return list(range(lo, hi + 1, stride))


def _linear_axis(values: list[float]):
    """(value -> 0..1, ticks): round ticks that cover the finite values."""
    finite = [v for v in values if math.isfinite(v)] or [0.0, 1.0]
    lo, hi = min(finite), max(finite)
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi), 1e-30):
        pad = abs(hi) * 0.01 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    k0, k1 = math.floor(lo / step), math.ceil(hi / step)
    lo, hi = k0 * step, k1 * step
    ticks = [(k * step, f"{k * step:.6g}") for k in range(k0, k1 + 1)]

    def y(v: float) -> float:
        if not math.isfinite(v):
            return 1.0
        return (v - lo) / (hi - lo)

    return y, ticks


def _log_axis(values: list[float], limit: float | None):
    """(value -> 0..1, ticks) in whole decades around the positive values and the limit;
    non-finite values at the top. Zeros have no place on it: the caller leaves them out."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    if limit:
        positive.append(limit)
    positive = positive or [1e-6]
    lo = math.floor(math.log10(min(positive)))
    hi = max(math.floor(math.log10(max(positive))) + 1, lo + 2)  # a decade above the top
    ticks = [(10.0**e, f"1e{e}") for e in range(lo, hi + 1)]

    def y(v: float) -> float:
        if not math.isfinite(v):
            return 1.0
        return (math.log10(v) - lo) / (hi - lo)

    return y, ticks
