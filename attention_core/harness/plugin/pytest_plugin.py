"""pytest glue: every check of every case file becomes one parametrised item per device.

Registered through the ``pytest11`` entry point (``pyproject.toml``), so it is active wherever
the package is installed, with or without a conftest. It adds ``--cases`` and ``--device``,
parametrises a test that asks for ``case_check`` and ``device`` with ids
``<file>/<case>/<check>-<device>`` and the ``case`` mark (a file or case that fails to load
becomes one failing item of its own), and one that asks for ``graded_check`` and
``low_dtype`` with each graded check in float16 and bfloat16. Each case check carries its points, and a run
with ``--impl`` ends with the points of the visible ones (``harness/plugin/points.py``).

The case checks are ``harness/plugin/case_checks.py``'s ``test_case``. A project that keeps snapshots
imports it into ``tests/test_cases.py``; where no collected module holds it (a course's
repository, ``pytest --cases DIR``), the plugin collects ``case_checks.py`` itself, for a run that asks
for case checks (``--cases``, ``--assignment``, ``--impl`` or ``-m case``): another project's own
``pytest`` runs its own tests alone.
"""

import os
import re
from fnmatch import fnmatch
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from attention_core.harness.checking import runner
from attention_core.harness.checking.devices import DEVICES, covered, skip_reason
from attention_core.harness.plugin import points

# The module holding test_case. Marked before anything imports it: its snapshot assert,
# rewritten, fails with syrupy's diff.
CASE_CHECKS_MODULE = "attention_core.harness.plugin.case_checks"
pytest.register_assert_rewrite(CASE_CHECKS_MODULE)
CASE_CHECKS = Path(__file__).with_name("case_checks.py").resolve()
# The name of the test module that holds a project's case checks, as syrupy ties a snapshot
# folder __snapshots__/test_cases/ to the module test_cases.py beside it.
CASE_MODULE = "test_cases.py"
LOW_PRECISION = (torch.float16, torch.bfloat16)


def pytest_addoption(parser):
    group = parser.getgroup("attention_core", "attention case checks")
    group.addoption(
        "--device",
        action="append",
        choices=DEVICES,
        default=None,
        help="run case checks on this device only (repeatable); default: cpu and cuda, "
        "cuda reported skipped when unavailable",
    )
    group.addoption(
        "--impl",
        default=None,
        metavar="PATH",
        help="check a submission (a .py file or a folder) instead of the reference core: its "
        "functions run in a separate process, on the CPU; no snapshots are compared",
    )
    group.addoption(
        "--assignment",
        default=None,
        metavar="DIR",
        help="an assignment's folder (reference.py, cases/, assignment.yaml) or a students' kit: its "
        "cases are checked, on its reference or on --impl; no snapshots are compared",
    )
    group.addoption(
        "--cases",
        default=None,
        metavar="DIR",
        help="folder of case files (default: the project's cases/); its checks are not "
        "compared with snapshots unless it is cases/ at the rootdir",
    )
    group.addoption(
        "--points-json",
        default=None,
        metavar="PATH",
        help="write the points of the visible graded checks to PATH as JSON, check by check (with --impl the "
        "run also ends with a line 'points: X / Y')",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "case: a check of a case file (cases/*.yaml) on one device")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)  # a worker per core already: torch's own pool would only oversubscribe them
    if config.getoption("--assignment") is not None:
        try:
            _assignment(config)
        except ValueError as err:
            raise pytest.UsageError(f"--assignment: {err}") from None
    folder = _cases_folder(config)
    if not folder.is_dir():
        raise pytest.UsageError(f"--cases {folder}: no such folder")
    impl = config.getoption("--impl")
    if impl is not None and not Path(impl).exists():
        raise pytest.UsageError(f"--impl {impl}: no such file or folder")
    written = config.getoption("--points-json")
    if written is not None and not Path(written).parent.is_dir():
        raise pytest.UsageError(f"--points-json {written}: {Path(written).parent}: no such folder")
    config.pluginmanager.register(points.Tally(config, lambda: _chosen(config)), TALLY)
    if impl is not None and config.getoption("update_snapshots", False):
        raise pytest.UsageError(
            "--snapshot-update with --impl: snapshots record the reference core, "
            "never a submission; refusing to rewrite them"
        )
    if not _own_cases(config) and config.getoption("update_snapshots", False):
        raise pytest.UsageError(
            f"--snapshot-update with --cases {folder}: snapshots are written only for a "
            f"project's own cases/, run from that project (its tests/{CASE_MODULE} beside "
            f"them); refusing to rewrite them"
        )
    # Snapshot names come from the case file, case and check, never from the test function
    # (see harness/plugin/snapshot.py); syrupy warns on every write that it cannot relate them.
    config.addinivalue_line("filterwarnings", r"ignore:\s*Can not relate snapshot name:UserWarning")


