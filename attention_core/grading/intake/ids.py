"""A submission's id, and where its files live in ``--out``.

An id is the submission's path as the teacher gave it, relative to the working directory (absolute where
the path lies outside it), normalised, without its extension (``subs/dirA/alice``), unless that leaves a
name of dots only (``subs/...py``). Two submissions of one batch that would share an id keep their
extensions (``alice.py`` beside ``alice.ipynb``). Ids are printable (a control character in a file name
is written as its escape), never collide, and stay the same between runs from the same folder.

A submission's files live in ``OUT/submissions/<id>/``: no id reaches the batch's own files
(``OUT/gradebook.csv``...) nor leaves ``OUT``, and no id's folder is another's file. Each part of the id
is a folder name as it is, except a part that begins with ``%`` or is the name of a submission's own
file (``results.json``...), which gets one more ``%`` in front; an absolute id's folders begin with
``%root``, which no part of a relative id becomes. A part too long for a file name (or an id too long for
a path) is written as its hash, under ``%long``.
"""

import collections
import hashlib
import os
import unicodedata
from pathlib import Path

from attention_core.grading.intake import archives, notebooks
from attention_core.harness.text import escape

SUBMISSIONS = "submissions"
REPORTS = "reports"
OWN_FILES = frozenset({"results.json", "results.json.partial", "report.html", "record.json", "record.json.partial"})
_NAME_BYTES, _ID_BYTES = 255, 1024  # a file name's limit on Linux; an id's, well below a path's (4096)


def submission_ids(paths, shown=None, cwd=None):
    """Each path's id (see the module's text), in order. ``shown``: path -> the path to name it by (a
    folder the batch made of a platform student's files is named as if it lay beside them)."""
    shown = shown or {}
    cwd = os.path.abspath(cwd or os.getcwd())
    full = [_printable(_relative(shown.get(p, p), cwd)) for p in paths]
    short = [_without_extension(path, text) for path, text in zip(paths, full)]
    count = collections.Counter(short)
    ids, used = [], {"Points Possible"}  # (the gradebook's row of each column's points)
    for text, whole in zip(short, full):
        unique = whole if count[text] > 1 else text
        base, n = unique, 1
        while unique in used:  # one path given twice, or a made folder's name beside a real one
            n += 1
            unique = f"{base}-{n}"
        used.add(unique)
        ids.append(unique)
    return ids


def folder_of(out, submission_id, root=None):
    """The folder of ``submission_id``'s files in ``out``: under ``out/submissions`` (what is the student's), or
    ``root`` (``REPORTS``: the teacher's report, with the case files and lines of every check)."""
    root = root or SUBMISSIONS
    parts = submission_id.split("/")
    first = []
    if submission_id.startswith("/"):
        first, parts = ["%root"], parts[1:]
    folders = [_folder_name(part) for part in parts]
    if any(len(os.fsencode(f)) > _NAME_BYTES for f in folders) or len(os.fsencode(submission_id)) > _ID_BYTES:
        return Path(out, root, "%long", hashlib.sha256(submission_id.encode("utf-8", "replace")).hexdigest())
    return Path(out, root, *first, *folders)


def _folder_name(part):
    return "%" + part if part.startswith("%") or part in OWN_FILES else part


def normalised(path):
    """``path`` absolute and normalised, links not followed (POSIX keeps a leading ``//``: not here)."""
    absolute = os.path.normpath(os.path.abspath(os.fspath(path)))
    return "/" + absolute.lstrip("/") if absolute.startswith("//") else absolute


def same_file_key(path):
    """What two spellings of one submission share (``a.py``, ``./a.py``, ``$PWD/a.py`` under a linked working
    folder): its folder's real path and its own name (the submission itself is never followed: a link is
    a submission of its own)."""
    absolute = normalised(path)
    return os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))


def _relative(path, cwd):
    """``path`` normalised (links not followed): relative to ``cwd``, or absolute where it lies outside."""
    absolute = normalised(os.path.join(cwd, os.fspath(path)))
    relative = os.path.relpath(absolute, cwd)
    if relative == "." or relative == ".." or relative.startswith("../"):
        return absolute
    return relative


def _printable(text):
    """``text`` with every unprintable character escaped, and ``/`` kept (it parts the folders)."""
    return "/".join(escape(part) for part in text.split("/"))


def _without_extension(path, text):
    """``text`` without its extension (``.py``, ``.ipynb``, ``.zip``: what a submission's kind is read from),
    where one is there and what is left is a name that is not dots only."""
    path = Path(path)
    if not (path.suffix.lower() == ".py" or notebooks.is_notebook(path) or archives.is_zip(path)):
        return text
    head, _, last = text.rpartition("/")
    stem = last[: -len(path.suffix)] if path.suffix and last.endswith(path.suffix) else last
    if not stem.strip("."):
        return text
    return f"{head}/{stem}" if head else stem


# Letters of other scripts drawn as Latin ones (Unicode's confusables.txt, the lower and upper case letters of
# Cyrillic and Greek whose prototype is one Latin letter): enough to tell "bob" from "b" + Cyrillic "о" + "b".
_LATIN_LOOKS = str.maketrans(
    "аᴀвсԁеһіјӏкмнорԛѕтսԝхуүΑΒΕΗΙΚΜΝΟΡΤΥΧΖαβεικνορτυχ",
    "aabcdehijlkmhopqstuwxyyABEHIKMNOPTYXZaBeikvoptux",
)


def skeleton(text):
    """What ``text`` looks like: NFKC-normalised, without the characters that show nothing
    (Unicode's default-ignorable ones: a Hangul filler, a zero-width space) and with letters of other scripts
    drawn as Latin ones read as those. Two ids with one skeleton read the same in a gradebook."""
    shown = "".join(c for c in unicodedata.normalize("NFKC", text) if not _invisible(c))
    return unicodedata.normalize("NFKC", shown.translate(_LATIN_LOOKS))


def _invisible(char):
    code = ord(char)
    return (
        unicodedata.category(char) in ("Cf", "Mn", "Me")
        or code in (0x115F, 0x1160, 0x3164, 0xFFA0, 0x034F, 0x180B, 0x180C, 0x180D, 0x180E)
        or 0xFE00 <= code <= 0xFE0F
        or 0xE0000 <= code <= 0xE0FFF
    )


def look_alikes(ids):
    """id -> the other ids of ``ids`` it only looks like (the same skeleton, not the same text)."""
    groups = collections.defaultdict(list)
    for one in ids:
        groups[skeleton(one)].append(one)
    return {
        one: [other for other in group if other != one] for group in groups.values() if len(group) > 1 for one in group
    }
