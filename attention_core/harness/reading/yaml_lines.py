"""Reading a case file's YAML: plain mappings and lists that remember where each value starts.

Safe and bounded: no tags, no timestamps, aliases expanded to at most :data:`MAX_NODES` nodes
for the whole document (an alias nest of a few lines can stand for billions), and every
problem of reading, PyYAML's own constructors included, is a :class:`CaseError` at a line.
"""

import errno
import os
import re
import stat

import yaml

from attention_core.harness.text import escape, read_float, shorten

MAX_NODES = 10**6  # nodes of the document with every alias expanded
MAX_BYTES = 2**24  # a case file of 16 MiB is far past any document's worked examples
_MERGE, _STR = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:str"
_SEQ, _MAP = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_PLAIN: dict = {}  # a plain scalar's text -> its value (numbers, booleans, null, text)
_PLAIN_SIZE = 2**16  # the most entries _PLAIN keeps


class CaseError(Exception):
    """A problem in a case file, at a line (and a column where one is known)."""

    def __init__(self, path, line, message, case_id=None, column=None):
        self.path, self.line, self.message, self.column = path, line, message, column
        self.case_id = case_id  # the case it belongs to, when the case has a usable id
        super().__init__(f"{self.where}: {message}")

    @property
    def where(self):
        """``path:line`` or ``path:line:column``."""
        return f"{escape(self.path)}:{self.line}" + (f":{self.column}" if self.column else "")

    def at(self, path, case_id=None):
        """This error, in the file ``path`` (and the case ``case_id``)."""
        return CaseError(path, self.line, self.message, case_id, self.column)


class OutOfRange(float):
    """A number the file wrote beyond float64's range (read as an infinity) or below it (read as 0):
    ``why`` says so. The part of the file that holds one does not load (see :func:`out_of_range_in`)."""

    def __new__(cls, value, why):
        number = super().__new__(cls, value)
        number.why = why
        return number


def out_of_range_in(tree):
    """(path, OutOfRange) of the first such number in ``tree`` (a path as :func:`locate` takes it), or None.
    A node shared through YAML aliases is walked once."""
    todo, seen = [((), tree)], set()
    while todo:
        path, node = todo.pop()
        if isinstance(node, OutOfRange):
            return path, node
        if isinstance(node, (dict, list)) and id(node) not in seen:
            seen.add(id(node))
            items = node.items() if isinstance(node, dict) else enumerate(node)
            todo += reversed([((*path, key), value) for key, value in items])
    return None


class Map(dict):
    """A mapping that remembers where it starts and where each key and value starts (1-based)."""

    __slots__ = ("line", "column", "places")

    def __init__(self, line=0, column=0):
        super().__init__()
        self.line, self.column = line, column
        self.places = {}  # key -> (key's line, key's column, value's line, value's column)


class Seq(list):
    """A list that remembers where it starts and where each item starts (1-based)."""

    __slots__ = ("line", "column", "places")

    def __init__(self, line=0, column=0):
        super().__init__()
        self.line, self.column = line, column
        self.places = []  # (line, column) of each item


_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML was built with it


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]  # a base chosen at import
    text_lines = ()

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as err:  # PyYAML's constructors: !!int abc, 0x_
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise CaseError(
                None,
                node.start_mark.line + 1,
                f"cannot read {shorten(node.value)!r} as {escape(tag)}: {shorten(str(err))}",
                column=node.start_mark.column + 1,
            ) from None


def _content_at(loader, event):
    """(line, column) of a value's first character of content; a block scalar's starts on the next line."""
    mark = event.start_mark
    style = getattr(event, "style", None)  # '' or None: plain scalars, collections and aliases
    if style in ("|", ">"):
        text = loader.text_lines[mark.line + 2] if mark.line + 2 < len(loader.text_lines) else ""
        return mark.line + 2, len(text) - len(text.lstrip(" ")) + 1
    if style in ("'", '"'):
        return mark.line + 1, mark.column + 2
    return mark.line + 1, mark.column + 1


_SCALAR, _ALIAS, _MAPPING = yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent
_MAPPING_END, _SEQUENCE_END = yaml.MappingEndEvent, yaml.SequenceEndEvent


