"""Heatmaps as inline SVG: colour scales, downsampling that keeps the worst element, cell categories.

No plotting library: a heatmap is a string of ``<path>`` elements, one per colour, in a
``viewBox`` of one unit per cell. A cell is either a value,
coloured on a scale, or one of the categories drawn apart: ``unknown`` (an element a print did
not show: an elided corner), ``masked`` (-inf), ``+inf`` and ``NaN``.
"""

import functools
import html
import math

import torch

MAX_CELLS = 32  # a heatmap is at most this many cells a side
LEVELS = 64  # colours a scale is quantised to (one path per colour)

# Anchors, interpolated linearly: viridis (dark purple → yellow, lightness rising with the value)
# for values, and blue → white → red for differences (white at 0).
SEQUENTIAL = (
    (68, 1, 84),
    (72, 40, 120),
    (62, 74, 137),
    (49, 104, 142),
    (38, 130, 142),
    (31, 158, 137),
    (53, 183, 121),
    (110, 206, 88),
    (181, 222, 43),
    (253, 231, 37),
)
DIVERGING = (
    (33, 102, 172),
    (103, 169, 207),
    (209, 229, 240),
    (247, 247, 247),
    (253, 219, 199),
    (239, 138, 98),
    (178, 24, 43),
)

VALUE, UNKNOWN, MASKED, POS_INF, NAN = range(5)
# Each category: its name in the legend, its fill and the mark drawn over it (in cell units).
CATEGORIES = {
    UNKNOWN: ("unknown (not printed)", "#f0f0f0", "#a0a0a0", "M{x} {y1}L{x1} {y}"),
    MASKED: ("masked (-inf)", "#8c8c8c", "#ffffff", "M{x} {y}L{x1} {y1}"),
    POS_INF: ("+inf", "#8c8c8c", "#000000", "M{x} {y1}L{x1} {y}"),
    NAN: ("NaN", "#e7298a", "#000000", "M{x} {y}L{x1} {y1}M{x} {y1}L{x1} {y}"),
}