_ITEMS = pytest.StashKey[list]()
_ASSIGNMENT = pytest.StashKey[object]()
TALLY = "attention_core_points"  # the name the run's points.Tally is registered under


def _assignment(config):
    """The Assignment of ``--assignment`` (a teacher's folder, or a students' kit without a reference);
    None for the built-in one."""
    if _ASSIGNMENT not in config.stash:
        folder = config.getoption("--assignment")
        if folder is None:
            config.stash[_ASSIGNMENT] = None
        else:
            from attention_core.harness.reading import assignment  # noqa: PLC0415

            config.stash[_ASSIGNMENT] = assignment.load(folder, need_reference=False)
    return config.stash[_ASSIGNMENT]


def _chosen(config):
    """The run's Assignment: ``--assignment``'s, else the built-in one."""
    from attention_core.harness.reading import assignment  # noqa: PLC0415

    return _assignment(config) or assignment.default()


def _cases_folder(config):
    if config.getoption("--cases"):
        return Path(config.getoption("--cases"))
    chosen = _assignment(config)
    return Path(chosen.cases) if chosen is not None else runner.default_cases_folder()


def _own_cases(config):
    """Whether the cases are the run's project's own: the very folder ``<rootdir>/cases`` (its identity, not
    its name), in a project that keeps their snapshots (``<rootdir>/tests/test_cases.py``)."""
    if config.getoption("--assignment") is not None:
        return False
    return (
        _same(_cases_folder(config), config.rootpath / "cases") and (config.rootpath / "tests" / CASE_MODULE).is_file()
    )


def _owns(module, config):
    """Whether the test module ``module`` (a project's tests/test_cases.py) owns the run's cases: its own
    project's ``cases`` is that very folder. Its snapshots are compared and written for those alone."""
    if config.getoption("--impl") is not None:
        return False  # a submission: its checks compare no snapshot, and none is reported unused
    return _own_cases(config) and _same(Path(module).resolve().parent.parent / "cases", _cases_folder(config))


def _same(a, b):
    try:
        return Path(a).samefile(b)
    except OSError:
        return False


def case_items(config):
    """The session's check items, loaded once."""
    if _ITEMS not in config.stash:
        config.stash[_ITEMS] = runner.collect(_cases_folder(config), _assignment(config))
    return config.stash[_ITEMS]


@pytest.fixture
def case_snapshots(request):
    """Whether a passing case check is compared with its snapshot.

    Snapshots belong to the project's own cases (``<rootdir>/cases``), checked through the
    project's ``tests/test_cases.py``. Checks of another folder (``--cases DIR``), or collected
    by the plugin from the package, are checked against their documents only.
    """
    if request.config.getoption("--impl") is not None:
        return False  # a submission is checked against the documents; snapshots record the reference
    return _owns(request.path, request.config) and request.path.resolve() != CASE_CHECKS


@pytest.fixture(scope="session")
def case_functions(request):
    """The spec functions the case checks call: None for the reference core, or a submission's (``--impl``).

    A submission is imported and called in a separate process (see :func:`_implementations`).
    """
    impl = request.config.getoption("--impl")
    if impl is None:
        yield None
        return
    try:
        with _implementations()(Path(impl), _chosen(request.config)) as functions:
            yield functions
    except ValueError as err:
        pytest.fail(f"--impl {impl}: {err}", pytrace=False)


def _implementations():
    """The installed way to run an implementation out of process: the ``process`` entry point of the
    ``attention_core.implementations`` group (the grading package's, see pyproject.toml)."""
    found = entry_points(group="attention_core.implementations", name="process")
    if not found:
        pytest.fail(
            "--impl needs the attention_core.implementations entry point 'process', which this install "
            "lacks: reinstall the package (pip install -e .)",
            pytrace=False,
        )
    return next(iter(found)).load()


