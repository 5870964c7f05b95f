"""SVG charts drawn at build time: no script, no library, no network. Each chart is an
`<svg role="img">` with an accessible name (`aria-label`) and a `<title>`; the page puts the same
numbers in a table beside it.

This module lays a chart out as data (`Chart`: its shapes, each with its coordinates and text);
`templates/charts.html` writes it, escaping every text (a label, a test name, the chart's name) as
every other value of a page is (`render`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

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


@dataclass(frozen=True)
class Label:
    kind: ClassVar[str] = "text"
    x: int | str
    y: int | str
    size: int
    text: str
    fill: str | None = None
    anchor: str | None = None


@dataclass(frozen=True)
class Rect:
    kind: ClassVar[str] = "rect"
    x: int | str
    y: int | str
    width: int | str
    height: int | str
    fill: str


@dataclass(frozen=True)
class Line:
    kind: ClassVar[str] = "line"
    x1: int | str
    y1: int | str
    x2: int | str
    y2: int | str
    stroke: str


@dataclass(frozen=True)
class Polyline:
    kind: ClassVar[str] = "polyline"
    stroke: str
    points: str


@dataclass(frozen=True)
class Circle:
    kind: ClassVar[str] = "circle"
    cx: str
    cy: str
    r: int
    fill: str


Shape = Label | Rect | Line | Polyline | Circle


@dataclass(frozen=True)
class Chart:
    """An `<svg role="img">` named `name` (its `aria-label` and `<title>`), `WIDTH` wide."""

    name: str
    height: int
    shapes: list[Shape] = field(default_factory=list)
    width: int = WIDTH


def bars(
    name: str,
    labels: list[str],
    values: list[float | None],
    top: float | None = None,
    unit: str = "",
) -> Chart:
    """Horizontal bars, one per label; `None` is drawn as "n/a"."""
    height = max(60, 22 * len(labels) + 20)
    top = top or max([v for v in values if v is not None] or [1]) or 1
    shapes: list[Shape] = []
    for i, (label, value) in enumerate(zip(labels, values)):
        y = 10 + 22 * i
        shapes.append(Label(0, y + 13, 11, label[:28]))
        if value is None:
            shapes.append(Label(190, y + 13, 11, "n/a", fill="#777"))
            continue
        width = max(1.0, (WIDTH - 260) * value / top)
        shapes.append(Rect(190, y, f"{width:.1f}", 16, PALETTE[0]))
        shapes.append(Label(f"{194 + width:.1f}", y + 13, 11, _fmt(value, unit)))
    return Chart(name, height, shapes)


def lines(
    name: str,
    x_labels: list[str],
    series: dict[str, list[float | None]],
    top: float = 1.0,
    unit: str = "",
) -> Chart:
    """One polyline per series over the x positions; gaps (`None`) break nothing, they are
    skipped."""
    count = max(len(x_labels), 2)
    inner_w, inner_h = WIDTH - 2 * PAD - 110, HEIGHT - 2 * PAD

    def point(i: int, v: float) -> tuple[str, str]:
        return f"{PAD + inner_w * i / (count - 1):.1f}", f"{PAD + inner_h * (1 - v / top):.1f}"

    shapes: list[Shape] = [
        Line(PAD, PAD + inner_h, PAD + inner_w, PAD + inner_h, "#999"),
        Line(PAD, PAD, PAD, PAD + inner_h, "#999"),
        Label(2, PAD + 4, 10, _fmt(top, unit)),
        Label(2, PAD + inner_h, 10, "0"),
    ]
    if x_labels:
        shapes.append(Label(PAD, HEIGHT - 8, 10, x_labels[0][:16]))
        shapes.append(Label(PAD + inner_w, HEIGHT - 8, 10, x_labels[-1][:16], anchor="end"))
    for k, (label, values) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        points = [point(i, v) for i, v in enumerate(values) if v is not None]
        if len(points) == 1:
            shapes.append(Circle(*points[0], 3, colour))
        elif points:
            shapes.append(Polyline(colour, " ".join(f"{x},{y}" for x, y in points)))
        shapes.append(Rect(WIDTH - 105, PAD + 14 * k - 8, 10, 10, colour))
        shapes.append(Label(WIDTH - 90, PAD + 14 * k + 1, 10, label[:16]))
    return Chart(name, HEIGHT, shapes)


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.0%}"
    return f"{value:.0f}{unit}" if value >= 10 else f"{value:.2g}{unit}"
