"""Naming mistakes: the library of mistakes, the slips and operators made on a reference, the diagnosis,
adequacy and the feedback's sentences."""