def pytest_ignore_collect(collection_path, config):
    """Leave unimported the test modules a run does not need, by name, without reading them.

    * With another folder's cases (``--cases DIR``), the project's ``test_cases.py``: the plugin
      collects the package's case checks instead, which compare no snapshots, and syrupy,
      finding the module that owns the project's snapshots uncollected, leaves them alone (it
      would otherwise report every one of them unused).
    * Under ``-m case`` (the case checks alone), every other test module.
    """
    if collection_path.suffix != ".py":
        return None
    if collection_path.name == CASE_MODULE:
        return None if _owns(collection_path, config) else True
    if config.getoption("markexpr", "") == "case" and any(
        fnmatch(collection_path.name, pattern) for pattern in config.getini("python_files")
    ):
        return True
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Add the package's case checks after whatever the session collects from its folders.

    They stand last, so that a run whose own ``test_cases.py`` holds the case checks (this
    project) finds them already collected, and the package's module yields nothing. A run
    given only test files (``pytest tests/test_expr.py``), or one that does not ask for case checks
    (:func:`_asks`: another project's own tests), gets none.
    """
    outcome = yield
    report = outcome.get_result()
    config = collector.config
    if isinstance(collector, pytest.Session) and report.passed and _collects_a_folder(config) and _asks(config):
        # Named as in a source checkout, wherever the package is installed.
        nodeid = CASE_CHECKS_MODULE.replace(".", "/") + ".py"
        report.result.append(PackageCaseChecks.from_parent(collector, path=CASE_CHECKS, nodeid=nodeid))


class PackageCaseChecks(pytest.Module):
    """``case_checks.py``, collected from the package unless the run's own modules hold the case checks."""

    def collect(self):
        if any("case_check" in getattr(item, "fixturenames", ()) for item in self.session.items):
            return []
        return super().collect()


def _asks(config):
    """Whether the run asks for case checks: it names their folder, an assignment or a submission (``--cases``,
    ``--assignment``, ``--impl``), or selects them (``-m case``). A project of its own where the package is merely
    installed runs its own tests alone."""
    named = any(config.getoption(option) is not None for option in ("--cases", "--assignment", "--impl"))
    return named or re.search(r"\bcase\b", config.getoption("markexpr", "") or "") is not None


def _collects_a_folder(config):
    """Whether the run collects a folder (``testpaths``, the working directory, or one it is given)."""
    return any((config.invocation_params.dir / arg.split("::")[0]).is_dir() for arg in config.args)


def _devices(config):
    """``(device, marks)`` for each device the run covers; one that cannot run here is skipped.

    A submission (``--impl``) runs in its own process on the CPU.
    """
    for device in covered(config.getoption("--device") or (["cpu"] if config.getoption("--impl") else None)):
        reason = skip_reason(device)
        yield device, [pytest.mark.skip(reason=reason)] if reason else []


MAX_REPORTS = 50  # failing case checks reported in full by one process; the rest, one line each
_FAILED = pytest.StashKey[int]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After MAX_REPORTS failing case checks, each further one's report is a line: a folder of thousands of
    failing cases prints a bounded amount (each worker of -n counts its own)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "case_check" in getattr(item, "fixturenames", ()):
        count = item.config.stash.get(_FAILED, 0) + 1
        item.config.stash[_FAILED] = count
        if count > MAX_REPORTS:
            report.longrepr = (
                f"(report left out: more than {MAX_REPORTS} case checks failed; run this one alone, "
                f"-k '{item.callspec.id if hasattr(item, 'callspec') else item.name}', to see it)"
            )


MAX_LISTED = 200  # failures and errors the end of a run lists; past it, a count


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """A run of thousands of failures lists the first MAX_LISTED of each kind at its end, then how many
    more (pytest's own summary of failures grows with their square: 30,000 would take an hour); then, with
    ``--impl``, the points line (the last before pytest's counts)."""
    stats = terminalreporter.stats
    cut = {kind: stats[kind] for kind in ("failed", "error") if len(stats.get(kind, ())) > MAX_LISTED}
    for kind, reports in cut.items():
        stats[kind] = reports[:MAX_LISTED]
    try:
        return (yield)
    finally:
        for kind, reports in cut.items():
            stats[kind] = reports
            terminalreporter.write_line(
                f"{len(reports) - MAX_LISTED} more {kind} not listed above (the first "
                f"{MAX_LISTED} are; -x stops at the first, -k selects some)"
            )
        tally = terminalreporter.config.pluginmanager.get_plugin(TALLY)
        if tally is not None:
            tally.write_line(terminalreporter)


def pytest_generate_tests(metafunc):
    if "graded_check" in metafunc.fixturenames:
        _parametrize_low_precision(metafunc)
    if "case_check" not in metafunc.fixturenames:
        return
    params = []
    for item in case_items(metafunc.config):
        if item.error is not None:
            params.append(pytest.param(item, None, id=item.id, marks=pytest.mark.case))
            continue
        for device, marks in _devices(metafunc.config):
            params.append(pytest.param(item, device, id=f"{item.id}-{device}", marks=[pytest.mark.case, *marks]))
    metafunc.parametrize(("case_check", "device"), params)


def _parametrize_low_precision(metafunc):
    """Graded checks x (float16, bfloat16) x devices, for the low-precision comparison."""
    params = []
    for item in case_items(metafunc.config):
        if item.error is not None or item.check.kind != "call":
            continue
        for dtype in LOW_PRECISION:
            for device, marks in _devices(metafunc.config):
                name = str(dtype).removeprefix("torch.")
                params.append(pytest.param(item, dtype, device, id=f"{item.id}-{name}-{device}", marks=marks))
    metafunc.parametrize(("graded_check", "low_dtype", "device"), params)