class _Builder:
    """Map, Seq and scalars straight from the parser's events, in one pass.

    Depth and size are counted as the events come, so a document nested past MAX_DEPTH or whose
    aliases expand it past MAX_NODES is refused before anything deeper is read. An alias is the
    value its anchor made (shared, never copied); its size counts at every place it is used.
    """

    def __init__(self, loader):
        self.loader, self.anchors, self.open, self.aliased = loader, {}, set(), False

    def document(self):
        loader = self.loader
        loader.get_event()  # the stream's start
        if loader.check_event(yaml.StreamEndEvent):
            loader.get_event()
            return None
        start = loader.get_event()
        value, _ = self.value(loader.get_event(), 1)
        loader.get_event()  # the document's end
        if not loader.check_event(yaml.StreamEndEvent):
            raise yaml.composer.ComposerError(
                "expected a single document in the stream",
                start.start_mark,
                "but found another document",
                loader.get_event().start_mark,
            )
        return value

    def value(self, event, depth):
        """(value, size) of the node that ``event`` starts; reads the events up to its end."""
        kind = type(event)
        if kind is _SCALAR:
            made = (self.scalar(event), 1)
        elif kind is _ALIAS:
            return self.alias(event)
        else:
            if depth > MAX_DEPTH:
                raise _at(event, _TOO_DEEP)
            if event.tag not in (None, "!", _SEQ, _MAP):
                raise _at(event, f"unknown YAML tag {shorten(event.tag)!r}: a case file is plain YAML, without tags")
            if event.anchor is not None:
                self.open.add(event.anchor)
            made = (self.mapping if kind is _MAPPING else self.sequence)(event, depth)
            if made[1] > MAX_NODES:
                if not self.aliased:  # a file simply that large: no alias to blame
                    raise _at(
                        event,
                        f"this value holds more than {MAX_NODES} values; the limit is {MAX_NODES} for "
                        f"a whole file (draw large tensors from a seed instead)",
                    )
                raise _at(
                    event,
                    f"YAML aliases expand this value to more than {MAX_NODES} values; the limit is "
                    f"{MAX_NODES} for a whole file",
                )
            self.open.discard(event.anchor)
        if event.anchor is not None:
            self.anchors[event.anchor] = made
        return made

    def alias(self, event):
        if event.anchor in self.open:
            raise _at(event, "a YAML alias refers to a node that contains it")
        if event.anchor not in self.anchors:
            raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}", event.start_mark)
        self.aliased = True
        return self.anchors[event.anchor]

    def scalar(self, event):
        tag, text = event.tag, event.value
        if tag is None:
            if not event.implicit[0]:
                return text  # quoted: text
            if text in _PLAIN:
                return _PLAIN[text]
        plain = tag is None
        if tag is None or tag == "!":
            tag = self.loader.resolve(yaml.ScalarNode, text, event.implicit)
        if tag == _STR:
            value = text
        else:
            value = self.loader.construct_object(
                yaml.ScalarNode(tag, text, event.start_mark, event.end_mark, event.style), deep=True
            )
            if isinstance(value, float):
                value, why = read_float(text.replace("_", ""), value, ".inf (or -.inf)")
                value = OutOfRange(value, why) if why else value
        if plain:  # a plain scalar's value depends on its text alone: read each text once
            if len(_PLAIN) >= _PLAIN_SIZE:
                _PLAIN.clear()
            _PLAIN[text] = value
        return value

    def sequence(self, event, depth):
        mark = event.start_mark
        result, size = Seq(mark.line + 1, mark.column + 1), 1
        get, loader, places, depth = self.loader.get_event, self.loader, result.places, depth + 1
        while True:
            item = get()
            if type(item) is _SEQUENCE_END:
                return result, size
            value, n = self.value(item, depth)
            result.append(value)
            places.append(_content_at(loader, item))
            size += n

    def mapping(self, event, depth):
        mark = event.start_mark
        result, size, merged = Map(mark.line + 1, mark.column + 1), 1, []
        get, loader, places, depth = self.loader.get_event, self.loader, result.places, depth + 1
        while True:
            key_event = get()
            kind = type(key_event)
            if kind is _MAPPING_END:
                break
            if kind is not _SCALAR and kind is not _ALIAS:
                raise _at(key_event, "a mapping key must be a plain word")
            is_merge = (
                kind is _SCALAR
                and key_event.value == "<<"
                and key_event.tag is None
                and loader.resolve(yaml.ScalarNode, "<<", key_event.implicit) == _MERGE
            )
            key, n = (None, 1) if is_merge else self.value(key_event, depth)
            value_event = get()
            value, m = self.value(value_event, depth)
            size += n + m
            if is_merge:
                merged += _merged(value, value_event)
                continue
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise _at(key_event, "a mapping key must be a plain word")
            if key in result:  # merged pairs join after the mapping's own
                raise _at(key_event, f"duplicate key {shorten(key)!r}")
            result[key] = value
            places[key] = _content_at(loader, key_event) + _content_at(loader, value_event)
        _merge(result, merged)
        return result, size


