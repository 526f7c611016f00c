"""The rules of points (docs/assignments.md, "Points"), one test each.

1. A check earns its points when every expectation is met.
2. A check whose values are wrong is charged once: its backward check is not run, and the check stands
   for the backward check's points too (its maximum is both; the total maximum never changes).
3. A backward check is charged only where the values are right: a mistake that shows in gradients alone.
4. A check of several results earns each result's share where only some are wrong; a result that is
   missing costs only its own share.
5. A check the case cannot compute is worth nothing to anyone (see test_assignments).
"""

import pytest

from attention_core import reference
from attention_core.grading.judging.grader import Grader

pytestmark = pytest.mark.grading

CASES = """document: {title: T}
cases:
  - id: c
    inputs:
      q: [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
      k: [[1.0, 2.0], [0.5, 0.0], [0.0, 1.0]]
      v: [[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]
    checks:
      - id: both
        call: attention(q, k, v)
        expect:
          output: {oracle: "scaled_dot_product_attention(q, k, v)"}
          weights: {oracle: "softmax(q @ k.T / sqrt(2.0), dim=-1)"}
      - id: output_only
        call: attention(q, k, v)
        expect:
          output: {oracle: "scaled_dot_product_attention(q, k, v)"}
"""

SOURCES = {
    "right": "",
    "no_weights": "\n_a = attention\n\ndef attention(q, k, v, mask=None, scale=None):\n"
    "    return _a(q, k, v, mask, scale)[0]\n",
    "wrong_weights": "\n_a = attention\n\ndef attention(q, k, v, mask=None, scale=None):\n"
    "    output, weights = _a(q, k, v, mask, scale)\n    return output, weights * 2\n",
    "wrong_values": "\n_a = attention\n\ndef attention(q, k, v, mask=None, scale=None):\n"
    "    output, weights = _a(q, k, v, mask, scale)\n    return output + 1, weights\n",
    "detached": "\n_a = attention\n\ndef attention(q, k, v, mask=None, scale=None):\n"
    "    output, weights = _a(q, k, v, mask, scale)\n    return output.detach(), weights.detach()\n",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("points")
    (folder / "cases").mkdir()
    (folder / "cases" / "p.yaml").write_text(CASES, encoding="utf-8")
    base = reference.__file__
    paths = []
    for name, extra in SOURCES.items():
        paths.append(folder / f"{name}.py")
        paths[-1].write_text(open(base, encoding="utf-8").read() + extra, encoding="utf-8")
    with Grader(folder / "cases", property_points=0) as grader:  # the rules of properties: test_properties.py
        return {g.name: {x.check_id: (x.score, x.max_score, x) for x in g.grades} for g in grader.grade_each(paths)}


def _scores(grades):
    return {check: (score, most) for check, (score, most, _) in grades.items()}


def test_1_a_check_that_meets_every_expectation_earns_its_points(graded):
    assert _scores(graded["right"]) == {
        "p/c/both": (1, 1),
        "p/c/both/backward": (1, 1),
        "p/c/output_only": (1, 1),
        "p/c/output_only/backward": (1, 1),
    }


def test_2_wrong_values_are_charged_once_for_the_check_and_its_gradients(graded):
    assert _scores(graded["wrong_values"]) == {"p/c/both": (0.5, 2), "p/c/output_only": (0, 2)}
    grade = graded["wrong_values"]["p/c/output_only"][2]
    assert "Its gradients were not checked: the values are wrong" in grade.charged
    total = {name: sum(most for _, most, _ in grades.values()) for name, grades in graded.items()}
    assert set(total.values()) == {4}  # the same maximum for everyone


def test_3_a_mistake_in_gradients_alone_is_charged_to_the_backward_checks(graded):
    assert _scores(graded["detached"]) == {
        "p/c/both": (1, 1),
        "p/c/both/backward": (0, 1),
        "p/c/output_only": (1, 1),
        "p/c/output_only/backward": (0, 1),
    }


def test_4_each_result_earns_its_share_and_a_missing_one_costs_only_its_own(graded):
    assert _scores(graded["wrong_weights"])["p/c/both"] == (0.5, 2)
    assert _scores(graded["wrong_weights"])["p/c/output_only"] == (1, 1)
    missing = graded["no_weights"]
    assert _scores(missing)["p/c/both"] == (0.5, 2)
    assert "missing: weights" in missing["p/c/both"][2].result.report
    assert _scores(missing)["p/c/output_only"] == (1, 2)  # it reads only the output: right (the gradients: not)
