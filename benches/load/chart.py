"""The results as an SVG bar chart: each case's req/s as a ratio to nginx pass-through.

One horizontal bar per case at the median of its per-round ratios, a whisker from the lowest to
the highest round, a dashed line at 1.0 (nginx itself) and a mark at the case's throughput goal.
Plain SVG with its own white background and generic fonts, so it reads the same in a browser
and on GitHub (light or dark theme), with no package beyond Python's own.
"""

import math
from html import escape

WIDTH = 860
LABEL_RIGHT = 250  # labels end here, right-aligned
PLOT_LEFT, PLOT_RIGHT = 262, WIDTH - 124  # the values and goals are written right of the plot
TOP, ROW, BAR = 70, 26, 14
COLOURS = {"met": "#2f855a", "missed": "#c53030", "reference": "#718096", "none": "#a0aec0"}
FONT = 'font-family="Helvetica, Arial, sans-serif"'


def _throughput_goal(case):
    return next((g for g in case.goals if g.metric == "rps_ratio"), None)


def _status(case, summary):
    goal = _throughput_goal(case)
    if case.name == case.reference:
        return "reference"
    if goal is None or summary["rps_ratio"] is None:
        return "none"
    return "met" if goal.met(summary["rps_ratio"]) else "missed"


def _scale_max(cases, summaries):
    """The axis's end: past the longest whisker and the highest goal, at a multiple of 0.5."""
    values = [1.0]
    for case in cases:
        s = summaries[case.name] or {}
        goal = _throughput_goal(case)
        values += [goal and goal.bound, s.get("rps_ratio"), s.get("rps_ratio_max")]
    top = max(v for v in values if v is not None)
    return math.ceil(top * 1.05 / 0.5) * 0.5


def _text(x, y, content, size=12, anchor="start", weight="normal", fill="#1a202c"):
    return (f'<text x="{x:.1f}" y="{y:.1f}" {FONT} font-size="{size}" fill="{fill}" '
            f'text-anchor="{anchor}" font-weight="{weight}">{escape(content)}</text>')


def _line(x1, y1, x2, y2, stroke="#1a202c", width=1.0, dash=None):
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{dashed}/>')


def _row(case, summary, y, sx):
    """The label, bar, whisker, goal mark and value of one case, centred on y."""
    out = [_text(LABEL_RIGHT, y + 4, case.label, anchor="end")]
    if summary is None or summary["rps_ratio"] is None:
        return out + [_text(PLOT_LEFT + 4, y + 4, "skipped", fill="#718096")]
    ratio, low, high = summary["rps_ratio"], summary["rps_ratio_min"], summary["rps_ratio_max"]
    out.append(f'<rect x="{PLOT_LEFT}" y="{y - BAR / 2:.1f}" width="{sx(ratio) - PLOT_LEFT:.1f}" '
               f'height="{BAR}" fill="{COLOURS[_status(case, summary)]}"/>')
    if low is not None and high is not None and high > low:
        out += [_line(sx(low), y, sx(high), y, width=1.2),
                _line(sx(low), y - 4, sx(low), y + 4, width=1.2),
                _line(sx(high), y - 4, sx(high), y + 4, width=1.2)]
    goal = _throughput_goal(case)
    if goal is not None:
        out.append(_line(sx(goal.bound), y - ROW / 2 + 2, sx(goal.bound), y + ROW / 2 - 2,
                         stroke="#000", width=2.5))
    out.append(_text(PLOT_RIGHT + 12, y + 4, f"{ratio:.2f}", size=11, weight="bold"))
    if goal is not None:
        out.append(_text(PLOT_RIGHT + 44, y + 4, f"goal {'≥' if goal.at_least else '≤'} {goal.bound:g}", size=11,
                         fill="#4a5568"))
    return out


def _axis(bottom, top_value, sx):
    out = []
    steps = int(round(top_value / 0.5))
    for i in range(steps + 1):
        value = i * 0.5
        out.append(_line(sx(value), TOP - ROW / 2, sx(value), bottom, stroke="#e2e8f0"))
        out.append(_text(sx(value), bottom + 16, f"{value:g}", size=11, anchor="middle"))
    out.append(_line(sx(1.0), TOP - ROW / 2 - 8, sx(1.0), bottom, stroke="#4a5568",
                     width=1.5, dash="5,4"))
    out.append(_text(sx(1.0) + 4, TOP - ROW / 2 - 2, "nginx pass-through = 1.0", size=11,
                     fill="#4a5568"))
    out.append(_text((PLOT_LEFT + PLOT_RIGHT) / 2, bottom + 34,
                     "req/s ÷ nginx pass-through's req/s in the same round", size=12,
                     anchor="middle"))
    return out


def _legend(y):
    items = [("met", "throughput goal met"), ("missed", "missed"),
             ("reference", "reference"), ("none", "no goal")]
    out, x = [], 16
    for key, words in items:
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{COLOURS[key]}"/>')
        out.append(_text(x + 17, y, words, size=11))
        x += 32 + 6.5 * len(words)
    out.append(_line(x, y - 11, x, y + 3, stroke="#000", width=2.5))
    out.append(_text(x + 6, y, "goal", size=11))
    out.append(_line(x + 46, y - 4, x + 70, y - 4, width=1.2))
    out.append(_text(x + 76, y, "lowest–highest round", size=11))
    return out


def render(cases, summaries, title, caption):
    top_value = _scale_max(cases, summaries)

    def sx(value):
        return PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * value / top_value

    bottom = TOP + ROW * (len(cases) - 0.5)
    height = int(bottom + 90)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        _text(16, 24, title, size=15, weight="bold"),
        _text(16, 42, caption, size=11, fill="#4a5568"),
    ]
    parts += _axis(bottom, top_value, sx)
    for i, case in enumerate(cases):
        parts += _row(case, summaries[case.name], TOP + i * ROW, sx)
    parts += _legend(bottom + 62)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_svg(path, cases, summaries, title, caption):
    with open(path, "w") as f:
        f.write(render(cases, summaries, title, caption))