def _merged(value, event):
    """The mappings a merge key (``<<: *base`` or ``<<: [*a, *b]``) copies, the first one winning."""
    maps = value if isinstance(value, Seq) else [value]
    if not all(isinstance(m, Map) for m in maps):
        raise _at(event, "a merge key ('<<') takes a mapping or a list of mappings")
    return maps


def _merge(result, merged):
    """Give ``result`` the pairs of ``merged`` that it does not write itself (YAML's merge rule), first."""
    if not merged:
        return
    own, own_places = dict(result), dict(result.places)
    result.clear()
    result.places.clear()
    for source in merged:
        for key, value in source.items():
            if key not in result and key not in own:
                result[key] = value
                result.places[key] = source.places[key]
    result.update(own)
    result.places.update(own_places)


def _at(event, message):
    return CaseError(None, event.start_mark.line + 1, message, column=event.start_mark.column + 1)


def _unknown_tag(loader, node):
    raise CaseError(
        None,
        node.start_mark.line + 1,
        f"unknown YAML tag {shorten(node.tag)!r}: a case file is plain YAML, without tags",
        column=node.start_mark.column + 1,
    )


# YAML 1.2's core schema, not PyYAML's YAML 1.1 one: `1:30` and `yes` are text, `010` is ten, `1e-7` is a
# number, a date is text. Only numbers, booleans and null are read; everything else is text.
_Loader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
    ("merge", r"^(?:<<)$", "<"),  # YAML 1.1's merge key stays: case files share inputs with it
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
        r"|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
):
    _Loader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(_pattern), list(_first))


def _int(loader, node):
    """A YAML 1.2 integer: decimal (a leading 0 is not octal), ``0o`` octal or ``0x`` hexadecimal."""
    text = loader.construct_scalar(node)
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    base = 8 if body[:2] == "0o" else 16 if body[:2] == "0x" else 10
    return sign * int(body[2:] if base != 10 else body, base)


_Loader.add_constructor("tag:yaml.org,2002:int", _int)
_Loader.add_constructor(None, _unknown_tag)


MAX_DEPTH = 100  # levels of nested lists and mappings; a case file needs a handful


def read(path, shown):
    """The YAML of the file ``path`` as Map, Seq and scalars; raises :class:`CaseError` at ``shown``."""
    data = read_bytes(path, shown)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        line, column = before.count(b"\n") + 1, err.start - (before.rfind(b"\n") + 1) + 1
        raise CaseError(
            shown,
            line,
            f"the file is not UTF-8 text: byte 0x{data[err.start]:02x} cannot be read (save the file as UTF-8)",
            column=column,
        ) from None
    try:
        return parse(text)
    except CaseError as err:
        raise err.at(shown) from None


