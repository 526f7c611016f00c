"""The authoring commands of the command line: ``lint``, ``import``, ``record`` and ``new``.

Each command's options are declared here and each calls one library function; ``cli.py``
adds the parsers and dispatches to :data:`AUTHORING`.
"""

import sys
from pathlib import Path

from attention_core.harness import runner


def add_authoring_commands(commands, common):
    """Add the authoring subcommands to ``commands`` (argparse's subparsers)."""
    lint = commands.add_parser("lint", parents=[common], help="check case files without running them: "
                                                                "every finding as file:line:col")
    lint.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                      help="case files or folders (default: the case folder)")
    imported = commands.add_parser("import", help="write a draft case file from a notebook's printed tensors "
                                                  "(.ipynb, or exported as text); nothing is executed")
    imported.add_argument("notebook", type=Path, metavar="NOTEBOOK")
    imported.add_argument("--out", type=Path, required=True, metavar="FILE", help="the draft case file to write")
    imported.add_argument("--force", action="store_true", help="replace FILE if it exists")


def lint_command(args, out=None):
    """Print every finding; 1 when any is an error, else 0 (pending and recorded are warnings)."""
    from attention_core.authoring.lint import lint  # noqa: PLC0415 (loads only when asked)
    out = out or sys.stdout
    findings = lint(args.paths, default_folder=getattr(args, "cases", None) or runner.default_cases_folder())
    for finding in findings:
        print(finding, file=out)
    errors = sum(f.severity == "error" for f in findings)
    print(f"{errors} error{'s' * (errors != 1)}, {len(findings) - errors} warning{'s' * (len(findings) - errors != 1)}",
          file=out)
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
    print(f"{args.out}: {cases} draft cases, {prints} pending expectations (python -m attention_core lint "
          f"{args.out} lists what is left)", file=out)
    return 0


def _refused(path, force):
    if path.exists() and not force:
        return f"{path} exists: give --force to replace it"
    if not path.parent.is_dir():
        return f"{path.parent}: no such folder"
    return None


def _schema():
    return runner.default_cases_folder() / "case-file.schema.json"


AUTHORING = {"lint": lint_command, "import": import_command}
