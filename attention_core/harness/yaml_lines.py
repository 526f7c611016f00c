"""Reading a case file's YAML: plain mappings and lists that remember where each value starts.

Safe and bounded: no tags, no timestamps, aliases expanded to at most :data:`MAX_NODES` nodes
for the whole document (an alias nest of a few lines can stand for billions), and every
problem of reading, PyYAML's own constructors included, is a :class:`CaseError` at a line.
"""

import re

import yaml

from attention_core.harness.text import escape, shorten

MAX_NODES = 10**6  # nodes of the document with every alias expanded
MAX_BYTES = 2**24  # a case file of 16 MiB is far past any document's worked examples
_MERGE = "tag:yaml.org,2002:merge"


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


class Map(dict):
    """A mapping that remembers where each key and value starts (1-based lines and columns)."""

    line = column = 0

    def __init__(self):
        super().__init__()
        self.key_lines, self.value_lines, self.key_cols, self.value_cols = {}, {}, {}, {}


class Seq(list):
    """A list that remembers where each item starts."""

    line = column = 0

    def __init__(self):
        super().__init__()
        self.item_lines, self.item_cols = [], []


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    text_lines = ()

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as err:  # PyYAML's constructors: !!int abc, 0x_
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise CaseError(None, node.start_mark.line + 1, f"cannot read {shorten(node.value)!r} as {escape(tag)}: "
                                                            f"{shorten(str(err))}", column=node.start_mark.column + 1)


def _content_at(loader, node):
    """(line, column) of a node's first character of content; a block scalar's starts on the next line."""
    line, column = node.start_mark.line + 1, node.start_mark.column + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        text = loader.text_lines[line + 1] if line + 1 < len(loader.text_lines) else ""
        return line + 1, len(text) - len(text.lstrip(" ")) + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("'", '"'):
        return line, column + 1
    return line, column


def _key(loader, key_node):
    key = loader.construct_object(key_node, deep=True)
    if not isinstance(key, (str, int, float, bool)) and key is not None:
        raise CaseError(None, key_node.start_mark.line + 1, "a mapping key must be a plain word",
                        column=key_node.start_mark.column + 1)
    return key


def _construct_map(loader, node):
    own = [(k, v) for k, v in node.value if k.tag != _MERGE]
    loader.flatten_mapping(node)  # puts the merged pairs first
    merged = node.value[:len(node.value) - len(own)]
    result = Map()
    result.line, result.column = node.start_mark.line + 1, node.start_mark.column + 1
    seen = set()
    for pairs, overridden in ((merged, True), (own, False)):
        for key_node, value_node in pairs:
            key = _key(loader, key_node)
            if not overridden:  # a merge key's pairs give way to the mapping's own (YAML's merge rule)
                if key in seen:
                    raise CaseError(None, key_node.start_mark.line + 1, f"duplicate key {shorten(key)!r}",
                                    column=key_node.start_mark.column + 1)
                seen.add(key)
            result[key] = loader.construct_object(value_node, deep=True)
            result.key_lines[key], result.key_cols[key] = _content_at(loader, key_node)
            result.value_lines[key], result.value_cols[key] = _content_at(loader, value_node)
    return result


def _construct_seq(loader, node):
    result = Seq()
    result.line, result.column = node.start_mark.line + 1, node.start_mark.column + 1
    for item in node.value:
        result.append(loader.construct_object(item, deep=True))
        line, column = _content_at(loader, item)
        result.item_lines.append(line)
        result.item_cols.append(column)
    return result


def _unknown_tag(loader, node):
    raise CaseError(None, node.start_mark.line + 1, f"unknown YAML tag {shorten(node.tag)!r}: a case file is plain "
                                                    f"YAML, without tags", column=node.start_mark.column + 1)


# YAML 1.1 reads 1e-7 (no dot) as text; a case file means a number.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
# A date stays text (a note saying 2024-02-30 is not an error); only numbers, booleans and null are read.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)
_Loader.add_constructor(None, _unknown_tag)


MAX_DEPTH = 100  # levels of nested lists and mappings; a case file needs a handful


def read(path, shown):
    """The YAML of the file ``path`` as Map, Seq and scalars; raises :class:`CaseError` at ``shown``."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise CaseError(shown, 1, f"the file is {path.stat().st_size} bytes; the limit is {MAX_BYTES}")
        data = path.read_bytes()
    except OSError as err:
        raise CaseError(shown, 1, f"the file could not be read: {type(err).__name__}: {shorten(str(err))}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[:err.start]
        line, column = before.count(b"\n") + 1, err.start - (before.rfind(b"\n") + 1) + 1
        raise CaseError(shown, line, f"the file is not UTF-8 text: byte 0x{data[err.start]:02x} cannot be read "
                                     f"(save the file as UTF-8)", column=column) from None
    try:
        return parse(text)
    except CaseError as err:
        raise err.at(shown) from None


def parse(text):
    """Parse YAML ``text`` (see :func:`read`); errors carry no path."""
    loader = _Loader(text)
    loader.text_lines = ("", *text.split("\n"))  # 1-based
    try:
        _check_depth(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = " ".join(p for p in (err.context, err.problem) if p)
        raise CaseError(None, mark.line + 1 if mark else 1, f"YAML syntax error: {escape(problem)}",
                        column=mark.column + 1 if mark else None) from None
    except yaml.YAMLError as err:
        raise CaseError(None, 1, f"YAML error: {shorten(str(err))}") from None
    except RecursionError:
        raise CaseError(None, 1, "the file could not be read: nested too deeply") from None
    finally:
        loader.dispose()


def _check_depth(text):
    """Refuse nesting deeper than MAX_DEPTH before composing (libyaml's composer recurses without a limit)."""
    scanner, depth = _Loader(text), 0
    try:
        while scanner.check_event():
            event = scanner.get_event()
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise CaseError(None, event.start_mark.line + 1, f"the YAML nests deeper than {MAX_DEPTH} levels",
                                    column=event.start_mark.column + 1)
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    finally:
        scanner.dispose()


def _check_size(root):
    """Refuse a document whose aliases expand it past MAX_NODES nodes, at the innermost node that does."""
    sizes = {}

    def size(node):
        known = sizes.get(id(node), 0)
        if known is None:
            raise CaseError(None, node.start_mark.line + 1, "a YAML alias refers to a node that contains it",
                            column=node.start_mark.column + 1)
        if known:
            return known
        sizes[id(node)] = None
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            total = 1
        if total > MAX_NODES:
            raise CaseError(None, node.start_mark.line + 1, f"YAML aliases expand this value to more than {MAX_NODES} "
                                                            f"values; the limit is {MAX_NODES} for a whole file",
                            column=node.start_mark.column + 1)
        sizes[id(node)] = total
        return total

    size(root)


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
            if key and i == len(loc) - 1:
                return node.key_lines[part], node.key_cols[part]
            line, column, node = node.value_lines[part], node.value_cols[part], node[part]
        elif isinstance(node, Seq) and isinstance(part, int) and 0 <= part < len(node):
            line, column, node = node.item_lines[part], node.item_cols[part], node[part]
    return line, column