def read_bytes(path, shown):
    """The bytes of a plain file at ``path`` (through links), opened without blocking (a FIFO put in
    its place is refused, not waited on) and at most :data:`MAX_BYTES` of them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        why = (
            "a link that leads nowhere"
            if path.is_symlink() and isinstance(err, FileNotFoundError)
            else "a link loop"
            if err.errno == errno.ELOOP
            else f"{type(err).__name__}: {shorten(str(err))}"
        )
        raise CaseError(shown, 1, f"the file could not be read: {why}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(status.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(status.st_mode)
                else "a device"
                if stat.S_ISCHR(status.st_mode) or stat.S_ISBLK(status.st_mode)
                else "no plain file"
            )
            raise CaseError(shown, 1, f"the file could not be read: it is {kind}; a case file is a plain file")
        if status.st_size > MAX_BYTES:
            raise CaseError(shown, 1, f"the file is {status.st_size} bytes; the limit is {MAX_BYTES}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as err:
        raise CaseError(shown, 1, f"the file could not be read: {type(err).__name__}: {shorten(str(err))}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:  # it grew while read
        raise CaseError(shown, 1, f"the file is over {MAX_BYTES} bytes, the limit")
    return data


def parse(text):
    """Parse YAML ``text`` (see :func:`read`); errors carry no path."""
    try:
        return _parse(text)
    except _TooDeepForLibyaml as err:
        # libyaml (PyYAML 6.0.4 on) refuses past its own depth of 1000, and its scanner reads up to a line's
        # 1024 characters ahead, so it may answer before MAX_DEPTH is reached. The text up to where it stopped
        # holds every level it opened: read alone, MAX_DEPTH answers at the level it refuses.
        try:
            _parse(text[: err.index])
        except CaseError as first:
            if first.message == _TOO_DEEP:
                raise first from None
        raise CaseError(None, err.line, _TOO_DEEP, column=err.column) from None


_TOO_DEEP = f"the YAML nests deeper than {MAX_DEPTH} levels"


class _TooDeepForLibyaml(Exception):
    def __init__(self, mark):
        super().__init__()
        self.index, self.line, self.column = mark.index, mark.line + 1, mark.column + 1


def _parse(text):
    loader = _Loader(text)
    loader.text_lines = ("", *text.split("\n"))  # 1-based
    try:
        return _Builder(loader).document()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if err.problem == "exceeded maximum nesting depth" and mark is not None:
            raise _TooDeepForLibyaml(mark) from None
        opened = err.context_mark
        where = (
            f" opened at line {opened.line + 1}, column {opened.column + 1},"
            if err.context and opened is not None and opened.line != mark.line
            else ""
        )
        problem = " ".join(p for p in (err.context and err.context + where, err.problem) if p)
        if err.problem == "found character that cannot start any token" and mark is not None:
            # libyaml leaves the character out of its message; Python's reader names it: say which
            found = text[mark.index] if mark.index < len(text) else ""
            tab = " (a tab: YAML indents with spaces)" if found == "\t" else ""
            problem = problem.replace("found character", f"found character {found!r}{tab}")
        raise CaseError(
            None,
            mark.line + 1 if mark else 1,
            f"YAML syntax error: {escape(problem)}",
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow, at its position in the text
        before = text[: err.position]
        line, column = before.count("\n") + 1, err.position - (before.rfind("\n") + 1) + 1
        raise CaseError(
            None,
            line,
            f"the character {escape(chr(err.character))} (U+{err.character:04X}) is not allowed in YAML: remove it",
            column=column,
        ) from None
    except yaml.YAMLError as err:
        raise CaseError(None, 1, f"YAML error: {shorten(str(err))}") from None
    except RecursionError:
        raise CaseError(None, 1, "the file could not be read: nested too deeply") from None
    finally:
        loader.dispose()


def locate(tree, loc, *, key=False):
    """(line, column) of the value at ``loc`` (a validation error's path) in the YAML ``tree``.

    Parts of ``loc`` that are not in the YAML (a model's own names: union tags, the field a short
    form stands for) are skipped: the position stays at the nearest value the file wrote. With
    ``key``, the position of the last part's key.
    """
    line, column = getattr(tree, "line", 1) or 1, getattr(tree, "column", None)
    node = tree
    for i, part in enumerate(loc):
        if isinstance(node, Map) and not isinstance(part, bool) and part in node:
            key_line, key_column, line, column = node.places[part]
            if key and i == len(loc) - 1:
                return key_line, key_column
            node = node[part]
        elif isinstance(node, Seq) and isinstance(part, int) and 0 <= part < len(node):
            (line, column), node = node.places[part], node[part]
    return line, column
