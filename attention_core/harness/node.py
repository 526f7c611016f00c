"""A mapping of a case file as a model: known keys only, its line, and unions of forms.

:class:`Node` is the base of every class of the case model: it refuses an unknown or missing
key with a message that names the keys expected, and remembers the line each value starts on.
:func:`union` makes a field that takes one of several forms, each a class chosen by the one key
of its own a mapping has, with the short forms a file may write instead (normalised before
validation, and described in the JSON Schema).
"""

import functools
from typing import Annotated, ClassVar, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, PrivateAttr, Tag, model_validator
from pydantic_core import PydanticCustomError

from attention_core.harness.text import quote


class Node(BaseModel):
    """A mapping of a case file: known keys only, and the line it starts on."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    what: ClassVar[str] = "a mapping"
    _line: int = PrivateAttr(0)

    @property
    def line(self):
        """The 1-based line of the file where this starts."""
        return self._line

    @model_validator(mode="wrap")
    @classmethod
    def _read(cls, data, handler, info):
        if isinstance(data, dict):
            _check_keys(cls, data)
        elif not isinstance(data, cls):
            raise _error("not_mapping", f"{cls.what} must be a mapping")
        made = handler(data)
        if isinstance(data, dict):
            made._line = getattr(data, "line", 0)
            _place_children(made, data)
        return cls._settle(made, info.context or {})

    @classmethod
    def _settle(cls, made, context):
        """What depends on more than one field, once the fields have validated."""
        return made


def _error(kind, message, **context):
    return PydanticCustomError(kind, "{message}", {"message": message, **context})


@functools.cache
def _keys(cls):
    return tuple(field.alias or name for name, field in cls.model_fields.items())


@functools.cache
def _fields(cls):
    return frozenset(cls.model_fields)


@functools.cache
def _required(cls):
    return tuple(k for k in _keys(cls) if cls.model_fields[k].is_required())


def _check_keys(cls, data):
    allowed = _keys(cls)
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise _error("unknown_key", f"unknown key {quote(unknown[0])} in {cls.what}; expected one of "
                                    f"{', '.join(sorted(allowed))}{_hint(unknown)}", key=unknown[0])
    missing = [k for k in _required(cls) if k not in data]
    if missing:
        raise _error("missing_key", f"{cls.what} is missing {', '.join(map(repr, missing))}")


def _hint(unknown):
    if any(c in str(k) for k in unknown for c in "()[]"):
        return " (an expression with commas inside {...} must be quoted: {expr: \"f(a, b)\"})"
    return ""


def _place_children(made, data):
    """Give each child the line its value starts on (a short form has no line of its own)."""
    value_lines = getattr(data, "value_lines", None)
    if value_lines is None:
        return
    fields = _fields(type(made))
    for name, raw in data.items():  # a field the mapping does not write holds its default: no line to give
        if name not in fields:
            continue
        value = getattr(made, name)
        if isinstance(value, Node):
            value._line = value_lines[name]
        elif isinstance(value, dict) and hasattr(raw, "value_lines"):
            for key, child in value.items():
                if isinstance(child, Node) and key in raw.value_lines:
                    child._line = raw.value_lines[key]
        elif isinstance(value, tuple) and hasattr(raw, "item_lines"):
            for child, line in zip(value, raw.item_lines):
                if isinstance(child, Node):
                    child._line = line


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
    def pick(value):
        if isinstance(value, Node):
            return _tag(next(f for f in forms if f in type(value).model_fields))
        return _tag(next(k for k in forms if k in value))
    return Discriminator(pick)


def _one_form(classes, forms, what, short):
    """A before-validator: the short form made long, then exactly one of ``forms``, and no unknown key."""
    allowed = sorted({k for c in classes for k in _keys(c)})

    def check(value):
        value = short(value)
        if isinstance(value, Node):
            return value
        if not isinstance(value, dict):
            raise _error("form", f"{what} needs exactly one of: {', '.join(forms)}; got {quote(value)}")
        unknown = [k for k in value if k not in allowed]
        if unknown:
            raise _error("unknown_key", f"unknown key {quote(unknown[0])} in {what}; expected one of "
                                        f"{', '.join(allowed)}{_hint(unknown)}", key=unknown[0])
        found = [k for k in forms if k in value]
        if len(found) != 1:
            raise _error("form", f"{what} needs exactly one of: {', '.join(forms)}"
                                 + (f"; got {', '.join(found)}" if found else ""))
        return value
    return check


def union(classes, forms, what, short, *short_schemas):
    tagged = tuple(Annotated[c, Tag(_tag(f))] for c, f in zip(classes, forms))
    return Annotated[Union[tagged], _form(forms), BeforeValidator(_one_form(classes, forms, what, short)),
                     ShortForms(*short_schemas)]
