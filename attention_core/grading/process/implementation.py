"""One implementation run out of process for the case checks (``pytest --impl FILE``).

The pytest plugin finds :func:`opened` through the ``attention_core.implementations`` entry point
(``process``): the plugin asks for a way to run an implementation, never for this package.
"""

import contextlib
import tempfile
from pathlib import Path

from attention_core.grading.intake import notebooks
from attention_core.grading.process import client, replies
from attention_core.grading.process.remote import RemoteFunctions


@contextlib.contextmanager
def opened(path, assignment):
    """The graded functions of the implementation at ``path`` (a ``.py`` file, a notebook or a folder),
    each call made in its sandboxed process, for ``assignment``. Raises ValueError, with what to tell
    the user, where it cannot be read or imported."""
    with (
        client.Worker(names=assignment.names, budget=assignment.settings.budget) as worker,
        tempfile.TemporaryDirectory(prefix="attention-impl-") as scratch,
    ):
        path = Path(path)
        if notebooks.is_notebook(path):
            try:
                path = notebooks.write_module(path, scratch)
            except notebooks.NotebookError as err:
                raise ValueError(str(err)) from None
        submission = worker.open(path)
        try:
            if submission.status != replies.OK:
                raise ValueError(f"could not be imported: {submission.message}")
            yield RemoteFunctions(submission, assignment.settings.call_timeout)
        finally:
            submission.close()
