"""The case checks as a pytest test: run one check on one device, then compare its snapshot.

``test_case`` takes what the plugin (``pytest_plugin.py``) provides:

* ``case_check``: one check of a case file (a :class:`runner.CheckItem`), parametrised from
  every case file of the case folder (``--cases``); a file or case that failed to load is one
  item, whose run reports the error;
* ``device``: ``"cpu"`` or ``"cuda"``, parametrised with it (``--device``); a device that
  cannot run here is skipped with the reason;
* ``case_snapshots``: whether this run compares snapshots (see below);
* ``case_functions``: the implementation checked: None for the reference core, or a
  submission's functions, called in a separate process (``--impl PATH``).

and syrupy's ``snapshot``, named from the case file, case and check (``snapshot.py``), so that
every device compares with the same file.

Not a ``test_*.py`` file, so pytest never collects it by walking a folder. It is collected in
one of two ways, never both:

* the project imports ``test_case`` into its ``tests/test_cases.py``, so that the items sit
  beside their snapshots in ``tests/__snapshots__/test_cases/``: checks of the project's own
  ``cases/`` are compared with them;
* in a run that collects no such module (a course's repository with the package installed
  and no conftest of ours, or ``--cases DIR``), the plugin collects this module itself; its
  checks are checked against their documents only.
"""

import pytest

from attention_core.harness.checking import runner
from attention_core.harness.checking.results import render
from attention_core.harness.plugin.snapshot import TensorSnapshotExtension, snapshot_data, snapshot_name


def test_case(case_check, device, snapshot, case_snapshots, case_functions, request):
    """One check on one device; a passing check of the project's own cases is compared with its snapshot.

    The check's points go into the test's properties (``--junitxml`` writes them): the plugin sets them
    (``harness/plugin/points.py``).
    """
    result = runner.run(case_check, device=device, functions=case_functions)
    if not result.passed:
        pytest.fail(render(result, traceback=request.config.get_verbosity() > 0), pytrace=False)
    if case_snapshots:
        assert snapshot.use_extension(TensorSnapshotExtension)(name=snapshot_name(case_check)) == snapshot_data(
            case_check, result
        )
