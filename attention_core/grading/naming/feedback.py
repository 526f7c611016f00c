"""What a student reads of a check: the call as their function saw it, and what was wrong, in their words.

A student never sees the case files, so the feedback names no case-file path or line, and no variable of
a case: the call is shown with the parameter names of the function the student wrote, each tensor
argument by dtype and shape (in full where it is small), and each expectation by what the function
returned. The teacher's report (``report.html``, the terminal) keeps the file:line of every check.
"""

import torch

from attention_core import instances
from attention_core.harness.checking.results import MAX_FAILURES, Status
from attention_core.harness.text import escape_lines, shorten

SHOWN_ELEMENTS = 24  # a tensor argument this small is printed in full


def call_text(graded, name, args, kwargs):
    """``attention(q, k, v, scale=1) with q: float32 (4, 5) = tensor(...), ...`` for a call of ``graded``
    (an assignment's entry; None: positions are numbered): each argument given by position on a line of its own
    (a tensor by dtype and shape, its values where few; a number by its value), a keyword's in the call."""
    args = list(args)
    made, after = name, ""
    if args and instances.is_record(args[0]):
        record = args.pop(0)[instances.INSTANCE]
        shown = [_value(a) for a in record["args"]] + [f"{k}={_value(v)}" for k, v in record["kwargs"].items()]
        made = f"{name}({', '.join(shown)})"
        learned = set(record["state"]) - set(record.get("buffers", ()))  # (a positional table's class has none)
        after = f", the instance made in {record['mode']} mode" + (
            " with its parameters set to the reference's initial ones" if learned else ""
        )
    params = [p.name for p in graded.call_params] if graded is not None else []
    names = [params[i] if i < len(params) else f"argument {i + 1}" for i in range(len(args))]
    signature = ", ".join(
        [*names, *(f"{k}={_value(v) if not isinstance(v, torch.Tensor) else k}" for k, v in kwargs.items())]
    )
    lines = [f"{made}({signature}){after}"]
    for label, value in [*zip(names, args), *kwargs.items()]:
        if isinstance(value, torch.Tensor):
            lines.append(f"  {label}: {_tensor(value)}")
        elif label in names:  # a number given by position (alibi_bias(n_heads, T)): its value (a keyword's is shown)
            lines.append(f"  {label}: {_value(value)}")
    return "\n".join(lines)


def student_report(result, call="", returns=(), function="", *, unreadable=False):
    """The report of ``result`` as a student reads it: no case-file location, expectations named by what
    the function returned. ``unreadable``: the check's case file did not load (the teacher's to fix)."""
    if result.passed:
        return "passed"
    if unreadable:
        return "not graded: a case of this assignment could not be read (a problem of the assignment, not yours)"
    if result.status is Status.CASE_ERROR:
        return (
            "not graded: this check cannot be run on anyone's code (a mistake of the assignment's case, "
            "worth no points)"
        )
    body = [f"{result.status}: {result.message}"] if result.message else []
    for failure in result.failures[:MAX_FAILURES]:
        body.append(f"{_target(failure.target, returns, function)}: {failure.mismatch.message}")
    if len(result.failures) > MAX_FAILURES:
        body.append(f"… and {len(result.failures) - MAX_FAILURES} more expectations not met")
    if result.details and result.status is not Status.HARNESS_ERROR:
        body.append(result.details.rstrip("\n"))
    what = "backward pass of the call" if result.check_id.endswith("/backward") else "call"
    head = f"The {what}: {call}" if call else ""
    return escape_lines("\n\n".join(filter(None, [head, *body])))


def _target(target, returns, function):
    returned = f"what your `{function}` returns" if function else "what your code returns"
    if target in returns:
        place = f" (result {returns.index(target) + 1} of {len(returns)})" if len(returns) > 1 else ""
        return f"`{target}`, {returned}{place}"
    if target.startswith("d/d"):
        return f"the gradient {target}"
    if target in ("inputs", "gradient"):
        return f"the {target}"
    names = ", ".join(f"`{r}`" for r in returns)
    return f"`{shorten(target, 80)}`, computed from {returned} ({names})"


def _value(value):
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    return shorten(repr(value), 60)


def _tensor(t):
    head = f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape)}"
    if t.numel() <= SHOWN_ELEMENTS:
        text = " ".join(str(t.detach().cpu()).split())
        return f"{head} = {text}"
    return head


def renamed(missing, others):
    """What a student reads where a graded name is not defined and their file defines it under another name: one
    other public definition of the same kind with the same parameters (a class ``MHSA`` for
    ``MultiHeadSelfAttention``), or the same name written another way (``multiHeadAttention``). ``missing``: the
    assignment's entries not defined; ``others``: the submission's other definitions, [name, kind, parameters,
    forward's parameters]. One line each; a definition that could be either of two names is told for neither, and
    parameters alone tell nothing where there is one (``relu(x)`` is no ``gelu(x)``)."""

    def plain(name):
        return name.replace("_", "").lower()

    found = {}
    for entry in missing:
        params = [p.name for p in entry.params]
        call = [p.name for p in entry.call_params] if entry.is_class else []
        alike = [o for o in others if o[1] == entry.kind and plain(o[0]) == plain(entry.name)]
        same = [o for o in others if o[1] == entry.kind and list(o[2]) == params and list(o[3]) == call]
        same = same if len(params) + len(call) >= 2 else []  # (one parameter, `x`, tells no name from another)
        candidates = alike or same
        if len(candidates) == 1:
            shown = f"({', '.join(params)})" + (f" and a forward of ({', '.join(call)})" if entry.is_class else "")
            found[entry.name] = (
                candidates[0],
                "the same name written another way" if alike else f"a {entry.kind} with the same parameters {shown}",
            )
    claimed = [other[0] for other, _ in found.values()]
    return [
        f"`{shorten(name, 60)}` is not defined. Your file defines `{shorten(other[0], 60)}`, {why}: if it is your "
        f"`{shorten(name, 60)}`, give it that name; the assignment grades it by that name, so its checks earn "
        f"nothing until then."
        for name, (other, why) in found.items()
        if claimed.count(other[0]) == 1
    ]
