"""Command line: ``python -m attention_core [check]``.

``check`` runs every case of the case folder on the reference core, on the CPU and on CUDA
when there is one, and prints a table of checks passed, failed and skipped per document.
"""

import argparse
import sys
from pathlib import Path

from attention_core.harness import inventory, runner
from attention_core.harness.cases import load_folder
from attention_core.harness.devices import DEVICES, covered, skip_reason


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m attention_core",
                                     description="Golden-value harness for attention mechanisms.")
    # The options may stand before or after the command; a subcommand's copy only sets what it is given.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--cases", type=Path, help="folder of case files (default: the project's cases/)")
    parser.add_argument("--cases", type=Path, default=None, help="folder of case files (default: the project's cases/)")
    commands = parser.add_subparsers(dest="command")
    check = commands.add_parser("check", parents=[common], help="run every case on the reference core (the default)")
    for p, default, dest in ((parser, None, "device"), (check, argparse.SUPPRESS, "check_device")):
        p.add_argument("--device", action="append", choices=DEVICES, default=default, dest=dest,
                       help="device to run on (repeatable; default: cpu, and cuda when available)")
        p.add_argument("-v", "--verbose", action="store_true", default=default or False,
                       help="print every failure in full")
    table = commands.add_parser("inventory", parents=[common],
                                help="check the corpus inventory and print the README's corpus table")
    table.add_argument("--write-readme", type=Path, metavar="README", default=None,
                       help="replace the table between the corpus markers of this README")
    args = parser.parse_args(argv)
    folder = args.cases or runner.default_cases_folder()
    if not folder.is_dir():
        parser.error(f"--cases {folder}: no such folder")
    if args.command == "inventory":
        return inventory_command(folder, args.write_readme)
    devices = (args.device or []) + getattr(args, "check_device", [])
    return check_command(folder, covered(devices), args.verbose)


README_START, README_END = "<!-- corpus table: python -m attention_core inventory -->", "<!-- end of corpus table -->"


def inventory_command(folder, readme=None, out=sys.stdout):
    """Print the inventory's disagreements with the case files, or its table; optionally write it."""
    rows = inventory.load(folder)
    case_files = load_folder(folder)
    found = inventory.problems(rows, case_files)
    for problem in found:
        print(problem, file=out)
    if found:
        return 1
    table = inventory.corpus_table(rows, case_files)
    print(table, file=out)
    if readme is not None:
        text = readme.read_text(encoding="utf-8")
        start, end = text.index(README_START) + len(README_START), text.index(README_END)
        readme.write_text(text[:start] + "\n" + table + "\n" + text[end:], encoding="utf-8")
    return 0


def check_command(folder, devices, verbose=False, out=sys.stdout):
    """Run every check; print the per-document table (and failures); return the exit status."""
    items = runner.collect(folder)
    if not items:
        print(f"no case files in {folder}", file=out)
        return 1
    rows, failures = {}, []
    for item in items:
        row = rows.setdefault(item.file.name, {"title": item.file.document.title if item.file.document else "",
                                               "passed": 0, "failed": 0, "skipped": 0})
        for device in devices if item.error is None else [None]:
            if skip_reason(device):
                row["skipped"] += 1
                continue
            result = runner.run(item, device=device or "cpu")
            row["passed" if result.passed else "failed"] += 1
            if not result.passed:
                failures.append(result.report)
    _print_table(rows, out)
    for reason in dict.fromkeys(filter(None, map(skip_reason, devices))):
        print(f"skipped: {reason}", file=out)
    errata = [item for item in items if item.error is None and item.check.erratum is not None]
    if errata:
        print(f"\nerrata: {len(errata)} printed values reproduce only with the document's own mistake "
              f"(checked that way; -v gives the notes):", file=out)
        for item in errata:
            print(f"  {item.id} ({item.location})" + (f": {item.check.erratum.note}" if verbose else ""), file=out)
    for report in failures:
        print("\nFAILED " + (report if verbose else report.split("\n", 1)[0]), file=out)
    if failures and not verbose:
        print("\n(-v prints each failure in full)", file=out)
    return 1 if failures else 0


def _print_table(rows, out):
    width = max(len(f"{name}  {row['title']}") for name, row in rows.items())
    width = max(width, len("document"))
    print(f"{'document':<{width}}  {'passed':>6}  {'failed':>6}  {'skipped':>7}", file=out)
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for name, row in rows.items():
        label = f"{name}  {row['title']}"
        print(f"{label:<{width}}  {row['passed']:>6}  {row['failed']:>6}  {row['skipped']:>7}", file=out)
        for key in totals:
            totals[key] += row[key]
    print(f"{'total':<{width}}  {totals['passed']:>6}  {totals['failed']:>6}  {totals['skipped']:>7}", file=out)


if __name__ == "__main__":
    sys.exit(main())
