"""The spec checker: every check of every case file, on every device."""

import pytest

from attention_core.harness import runner


def test_case(case_check, device):
    result = runner.run(case_check, device=device)
    if not result.passed:
        pytest.fail(result.report, pytrace=False)
