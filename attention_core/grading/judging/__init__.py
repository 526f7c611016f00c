"""Judging a submission: the grader, its grades, backward and property checks, the run's options."""
