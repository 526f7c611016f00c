"""An assignment's settings, ``assignment.yaml``: what a teacher sets once for the whole assignment.

Every key is optional; without the file the defaults below hold (every case visible, one point a
check, one point a backward check, properties shown as feedback worth 0, 5 s of CPU time a call, 60 s a
submission, modules in ``eval`` mode).
Validated like case files: a declared model, a JSON Schema (``python -m attention_core.harness.reading.settings``)
and each problem at its file:line:column.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.fields import MAX_POINTS, VISIBILITIES
from attention_core.harness.text import escape, shorten

CALL_TIMEOUT, BUDGET, POINTS, GRADIENT_POINTS, PROPERTY_POINTS = 5.0, 60.0, 1.0, 1.0, 1.0
PROPERTY_KINDS = (
    "rows_sum_to_one",
    "causal",
    "permutation",
    "permutation_rows",
    "shift",
    "one_head",
    "split_merge",
    "constant",
    "moments",
    "batched",
    "large_inputs",
    "deterministic",
)
Points = Annotated[float, Field(ge=0, le=MAX_POINTS, allow_inf_nan=False)]
Seconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=200)]


class Override(BaseModel):
    """Points, gradient points and visibility of the checks whose id starts with the key (a file, a
    case ``file/case`` or a check ``file/case/check``); each of the three is taken from the longest
    matching key that sets it (a key that sets visibility alone leaves the points to a shorter one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    points: Points | None = None
    gradient_points: Points | None = None
    visibility: Literal[VISIBILITIES] | None = None


class Settings(BaseModel):
    """``assignment.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="attention-core assignment settings")
    title: Annotated[str, Field(max_length=200)] | None = None
    graded: list[Identifier] | None = Field(
        None, description="the names graded (default: every public function and nn.Module class of reference.py)"
    )
    returns: dict[Identifier, list[Identifier]] = Field(
        default_factory=dict,
        description="the names of a graded name's results (default: read from its return statement, else 'out')",
    )
    points: Points = Field(POINTS, description="points of a check whose case file gives none")
    gradient_points: Points = Field(GRADIENT_POINTS, description="points of each backward check (0: none)")
    visibility: Literal[VISIBILITIES] = "visible"
    call_timeout: Seconds = Field(CALL_TIMEOUT, description="seconds one call may take")
    budget: Seconds = Field(BUDGET, description="seconds one submission may take in all")
    mode: Literal["eval", "train"] = Field(
        "eval", description="the mode a module is called in, unless a case says 'mode'"
    )
    property_points: Points | None = Field(
        None,
        description="points of each property check (0: none but those "
        "checks: gives points; not given: shown as feedback "
        "worth 0 points)",
    )
    properties: dict[Identifier, list[Literal[PROPERTY_KINDS]]] = Field(
        default_factory=dict,
        description="per graded name, the properties it is checked for (default: every "
        "one its reference holds; [] for none)",
    )
    checks: dict[Annotated[str, Field(max_length=400)], Override] = Field(
        default_factory=dict, description="per file, case or check: points, gradient_points, visibility"
    )

    def override(self, check_id):
        """What ``checks:`` sets for ``check_id`` (``file/case/check``, or a property's id): each key from the
        most specific entry that sets it; an empty Override where none does."""
        return Override(**{key: value for key, (value, _) in self.overriding(check_id).items()})

    def overriding(self, check_id):
        """key -> (its value, the ``checks:`` entry it comes from) for each key ``checks:`` sets for ``check_id``."""
        parts = check_id.split("/")
        found = {}
        for n in range(len(parts), 0, -1):
            entry = self.checks.get("/".join(parts[:n]))
            if entry is None:
                continue
            for key in Override.model_fields:
                value = getattr(entry, key)
                if value is not None and key not in found:
                    found[key] = (value, "/".join(parts[:n]))
        return found


class SettingsError(ValueError):
    """A problem in ``assignment.yaml``, at its line and column."""


def unknown_checks(path, settings, check_ids):
    """``file:line:col: ...`` for each key of ``checks:`` in ``path`` that names no file, case or check of
    ``check_ids`` (a misspelt id would otherwise leave its check as it was, in silence)."""
    known = set()
    for check_id in check_ids:
        parts = check_id.split("/")
        known |= {"/".join(parts[:n]) for n in range(1, len(parts) + 1)}
    wrong = [key for key in settings.checks if key not in known]
    if not wrong:
        return []
    tree = yaml_lines.read(Path(path), escape(str(path)))
    problems = []
    for key in wrong:
        line, column = yaml_lines.locate(tree, ("checks", key), key=True)
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(
            f"{escape(str(path))}:{line}:{column}: checks: {shorten(key)!r} names no file, case or check "
            f"of the assignment's cases{hint}"
        )
    return problems


def shadowed_points(path, settings, items):
    """``file:line:col: ...`` for each key of ``checks:`` in ``path`` whose points replace points that a case file
    gives its checks (``items``, loaded): the case file's own number is then never used."""
    shadowing = {}
    for item in items:
        if item.error is not None or item.check.kind != "call":
            continue
        found = settings.overriding(item.id).get("points")
        if (
            found is not None
            and float(found[0]) != float(item.check.points)
            and float(item.check.points) != float(settings.points)
        ):
            shadowing.setdefault(found[1], []).append(item)
    if not shadowing:
        return []
    tree = yaml_lines.read(Path(path), escape(str(path)))
    problems = []
    for key, shadowed in shadowing.items():
        line, column = yaml_lines.locate(tree, ("checks", key), key=True)
        first = shadowed[0]
        more = f" (and {len(shadowed) - 1} more checks)" if len(shadowed) > 1 else ""
        problems.append(
            f"{escape(str(path))}:{line}:{column}: checks: {shorten(key)!r} gives "
            f"{settings.checks[key].points:g} points to {shorten(first.id, 120)}{more}, over the "
            f"{first.check.points:g} its case file gives: the case file's number is not used"
        )
    return problems


def read_settings(path):
    """The settings of ``path``; the defaults where there is no such file."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return Settings()
    shown = escape(str(path))
    try:
        tree = yaml_lines.read(path, shown)
    except yaml_lines.CaseError as err:
        raise SettingsError(str(err)) from None
    if tree is None:
        return Settings()
    try:
        return Settings.model_validate(tree)
    except pydantic.ValidationError as err:
        problem = err.errors(include_url=False)[0]
        loc = problem["loc"]
        extra = problem["type"] == "extra_forbidden"
        line, column = yaml_lines.locate(tree, loc, key=extra)
        where = ".".join(str(p) for p in loc) or "the file"
        if extra:
            known = ", ".join(sorted(Settings.model_fields if len(loc) == 1 else Override.model_fields))
            message = f"unknown key {shorten(str(loc[-1]))!r} (known: {known})"
        else:
            message = f"{where}: {shorten(problem['msg'], 200)}, got {shorten(repr(problem.get('input')), 80)}"
        raise SettingsError(f"{shown}:{line}" + (f":{column}" if column else "") + f": {message}") from None


def json_schema():
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Settings.model_json_schema()}


if __name__ == "__main__":
    json.dump(json_schema(), sys.stdout, indent=2)
    sys.stdout.write("\n")
