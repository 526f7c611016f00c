"""A student's .zip: unpacked on the trusted side under bounds and graded as what it holds; a zip over a
bound, or with an entry that escapes its folder, is refused whole with its reason, and the batch goes on."""

import json
import stat
import zipfile

import nbformat
import pytest

from attention_core.grading.intake import archives
from tests import attacks
from tests.outputs import HEAD, folder, grade_head, last_part

CORRECT = (HEAD / "submissions" / "correct.py").read_text(encoding="utf-8")


def _zip(path, entries, modes=None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (modes or {}).get(name, 0o100644) << 16
            z.writestr(info, data)
    return path


def test_the_files_at_the_root_or_in_one_folder_inside_are_the_submission(tmp_path):
    flat = archives.unpack(_zip(tmp_path / "a.zip", {"attention.py": CORRECT}), tmp_path / "a")
    assert flat == tmp_path / "a" and (flat / "attention.py").read_text() == CORRECT
    nested = archives.unpack(
        _zip(tmp_path / "b.zip", {"bob/attention.py": CORRECT, "bob/util.py": "", "__MACOSX/bob/._attention.py": "x"}),
        tmp_path / "b",
    )
    assert nested == tmp_path / "b" / "bob" and sorted(p.name for p in nested.iterdir()) == ["attention.py", "util.py"]


@pytest.mark.parametrize(
    ("entries", "modes", "words"),
    [
        ({"../evil.py": "x"}, None, "would lie outside its folder"),
        ({"/etc/evil.py": "x"}, None, "would lie outside its folder"),
        ({"a\\..\\..\\evil.py": "x"}, None, "would lie outside its folder"),
        ({"link.py": "/etc/passwd"}, {"link.py": stat.S_IFLNK | 0o777}, "is a link"),
    ],
)
def test_an_entry_that_escapes_or_links_refuses_the_whole_zip(tmp_path, entries, modes, words):
    with pytest.raises(archives.ArchiveError, match=words):
        archives.unpack(_zip(tmp_path / "x.zip", entries, modes), tmp_path / "x")
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "x").exists()  # nothing unpacked


def test_a_zip_written_by_writestr_with_permission_bits_alone_is_read(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("attention.py", CORRECT)  # mode 0o600: no file type in the bits
        z.writestr(zipfile.ZipInfo("bob/"), "")
    assert (zipfile.ZipFile(path).infolist()[0].external_attr >> 16) == 0o600
    unpacked = archives.unpack(path, tmp_path / "a")
    assert (unpacked / "attention.py").read_text() == CORRECT


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2])
def test_a_stream_that_fails_to_decompress_is_the_zip_s_own_error(tmp_path, method):
    path = attacks.corrupt_zip(tmp_path / "a.zip", method, CORRECT * 20)
    with pytest.raises(archives.ArchiveError, match="the zip cannot be read"):
        archives.unpack(path, tmp_path / "a")


def test_a_zip_bomb_and_a_flood_of_entries_are_refused_before_unpacking(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.py", b"\0" * (archives.MAX_BYTES + 1))
    assert bomb.stat().st_size < 1 << 20  # small to hand in
    (tmp_path / "out").mkdir()
    with pytest.raises(archives.ArchiveError, match="unpacks to 104857601 bytes; the limit is 104857600"):
        archives.unpack(bomb, tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())
    monkeypatch.setattr(archives, "MAX_FILES", 3)
    with pytest.raises(archives.ArchiveError, match="holds 4 entries; the limit is 3"):
        archives.unpack(_zip(tmp_path / "many.zip", {f"{i}.py": "" for i in range(4)}), tmp_path / "out")


@pytest.mark.grading
def test_a_batch_of_zips_grades_the_good_ones_and_refuses_the_hostile_with_rows_of_zero(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    _zip(subs / "alice.zip", {"alice/attention.py": CORRECT})
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CORRECT)])
    _zip(subs / "carol.zip", {"carol.ipynb": nbformat.writes(notebook)})
    _zip(subs / "eve.zip", {"../../escaped.py": CORRECT})
    with zipfile.ZipFile(subs / "mallory.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("attention.py", b"#" * (archives.MAX_BYTES + 1))
    out = tmp_path / "out"
    run = grade_head(
        *map(str, sorted(subs.iterdir())),
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    scores = {last_part(line.split()[0]): line.split()[1] for line in run.stdout.splitlines() if " / " in line}
    assert scores == {"alice": "6", "carol": "6", "eve": "0", "mallory": "0"}
    assert "would lie outside its folder" in json.loads((folder(out, "eve") / "results.json").read_text())["output"]
    assert "the limit is 104857600" in json.loads((folder(out, "mallory") / "results.json").read_text())["output"]
    assert not (tmp_path / "escaped.py").exists() and not (subs.parent / "escaped.py").exists()
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 5 << 20
