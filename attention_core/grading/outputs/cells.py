"""CSV cells a spreadsheet reads as text, never as a formula (OWASP's guidance on CSV injection).

A submission's file name, a student's name on a platform, a mistake's words: any text cell of a CSV the
batch writes that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is written with a
``'`` in front, as a spreadsheet shows text; so is a cell that already starts with ``'`` followed by one
of those (or by another ``'``), so that reading the file back (:func:`original`) gives every cell's text
as it was. Numbers are written as they are.
"""

import csv

FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def safe(cell):
    """``cell`` as it is written: text that would start a formula gets a ``'`` in front."""
    if not isinstance(cell, str) or _number(cell):
        return cell
    if cell.startswith(FORMULA) or (cell.startswith("'") and cell[1:2] in (*FORMULA, "'")):
        return "'" + cell
    return cell


def original(cell):
    """The text :func:`safe` was given, from what it wrote."""
    if isinstance(cell, str) and cell.startswith("'") and cell[1:2] in (*FORMULA, "'"):
        return cell[1:]
    return cell


def write_rows(handle, rows):
    """Write ``rows`` to the open ``handle`` as CSV, every cell made safe."""
    csv.writer(handle).writerows([[safe(cell) for cell in row] for row in rows])


def read_rows(handle):
    """The rows of a CSV this module wrote, every cell's text as it was."""
    return [[original(cell) for cell in row] for row in csv.reader(handle)]
