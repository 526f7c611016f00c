"""Where a batch's files for one submission are, as the tests name a submission: its file's name."""

from pathlib import Path


def folder(out, name):
    """The one folder of ``out/submissions`` for the submission whose id ends in ``name``."""
    found = [p.parent for p in Path(out, "submissions").rglob("record.json") if p.parent.name == name]
    assert len(found) == 1, f"{len(found)} submissions named {name!r} in {out}"
    return found[0]


def last_part(submission_id):
    """A submission id's last part (``subs/dirA/alice`` -> ``alice``)."""
    return submission_id.rsplit("/", 1)[-1]


def report(out, name):
    """The teacher's report of the submission whose id ends in ``name`` (apart from the student's files)."""
    found = [p for p in Path(out, "reports").rglob("report.html") if p.parent.name == name]
    assert len(found) == 1, f"{len(found)} reports named {name!r} in {out}"
    return found[0]
