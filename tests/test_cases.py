"""The spec checker: every check of every case file, on every device, then its snapshot.

The test itself lives in the package (``attention_core/harness/plugin/case_checks.py``), where the
plugin also finds it for a repository without this module. Importing it here puts its items
beside their snapshots: syrupy keeps ``tests/__snapshots__/test_cases/`` for this module.
"""

from attention_core.harness.plugin.case_checks import test_case  # noqa: F401  (collected from here)
