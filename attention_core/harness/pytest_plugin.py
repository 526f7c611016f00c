"""pytest glue: every check of every case file becomes one parametrised item per device.

Loaded by the project's ``conftest.py``. A test function that asks for the ``case_check``
and ``device`` fixtures is parametrised with ids ``<file>/<case>/<check>-<device>`` and the
``case`` mark; a case file (or case) that fails to load becomes one failing item of its own.
"""

from pathlib import Path

import pytest
import torch

from attention_core.harness import runner

DEVICES = ("cpu", "cuda")
_NO_CUDA = "CUDA is not available here (torch.cuda.is_available() is False)"


def pytest_addoption(parser):
    group = parser.getgroup("attention_core", "attention case checks")
    group.addoption("--device", action="append", choices=DEVICES, default=None,
                    help="run case checks on this device only (repeatable); default: cpu and cuda, "
                         "cuda reported skipped when unavailable")
    group.addoption("--cases", default=None, metavar="DIR",
                    help="folder of case files (default: the project's cases/)")


def pytest_configure(config):
    config.addinivalue_line("markers", "case: a check of a case file (cases/*.yaml) on one device")
    folder = _cases_folder(config)
    if not folder.is_dir():
        raise pytest.UsageError(f"--cases {folder}: no such folder")
    if not _own_cases(config):
        if config.getoption("update_snapshots", False):
            raise pytest.UsageError(f"--snapshot-update with --cases {folder}: snapshots belong to the project's "
                                    f"own cases/ ({config.rootpath / 'cases'}); refusing to rewrite them")
        config.option.disable_unused_snapshots = True
    # Snapshot names come from the case file, case and check, never from the test function
    # (see harness/snapshot.py); syrupy warns on every write that it cannot relate them.
    config.addinivalue_line("filterwarnings", r"ignore:\s*Can not relate snapshot name:UserWarning")


_ITEMS = pytest.StashKey[list]()


def _cases_folder(config):
    return Path(config.getoption("--cases") or runner.default_cases_folder())


def _own_cases(config):
    """Whether the cases are the project's own (``<rootdir>/cases``), whose snapshots live in tests/."""
    return _cases_folder(config).resolve() == (config.rootpath / "cases").resolve()


def case_items(config):
    """The session's check items, loaded once."""
    if _ITEMS not in config.stash:
        config.stash[_ITEMS] = runner.collect(_cases_folder(config))
    return config.stash[_ITEMS]


@pytest.fixture
def case_snapshots(request):
    """Whether a passing check is compared with its snapshot.

    Snapshots belong to the project's own cases. Checks of another folder (``--cases DIR``)
    are checked against their documents only, and syrupy is told not to treat the project's
    snapshots as unused.
    """
    return _own_cases(request.config)


def pytest_ignore_collect(collection_path, config):
    """Under ``-m case`` (the case checks alone), leave test modules that hold none unimported."""
    if config.getoption("markexpr", "") != "case" or collection_path.suffix != ".py":
        return None
    if collection_path.name.startswith("test_") and "case_check" not in collection_path.read_text(encoding="utf-8"):
        return True
    return None


LOW_PRECISION = (torch.float16, torch.bfloat16)


def pytest_generate_tests(metafunc):
    if "graded_check" in metafunc.fixturenames:
        _parametrize_low_precision(metafunc)
    if "case_check" not in metafunc.fixturenames:
        return
    devices = metafunc.config.getoption("--device") or DEVICES
    cuda = torch.cuda.is_available()
    params = []
    for item in case_items(metafunc.config):
        if item.error is not None:
            params.append(pytest.param(item, None, id=item.id, marks=pytest.mark.case))
            continue
        for device in devices:
            marks = [pytest.mark.case]
            if device == "cuda" and not cuda:
                marks.append(pytest.mark.skip(reason=_NO_CUDA))
            params.append(pytest.param(item, device, id=f"{item.id}-{device}", marks=marks))
    metafunc.parametrize(("case_check", "device"), params)


def _parametrize_low_precision(metafunc):
    """Graded checks x (float16, bfloat16) x devices, for the low-precision comparison."""
    devices = metafunc.config.getoption("--device") or DEVICES
    cuda = torch.cuda.is_available()
    params = []
    for item in case_items(metafunc.config):
        if item.error is not None or item.check.kind != "call":
            continue
        for dtype in LOW_PRECISION:
            for device in devices:
                marks = [pytest.mark.skip(reason=_NO_CUDA)] if device == "cuda" and not cuda else []
                name = str(dtype).removeprefix("torch.")
                params.append(pytest.param(item, dtype, device, id=f"{item.id}-{name}-{device}", marks=marks))
    metafunc.parametrize(("graded_check", "low_dtype", "device"), params)
