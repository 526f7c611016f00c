"""The authoring commands of the command line: ``lint``, ``import``, ``record`` and ``new``.

Each command's options are declared here and each calls one library function; ``cli.py``
adds the parsers and dispatches to :data:`AUTHORING`.
"""

import sys
from pathlib import Path


def add_authoring_commands(commands, common):
    """Add the authoring subcommands to ``commands`` (argparse's subparsers)."""
    lint = commands.add_parser(
        "lint", parents=[common], help="check case files without running them: every finding as file:line:col"
    )
    lint.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help="case files or folders (default: the case folder)"
    )
    imported = commands.add_parser(
        "import",
        parents=[common],
        help="write a draft case file from a notebook's printed tensors "
        "(.ipynb, or exported as text); nothing is executed",
    )
    imported.add_argument("notebook", type=Path, metavar="NOTEBOOK", help="the notebook (.ipynb, or exported as text)")
    imported.add_argument("--out", type=Path, required=True, metavar="FILE", help="the draft case file to write")
    imported.add_argument("--force", action="store_true", help="replace FILE if it exists")
    recorded = commands.add_parser(
        "record",
        parents=[common],
        help="fill the expectations a case file leaves empty, by torch's own "
        "functions in float64, marked 'recorded' until reviewed",
    )
    recorded.add_argument("file", type=Path, metavar="FILE", help="the case file whose empty expectations to fill")
    recorded.add_argument("--case", default=None, metavar="ID", help="only this case")
    new = commands.add_parser("new", parents=[common], help="write a commented skeleton to cases/NAME.yaml")
    new.add_argument("name", metavar="NAME", help="the file's name, without .yaml (letters, digits, _ and -)")
    new.add_argument(
        "--mistake",
        action="store_true",
        help="write mistakes/NAME.py instead: a copy of the assignment's reference.py to change in one "
        "place, under a docstring for the mistake's sentence and fix (--assignment DIR)",
    )


def lint_command(args, out=None):
    """Print every finding; 1 when any is an error, else 0 (pending and recorded are warnings)."""
    from attention_core.authoring.lint import lint  # noqa: PLC0415 (loads only when asked)

    out = out or sys.stdout
    chosen = _chosen(args)
    findings = lint(args.paths, default_folder=chosen.cases, assignment=chosen)
    for finding in findings:
        print(finding, file=out)
    from attention_core.harness.checking import runner  # noqa: PLC0415

    items = [] if args.paths else runner.collect(chosen.cases, chosen)
    settings = chosen.settings_problems(items) if items else []
    for problem in settings:
        print(problem.replace(": checks: ", ": error: checks: ", 1), file=out)
    warned = chosen.settings_warnings(items) if items else []
    for problem in warned:
        print(problem.replace(": checks: ", ": warning: checks: ", 1), file=out)
    errors = sum(f.severity == "error" for f in findings) + len(settings)
    print(
        f"{_count(errors, 'error')}, {_count(len(findings) + len(settings) + len(warned) - errors, 'warning')}",
        file=out,
    )
    return 1 if errors else 0


def import_command(args, out=None):
    """Write the draft; 2 when the notebook cannot be read or the file exists (without --force)."""
    from attention_core.authoring.drafts import import_notebook  # noqa: PLC0415

    out = out or sys.stdout
    refused = _refused(args.out, args.force)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    try:
        cases, prints = import_notebook(args.notebook, args.out, schema=_schema())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"{args.notebook}: cannot be read as a notebook: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    print(
        f"{args.out}: {_count(cases, 'draft case')}, {_count(prints, 'pending expectation')} "
        f"(python -m attention_core lint {args.out} lists what is left)",
        file=out,
    )
    return 0


def record_command(args, out=None):
    """Record; 2 when the file does not load or has no such case."""
    from attention_core.authoring.record import RecordError, pending_checks, record  # noqa: PLC0415

    out = out or sys.stdout
    if not args.file.is_file():
        print(f"{args.file}: no such file", file=sys.stderr)
        return 2
    try:
        written = record(args.file, case_id=args.case, assignment=_chosen(args))
    except RecordError as err:
        print(err, file=sys.stderr)
        return 2
    for check_id, target, how in written:
        print(f"{args.file}: {check_id}: recorded {target!r} ({how})", file=out)
    left = pending_checks(args.file)
    print(
        f"{_count(len(written), 'expectation')} recorded, marked 'recorded' until reviewed"
        + (f"; {_count(len(left), 'pending check')} still to write" if left else ""),
        file=out,
    )
    return 0


def new_command(args, out=None):
    """Write the skeleton; 2 when the name is not a plain file name or the file exists."""
    from attention_core.authoring.drafts import skeleton  # noqa: PLC0415
    from attention_core.harness.reading.fields import ID  # noqa: PLC0415

    out = out or sys.stdout
    if getattr(args, "mistake", False):
        return _new_mistake(args, out)
    folder = Path(_chosen(args).cases)
    path = folder / f"{args.name}.yaml"
    refused = (
        f"{args.name!r}: a case file's name is letters, digits, '_' and '-'"
        if not ID.match(args.name)
        else _refused(path, False, "choose another name, or edit that file")
    )
    if refused:
        print(refused, file=sys.stderr)
        return 2
    path.write_text(skeleton(path, schema=_schema(), assignment=_chosen(args)), encoding="utf-8")
    print(f"{path}: written; fill it in, then python -m attention_core lint {path}", file=out)
    return 0


def _new_mistake(args, out):
    """``new --mistake``: the teacher's own mistake to fill in; 2 where there is no assignment or the name is taken."""
    from attention_core.authoring import mistakes  # noqa: PLC0415

    chosen = _chosen(args)
    if chosen.folder is None or chosen.reference is None:
        print(
            "error: new --mistake needs --assignment DIR (a teacher's assignment, with its reference.py)",
            file=sys.stderr,
        )
        return 2
    try:
        path = mistakes.scaffold(chosen, args.name)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(
        f"{path}: written; make the one change, write the mistake and its fix in its docstring, then "
        f"python -m attention_core adequacy --assignment {chosen.folder} tells whether a case catches it",
        file=out,
    )
    return 0


def _chosen(args):
    """The assignment the command line chose (``--assignment``, ``--cases``), or the built-in one."""
    from attention_core.harness.reading.assignment import resolve  # noqa: PLC0415

    return getattr(args, "assignment_loaded", None) or resolve(
        getattr(args, "assignment", None), getattr(args, "cases", None)
    )


def _count(n, what):
    return f"{n} {what}{'s' * (n != 1)}"


def _refused(path, force, replace_with="give --force to replace it"):
    """Why ``path`` is not written, or None: the folder it goes in is made where there is none yet."""
    if path.exists() and not force:
        return f"{path} exists: {replace_with}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return f"{path.parent}: cannot make that folder ({err.strerror or err})"
    return None


def _schema():
    from attention_core.harness.checking import runner  # noqa: PLC0415
    from attention_core.harness.reading.cases import SCHEMA_FILE  # noqa: PLC0415

    return runner.default_cases_folder() / SCHEMA_FILE


AUTHORING = {"lint": lint_command, "import": import_command, "record": record_command, "new": new_command}
