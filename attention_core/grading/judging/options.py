"""What a teacher may set for one grading run, over the assignment's own settings.

Each option left None takes the assignment's setting (``assignment.yaml``), whose defaults live in
one place: :mod:`attention_core.harness.reading.settings` (5 s of CPU time a call, 60 s a submission,
1 point a backward check and a property).
"""

import dataclasses

from attention_core.harness.text import first_given


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradingOptions:
    """One run's options: frozen, given by name."""

    call_timeout: float | None = None  # CPU seconds one call may take
    budget: float | None = None  # CPU seconds one submission may take in all
    gradient_points: float | None = None  # points of each backward check; 0: none
    property_points: float | None = None  # points of each property check; 0: none

    def over(self, settings) -> "GradingOptions":
        """Every option decided: the one given here, else the assignment's ``settings``."""
        return GradingOptions(
            **{f.name: first_given(getattr(self, f.name), getattr(settings, f.name)) for f in dataclasses.fields(self)}
        )

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
