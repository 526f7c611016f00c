"""A failed expectation drawn: expected, actual and difference side by side, for its 2-D slices.

The data is :meth:`Failure.dense` (expected, actual, allowed and which elements a print shows,
at the computed value's shape). A 1-D tensor is drawn as one row; a tensor of higher rank as its
first slices over the last two dimensions (and the slice holding the worst element), with a note.
Expected and actual share one colour scale; the difference (actual − expected) has its own,
centred on 0. Every fragment carries its own inline styles, so it reads the same in the report
and in a Gradescope test's output.
"""

import html
import itertools
import math

import torch

from attention_core.report import heatmap

MAX_SLICES = 2  # 2-D slices drawn of a higher-rank tensor
MAX_TARGETS = 2  # failed expectations drawn per check (the text report lists them all)
MAX_CHECKS = 10  # checks drawn per report (each costs about a millisecond): the first with wrong values
MAX_ELEMENTS = 1 << 18  # larger tensors are not drawn: making their dense values costs more than grading
KINDS = ("expected", "actual", "difference")

_FIGURE = "display:inline-block;margin:4px 10px 4px 0;vertical-align:top"
_CAPTION = "font:11px sans-serif;text-align:center"


def draw(failure, computed=None, *, max_slices=MAX_SLICES):
    """HTML of the failure's heatmaps, or "" when it has nothing to draw (not a values mismatch, or 0-d).

    ``computed`` is the value as computed (a result's ``outputs[target]``), where it is at hand:
    the actual heatmap then shows every element, those an elided print leaves out included.
    """
    if failure.shape is None or len(failure.shape) == 0:
        return ""
    if math.prod(failure.shape) > MAX_ELEMENTS:
        return (
            (
                f'<p class="note" style="font:12px sans-serif">{html.escape(failure.target)} has shape '
                f"{tuple(failure.shape)}: not drawn (heatmaps are drawn for tensors of up to {MAX_ELEMENTS:,} "
                f"elements).</p>"
            )
            if failure.mismatch.stage == "values"
            else ""
        )
    dense = failure.dense()
    if dense is None:
        return ""
    whole = (
        isinstance(computed, torch.Tensor)
        and tuple(computed.shape) == tuple(failure.shape)
        and computed.device.type != "meta"
        and not computed.is_complex()
    )
    if whole:
        dense = (dense[0], computed.detach(), *dense[2:])
    if len(failure.shape) == 1:
        dense = tuple(t.unsqueeze(0) for t in dense)
    expected, actual, allowed, shown = dense
    worst = failure.mismatch.index
    if worst is not None:  # an elided print counts its last rows and columns from the end: -1 is the last
        worst = tuple(i % n for i, n in zip(worst, failure.shape))
        worst = (0, *worst) if len(failure.shape) == 1 else worst
    chosen = _slices(expected.shape[:-2], worst[:-2] if worst is not None else None, max_slices)
    pieces = [
        (index, *_prepared(expected[index], actual[index].to("cpu", torch.float64), allowed[index], shown[index]))
        for index in chosen
    ]
    # Expected and the difference are NaN where the print shows no element: the scales leave them out.
    values = heatmap.Scale.spanning(*(t for piece in pieces for t in piece[1:3]))
    differences = heatmap.Scale.around_zero(*(piece[3] for piece in pieces))
    present = set()
    drawn = [_note(failure.target, failure.shape, chosen, worst)]
    for index, e, a, d, s, b in pieces:
        inside = worst is not None and tuple(worst[:-2]) == index
        picks, (bh, bw) = heatmap.block_picks(b, worst[-2:] if inside else None)
        outline = (worst[-2] // bh, worst[-1] // bw) if inside else None
        e, a, d, s = (t.reshape(-1)[picks] for t in (e, a, d, s))
        # Without the computed value, actual too is known only where the print shows an element.
        grids = [
            (e, heatmap.categories(e, s)),
            (a, heatmap.categories(a, None if whole else s)),
            (d, heatmap.categories(d, s)),
        ]
        for _, c in grids:
            present |= set(c.unique().tolist())
        drawn.append(
            _slice(
                failure.target,
                index,
                len(failure.shape),
                grids,
                (values, values, differences),
                outline,
                (bh, bw),
                b.shape,
            )
        )
    keys = heatmap.keys_svg(present, outline=worst is not None)
    legend = "".join(
        f'<span style="display:inline-block;margin-right:20px;vertical-align:top">{svg}</span>'
        for svg in (
            heatmap.legend_svg(values, "expected and actual"),
            heatmap.legend_svg(differences, "actual − expected"),
            keys,
        )
    )
    return (
        f'<div class="heatmaps" data-target="{html.escape(failure.target)}" style="margin:6px 0">'
        + "".join(drawn)
        + f'<div class="legend" style="margin:4px 0">{legend}</div></div>'
    )


def _prepared(expected, actual, allowed, shown):
    """One slice's (expected, actual, difference, shown, badness): badness is |diff| / allowed, -1 where not shown."""
    same = (actual == expected) | (actual.isnan() & expected.isnan())
    raw = actual - expected
    # Where both agree the difference is 0, or the shared non-finite value (both masked stays masked).
    difference = torch.where(same, torch.where(expected.isfinite(), torch.zeros_like(expected), expected), raw)
    badness = torch.where(same, torch.zeros_like(actual), raw.abs() / allowed.clamp(min=1e-300))
    badness = torch.where(shown, badness.nan_to_num(nan=math.inf, posinf=math.inf), torch.full_like(badness, -1.0))
    return expected, actual, difference, shown, badness


def _slices(leading, worst, limit):
    """The leading indices drawn: the first ``limit`` in order, the worst element's taking the last place."""
    chosen = list(itertools.islice(itertools.product(*map(range, leading)), max(1, limit)))
    if worst is not None and tuple(worst) not in chosen:
        chosen[-1] = tuple(worst)
    return chosen


def _note(target, shape, chosen, worst):
    if len(shape) <= 2:
        return ""
    total = math.prod(shape[:-2])
    named = ", ".join(
        _index(i) + (" (the worst element's)" if worst is not None and tuple(worst[:-2]) == i else "") for i in chosen
    )
    return (
        f'<p class="note" style="margin:2px 0;font:12px sans-serif">{html.escape(target)} has shape '
        f"{tuple(shape)}: {len(chosen)} of its {total} slices over the last two dimensions drawn: "
        f"{html.escape(named)}.</p>"
    )


def _slice(target, index, ndim, grids, scales, outline, steps, shape):
    rows, cols = grids[0][0].shape
    cell = max(6, min(28, 256 // max(rows, cols)))
    name = f"{target}{_index(index)}" if index else target if ndim > 1 else f"{target} (one row)"
    label = f"{name}: {shape[0]} × {shape[1]}"
    if steps != (1, 1):
        label += f", drawn {rows} × {cols}: each cell shows the worst element of its {steps[0]} × {steps[1]} block"
    figures = []
    for kind, (values, codes), scale in zip(KINDS, grids, scales):
        svg = heatmap.heatmap_svg(
            values,
            codes,
            scale,
            outline=outline,
            label=f"{kind}: {name}",
            cell=cell,
            attributes={
                "class": "heatmap",
                "data-role": kind,
                "data-rows": rows,
                "data-cols": cols,
                "data-row-step": steps[0],
                "data-col-step": steps[1],
            },
        )
        figures.append(f'<figure style="{_FIGURE}">{svg}<figcaption style="{_CAPTION}">{kind}</figcaption></figure>')
    return (
        f'<div class="slice" data-slice="{html.escape(_index(index))}">'
        f'<div style="font:12px monospace">{html.escape(label)}</div>{"".join(figures)}</div>'
    )


def _index(index):
    return "[" + ", ".join(map(str, index)) + "]" if index else ""


class Drawings:
    """Each failed expectation of a result drawn once: the report and results.json show the same pictures.

    A backward check (``<check>/backward``) is drawn only when its check's values passed: where
    the values are wrong, their heatmaps already show the mistake, and the gradients follow it.
    At most MAX_CHECKS checks are drawn; ``left_out`` counts the later ones that had a drawing.
    """

    def __init__(self):
        self._drawn = {}
        self._failed = set()  # ids of the checks met that did not pass
        self._checks = {}  # check id -> whether it is drawn
        self.drawn = self.left_out = 0  # checks drawn; checks with wrong values past MAX_CHECKS

    def failure(self, failure, computed=None):
        key = id(failure)
        if key not in self._drawn:  # the failure is kept with its drawing, so its id stays its own
            self._drawn[key] = (failure, draw(failure, computed))
        return self._drawn[key][1]

    def result(self, result, *, limit=None, located=True):
        """The first MAX_TARGETS drawable failures of ``result``, each under its target's name (and, where
        ``located``, its line in the case file: the teacher's report, not a student's feedback).

        At most ``limit`` characters: a drawing that would pass it is left out, and a note says so.
        """
        check_id = result.check_id
        if not result.passed:
            self._failed.add(check_id)
        if check_id.endswith("/backward") and check_id.removesuffix("/backward") in self._failed:
            return ""
        if check_id not in self._checks:
            wrong_values = any(f.mismatch.stage == "values" for f in result.failures)
            self._checks[check_id] = wrong_values and self.drawn < MAX_CHECKS
            self.drawn += self._checks[check_id]
            self.left_out += wrong_values and not self._checks[check_id]
        if not self._checks[check_id]:
            return ""
        parts, size, left_out, drawable = [], 0, 0, 0
        for failure in result.failures:
            if drawable == MAX_TARGETS:
                break
            drawn = self.failure(failure, result.outputs.get(failure.target))
            if not drawn:
                continue
            drawable += 1
            where = f" (line {failure.line})" if located else ""
            piece = (
                f'<div style="font:bold 12px sans-serif;margin-top:8px">{html.escape(failure.target)}'
                f"{where}</div>{drawn}"
            )
            if limit is not None and size + len(piece) > limit:
                left_out += 1
                continue
            parts.append(piece)
            size += len(piece)
        if left_out:
            parts.append(f'<p style="font:12px sans-serif">{left_out} more heatmaps left out here (size limit).</p>')
        return "".join(parts)
