"""The grading report opened in a real browser: headless Chromium, driven by Selenium.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package (the ``test``
extra). Where they are missing the tests are skipped with the reason; with
``ATTENTION_CORE_REQUIRE_BROWSER=1`` (as CI sets it) they fail instead. Screenshots are kept in
``test-artifacts/`` (or ``$ATTENTION_CORE_ARTIFACTS``).
"""

import os
import struct
import sys
import types
import zlib
from pathlib import Path

import pytest
import torch

from attention_core.cli import main
from attention_core.grading.naming import mutants
from attention_core.harness.checking import runner
from tests.outputs import report

pytestmark = [pytest.mark.grading, pytest.mark.browser]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("ATTENTION_CORE_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))
P_ATTN = "000_attention_explained/version3_p_attn/p_attn"


def _missing():
    """Why no browser can run here, or None."""
    try:
        import selenium  # noqa: F401, PLC0415
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason and os.environ.get("ATTENTION_CORE_REQUIRE_BROWSER") == "1":
        pytest.fail(f"a browser is required here: {reason}")
    if reason:
        pytest.skip(reason)
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--window-size=1400,1000", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # Chromium refuses to run as root inside its sandbox
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def graded(tmp_path_factory, browser):
    """The inverted-mask mutant of the shipped library, graded; returns the output folder."""
    folder = tmp_path_factory.mktemp("mutants")
    path = folder / "mutant_mask_inverted.py"
    path.write_text(
        mutants.submission_source(next(m for m in mutants.MUTANTS if m.name == "mask_inverted")), encoding="utf-8"
    )
    out = folder / "out"
    assert main(["grade", str(path), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def inverted(browser, graded):
    """The inverted-mask mutant's report, open in the browser."""
    browser.get(report(graded, "mutant_mask_inverted").as_uri())
    return browser


def test_the_report_renders_without_console_errors(inverted):
    assert inverted.title.startswith("Report: ") and inverted.title.endswith("/mutant_mask_inverted")  # its id
    errors = [entry for entry in inverted.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert errors == []


def test_each_failed_checks_heatmaps_are_visible_with_a_size_and_a_screenshot_is_kept(inverted):
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    sections = inverted.find_elements(By.CSS_SELECTOR, "section.check")
    drawn = [s for s in sections if s.find_elements(By.CSS_SELECTOR, ".heatmaps")]
    assert drawn, "no failed check of the inverted mask is drawn"
    for section in drawn:
        maps = section.find_elements(By.CSS_SELECTOR, "svg.heatmap")
        roles = [m.get_attribute("data-role") for m in maps]
        assert roles[:3] == ["expected", "actual", "difference"] and len(roles) % 3 == 0
        for heatmap in maps:
            size = heatmap.size
            assert heatmap.is_displayed() and size["width"] > 0 and size["height"] > 0, roles
    first = drawn[0].find_element(By.CSS_SELECTOR, ".heatmaps")
    inverted.execute_script("arguments[0].scrollIntoView()", first)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "report-mask_inverted.png"
    assert inverted.save_screenshot(str(path)) and path.stat().st_size > 10_000


def test_the_inverted_mask_lights_the_upper_triangle_in_actual_and_leaves_it_dark_in_expected(inverted):
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    expected, actual = _p_attn_weights()
    section = inverted.find_element(By.ID, "check-" + P_ATTN.replace("/", "-"))
    maps = {m.get_attribute("data-role"): m for m in section.find_elements(By.CSS_SELECTOR, "svg.heatmap")[:3]}
    inverted.execute_script("arguments[0].scrollIntoView()", maps["expected"])
    shots = {role: _decode_png(element.screenshot_as_png) for role, element in maps.items()}

    def shown(role, r, c):
        return _luminance(_pixel(shots[role], 8, r, c))

    upper = [(r, c) for r in range(8) for c in range(8) if c > r]
    assert all(expected[r, c] == 0 for r, c in upper) and all(actual[r, c] > 0 for r, c in upper)
    assert max(shown("expected", r, c) for r, c in upper) < 0.2, "the expected upper triangle is masked: dark"
    lit = [(r, c) for r, c in upper if actual[r, c] >= 0.4]  # (4, 7), (5, 7) and (6, 7)
    assert len(lit) >= 3
    for r, c in lit:
        assert shown("actual", r, c) > shown("expected", r, c) + 0.25, (r, c)
    assert shown("actual", 6, 7) > 0.7, "row 6 may attend to key 7 alone: weight 1, the brightest"
    lower = [(r, c) for r in range(7) for c in range(8) if c < r]  # row 7 is all NaN in actual
    assert max(shown("actual", r, c) for r, c in lower) < 0.2, "the inverted mask blanks the lower triangle"
    assert shown("expected", 0, 0) > 0.5, "expected's row 0 attends to itself alone: weight 1, the brightest"


def _p_attn_weights():
    """(expected, actual) weights of the p_attn check: the reference's and the inverted-mask mutant's."""
    item = next(i for i in runner.collect(runner.default_cases_folder()) if i.id == P_ATTN)
    name, args, kwargs = runner.Preparation().arguments(item, "cpu")
    _, expected = runner.REFERENCE[name](*args, **kwargs)
    _, actual = mutants.BY_NAME["mask_inverted"].functions[name](*args, **kwargs)
    return expected, torch.nan_to_num(actual, nan=-1.0)


def _pixel(image, cells, row, col):
    """The colour at the centre of cell (row, col) of a ``cells`` × ``cells`` heatmap's screenshot."""
    width, height, pixels = image
    x = int((col + 0.5) * width / cells)
    y = int((row + 0.5) * height / cells)
    return pixels[y][x]


def _luminance(rgb):
    r, g, b = (v / 255 for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _decode_png(data):
    """(width, height, rows of (r, g, b)) of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, chunks, header = 8, [], None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    step = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * step
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append([tuple(line[x * step : x * step + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def test_a_missing_browser_is_a_skip_with_its_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "selenium", types.ModuleType("selenium"))
    monkeypatch.setattr(os, "access", lambda path, mode: path != CHROMEDRIVER)
    assert _missing() == f"{CHROMEDRIVER} is missing (apt-get install chromium chromium-driver)"
    monkeypatch.setitem(sys.modules, "selenium", None)  # import fails
    assert _missing().startswith("selenium is not installed")
