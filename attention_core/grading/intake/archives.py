"""A student's ``.zip``, unpacked on the trusted side under bounds, before anything of it runs.

What students upload, and what learning platforms hand a teacher, is often a zip of a ``.py``, a
notebook or a folder. It is read as data: at most :data:`MAX_FILES` entries and :data:`MAX_BYTES`
unpacked (the sizes its directory declares, which reading never exceeds), no entry outside its folder
(an absolute path or ``..``), no link, nothing but plain files and folders (an entry whose mode has
permission bits alone, as ``ZipFile.writestr`` writes, is a file). The zip itself is a regular file (``regular.py``);
whatever its reading raises (a corrupt deflate, LZMA or bzip2 stream) is :class:`ArchiveError`. A zip over a bound, or with
an entry that escapes, is refused whole. Its files may lie at its root or in one folder inside it
(``alice/attention.py``); the macOS resource forks a zip tool adds (``__MACOSX/``, ``.DS_Store``) are
left out.
"""

import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

from attention_core.grading.intake import regular
from attention_core.harness.text import shorten

MAX_BYTES = 100 << 20  # unpacked, all entries together
MAX_FILES = 1000
_LEFT_OUT = ("__MACOSX", ".DS_Store")


class ArchiveError(ValueError):
    """A zip that is refused: the message says why (one line)."""


def is_zip(path):
    return Path(path).suffix.lower() == ".zip" and not Path(path).is_dir()


def unpack(path, folder):
    """Unpack the zip at ``path`` into the empty ``folder``; the submission it holds: the one folder all its
    entries lie in, else ``folder`` itself. Raises :class:`ArchiveError` naming the problem."""
    try:
        with regular.open_regular(path, Path(path).name) as handle, zipfile.ZipFile(handle) as archive:
            members = [m for m in archive.infolist() if not _left_out(m.filename)]
            _check(members)
            for member in members:
                target = Path(folder, *PurePosixPath(member.filename).parts)
                if member.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(target, "xb") as out:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
    except (ArchiveError, regular.NotRegular):
        raise
    except Exception as err:  # noqa: BLE001 (a bad header, a corrupt deflate, LZMA or bzip2 stream: the zip's)
        said = shorten(" ".join(str(err).split()), 200)
        raise ArchiveError(f"the zip cannot be read: {type(err).__name__}: {said}") from None
    entries = [p for p in Path(folder).iterdir()]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(folder)


def _left_out(name):
    return any(part in _LEFT_OUT for part in PurePosixPath(name).parts)


def _check(members):
    if len(members) > MAX_FILES:
        raise ArchiveError(f"the zip holds {len(members)} entries; the limit is {MAX_FILES}")
    total = sum(m.file_size for m in members)
    if total > MAX_BYTES:
        raise ArchiveError(f"the zip unpacks to {total} bytes; the limit is {MAX_BYTES} (100 MiB)")
    for member in members:
        name = member.filename
        parts = PurePosixPath(name).parts
        if name.startswith(("/", "\\")) or "\\" in name or ".." in parts or (parts and ":" in parts[0]):
            raise ArchiveError(f"the zip's entry {shorten(repr(name), 120)} would lie outside its folder")
        mode = member.external_attr >> 16  # (a zip made by ``writestr`` sets the permission bits alone: a file)
        if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = "a link" if stat.S_ISLNK(mode) else "not a plain file"
            raise ArchiveError(f"the zip's entry {shorten(repr(name), 120)} is {kind}: a submission is plain files")
        if os.sep != "/" and os.sep in name:
            raise ArchiveError(f"the zip's entry {shorten(repr(name), 120)} would lie outside its folder")
