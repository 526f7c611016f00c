"""The HTML report's content: `check --html`, the drawings of failed expectations, and Gradescope's html output."""

import json
import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
import torch
from test_heatmap import cell_fills, luminance

from attention_core.cli import main
from attention_core.grading.naming import mutants
from attention_core.grading.outputs import gradescope
from attention_core.harness.checking import compare
from attention_core.harness.checking.results import Failure, Result, Status
from attention_core.report import figures, heatmap
from tests.outputs import folder, report

ELIDED_ONES = "\n".join(  # torch's print of ones(40, 40), its last element changed to 0
    ["tensor([[1., 1., 1.,  ..., 1., 1., 1.],"]
    + ["        [1., 1., 1.,  ..., 1., 1., 1.],"] * 2
    + ["        ...,"]
    + ["        [1., 1., 1.,  ..., 1., 1., 1.],"] * 2
    + ["        [1., 1., 1.,  ..., 1., 1., 0.]])"]
)

CASES = (
    """\
document: {title: "Masks <b>&</b> prints", origin: tests}
cases:
  - id: masked
    source: {cell: "In [7]"}
    checks:
      - id: scores
        expr: "masked_fill(ones(3, 3), tril(ones(3, 3)) == 0, -inf)"
        expect:
          out: |
            tensor([[1., -inf, -inf],
                    [1., 2., -inf],
                    [1., 1., 1.]])
      - id: fine
        expr: "ones(2)"
        expect:
          out: tensor([1., 1.])
  - id: elided
    source: {cell: "In [8]"}
    checks:
      - id: big
        expr: "ones(40, 40)"
        expect:
          out: |
"""
    + "\n".join("            " + line for line in ELIDED_ONES.split("\n"))
    + "\n"
)


class Parsed(HTMLParser):
    """Tags, their attributes, and what a page would fetch."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.text = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def assert_self_contained(page):
    parsed = Parsed(page)
    assert not parsed.find("script") and not parsed.find("img") and not parsed.find("iframe")
    for tag, attrs in parsed.tags:
        for name in ("src", "href"):
            assert attrs.get(name) in (None, "data:,"), (tag, attrs)
    assert "url(" not in page and "@import" not in page and "@font-face" not in page
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg\")", page), "nothing is fetched"


def svgs(fragment):
    """Each heatmap's (role, svg text) in order."""
    return [
        (m.group(1), m.group(0)) for m in re.finditer(r'<svg [^>]*data-role="(\w+)".*?</svg>', fragment, flags=re.S)
    ]


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cases")
    (folder / "r.yaml").write_text(CASES, encoding="utf-8")
    out = folder / "report.html"
    code = main(["check", "--cases", str(folder), "--device", "cpu", "--html", str(out)])
    return code, out.read_text(encoding="utf-8")


def test_check_html_writes_one_self_contained_page_with_both_summaries(checked):
    code, page = checked
    assert code == 1
    assert_self_contained(page)
    text = "".join(Parsed(page).text)
    assert "By document" in text and "By spec function" in text
    row = re.search(r"<tr class=bad><td>r</td><td>(.*?)</td><td class=\"n\">(\d+)</td><td class=\"n\">(\d+)</td>", page)
    assert row and row.groups() == ("Masks &lt;b&gt;&amp;&lt;/b&gt; prints", "1", "2")
    assert "<b>&</b>" not in page, "a document's title is text, never markup"
    assert re.search(r"<td>\(document arithmetic\)</td><td class=\"n\">1</td><td class=\"n\">2</td>", page)


def test_each_failed_check_shows_its_source_report_and_heatmaps_and_the_passing_one_is_collapsed(checked):
    _, page = checked
    sections = re.findall(r'<section class="check".*?</section>', page, flags=re.S)
    assert len(sections) == 2
    scores = next(s for s in sections if "r/masked/scores" in s)
    assert "Masks &lt;b&gt;&amp;&lt;/b&gt; prints, In [7]" in scores
    assert "Values are not close!" in scores and "Mismatched elements: 1 / 9" in scores
    assert [role for role, _ in svgs(scores)] == ["expected", "actual", "difference"]
    passed = re.search(r"<details class=\"passed\"><summary>1 check passed</summary>(.*?)</details>", page, re.S)
    assert passed and "r/masked/fine" in passed.group(1) and "r/masked/fine" not in "".join(sections)


def test_masked_cells_are_drawn_as_masked_and_the_worst_element_is_outlined(checked):
    _, page = checked
    scores = next(
        s for s in re.findall(r'<section class="check".*?</section>', page, flags=re.S) if "r/masked/scores" in s
    )
    masked_fill = heatmap.CATEGORIES[heatmap.MASKED][1]
    for role, svg in svgs(scores):
        fills = cell_fills(svg)
        assert [fills[r, c] for r, c in [(0, 1), (0, 2), (1, 2)]] == [masked_fill] * 3, role
        assert fills[1, 0] != masked_fill, role
        frame = ET.fromstring(svg).find("{http://www.w3.org/2000/svg}rect")
        assert (float(frame.get("x")), float(frame.get("y"))) == pytest.approx((1.1, 1.1)), role
    fills = {role: cell_fills(svg) for role, svg in svgs(scores)}
    assert luminance(fills["actual"][1, 1]) < luminance(fills["expected"][1, 1]), "actual 1 is darker than expected 2"


