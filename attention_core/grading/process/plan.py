"""What a submission's fresh root holds: the allow-list the sandbox builds from (``sandbox.py``).

Read-only binds, each at its own path: ``/usr`` and the ``/lib*`` folders (or the links to them),
the Python installation and the site folders the worker's path names (where torch is installed);
and a copy of the submission (its file, or its folder) under ``/submission``. Masked inside
them: this project's own files (the package with its case files, its install metadata, an
editable install's finder), wherever the installation put them. Nothing else: not the checkout,
not the output folder, not the other submissions. And the limits a submission runs under.
"""

import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

import attention_core
from attention_core.grading.intake import folders

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
TMP_SIZE = 64 << 20  # bytes of each private tmpfs (/tmp, /dev/shm, $HOME), and of the submission's copy
PROCESSES = 128  # of one uid (an rlimit), and of all of a submission's processes where a cgroup holds them
DISTRIBUTION = "attention-core"
# What a checkout holds beside the package that copies expected values (masked where a bind reaches it).
CHECKOUT = ("cases", "tests", ".git", "build", "README.md", "docs", "benchmarks", "dist")


def plan(site_dirs, *, root, budget, namespaces=True):
    """The sandbox's plan, without the submission (see :func:`with_submission`); ``root`` is an empty
    folder to build the fresh root on, ``budget`` the seconds a submission may take."""
    binds, links = [], []
    for path in SYSTEM:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append(path)
    binds += [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, *site_dirs) if os.path.isdir(p)]
    binds = _outermost(binds)
    limits = {
        "RLIMIT_CPU": (int(budget) + 5, int(budget) + 10),
        "RLIMIT_FSIZE": 64 << 20,
        "RLIMIT_NPROC": PROCESSES,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
    return {
        "binds": binds,
        "links": links,
        "masks": sorted(_inside(project_files(site_dirs), binds)),
        "root": root,
        "tmp_size": TMP_SIZE,
        "limits": limits,
        "processes": PROCESSES,
        "namespaces": namespaces,
    }


def with_submission(base, path, scratch):
    """The plan for one submission (a file or a folder), which the sandbox copies into its root;
    ``scratch``: its private folder where the fresh root cannot be built."""
    return dict(base, submission=os.path.realpath(path), scratch=scratch)


def resolve(path, entry, names=()):
    """(entry file, root folder, module name, is a package) for a submission at ``path``.

    A folder's entry is ``entry``, else the one :func:`folders.read` finds (its files read as text, never
    run); a folder it reads as several submissions, or cannot tell, raises ValueError saying why."""
    path = path.resolve()
    if path.is_file():
        return path, path.parent, path.stem, False
    if entry is None:
        reading = folders.read(path, names, one=True)
        if reading.kind == "one" and reading.entry.suffix != ".py":
            raise ValueError(
                f"{path}: its entry {reading.entry.name} is a notebook: the grader runs a notebook's "
                f"code cells as a module of their own"
            )
        if reading.kind != "one":
            raise ValueError(reading.why or folders.several(path, reading))
        entry = str(reading.entry.relative_to(path))
    file = path / entry
    if entry == "__init__.py":
        return file, path, path.name, True
    return file, path, file.stem, False


def project_files(site_dirs=()):
    """Every path of this project's own files that an installation may have put on the allow-list:
    the package (and its case files), and in each site folder every entry named after the project
    (install metadata, an editable install's ``.pth`` file and finder) or listed as its files."""
    package = Path(attention_core.__file__).resolve().parent
    found = {str(package)}
    checkout = package.parent
    if (checkout / "pyproject.toml").exists():  # a checkout: what else of it holds expected values
        found |= {str(checkout / name) for name in CHECKOUT if (checkout / name).exists()}
    cases = importlib.util.find_spec("attention_core.cases")
    if cases is not None and cases.submodule_search_locations:
        found |= {os.path.realpath(p) for p in cases.submodule_search_locations}
    key = DISTRIBUTION.replace("-", "_")
    for site in site_dirs:
        if os.path.isdir(site):
            found |= {
                os.path.realpath(os.path.join(site, n)) for n in os.listdir(site) if key in n.lower().replace("-", "_")
            }
    for distribution in importlib.metadata.distributions(name=DISTRIBUTION):
        site = Path(os.path.realpath(distribution.locate_file("")))
        for file in distribution.files or ():
            path = Path(os.path.realpath(distribution.locate_file(file)))
            try:
                top = path.relative_to(site).parts[0]
                found.add(str(site / top) if top != "__pycache__" else str(path))  # its entry in the site folder
            except (ValueError, IndexError):
                found.add(str(path))  # outside the site folder (a script in bin/)
    return found


def _outermost(paths):
    """The paths, without those that lie inside another (a bind covers what is under it)."""
    unique = sorted(set(paths), key=len)
    kept = []
    for path in unique:
        if not any(_under(path, k) for k in kept):
            kept.append(path)
    return kept


def _inside(paths, binds):
    return {p for p in paths if any(_under(p, b) for b in binds)}


def _under(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")
