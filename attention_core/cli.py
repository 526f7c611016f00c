"""Command line: ``python -m attention_core [check|inventory|template|points|grade|lint|import|record|new|...]``.

``check`` (the default) runs every case of the case folder on the reference core, on the CPU
and on CUDA when there is one, and prints a table of checks passed, failed and skipped per
document. ``template`` prints the hand-out for students; ``grade`` grades their submissions.
``lint``, ``import``, ``record`` and ``new`` write and check case files (``authoring/commands.py``).
"""

import argparse
import difflib
import os
import sys
from pathlib import Path

from attention_core.authoring.commands import AUTHORING, add_authoring_commands
from attention_core.harness.checking.devices import DEVICES, covered


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line that says what to do: a misspelt option gets the
    nearest one the command has, and the usage is left to ``--help``. An abbreviated option is misspelt:
    ``--verbos`` is refused, not taken for ``--verbose`` (a later option could make it mean another)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        hint = ""
        unknown = [a for a in message.removeprefix("unrecognized arguments:").split() if a.startswith("-")]
        if message.startswith("unrecognized arguments:") and unknown:
            known = [o for action in self._actions for o in action.option_strings]
            for sub in self._subparsers._group_actions if self._subparsers else ():
                known += [o for p in getattr(sub, "choices", {}).values() for a in p._actions for o in a.option_strings]
            close = difflib.get_close_matches(unknown[0].split("=")[0], sorted(set(known)), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
        self.exit(2, f"{self.prog}: error: {message}{hint} ({self.prog} --help lists what it takes)\n")


def run() -> int:
    """The command line as its own process runs it (``python -m attention_core``, ``attention-core``): ``main``'s exit
    code. Output its reader stops taking (``... | head``) ends the command quietly, with exit code 1, not a
    traceback."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (the interpreter's own last flush must not fail again)
        code = 1
    return code


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m attention_core", description="Golden-value harness for attention mechanisms.")
    # The options may stand before or after the command; a subcommand's copy only sets what it is given.
    common = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--cases", type=Path, help="folder of case files (default: the project's cases/)")
    parser.add_argument("--cases", type=Path, default=None, help="folder of case files (default: the project's cases/)")
    assignment_help = (
        "an assignment's folder: reference.py, cases/ and an optional assignment.yaml "
        "(default: the built-in spec and the project's cases/)"
    )
    common.add_argument("--assignment", type=Path, metavar="DIR", help=assignment_help)
    parser.add_argument("--assignment", type=Path, metavar="DIR", default=None, help=assignment_help)
    commands = parser.add_subparsers(dest="command")
    check = commands.add_parser("check", parents=[common], help="run every case on the reference core (the default)")
    for p, default, prefix in ((parser, None, ""), (check, argparse.SUPPRESS, "check_")):
        p.add_argument(
            "--device",
            action="append",
            choices=DEVICES,
            default=default,
            dest=f"{prefix}device",
            help="device to run on (repeatable; default: cpu, and cuda when available)",
        )
        p.add_argument(
            "-v", "--verbose", action="store_true", default=default or False, help="print every failure in full"
        )
        p.add_argument(
            "--html",
            type=Path,
            metavar="REPORT",
            default=default,
            dest=f"{prefix}html",
            help="also write an HTML report (summaries, each failure with heatmaps) to REPORT",
        )
    table = commands.add_parser(
        "inventory", parents=[common], help="check the corpus inventory and print the README's corpus table"
    )
    table.add_argument(
        "--write-readme",
        type=Path,
        metavar="README",
        default=None,
        help="replace the table between the corpus markers of this README",
    )
    template = commands.add_parser(
        "template", parents=[common], help="print the students' hand-out: the spec's signatures, documented, as stubs"
    )
    template.add_argument(
        "--format",
        choices=("py", "ipynb"),
        default="py",
        help="a Python module (default) or the same stubs as a notebook",
    )
    kit = commands.add_parser(
        "student-kit",
        parents=[common],
        help="write what students check themselves with: the visible cases with their "
        "expectations recorded, the template, no solution",
    )
    kit.add_argument("kit", type=Path, metavar="KIT", help="the folder to write (it must not exist)")
    kit.add_argument(
        "--github-classroom",
        action="store_true",
        help="also write GitHub Classroom's autograding workflow (a step per case file, worth its visible points), "
        "the requirements it installs and the hand-out as attention_student.py, the file it grades",
    )
    zipped = commands.add_parser(
        "gradescope-bundle", parents=[common], help="write the zip a Gradescope autograder is built from"
    )
    zipped.add_argument("zip", type=Path, metavar="OUT.zip", help="the zip to write")
    learn = commands.add_parser(
        "prairielearn", parents=[common], help="write a PrairieLearn question graded by this harness (external grading)"
    )
    learn.add_argument(
        "question", type=Path, metavar="OUT", help="the question's folder (new, or one this wrote: brought up to date)"
    )
    learn.add_argument(
        "--image",
        default=None,
        metavar="NAME",
        help="the image info.json names, built from OUT/Dockerfile and pushed to Docker Hub "
        "(default: attention-core-grader:torch-VERSION)",
    )
    learn.add_argument(
        "--job-timeout",
        type=int,
        default=None,
        metavar="S",
        help="seconds PrairieLearn gives one grading job, at most 600 (default: twice the assignment's budget, and 30)",
    )
    for made in (zipped, learn):
        made.add_argument(
            "--torch",
            default=None,
            metavar="VERSION",
            help="the torch release the image installs (default: the one this runs with, the expectations' own)",
        )
    job = commands.add_parser(
        "prairielearn-grade",
        parents=[common],
        help="grade ROOT/student into ROOT/results/results.json (what a PrairieLearn question's grading job runs)",
    )
    job.add_argument("--root", type=Path, default=Path("/grade"), metavar="ROOT", help="the job's folder (/grade)")
    job.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="S",
        help="seconds grading may take; past them the submission is not graded and costs no attempt (default 570)",
    )
    grade = commands.add_parser(
        "grade", parents=[common], help="grade submissions (.py files, notebooks, folders or zips)"
    )
    grade.add_argument(
        "submissions",
        nargs="+",
        type=Path,
        metavar="SUBMISSION",
        help="a student's .py file, .ipynb notebook, folder or .zip (one or many)",
    )
    grade.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="write DIR/submissions/<id>/results.json (Gradescope's format; <id>: the submission's "
        "path) and DIR/gradebook.csv",
    )
    grade.add_argument(
        "--entry",
        default=None,
        metavar="FILE",
        help="each SUBMISSION folder is one submission, imported from this file of it (default: a "
        "folder whose files each define the graded names is a batch, one submission each; one "
        "whose files import one another is one, from the file that holds the most names)",
    )
    grade.add_argument("--jobs", type=int, default=1, metavar="N", help="submissions graded at once (default 1)")
    grade.add_argument(
        "--regrade",
        action="store_true",
        help="grade every submission again, also those whose record in --out shows them unchanged",
    )
    grade.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds one call may take (default: the assignment's, 5)",
    )
    grade.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="S",
        help="seconds one submission may take in all (default: the assignment's, 60)",
    )
    grade.add_argument(
        "--gradient-points",
        type=float,
        default=None,
        metavar="P",
        help="points of each backward (gradient and side-effect) check; 0 switches them off "
        "(default: the assignment's, 1)",
    )
    grade.add_argument(
        "--roster",
        type=Path,
        default=None,
        metavar="CSV",
        help="the class's gradebook as the learning platform exports it (Canvas's gradebook CSV, "
        "Moodle's grading worksheet): adds roster.csv (who did not submit) and the grades in "
        "that platform's import format",
    )
    grade.add_argument(
        "--property-points",
        type=float,
        default=None,
        metavar="P",
        help="points of each property check (docs/properties.md); 0 switches them off (default: the assignment's, 1)",
    )
    worth = commands.add_parser(
        "points", parents=[common], help="print what every check and property is worth, and who sees it, before grading"
    )
    for option, what in (("--gradient-points", "backward check"), ("--property-points", "property check")):
        worth.add_argument(
            option,
            type=float,
            default=None,
            metavar="P",
            help=f"points of each {what}, as grade takes it (default: the assignment's)",
        )
    adequate = commands.add_parser(
        "adequacy",
        parents=[common],
        help="list the mistakes (made from the reference) that no case or property catches",
    )
    adequate.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        dest="adequacy_verbose",
        help="also list each mistake that is caught, and by which check",
    )
    add_authoring_commands(commands, common)
    args = parser.parse_args(argv)
    if args.command == "prairielearn-grade":  # it reads the assignment itself: a results.json also where it cannot
        from attention_core.grading.platforms import prairielearn  # noqa: PLC0415

        where = {"assignment": getattr(args, "assignment", None), "cases": getattr(args, "cases", None)}
        return prairielearn.main(args.root, **where, time_limit=args.time_limit)
    if args.command == "grade":
        from attention_core.grading.judging.options import GradingOptions  # noqa: PLC0415
        from attention_core.grading.outputs.batch import grade_command  # noqa: PLC0415

        options = GradingOptions(
            call_timeout=args.timeout,
            budget=args.budget,
            gradient_points=args.gradient_points,
            property_points=args.property_points,
        )
        return grade_command(
            args.submissions,
            args.out,
            assignment=getattr(args, "assignment", None),
            cases=getattr(args, "cases", None),
            jobs=args.jobs,
            options=options,
            regrade=args.regrade,
            roster=args.roster,
            entry=args.entry,
        )
    try:
        args.assignment_loaded = chosen = chosen_assignment(args)
    except ValueError as err:  # an assignment folder, its reference or its assignment.yaml that cannot be used
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command in AUTHORING:
        return AUTHORING[args.command](args)
    if args.command == "template":
        from attention_core.grading.platforms.template import assignment_template  # noqa: PLC0415 (loads only when asked)

        print(assignment_template(chosen, fmt=args.format), end="")
        return 0
    if args.command == "points":
        from attention_core.grading.judging.grader import points_command  # noqa: PLC0415
        from attention_core.grading.judging.options import GradingOptions  # noqa: PLC0415

        return points_command(
            chosen, GradingOptions(gradient_points=args.gradient_points, property_points=args.property_points)
        )
    if args.command == "adequacy":
        from attention_core.grading.naming import adequacy  # noqa: PLC0415

        return adequacy.report(adequacy.assess(chosen), verbose=args.adequacy_verbose)
    if args.command in ("student-kit", "gradescope-bundle", "prairielearn"):  # what students get: the settings as meant
        from attention_core.harness.checking import runner  # noqa: PLC0415

        problems = chosen.settings_problems(runner.collect(chosen.cases, chosen))
        if problems:
            print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
            return 2
    if args.command == "student-kit":
        from attention_core.kit import write_kit  # noqa: PLC0415

        return write_kit(chosen, args.kit, github_classroom=args.github_classroom)
    if args.command == "gradescope-bundle":
        from attention_core.grading.platforms.autograder import bundle  # noqa: PLC0415

        try:
            written = bundle(args.zip, Path(__file__).resolve().parent.parent, assignment=chosen, torch=args.torch)
        except ValueError as err:  # a --torch that is not a release
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"wrote {written}", file=sys.stderr)
        return 0
    if args.command == "prairielearn":
        from attention_core.grading.platforms.prairielearn import question_command  # noqa: PLC0415

        project = Path(__file__).resolve().parent.parent
        return question_command(
            args.question, project, chosen, torch=args.torch, image=args.image, timeout=args.job_timeout
        )
    folder = chosen.cases
    if not folder.is_dir():
        parser.error(f"--cases {folder}: no such folder")
    from attention_core.checks import check_command, inventory_command  # noqa: PLC0415

    if args.command == "inventory":
        return inventory_command(folder, args.write_readme)
    devices = (args.device or []) + getattr(args, "check_device", [])
    return check_command(
        folder, covered(devices), args.verbose, html=getattr(args, "check_html", None) or args.html, assignment=chosen
    )


def chosen_assignment(args):
    """The Assignment the command works on: ``--assignment DIR``, else the built-in one; ``--cases DIR``
    replaces its case folder. Raises ValueError (an AssignmentError or SettingsError) naming the problem."""
    from attention_core.harness.reading import assignment  # noqa: PLC0415

    return assignment.resolve(getattr(args, "assignment", None), getattr(args, "cases", None))


if __name__ == "__main__":
    sys.exit(main())