def test_an_elided_print_draws_its_hidden_elements_as_unknown_and_a_large_slice_is_downsampled(checked):
    _, page = checked
    big = next(s for s in re.findall(r'<section class="check".*?</section>', page, flags=re.S) if "r/elided/big" in s)
    assert "each cell shows the worst element of its 2 × 2 block" in big
    unknown = heatmap.CATEGORIES[heatmap.UNKNOWN][1]
    drawn = dict(svgs(big))
    expected, actual = cell_fills(drawn["expected"]), cell_fills(drawn["actual"])
    assert len(expected) == 400 and 'data-rows="20"' in drawn["expected"]
    assert expected[10, 10] == unknown and expected[0, 0] != unknown and expected[19, 19] != unknown
    assert unknown not in actual.values(), "the computed value is known everywhere"
    assert "Mismatched elements: 1 / 36" in big and "at index (-1, -1)" in big  # counted from the end: (39, 39)
    for svg in drawn.values():
        frame = ET.fromstring(svg).find("{http://www.w3.org/2000/svg}rect")
        assert (float(frame.get("x")), float(frame.get("y"))) == pytest.approx((19.1, 19.1))


def test_a_case_file_that_does_not_load_is_listed_as_a_case_error_with_its_line(tmp_path):
    (tmp_path / "broken.yaml").write_text("document: {title: B}\ncases:\n  - id: c\n    nope: 1\n", encoding="utf-8")
    out = tmp_path / "report.html"
    assert main(["check", "--cases", str(tmp_path), "--device", "cpu", "--html", str(out)]) == 1
    page = out.read_text(encoding="utf-8")
    section = re.search(r'<section class="check"[^>]*data-status="case error".*?</section>', page, flags=re.S)
    assert section and "broken.yaml:4" in section.group(0) and "<svg" not in section.group(0)
    assert re.search(r'<td>\(case file\)</td><td class="n">0</td><td class="n">1</td>', page)


def _failure(shape, worst):
    """A full-precision failure of a tensor of ``shape``: expected zeros, actual 1 at ``worst`` and 0.5 at 0."""
    expected = torch.zeros(shape, dtype=torch.float64)
    actual = expected.clone()
    actual[worst] = 1.0
    actual.view(-1)[0] = 0.5
    mismatch = compare.compare_full(actual, expected)
    return Failure("weights", 12, mismatch, tuple(shape)), actual


def test_a_higher_rank_tensor_draws_its_first_slice_and_the_worst_elements_with_a_note():
    failure, actual = _failure((2, 3, 5, 5), (1, 2, 4, 0))
    drawn = figures.draw(failure, actual)
    assert (
        "weights has shape (2, 3, 5, 5): 2 of its 6 slices over the last two dimensions drawn: "
        "[0, 0], [1, 2] (the worst element&#x27;s)." in drawn
    )
    slices = re.findall(r'data-slice="([^"]*)"', drawn)
    assert slices == ["[0, 0]", "[1, 2]"]
    assert len(svgs(drawn)) == 6
    assert drawn.count('<rect x="0.1" y="4.1"') == 6, "the worst element is framed in its slice's three maps"


def test_a_one_dimensional_tensor_is_drawn_as_one_row_and_a_0d_one_not_at_all():
    failure, actual = _failure((7,), (3,))
    drawn = figures.draw(failure, actual)
    assert [ET.fromstring(svg).get("data-rows") for _, svg in svgs(drawn)] == ["1"] * 3
    expected, actual = (cell_fills(svg) for _, svg in svgs(drawn)[:2])
    assert luminance(actual[0, 3]) > luminance(actual[0, 0]) > luminance(expected[0, 3]) == luminance(expected[0, 0])
    scalar = Failure("out", 3, compare.compare_full(torch.tensor(1.0), torch.tensor(0.0)), ())
    assert figures.draw(scalar) == ""


def test_a_tensor_too_large_to_draw_says_so():
    failure = Failure("out", 3, compare.Mismatch("values", "Values are not close!"), (1024, 1024))
    assert "not drawn" in figures.draw(failure) and "<svg" not in figures.draw(failure)


