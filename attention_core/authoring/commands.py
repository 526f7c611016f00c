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


AUTHORING = {"lint": lint_command}