class Scale:
    """A linear colour scale from ``low`` to ``high`` over ``anchors``, quantised to LEVELS colours."""

    def __init__(self, low, high, anchors=SEQUENTIAL):
        if not (math.isfinite(low) and math.isfinite(high)) or low > high:
            raise ValueError(f"a colour scale needs finite low <= high, got {low}, {high}")
        self.low, self.high, self.anchors = float(low), float(high), anchors
        self.palette = _palette(anchors)

    @classmethod
    def around_zero(cls, *tensors):
        """A diverging scale symmetric about 0, reaching the largest finite |value| of ``tensors``."""
        low, high = _finite_range(tensors)
        top = max(abs(low), abs(high))
        return cls(-top, top, DIVERGING)

    @classmethod
    def spanning(cls, *tensors):
        """A sequential scale from the smallest to the largest finite value of ``tensors``."""
        return cls(*_finite_range(tensors))

    def levels(self, values):
        """Each value's colour index (0 … LEVELS-1); a flat scale puts everything in the middle."""
        if self.high == self.low:
            return torch.full(values.shape, LEVELS // 2, dtype=torch.int64)
        fraction = (values - self.low) / (self.high - self.low)
        return (fraction.nan_to_num(0.5).clamp(0, 1) * (LEVELS - 1)).round().long()

    def colour(self, value):
        return self.palette[int(self.levels(torch.tensor([float(value)], dtype=torch.float64))[0])]


def _finite_range(tensors):
    """(smallest, largest) finite value of ``tensors``; (0, 0) when there is none."""
    low, high = math.inf, -math.inf
    for t in tensors:
        finite = t.isfinite()
        if finite.any():
            low = min(low, float(torch.where(finite, t, math.inf).min()))
            high = max(high, float(torch.where(finite, t, -math.inf).max()))
    return (low, high) if low <= high else (0.0, 0.0)


@functools.cache
def _palette(anchors):
    return [_hex(_interpolate(anchors, i / (LEVELS - 1))) for i in range(LEVELS)]


def _interpolate(anchors, t):
    position = t * (len(anchors) - 1)
    i = min(int(position), len(anchors) - 2)
    f = position - i
    return tuple(round(a + (b - a) * f) for a, b in zip(anchors[i], anchors[i + 1]))


def _hex(rgb):
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def categories(values, known=None):
    """Each element's category: VALUE, or UNKNOWN where ``known`` is False, MASKED (-inf), POS_INF, NAN."""
    codes = torch.full(values.shape, VALUE, dtype=torch.int64)
    codes[torch.isnan(values)] = NAN
    codes[values == math.inf] = POS_INF
    codes[values == -math.inf] = MASKED
    if known is not None:
        codes[~known] = UNKNOWN
    return codes


def block_picks(badness, worst=None, limit=MAX_CELLS):
    """Downsampling: for each block of a 2-D slice, the flat index of its worst element.

    ``badness`` is ``(H, W)``; a slice over ``limit`` cells a side is cut into blocks of
    ``ceil(H / limit)`` × ``ceil(W / limit)`` elements and each block is shown by its element of
    greatest badness. ``worst`` (a row, column) is the element the block holding it always shows,
    whatever ties. Returns ``(picks, (row step, column step))``: picks is ``(rows, cols)``.
    """
    if badness.ndim != 2:
        raise ValueError(f"a heatmap slice is 2-D, got {badness.ndim} dimensions")
    H, W = badness.shape
    if H <= limit and W <= limit:  # drawn as it is
        return torch.arange(H * W).reshape(H, W), (1, 1)
    bh, bw = max(1, math.ceil(H / limit)), max(1, math.ceil(W / limit))
    rows, cols = math.ceil(H / bh), math.ceil(W / bw)
    padded = torch.full((rows * bh, cols * bw), -math.inf, dtype=torch.float64)
    padded[:H, :W] = badness.nan_to_num(math.inf)
    index = torch.zeros((rows * bh, cols * bw), dtype=torch.int64)
    index[:H, :W] = torch.arange(H * W).reshape(H, W)

    def blocks(t):
        return t.reshape(rows, bh, cols, bw).permute(0, 2, 1, 3).reshape(rows, cols, bh * bw)

    picks = blocks(index).gather(-1, blocks(padded).argmax(-1, keepdim=True)).squeeze(-1)
    if worst is not None:
        picks[worst[0] // bh, worst[1] // bw] = worst[0] * W + worst[1]
    return picks, (bh, bw)


def heatmap_svg(values, codes, scale, *, outline=None, label="", cell=12, attributes=None):
    """One heatmap: ``values`` and ``codes`` are ``(rows, cols)``; ``outline`` a (row, col) to frame.

    One ``<path>`` per colour, its cells' squares in it; each category's mark is one more path.

    ``cell`` is the drawn size of one cell in CSS pixels. ``attributes`` are added to the
    ``<svg>`` element (their values escaped).
    """
    rows, cols = values.shape
    # Each cell's key: its colour level, or LEVELS + its category; cells grouped by key in one sort.
    keys = torch.where(codes == VALUE, scale.levels(values), LEVELS + codes).reshape(-1)
    ordered, order = keys.sort(stable=True)
    found, counts = torch.unique_consecutive(ordered, return_counts=True)
    order, squares = order.tolist(), _squares(rows, cols)
    extra = "".join(f' {name}="{html.escape(str(value))}"' for name, value in (attributes or {}).items())
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{cols * cell}" height="{rows * cell}" '
        f'viewBox="0 0 {cols} {rows}" shape-rendering="crispEdges"{extra}>',
        f"<title>{html.escape(label)}</title>" if label else "",
    ]
    marks, start = [], 0
    for key, count in zip(found.tolist(), counts.tolist()):
        cells, start = order[start : start + count], start + count
        if key < LEVELS:
            parts.append(f'<path fill="{scale.palette[key]}" d="{"".join(map(squares.__getitem__, cells))}"/>')
            continue
        _, fill, stroke, _ = CATEGORIES[key - LEVELS]
        parts.append(f'<path fill="{fill}" d="{"".join(map(squares.__getitem__, cells))}"/>')
        drawn = "".join(map(_marks(rows, cols, key - LEVELS).__getitem__, cells))
        marks.append(
            f'<path fill="none" stroke="{stroke}" stroke-width="0.12" shape-rendering="geometricPrecision" '
            f'd="{drawn}"/>'
        )
    parts += marks
    if outline is not None:
        r, c = outline
        for colour, width in (("#ffffff", 0.36), ("#000000", 0.16)):
            parts.append(
                f'<rect x="{c + 0.1}" y="{r + 0.1}" width="0.8" height="0.8" fill="none" stroke="{colour}" '
                f'stroke-width="{width}" shape-rendering="geometricPrecision"/>'
            )
    parts.append("</svg>")
    return "".join(parts)


@functools.lru_cache(maxsize=64)
def _squares(rows, cols):
    """Each cell's square as path data, row by row."""
    return tuple(f"M{c} {r}h1v1h-1z" for r in range(rows) for c in range(cols))


@functools.lru_cache(maxsize=64)
def _marks(rows, cols, code):
    """Each cell's mark of category ``code`` as path data, row by row."""
    mark = CATEGORIES[code][3]
    return tuple(mark.format(x=c, y=r, x1=c + 1, y1=r + 1) for r in range(rows) for c in range(cols))


def legend_svg(scale, label, *, steps=16, width=160):
    """A colour bar for ``scale``: ``steps`` swatches between its low and high value, both written."""
    step = width / steps
    swatches = "".join(
        f'<rect x="{i * step:.2f}" y="14" width="{step + 0.5:.2f}" height="10" '
        f'fill="{scale.palette[round(i * (LEVELS - 1) / (steps - 1))]}"/>'
        for i in range(steps)
    )
    low, high = _number(scale.low), _number(scale.high)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="38" '
        f'viewBox="0 0 {width} 38" font-family="sans-serif" font-size="10">'
        f"<title>{html.escape(label)}: {low} to {high}</title>"
        f'<text x="0" y="10">{html.escape(label)}</text>{swatches}'
        f'<text x="0" y="36">{low}</text><text x="{width}" y="36" text-anchor="end">{high}</text></svg>'
    )


def keys_svg(present, *, outline=True):
    """Swatches for the categories in ``present`` (and the worst element's frame): what each drawing means."""
    entries = [(CATEGORIES[code], code) for code in (UNKNOWN, MASKED, POS_INF, NAN) if code in present]
    height = 14 * (len(entries) + outline)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="150" height="{height}" '
        f'viewBox="0 0 150 {height}" font-family="sans-serif" font-size="10"><title>key</title>'
    ]
    for n, ((name, fill, stroke, mark), _) in enumerate(entries):
        y = 14 * n + 1
        d = mark.format(x=0, y=y, x1=11, y1=y + 11)
        parts.append(
            f'<rect x="0" y="{y}" width="11" height="11" fill="{fill}"/>'
            f'<path d="{d}" stroke="{stroke}" stroke-width="1.3" fill="none"/>'
            f'<text x="16" y="{y + 9}">{html.escape(name)}</text>'
        )
    if outline:
        y = 14 * len(entries) + 1
        parts.append(
            f'<rect x="1" y="{y + 1}" width="9" height="9" fill="none" stroke="#000" stroke-width="2"/>'
            f'<text x="16" y="{y + 9}">worst element</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _number(x):
    return f"{x:.4g}"