def test_drawings_skip_a_backward_check_whose_values_failed_and_stop_after_the_cap():
    failure, actual = _failure((3, 3), (2, 1))
    drawings = figures.Drawings()
    value = Result(Status.FAILED, "f/c/k", "f.yaml:1", "call", (failure,), outputs={"weights": actual})
    backward = Result(Status.FAILED, "f/c/k/backward", "f.yaml:1", "backward", (failure,))
    assert "<svg" in drawings.result(value) and drawings.result(backward) == ""
    for n in range(figures.MAX_CHECKS + 3):
        drawings.result(Result(Status.FAILED, f"f/c/{n}", "f.yaml:1", "call", (failure,)))
    assert drawings.left_out == 4


# ---------------------------------------------------------------- grading


@pytest.mark.grading
def test_grading_writes_a_report_and_html_feedback_with_heatmaps_within_the_cap(tmp_path):
    path = tmp_path / "inverted.py"
    path.write_text(mutants.submission_source(mutants.BY_NAME["mask_inverted"]), encoding="utf-8")
    assert main(["grade", str(path), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((folder(tmp_path / "out", "inverted") / "results.json").read_text(encoding="utf-8"))
    page = report(tmp_path / "out", "inverted").read_text(encoding="utf-8")
    assert_self_contained(page)
    tests = {t["name"]: t for t in results["tests"]}
    p_attn = tests["000_attention_explained/version3_p_attn/p_attn"]
    assert p_attn["status"] == "failed" and p_attn["output_format"] == "html"
    assert p_attn["output"].startswith("<pre") and "Likely mistake: the bool mask is read inverted" in p_attn["output"]
    assert [role for role, _ in svgs(p_attn["output"])][:3] == ["expected", "actual", "difference"]
    assert all(t["output_format"] == "text" for t in results["tests"] if t["status"] == "passed")
    pictures = sum(len(t["output"]) for t in results["tests"] if t["output_format"] == "html")
    assert pictures <= gradescope.PICTURES_LIMIT + len(results["tests"]) * 2 * gradescope.OUTPUT_LIMIT
    assert all(len(t["output"]) <= gradescope.PICTURE_LIMIT + 2 * gradescope.OUTPUT_LIMIT for t in results["tests"])
    assert "000_attention_explained/version3_p_attn/p_attn" in page and "Likely mistake" in page
    assert 'data-role="actual"' in page and "points" in page
    assert math.isclose(results["score"], float(re.search(r"([\d.]+) of [\d.]+ points", page).group(1)))


def test_a_pending_draft_is_counted_as_pending_not_as_failed(tmp_path):
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "d.yaml").write_text(
        CASES.split("  - id: elided")[0]
        + """\
      - id: later
        pending: the computation is not written yet
        expect:
          out: tensor([1., 1.])
""",
        encoding="utf-8",
    )
    out = tmp_path / "report.html"
    main(["check", "--cases", str(folder), "--device", "cpu", "--html", str(out)])
    page = out.read_text(encoding="utf-8")
    assert '<th class="n">passed</th><th class="n">failed</th><th class="n">pending</th>' in page
    row = re.search(
        r"<tr class=bad><td>d</td><td>.*?</td><td class=\"n\">(\d+)</td><td class=\"n\">(\d+)</td>"
        r"<td class=\"n\">(\d+)</td>",
        page,
    )
    assert row and row.groups() == ("1", "1", "1")  # fine passed, scores failed, later waits
    assert "1 check passed, 2 did not (1 of them pending: drafts, not yet checked)." in page
    assert 'data-status="pending"' in page


def test_a_class_call_says_its_parameters_were_set_only_where_it_has_parameters():
    """A class with learned parameters is made with the reference's initial ones; a positional table's class has
    none (its state a buffer alone), and the call says nothing of them."""
    from attention_core import instances  # noqa: PLC0415
    from attention_core.grading.naming.feedback import call_text  # noqa: PLC0415

    x = torch.zeros(1, 2, 4)
    learned = instances.instance_record((4, 2), {}, {"w.weight": torch.ones(2, 4)}, "eval", torch.float32)
    table = instances.instance_record((4, 8), {}, {"pe": torch.zeros(8, 4)}, "eval", torch.float32, buffers=["pe"])
    assert "eval mode with its parameters set to the reference's initial ones" in call_text(
        None, "Lin", [learned, x], {}
    )
    said = call_text(None, "PositionalEncoding", [table, x], {})
    assert "the instance made in eval mode" in said and "parameters" not in said


def test_a_number_given_by_position_is_shown_by_its_value():
    """``alibi_bias(n_heads, T)`` alone told a student nothing of the sizes the check used."""
    from attention_core.grading.naming.feedback import call_text  # noqa: PLC0415

    said = call_text(None, "alibi_bias", [4, 5, torch.zeros(2, 3)], {"scale": 0.5})
    assert said.splitlines() == [
        "alibi_bias(argument 1, argument 2, argument 3, scale=0.5)",
        "  argument 1: 4",
        "  argument 2: 5",
        "  argument 3: float32 (2, 3) = tensor([[0., 0., 0.], [0., 0., 0.]])",
    ], said
