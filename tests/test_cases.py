"""The spec checker: every check of every case file, on every device, then its snapshot."""

import pytest

from attention_core.harness import runner
from attention_core.harness.snapshot import TensorSnapshotExtension, snapshot_data, snapshot_name


def test_case(case_check, device, snapshot, case_snapshots):
    result = runner.run(case_check, device=device)
    if not result.passed:
        pytest.fail(result.report, pytrace=False)
    if case_snapshots:
        assert snapshot.use_extension(TensorSnapshotExtension)(name=snapshot_name(case_check)) == snapshot_data(case_check, result)
