"""SVG charts drawn at build time: no script, no library, no network. Each chart is an
`<svg role="img">` with an accessible name (`aria-label`) and a `<title>`; the page puts the same
numbers in a table beside it."""

from __future__ import annotations

from pytest_rocm.schemas.markdown import html_text as escape

PALETTE = [
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
]
WIDTH, HEIGHT, PAD = 560, 220, 36


def _frame(name: str, body: list[str], height: int = HEIGHT) -> str:
    return (
        f'<svg role="img" aria-label="{escape(name)}" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(name)}</title>'
        + "".join(body)
        + "</svg>"
    )


def bars(
    name: str,
    labels: list[str],
    values: list[float | None],
    top: float | None = None,
    unit: str = "",
) -> str:
    """Horizontal bars, one per label; `None` is drawn as "n/a"."""
    height = max(60, 22 * len(labels) + 20)
    top = top or max([v for v in values if v is not None] or [1]) or 1
    body = []
    for i, (label, value) in enumerate(zip(labels, values)):
        y = 10 + 22 * i
        body.append(f'<text x="0" y="{y + 13}" font-size="11">{escape(label[:28])}</text>')
        if value is None:
            body.append(f'<text x="190" y="{y + 13}" font-size="11" fill="#777">n/a</text>')
            continue
        width = max(1.0, (WIDTH - 260) * value / top)
        body.append(f'<rect x="190" y="{y}" width="{width:.1f}" height="16" fill="{PALETTE[0]}"/>')
        body.append(
            f'<text x="{194 + width:.1f}" y="{y + 13}" font-size="11">{_fmt(value, unit)}</text>'
        )
    return _frame(name, body, height)


def lines(
    name: str,
    x_labels: list[str],
    series: dict[str, list[float | None]],
    top: float = 1.0,
    unit: str = "",
) -> str:
    """One polyline per series over the x positions; gaps (`None`) break nothing, they are
    skipped."""
    count = max(len(x_labels), 2)
    inner_w, inner_h = WIDTH - 2 * PAD - 110, HEIGHT - 2 * PAD

    def point(i: int, v: float) -> str:
        return f"{PAD + inner_w * i / (count - 1):.1f},{PAD + inner_h * (1 - v / top):.1f}"

    body = [
        f'<line x1="{PAD}" y1="{PAD + inner_h}" x2="{PAD + inner_w}" y2="{PAD + inner_h}" stroke="#999"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{PAD + inner_h}" stroke="#999"/>',
        f'<text x="2" y="{PAD + 4}" font-size="10">{_fmt(top, unit)}</text>',
        f'<text x="2" y="{PAD + inner_h}" font-size="10">0</text>',
    ]
    if x_labels:
        body.append(
            f'<text x="{PAD}" y="{HEIGHT - 8}" font-size="10">{escape(x_labels[0][:16])}</text>'
        )
        body.append(
            f'<text x="{PAD + inner_w}" y="{HEIGHT - 8}" font-size="10" text-anchor="end">'
            f"{escape(x_labels[-1][:16])}</text>"
        )
    for k, (label, values) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        points = [point(i, v) for i, v in enumerate(values) if v is not None]
        if len(points) == 1:
            x, y = points[0].split(",")
            body.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"/>')
        elif points:
            body.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(points)}"/>'
            )
        body.append(
            f'<rect x="{WIDTH - 105}" y="{PAD + 14 * k - 8}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{WIDTH - 90}" y="{PAD + 14 * k + 1}" font-size="10">{escape(label[:16])}</text>'
        )
    return _frame(name, body)


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.0%}"
    return f"{value:.0f}{unit}" if value >= 10 else f"{value:.2g}{unit}"
