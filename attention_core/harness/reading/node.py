"""A mapping of a case file as a model: known keys only, its line, and unions of forms.

:class:`Node` is the base of every class of the case model: it refuses an unknown or missing
key with a message that names the keys expected, and remembers the line each value starts on.
:func:`union` makes a field that takes one of several forms, each a class chosen by the one key
of its own a mapping has, with the short forms a file may write instead (normalised before
validation, and described in the JSON Schema).
"""

import functools
from typing import Annotated, ClassVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Tag, model_validator
from pydantic_core import PydanticCustomError

from attention_core.harness.text import quote


class Node(BaseModel):
    """A mapping of a case file: known keys only, and the line it starts on."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    what: ClassVar[str] = "a mapping"
    # Set once the model is made (not fields, so not pydantic private attributes either: those cost a
    # Python call per model made); kept by a copy, left out of equality.
    __slots__ = ("_line",)

    @property
    def line(self):
        """The 1-based line of the file where this starts (0 where it was not read from a file)."""
        return getattr(self, "_line", 0)

    def __copy__(self):
        return self.updated({})

    def updated(self, changes):
        """A copy with the fields ``changes`` names changed, not validated again (``model_copy(update=...)``
        for a model of this frozen, extra-forbidding kind, without its generic steps)."""
        cls = type(self)
        made = cls.__new__(cls)
        _set(made, "__dict__", {**self.__dict__, **changes})
        _set(made, "__pydantic_extra__", None)
        _set(made, "__pydantic_fields_set__", self.__pydantic_fields_set__ | changes.keys())
        _set(made, "__pydantic_private__", None)
        for name in _slots(cls):
            if hasattr(self, name):
                _set(made, name, getattr(self, name))
        return made

    @model_validator(mode="wrap")
    @classmethod
    def _read(cls, data, handler, info):
        if isinstance(data, dict):
            _check_keys(cls, data)
        elif not isinstance(data, cls):
            raise _error("not_mapping", f"{cls.what} must be a mapping")
        made = handler(data)
        if isinstance(data, dict):
            _set(made, "_line", getattr(data, "line", 0))
            _place_children(made, data)
        return cls._settle(made, info.context or {})

    @classmethod
    def _settle(cls, made, context):
        """What depends on more than one field, once the fields have validated."""
        return made


_set = object.__setattr__


def _error(kind, message, **context):
    return PydanticCustomError(kind, "{message}", {"message": message, **context})


@functools.cache
def _slots(cls):
    return tuple(name for c in cls.__mro__ if issubclass(c, Node) for name in c.__dict__.get("__slots__", ()))


@functools.cache
def _keys(cls):
    return tuple(field.alias or name for name, field in cls.model_fields.items())


@functools.cache
def _required(cls):
    return tuple(k for k in _keys(cls) if cls.model_fields[k].is_required())


@functools.cache
def _allowed(cls):
    return frozenset(_keys(cls))


def _check_keys(cls, data):
    allowed = _allowed(cls)
    unknown = [] if allowed.issuperset(data) else [k for k in data if k not in allowed]
    if unknown:
        raise _error(
            "unknown_key",
            f"unknown key {quote(unknown[0])} in {cls.what}; expected one of "
            f"{', '.join(sorted(allowed))}{_hint(unknown)}",
            key=unknown[0],
        )
    missing = [k for k in _required(cls) if k not in data]
    if missing:
        raise _error("missing_key", f"{cls.what} is missing {', '.join(map(repr, missing))}")


def _hint(unknown):
    if any(c in str(k) for k in unknown for c in "()[]"):
        return ' (an expression with commas inside {...} must be quoted: {expr: "f(a, b)"})'
    return ""


_LEAVES = frozenset((str, int, float, bool))  # a field's value that holds no child


def _place_children(made, data):
    """Give each child the line its value starts on (a short form has no line of its own)."""
    places = getattr(data, "places", None)
    if places is None:
        return
    values = made.__dict__  # by field name: a key the model does not know as a field has no child here
    for name, raw in data.items():  # a field the mapping does not write holds its default: no line to give
        value = values.get(name)
        if value is None or type(value) in _LEAVES:
            continue
        if isinstance(value, Node):
            _set(value, "_line", places[name][2])
        elif isinstance(value, dict) and isinstance(raw, dict) and hasattr(raw, "places"):
            for key, child in value.items():
                if isinstance(child, Node) and key in raw.places:
                    _set(child, "_line", raw.places[key][2])
        elif isinstance(value, tuple) and isinstance(raw, list) and hasattr(raw, "places"):
            for child, (line, _) in zip(value, raw.places):
                if isinstance(child, Node):
                    _set(child, "_line", line)


class ShortForms:
    """JSON Schema of a field that also takes short forms: ``anyOf`` the short forms and the long one."""

    def __init__(self, *forms):
        self.forms = forms

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return {"anyOf": [*self.forms, handler(core_schema)]}


def _tag(form):
    return f"<{form}>"  # never a key of a case file, so an error's path can skip it


def _form(forms):
    """A discriminator: the tag of the one key of ``forms`` a mapping has."""
    tags = {f: _tag(f) for f in forms}

    def pick(value):
        keys = type(value).model_fields if isinstance(value, Node) else value
        for form in forms:
            if form in keys:
                return tags[form]
        return None  # no form: the before-validator has refused it already

    return Discriminator(pick)


def _one_form(classes, forms, what, short):
    """A before-validator: the short form made long, then exactly one of ``forms``, and no unknown key."""
    allowed = frozenset(k for c in classes for k in _keys(c))

    def check(value):
        value = short(value)
        if isinstance(value, Node):
            return value
        if not isinstance(value, dict):
            raise _error("form", f"{what} needs exactly one of: {', '.join(forms)}; got {quote(value)}")
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise _error(
                "unknown_key",
                f"unknown key {quote(unknown[0])} in {what}; expected one of "
                f"{', '.join(sorted(allowed))}{_hint(unknown)}",
                key=unknown[0],
            )
        found = [k for k in forms if k in value]
        if len(found) != 1:
            raise _error(
                "form",
                f"{what} needs exactly one of: {', '.join(forms)}" + (f"; got {', '.join(found)}" if found else ""),
            )
        return value

    return check


def union(classes, forms, what, short, *short_schemas):
    tagged = tuple(Annotated[c, Tag(_tag(f))] for c, f in zip(classes, forms))
    return Annotated[
        Union[tagged],  # noqa: UP007 (a union of a tuple of types made here: no `|` spelling)
        _form(forms),
        BeforeValidator(_one_form(classes, forms, what, short)),
        ShortForms(*short_schemas),
    ]
