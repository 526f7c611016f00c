"""Grading students' implementations out of process: the worker, its wire format and the grader's client."""
