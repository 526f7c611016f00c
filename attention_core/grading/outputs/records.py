"""A graded submission's record in ``--out``: what it scored, and the hash of what it was graded from.

``OUT/submissions/<id>/record.json`` (see :mod:`ids`) is written (atomically) once a submission's results are. It holds a hash of the
submission's own bytes, the assignment (its reference, settings and case files), the grading options and
this package's code: grading the same command again skips a submission whose record matches (unchanged),
and grades one that changed. The gradebook and the class summary are rebuilt from the records' scores.
"""

import hashlib
import json
import os
from pathlib import Path

import attention_core
from attention_core.grading.intake import regular
from attention_core.grading.outputs.scores import Scores

RECORD = "record.json"


def batch_key(assignment, options):
    """The hash of everything a grade depends on besides the submission: the assignment's files, the grading
    options and this package's code."""
    digest = hashlib.sha256()
    folders = [Path(assignment.cases), Path(attention_core.__file__).parent]
    if assignment.folder is not None:
        folders.append(Path(assignment.folder))
    for folder in folders:
        for path in sorted(
            p
            for p in folder.rglob("*")
            if p.is_file() and p.suffix in (".py", ".yaml", ".yml") and "__pycache__" not in p.parts
        ):
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def submission_hash(path, key):
    """The hash of a submission's own bytes (a file, a folder's files by name, a link's target, never followed)
    under ``key`` (see :func:`batch_key`)."""
    digest = hashlib.sha256(key.encode())
    path = Path(path)
    entries = [(Path(path.name), path)]
    if path.is_dir() and not path.is_symlink():
        entries = []
        for root, folders, files in os.walk(path, followlinks=False):
            folders.sort()
            entries += [(Path(root, name).relative_to(path), Path(root, name)) for name in sorted(files + folders)]
    for name, entry in entries:
        digest.update(str(name).encode() + b"\0")
        if entry.is_symlink():
            digest.update(b"link:" + os.fsencode(os.readlink(entry)))
        elif entry.is_file():
            try:
                with regular.open_regular(entry) as handle:
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(chunk)
            except regular.NotRegular:  # (it changed under us: graded, it is refused)
                digest.update(b"not regular")
        digest.update(b"\0")
    return digest.hexdigest()


def write(folder, digest, scores, source):
    """Write ``folder/record.json`` for ``scores`` (a :class:`Scores`) graded from ``digest``, the submission at
    ``source`` (its absolute path: whose folder this is), atomically."""
    record = {"hash": digest, "source": source, **scores.to_record()}
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / (RECORD + ".partial")
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(folder / RECORD)


def read(folder, digest, name):
    """The :class:`Scores` of ``folder``'s record, named ``name``, when it was graded from ``digest`` (and its
    results are there); else None: the submission is graded (again)."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        if record.get("hash") != digest or not (folder / "results.json").is_file():
            return None
        return Scores.from_record({**record, "name": name})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
