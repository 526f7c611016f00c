"""A submission's property checks (``properties/``): every property's calls made in one round trip, then each
relation judged in the grader. A mixin of the Grader."""

from attention_core.grading import properties
from attention_core.grading.judging.grades import Grade, headline
from attention_core.grading.naming import feedback
from attention_core.grading.process import replies
from attention_core.grading.properties import worth
from attention_core.grading.server import wire
from attention_core.harness.checking.results import CallFailed, Result, Status

PROPERTY_REPLY = 1 << 20  # bytes of a reply beyond its tensors, for a submission's property calls together


class PropertyGrades:
    """The Grader's property checks (its assignment, preparation, time limit and caches are the grader's)."""

    @property
    def probes(self):
        """The assignment's properties (see properties.py), made once per grader."""
        if self._probes is None:
            runnable = [i for i in self.items if i.error is None and not self._case_refused(i)]
            self._probes = properties.probes(self.assignment, runnable, self.preparation, self.options.property_points)
            self.diagnoser.probes = self._probes
        return self._probes

    def _property_grades(self, submission, functions, problem):
        """A grade per property: every property's calls made in one round trip (a second one for the calls
        made from the first's results), then each relation judged here."""
        probes = self.probes
        if not probes:
            return []
        values = {}
        if functions is None or submission.status != replies.OK:
            failed = CallFailed(Status.IMPLEMENTATION_ERROR, headline(problem) or "the submission did not import")
        else:
            failed = None
            self._make_property_calls([c for p in probes for c in p.calls], submission, functions, values, "properties")
            more = properties.second_calls(probes, values)
            if more:
                self._make_property_calls(more, submission, functions, values, None)
        grades = []
        for probe in probes:
            why, broken = (failed.status, failed.message) if failed is not None else probe.verdict(values)
            item = properties.PropertyItem(probe)
            status = Status.PASSED if broken is None else why or Status.FAILED
            result = Result(status, probe.id, item.location, f"property: {probe.title}", message=broken or "")
            grades.append(
                Grade(
                    probe.id,
                    item,
                    result,
                    probe.points if broken is None else 0.0,
                    probe.points,
                    worth.of_property(self.assignment, probe).visibility,
                    "property",
                    call=self._property_call_text(probe),
                )
            )
        return grades

    def _make_property_calls(self, calls, submission, functions, values, reuse):
        """Make ``calls`` (each once, in order) and put each one's value, or CallFailed, in ``values``."""
        unique = list({id(c): c for c in calls}.values())
        asked, positions = [], []
        for position, call in enumerate(unique):
            if call.name in functions.timed_out:
                values[call] = CallFailed(Status.TIMEOUT, f"`{call.name}` timed out earlier (not called again)")
            elif call.name not in submission.names:
                values[call] = CallFailed(Status.NOT_IMPLEMENTED, f"the implementation has no `{call.name}`")
            else:
                asked.append(call)
                positions.append(position)
        limit = PROPERTY_REPLY + sum(4 * wire.nbytes([c.args, c.kwargs]) + (64 << 10) for c in asked)
        # The request's bytes are kept for the batch under a key naming the very calls asked: submissions that
        # define other names ask other calls, and each gets its own request.
        outcomes = submission.call_all(
            [(c.name, c.args, c.kwargs) for c in asked],
            timeout=self.options.call_timeout,
            reuse=None if reuse is None else (reuse, tuple(positions)),
            limit=limit,
        )
        names = list(dict.fromkeys(c.name for c in asked))
        if len(names) > 1 and outcomes and outcomes[0].status in (replies.TIMEOUT, replies.CRASHED):
            # One call hung or killed the process: each name's calls again on their own, so that it is that
            # name's properties alone that fail.
            by_name = {}
            for name in names:
                mine = [c for c in asked if c.name == name]
                by_name.update(
                    zip(
                        map(id, mine),
                        submission.call_all(
                            [(c.name, c.args, c.kwargs) for c in mine], timeout=self.options.call_timeout, limit=limit
                        ),
                    )
                )
            outcomes = [by_name[id(c)] for c in asked]
        for call, outcome in zip(asked, outcomes):
            try:
                values[call] = functions.value(call.name, outcome)
            except CallFailed as failed:
                values[call] = failed

    def _property_call_text(self, probe):
        if probe.id not in self._call_texts:
            call = probe.parts[0].base.call if probe.parts and probe.parts[0].base is not None else None
            self._call_texts[probe.id] = (
                ""
                if call is None
                else feedback.call_text(self.assignment.graded.get(call.name), call.name, call.args, call.kwargs)
            )
        return self._call_texts[probe.id]
