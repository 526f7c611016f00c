"""Reading YAML in one pass from the parser's events: YAML's own rules, each value's place, the limits."""

import pytest
import yaml

from attention_core.harness.reading import yaml_lines
from attention_core.harness.reading.yaml_lines import CaseError

TEXT = """\
base: &base {a: 1, b: "two"}
other: &other {b: 3, c: 4.5}
one:
  <<: *base
  b: own
many:
  <<: [*other, *base]
  d: [1, '1', 1e-7, true, null, ~, 2024-02-30]
"""


def test_values_are_yamls_own_and_merge_keys_follow_yamls_rule():
    tree = yaml_lines.parse(TEXT)
    assert tree == yaml.safe_load(TEXT.replace("2024-02-30", "'2024-02-30'").replace("1e-7", "1.0e-7"))
    assert tree["one"] == {"a": 1, "b": "own"}  # the mapping's own key wins over a merged one
    assert tree["many"]["b"] == 3  # of a list of merged mappings, the first wins
    assert tree["many"]["d"] == [1, "1", 1e-7, True, None, None, "2024-02-30"]


def test_each_key_and_value_keeps_its_line_and_column_a_merged_one_its_own_place():
    tree = yaml_lines.parse(TEXT)
    one, many = tree["one"], tree["many"]
    assert one.places["b"] == (5, 3, 5, 6)  # key's line and column, value's line and column
    assert one.places["a"][:2] == (1, 14)  # where the merged pair is written
    assert many["d"].places[1] == (8, 11)  # inside the quotes
    shared = yaml_lines.parse("a: &x {k: [1]}\nb: *x\n")
    assert shared["a"] is shared["b"]  # an alias is its anchor's value, shared, never copied


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("a: !!set {x, y}\n", (1, 4), "unknown YAML tag 'tag:yaml.org,2002:set'"),
        ("a: 1\na: 2\n", (2, 1), "duplicate key 'a'"),
        ("? [1, 2]\n: x\n", (1, 3), "a mapping key must be a plain word"),
        ("a: &x [1, *x]\n", (1, 11), "a YAML alias refers to a node that contains it"),
        ("b: {<<: 1}\n", (1, 9), "a merge key ('<<') takes a mapping or a list of mappings"),
        ("a: 1\n---\nb: 2\n", (2, 1), "YAML syntax error: expected a single document in the stream"),
        ("a: *nope\n", (1, 4), "YAML syntax error: found undefined alias 'nope'"),
        # found lines later: where the unclosed bracket was opened is said too
        (
            "a:\n  x: [1.0,\n 2.0\nz: 3\n",
            (4, 2),
            "while parsing a flow sequence opened at line 2, column 6, did not find expected ',' or ']'",
        ),
    ],
)
def test_what_yaml_refuses_is_a_case_error_at_its_line(text, where, words):
    with pytest.raises(CaseError) as caught:
        yaml_lines.parse(text)
    assert (caught.value.line, caught.value.column) == where and words in caught.value.message


def test_a_plain_numbers_text_is_read_again_wherever_it_stands():
    assert yaml_lines.parse("a: 017\nb: '017'\nc: 017\n") == {"a": 17, "b": "017", "c": 17}  # YAML 1.2: decimal
    assert yaml_lines.parse("a: 1\nb: 0x_\n") == {"a": 1, "b": "0x_"}  # not a YAML 1.2 number: text
    with pytest.raises(CaseError, match="cannot read '0x_' as !!int"):
        yaml_lines.parse("a: 1\nb: !!int 0x_\n")


@pytest.mark.parametrize(
    ("text", "line", "column", "shown"),
    [
        ("document: {title: a}\ncases:\n  - id: x\x1b[31m\n", 3, 10, "\\x1b (U+001B)"),
        ('document: {title: "ab\x00c"}\n', 1, 22, "\\x00 (U+0000)"),
    ],
)
def test_a_character_yaml_does_not_allow_is_named_escaped_at_its_line_and_column(text, line, column, shown):
    with pytest.raises(CaseError) as err:
        yaml_lines.parse(text)
    assert (err.value.line, err.value.column) == (line, column)
    assert err.value.message == f"the character {shown} is not allowed in YAML: remove it"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1:30", "1:30"),
        ("010", 10),
        ("yes", "yes"),
        ("on", "on"),
        ("1e-7", 1e-7),
        ("0o17", 15),
        ("0x1F", 31),
        ("2024-02-30", "2024-02-30"),
        ("1_000", "1_000"),
        ("True", True),
        ("~", None),
        ("-.5", -0.5),
        (".NaN", "nan"),
    ],
)
def test_scalars_are_read_with_yaml_1_2_meanings(text, value):
    read = yaml_lines.parse(f"a: {text}\n")["a"]
    if value == "nan":
        assert read != read
    else:
        assert read == value and type(read) is type(value)


def test_a_file_large_without_aliases_is_told_so_not_blamed_on_aliases():
    with pytest.raises(
        CaseError,
        match=r"this value holds more than 1000000 values; the limit is 1000000 for a "
        r"whole file \(draw large tensors from a seed instead\)",
    ):
        yaml_lines.parse("a: [" + ", ".join(["1"] * (yaml_lines.MAX_NODES + 1)) + "]\n")
