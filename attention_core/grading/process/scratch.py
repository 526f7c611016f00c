"""The temporary folder of a grading run: one folder that holds every temporary folder its graders make (a
Grader's notebooks, each worker server's sandboxes), removed as a whole by the process that made it, whatever
ended the graders (a grader process killed, a grading thread left behind at a time limit).

Its mode lets a sandboxed submission's process pass through it to its own folder (see ``client.Worker``).
"""

import contextlib
import os
import shutil
import tempfile


def make(prefix="attention-batch-"):
    """A new folder for a run's temporary folders: its path."""
    made = tempfile.mkdtemp(prefix=prefix)
    os.chmod(made, 0o711)
    return made


def remove(made):
    """Remove ``made`` and all in it (nothing where it is gone already)."""
    shutil.rmtree(made, ignore_errors=True)


@contextlib.contextmanager
def used(prefix="attention-job-"):
    """This process's temporary folders made in a new folder while the block runs, then removed with it."""
    made, before = make(prefix), tempfile.tempdir
    tempfile.tempdir = made
    try:
        yield made
    finally:
        tempfile.tempdir = before
        remove(made)
