"""The README fits on a screen and leads to the docs; every link of the README and the docs resolves."""

import re
from pathlib import Path

import pytest

from tests.outputs import command as in_process
from tests.outputs import folder

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path):
    """The anchors GitHub makes of a page's headings (outside code blocks)."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_fits_on_a_screen_and_links_its_docs_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 12_000
    linked = {m for m in LINK.findall(readme) if m.startswith("docs/") and m.endswith(".md")}
    assert len(linked) >= 6 and all((ROOT / m).is_file() for m in linked)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_of_a_page_resolves(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # https:, file:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        assert where.exists(), f"{page.name}: {target}: no such file"
        if anchor and where.suffix == ".md":
            assert anchor in _anchors(where), f"{page.name}: {target}: no such heading"


def _blocks(text, after):
    """The fenced blocks that follow the first line starting with ``after`` (the command, then its output...)."""
    tail = text[text.index(after) :]
    return re.findall(r"^```\w*\n(.*?)^```", tail, re.M | re.S)


@pytest.mark.grading
def test_the_readme_s_grading_example_prints_what_the_readme_shows(tmp_path):
    import json  # noqa: PLC0415
    import shlex  # noqa: PLC0415

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command, shown, excerpt = _blocks(readme, "## Grading, the main job")[:3]
    words = shlex.split(command.strip())
    assert words[:4] == ["python", "-m", "attention_core", "grade"]
    out = tmp_path / "graded"
    words = [str(out) if w == "/tmp/graded" else w for w in words]
    paths = [str(p) for p in sorted((ROOT / "examples" / "head" / "submissions").glob("*.py"))]
    words = [w for w in words if "*" not in w] + paths  # the shell's glob
    run = in_process(*words[3:], cwd=ROOT)  # (python -m attention_core's main(), in this process)
    assert run.returncode == 0, run.stderr
    assert run.stdout.replace(str(out), "/tmp/graded").strip() == shown.strip()
    output = json.loads((folder(out, "unscaled") / "results.json").read_text())["tests"]
    failed = next(t["output"] for t in output if t["status"] == "failed")
    text = re.sub(r"<[^>]+>", "", failed)  # the text of its HTML form
    import html  # noqa: PLC0415

    assert html.unescape(text).startswith(excerpt.strip())


def test_the_readme_s_worked_case_passes_as_written(tmp_path):
    import io  # noqa: PLC0415

    from attention_core.checks import check_command  # noqa: PLC0415
    from attention_core.harness.checking.devices import covered  # noqa: PLC0415

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## A worked case") : readme.index("## Grading, the main job")]
    (case,) = re.findall(r"^```yaml\n(.*?)^```", section, re.M | re.S)
    (tmp_path / "softmax.yaml").write_text(case, encoding="utf-8")
    out = io.StringIO()
    assert check_command(tmp_path, covered(["cpu"]), False, out=out) == 0, out.getvalue()
    assert re.search(r"softmax +Attention mechanism +1 +0", out.getvalue()), out.getvalue()
    broken = case.replace("0.6652", "0.6653")  # one digit off: the check fails
    (tmp_path / "softmax.yaml").write_text(broken, encoding="utf-8")
    assert check_command(tmp_path, covered(["cpu"]), False, out=io.StringIO()) == 1


def test_the_readme_s_table_has_the_columns_and_first_row_the_check_command_prints():
    run = in_process("--device", "cpu", cwd=ROOT)
    printed = run.stdout.splitlines()
    shown = (ROOT / "README.md").read_text(encoding="utf-8").split("```\ndocument", 1)[1].splitlines()
    assert printed[0].split() == ["document", *shown[0].split()]
    row, readme = printed[1].split(), shown[1].split()
    assert row[:2] == readme[:2] and row[-5:-3] == readme[-5:-3]  # the document, its passed and failed checks
