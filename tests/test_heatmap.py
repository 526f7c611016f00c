"""The SVG heatmap module: colour scales, downsampling that keeps the worst element, cells drawn apart, escaping."""

import math
import re
import xml.etree.ElementTree as ET

import pytest
import torch

from attention_core.report import heatmap
from attention_core.report.heatmap import MASKED, NAN, POS_INF, UNKNOWN, VALUE, Scale

SVG = "{http://www.w3.org/2000/svg}"


def luminance(colour):
    r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def cell_fills(svg):
    """{(row, col): fill} of a heatmap's cells, read back from its paths."""
    root = ET.fromstring(svg)
    fills = {}
    for path in root.iter(f"{SVG}path"):
        if path.get("fill") in (None, "none"):
            continue
        for c, r in re.findall(r"M(\d+) (\d+)h1v1h-1z", path.get("d")):
            assert (int(r), int(c)) not in fills, "a cell drawn twice"
            fills[int(r), int(c)] = path.get("fill")
    return fills


# ---------------------------------------------------------------- colour scales


def test_a_sequential_scale_runs_from_dark_at_its_low_end_to_light_at_its_high_end():
    scale = Scale(-2.0, 6.0)
    levels = scale.levels(torch.tensor([-2.0, 2.0, 6.0, -50.0, 50.0], dtype=torch.float64)).tolist()
    assert levels == [0, round((heatmap.LEVELS - 1) / 2), heatmap.LEVELS - 1, 0, heatmap.LEVELS - 1]
    shades = [luminance(c) for c in scale.palette]
    assert all(a < b for a, b in zip(shades, shades[1:])), "a brighter colour means a larger value"
    assert scale.colour(-2.0) == scale.palette[0] != scale.colour(6.0) == scale.palette[-1]


def test_a_difference_scale_is_symmetric_about_zero_and_white_at_zero():
    scale = Scale.around_zero(torch.tensor([-0.5, 3.0, math.nan, -math.inf], dtype=torch.float64))
    assert (scale.low, scale.high) == (-3.0, 3.0)
    r, g, b = (int(scale.colour(0.0)[i : i + 2], 16) for i in (1, 3, 5))
    assert min(r, g, b) > 230, "0 is drawn near white"
    assert scale.colour(-3.0) != scale.colour(3.0)


def test_a_scale_spans_the_finite_values_only_and_a_flat_scale_draws_one_colour():
    scale = Scale.spanning(torch.tensor([math.nan, -math.inf, 1.0]), torch.tensor([4.0, math.inf]))
    assert (scale.low, scale.high) == (1.0, 4.0)
    flat = Scale.spanning(torch.tensor([2.0, 2.0]))
    assert len(set(flat.levels(torch.tensor([2.0, 2.0])).tolist())) == 1


@pytest.mark.parametrize(("low", "high"), [(1.0, 0.0), (0.0, math.inf), (math.nan, 1.0)])
def test_a_scale_refuses_bounds_it_cannot_draw(low, high):
    with pytest.raises(ValueError, match="finite low <= high"):
        Scale(low, high)


# ---------------------------------------------------------------- downsampling


def test_downsampling_keeps_the_worst_element_and_each_blocks_worst():
    g = torch.Generator().manual_seed(0)
    badness = torch.rand(100, 70, generator=g, dtype=torch.float64)
    badness[57, 41] = 10.0
    picks, (bh, bw) = heatmap.block_picks(badness)
    assert (bh, bw) == (4, 3) and tuple(picks.shape) == (25, 24)
    assert picks[57 // 4, 41 // 3] == 57 * 70 + 41
    for r, c in [(0, 0), (3, 7), (24, 23)]:  # the last row and column of blocks are cut short
        block = badness[r * bh : (r + 1) * bh, c * bw : (c + 1) * bw]
        best = divmod(int(picks[r, c]), 70)
        assert badness[best] == block.max()


def test_downsampling_shows_the_named_worst_element_where_its_block_ties():
    badness = torch.full((64, 64), math.inf, dtype=torch.float64)  # every element infinitely wrong (NaN results)
    picks, _ = heatmap.block_picks(badness, worst=(9, 13))
    assert picks[4, 6] == 9 * 64 + 13


def test_a_small_slice_is_drawn_as_it_is():
    picks, steps = heatmap.block_picks(torch.zeros(8, 5))
    assert steps == (1, 1) and picks.reshape(-1).tolist() == list(range(40))


def test_downsampling_refuses_anything_but_a_2d_slice():
    with pytest.raises(ValueError, match="2-D"):
        heatmap.block_picks(torch.zeros(2, 3, 4))


# ---------------------------------------------------------------- cells drawn apart


def test_masked_nan_inf_and_unknown_cells_are_drawn_apart_from_the_values():
    values = torch.tensor([[0.0, -math.inf, 1.0], [math.nan, math.inf, 0.5]], dtype=torch.float64)
    known = torch.tensor([[True, True, False], [True, True, True]])
    codes = heatmap.categories(values, known)
    assert codes.tolist() == [[VALUE, MASKED, UNKNOWN], [NAN, POS_INF, VALUE]]
    scale = Scale(0.0, 1.0)
    svg = heatmap.heatmap_svg(values, codes, scale, outline=(1, 2))
    fills = cell_fills(svg)
    assert set(fills) == {(r, c) for r in range(2) for c in range(3)}
    # viridis (matplotlib's table): #440154 at its low end, #21918c half way (the palette's 64 steps: within 2)
    assert fills[0, 0] == "#440154"
    middle = [int(fills[1, 2][i : i + 2], 16) for i in (1, 3, 5)]
    assert all(abs(a - b) <= 2 for a, b in zip(middle, (0x21, 0x91, 0x8C))), fills[1, 2]
    special = {fills[0, 1], fills[0, 2], fills[1, 0]}
    assert len(special) == 3 and not special & set(scale.palette), "masked, unknown and NaN each look their own"
    marks = [p for p in ET.fromstring(svg).iter(f"{SVG}path") if p.get("fill") == "none"]
    assert len(marks) == 4, "each category cell carries a mark over its fill"
    frames = [r for r in ET.fromstring(svg).iter(f"{SVG}rect")]
    assert frames and all(
        float(r.get("x")) == pytest.approx(2.1) and float(r.get("y")) == pytest.approx(1.1) for r in frames
    )


def test_text_in_a_heatmap_and_its_legend_is_escaped():
    label = '</title><script>alert("x")</script> & more'
    svg = heatmap.heatmap_svg(
        torch.zeros(1, 2),
        torch.zeros(1, 2, dtype=torch.int64),
        Scale(0.0, 1.0),
        label=label,
        attributes={"data-target": 'a"><script>'},
    )
    root = ET.fromstring(svg)  # well-formed: nothing got out of its attribute or element
    assert root.find(f"{SVG}title").text == label
    assert root.get("data-target") == 'a"><script>'
    assert "<script" not in svg
    legend = ET.fromstring(heatmap.legend_svg(Scale(-1.5, 2.25), "a < b & c"))
    texts = [t.text for t in legend.iter(f"{SVG}text")]
    assert texts == ["a < b & c", "-1.5", "2.25"]


def test_the_key_names_only_the_categories_present():
    key = ET.fromstring(heatmap.keys_svg({VALUE, MASKED}, outline=True))
    assert [t.text for t in key.iter(f"{SVG}text")] == ["masked (-inf)", "worst element"]
