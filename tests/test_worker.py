"""The grading worker: submissions run in forked children and every outcome comes back as data."""

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from attention_core.grading.process.client import Worker
from attention_core.grading.server import wire

pytestmark = pytest.mark.grading

SOFTMAX = """
import torch

def softmax(x, dim=-1):
    e = (x - x.max(dim, keepdim=True).values).exp()
    return e / e.sum(dim, keepdim=True)
"""


@pytest.fixture(scope="module")
def worker():
    with Worker(budget=30.0) as w:
        yield w


@pytest.fixture
def submit(worker, tmp_path):
    opened = []

    def submit(source, name="sub.py", **options):
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        opened.append(worker.open(path, **options))
        return opened[-1]

    yield submit
    for submission in opened:
        submission.close()


def alive(pid):
    """Whether ``pid`` is a process that has not exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_correct_call_returns_plain_tensors_with_the_right_values(submit):
    s = submit(SOFTMAX)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    outcome = s.call("softmax", (x,), {"dim": 1})
    assert (s.status, s.names) == ("ok", ("softmax",))
    assert outcome.status == "ok" and outcome.mutated == ()
    assert type(outcome.value) is torch.Tensor
    torch.testing.assert_close(outcome.value, torch.softmax(x, 1), rtol=0, atol=1e-15)


def test_results_not_kept_come_back_as_their_shape_and_dtype_alone(submit):
    s = submit("""
        import torch
        def attention(q, k, v, mask=None, scale=None):
            weights = torch.softmax(q @ k.transpose(-2, -1), -1)
            return weights @ v, weights
    """)
    q = torch.randn(2, 4, 3)
    for call in (s.call, s.call_grad):
        output, weights = call("attention", (q, q, q), keep=[0]).value
        assert output.device.type == "cpu" and output.shape == (2, 4, 3)
        assert weights.device.type == "meta" and weights.shape == (2, 4, 4) and weights.dtype == torch.float32


def test_values_of_every_kind_cross_both_ways(submit):
    s = submit("def split_heads(x, n_heads):\n    return x, n_heads\n")
    args = (
        (
            torch.arange(6).reshape(2, 3),
            None,
            True,
            2,
            0.5,
            "s",
            [1.5, (2,)],
            torch.device("cpu"),
            torch.zeros(0, 3, dtype=torch.bfloat16),
            torch.tensor([True, False]),
        ),
        torch.float16,
    )
    outcome = s.call("split_heads", args)
    assert outcome.status == "ok"
    sent, got = args[0], outcome.value[0]
    assert got[1:8] == sent[1:8] and outcome.value[1] is torch.float16
    for a, b in zip((sent[0], sent[8], sent[9]), (got[0], got[8], got[9])):
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and torch.equal(a, b)


def test_a_missing_function_and_not_implemented_error_are_not_implemented(submit):
    s = submit("def softmax(x, dim=-1):\n    raise NotImplementedError('later')\n")
    assert s.call("softmax", (torch.ones(2),)).status == "not implemented"
    missing = s.call("layer_norm", (torch.ones(2),))
    assert (missing.status, missing.message) == ("not implemented", "the submission defines no function layer_norm")
    with pytest.raises(ValueError, match="'helper' is not graded"):
        s.call("helper", ())


def test_an_exception_is_raised_with_the_submissions_traceback_lines_only(submit):
    s = submit("""
        def helper(x):
            return x.reshape(7)

        def layer_norm(x, eps=1e-5):
            print("normalising")
            return helper(x)
    """)
    outcome = s.call("layer_norm", (torch.ones(2, 3),))
    assert outcome.status == "raised"
    assert outcome.message.startswith("RuntimeError: shape '[7]' is invalid")
    assert outcome.traceback == (
        '  File "sub.py", line 7, in layer_norm',
        "    return helper(x)",
        '  File "sub.py", line 3, in helper',
        "    return x.reshape(7)",
    )
    assert outcome.output == "normalising\n"


def test_a_hang_times_out_keeps_its_output_and_the_next_call_works(submit):
    s = submit(SOFTMAX + "\ndef layer_norm(x, eps=1e-5):\n    print('start')\n    while True:\n        pass\n")
    first = s.pid
    outcome = s.call("layer_norm", (torch.ones(2),), timeout=0.5)
    assert (outcome.status, outcome.message) == ("timeout", "the call did not return within 0.5 s of CPU time")
    assert outcome.output == "start\n"
    assert 0.5 <= outcome.seconds < 5
    assert s.call("softmax", (torch.zeros(2),)).value.tolist() == [0.5, 0.5]
    assert s.pid != first and not alive(first)


def test_a_time_limit_counts_cpu_time_and_a_call_that_only_waits_ends_at_twice_its_limit(submit):
    s = submit(
        SOFTMAX
        + """
import time

def layer_norm(x, eps=1e-5):
    time.sleep(float(x.sum()))  # waits: no CPU time
    return x
""",
        budget=3.0,
    )
    for _ in range(3):  # each waits longer than its limit of CPU time
        waited = s.call("layer_norm", (torch.tensor([0.4]),), timeout=0.3)
        assert waited.status == "ok" and waited.seconds >= 0.4, waited.message
    asleep = s.call("layer_norm", (torch.tensor([30.0]),), timeout=0.3)
    assert (asleep.status, asleep.message) == (
        "timeout",
        "the call did not return within 0.6 s (2 times its limit of 0.3 s of CPU time: it waited rather than computed)",
    )
    assert 0.6 <= asleep.seconds < 5


@pytest.mark.parametrize(
    "body, reason",
    [
        ("import os; os._exit(0)", "the submission's process died (exit code 0)"),
        ("import ctypes; ctypes.string_at(0)", "the submission's process died (killed by signal 11, SIGSEGV)"),
        ("import sys; sys.exit(3)", "the call raised SystemExit: 3"),
        ("raise KeyboardInterrupt", "the call raised KeyboardInterrupt"),
    ],
)
def test_a_crash_says_why_and_the_child_is_replaced(submit, body, reason):
    s = submit(SOFTMAX + f"\ndef causal_average(x):\n    {body}\n")
    first = s.pid
    outcome = s.call("causal_average", (torch.ones(2, 2),))
    assert (outcome.status, outcome.message) == ("crashed", reason)
    assert s.call("softmax", (torch.zeros(2),)).status == "ok"
    assert s.pid != first and not alive(first)


def test_an_import_error_is_data(submit):
    s = submit("import torch\n\ndef softmax(x, dim=-1):\n    return x\n\nprint('loading')\n1 / 0\n")
    assert (s.status, s.message, s.names) == ("import error", "ZeroDivisionError: division by zero", ())
    assert s.traceback == ('  File "sub.py", line 7, in <module>', "    1 / 0")
    assert s.output == "loading\n"
    assert s.call("softmax", (torch.ones(1),)).status == "not implemented"
    syntax = submit("def softmax(x:\n", name="bad.py")
    assert syntax.status == "import error" and "SyntaxError" in syntax.message and "bad.py" in syntax.message


def test_an_import_that_hangs_is_an_import_error(submit, worker):
    timeout, worker.import_timeout = worker.import_timeout, 0.5
    try:
        s = submit("print('importing')\nwhile True:\n    pass\n")
    finally:
        worker.import_timeout = timeout
    assert (s.status, s.message, s.output) == (
        "import error",
        "the import did not finish within 0.5 s of CPU time",
        "importing\n",
    )
    assert s.pid is None


def test_a_submission_set_up_ahead_runs_nothing_until_started(submit):
    s = submit(
        "import time\nimport torch\nIMPORTED = time.time()\n\n"
        "def causal_average(x):\n    return torch.tensor([IMPORTED], dtype=torch.float64)\n",
        start=False,
    )
    assert s.status is None and s.pid is not None  # its process is there, its sandbox built
    time.sleep(0.5)
    before = time.time()
    outcome = s.call("causal_average", (torch.ones(1),))  # the first call starts it
    assert s.status == "ok" and outcome.status == "ok"
    assert outcome.value.item() >= before  # imported only when told to, not when set up


def test_memory_beyond_the_cap_cannot_be_had(submit):
    s = submit("import torch\n\ndef causal_average(x):\n    return torch.empty(2**31)  # 8 GiB, never touched\n")
    outcome = s.call("causal_average", (torch.ones(1),))
    assert outcome.status == "raised" and "can't allocate memory" in outcome.message


def test_a_folder_submission_imports_its_own_helpers(worker, tmp_path):
    (tmp_path / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "solution.py").write_text(
        "from helpers import double\n\ndef causal_average(x):\n    return double(x)\n"
    )
    with worker.open(tmp_path, entry="solution.py") as s:
        assert s.call("causal_average", (torch.ones(2),)).value.tolist() == [2.0, 2.0]
    with worker.open(tmp_path, entry="attention.py") as misnamed:
        assert misnamed.status == "import error" and "attention.py" in misnamed.message
    with worker.open(tmp_path) as chosen:  # no entry named: the one file that defines a graded name
        assert chosen.call("causal_average", (torch.ones(2),)).value.tolist() == [2.0, 2.0]
    (tmp_path / "solution.py").write_text("from helpers import double\n")
    with pytest.raises(ValueError, match="none of its 2 files defines a graded name"):
        worker.open(tmp_path)


def test_a_rigged_tensor_subclass_comes_back_plain_with_its_true_values(submit, tmp_path):
    marker = tmp_path / "pickled"
    s = submit(f"""
        import torch

        class Rigged(torch.Tensor):
            def __eq__(self, other):
                return True

            def __reduce_ex__(self, protocol):
                return (open, ({str(marker)!r}, "w"))

        def softmax(x, dim=-1):
            return torch.full((2,), 7.0).as_subclass(Rigged)
    """)
    outcome = s.call("softmax", (torch.ones(2),))
    assert type(outcome.value) is torch.Tensor and outcome.value.tolist() == [7.0, 7.0]
    assert not (outcome.value == torch.zeros(2)).any()
    assert not marker.exists()


def test_an_in_place_change_of_an_argument_is_reported(submit):
    s = submit("""
        def attention(q, k, v, mask=None, scale=None):
            q /= 2
            return q, k
    """)
    q = torch.ones(2, 2)
    outcome = s.call("attention", (q, torch.ones(2, 2)), {"v": torch.ones(2, 2)})
    assert outcome.mutated == (0,)
    assert torch.equal(q, torch.ones(2, 2))  # the grader's own tensor is untouched
    assert s.call_grad("attention", (q, q, q), projection_seed=0).mutated == (0,)


@contextlib.contextmanager
def sharing(tmp_path, big, source):
    """The submission ``source``, opened in a worker that shares the tensor ``big``."""
    path = tmp_path / "sub.py"
    path.write_text(source)
    with Worker(budget=30.0) as w:
        w.share([big])
        with w.open(path) as s:
            yield s


def test_a_shared_argument_goes_by_name_and_every_call_gets_a_fresh_copy(tmp_path, monkeypatch):
    big = torch.arange(70_000, dtype=torch.float32)
    sent = []
    encode = wire.encode
    monkeypatch.setattr(wire, "encode", lambda value, shared=None: sent.append(encode(value, shared)) or sent[-1])
    with sharing(tmp_path, big, "def softmax(x, dim=-1):\n    x += 1\n    return x.clone()\n") as s:
        outcomes = [s.call("softmax", (big,), {"dim": d}) for d in (-1, 0)]  # two calls: not one answered twice
    assert outcomes[1] is not outcomes[0]
    assert all(torch.equal(o.value, big + 1) and o.mutated == (0,) for o in outcomes)
    assert torch.equal(big, torch.arange(70_000, dtype=torch.float32))
    calls = [m for m in sent if b'"op":"call"' in m]
    assert len(calls) == 2 and all(len(m) < 1000 for m in calls)  # a name, not 280 kB of bytes


def test_a_shared_argument_kept_by_one_call_and_changed_in_a_later_one_reaches_the_next_call_untouched(tmp_path):
    big = torch.arange(70_000, dtype=torch.float32)
    with sharing(
        tmp_path,
        big,
        "KEPT = []\n"
        "def softmax(x, dim=-1):\n    KEPT.append(x)\n    return x.clone()\n"
        "def causal_average(x):\n    KEPT[0].fill_(7)\n    return x\n",
    ) as s:
        first = s.call("softmax", (big,))
        assert s.call("causal_average", (torch.ones(2),)).mutated == ()  # not its own argument
        again = s.call("softmax", (big,), {"dim": 0})
    assert again is not first
    assert torch.equal(first.value, big) and torch.equal(again.value, big)
    assert first.mutated == () and again.mutated == ()


def test_a_large_prepared_input_is_shared_as_the_grader_s_own_file_and_no_call_changes_it(tmp_path):
    """The grader keeps a large case input in a sealed memory file (``unwritten.py``); sharing it sends the file:
    the server maps the grader's pages (no copy of its own), each call still gets its own copy, and a submission
    that writes into its argument changes neither the grader's tensor nor the next call's."""
    from attention_core.harness.checking import unwritten  # noqa: PLC0415

    values = torch.arange(300_000, dtype=torch.float32)
    big = unwritten.kept(values.clone())
    assert unwritten.file_of(big) is not None
    path = tmp_path / "sub.py"
    path.write_text("def softmax(x, dim=-1):\n    y = x.clone()\n    x.fill_(-1)\n    return y\n")
    with Worker(budget=30.0) as w:
        w.share([big])
        with open(f"/proc/{w.pid}/maps") as handle:  # noqa: PTH123
            maps = handle.read()
        assert "attention-argument" in maps and "attention-shared-" not in maps
        with w.open(path) as s:
            outcomes = [s.call("softmax", (big,), {"dim": d}) for d in (-1, 0)]
    assert all(torch.equal(o.value, values) and o.mutated == (0,) for o in outcomes)
    assert torch.equal(big, values)


def test_a_server_maps_a_shared_file_only_where_it_is_sealed_against_every_change_and_of_the_tensor_s_size():
    """A file that could still be written (then a later submission could receive other values than the grader
    holds) or that is not the tensor's size is refused."""
    import fcntl  # noqa: PLC0415

    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    try:
        os.write(fd, bytes(16))
        with pytest.raises(ValueError, match="not sealed"):
            wire.Shared.from_file(fd, torch.float32, (4,))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, wire.SEALS)
        with pytest.raises(ValueError, match="not of its size"):
            wire.Shared.from_file(fd, torch.float32, (5,))
        assert torch.equal(wire.Shared.from_file(fd, torch.float32, (4,)).fresh(), torch.zeros(4))
    finally:
        os.close(fd)


def test_a_shared_tensor_tells_its_untouched_view_from_a_written_one_by_the_pages_written():
    kept = wire.Shared(torch.arange(70_000, dtype=torch.float32), "t")
    view = kept.fresh()
    assert kept.unwritten(view)  # mapped, not yet read
    assert float(view.sum()) > 0 and kept.unwritten(view)  # read: the file's own pages
    view[-1] = 5.0
    assert not kept.unwritten(view)  # one page copied on write
    view = kept.fresh()
    assert kept.unwritten(view) and float(view[-1]) == 69_999.0  # the write forgotten
    assert not kept.unwritten(view[1:]) and not kept.unwritten(view.clone()) and not kept.unwritten(view.view(10, -1))
    view.mul_(1.0)
    assert not kept.unwritten(view)  # written, with the same values: left to the comparison


def test_a_shared_argument_is_reported_changed_by_its_values_not_by_the_pages_written(tmp_path):
    big = torch.arange(70_000, dtype=torch.float32)
    with sharing(
        tmp_path,
        big,
        "def softmax(x, dim=-1):\n    x.mul_(1.0)\n    return x.clone()\n"
        "def causal_average(x):\n    x[-1] += 1\n    return x.clone()\n"
        "def layer_norm(x, eps=1e-5):\n    return x * 2\n",
    ) as s:
        rewritten, changed, read = (s.call(name, (big,)) for name in ("softmax", "causal_average", "layer_norm"))
    assert rewritten.mutated == () and changed.mutated == (0,) and read.mutated == ()
    assert torch.equal(read.value, big * 2)


def test_a_shared_argument_given_twice_in_one_call_arrives_as_two_tensors(tmp_path):
    big = torch.arange(70_000, dtype=torch.float32)
    with sharing(
        tmp_path, big, "def attention(q, k, v, mask=None, scale=None):\n    q.mul_(2)\n    return k + v\n"
    ) as s:
        outcome = s.call("attention", (big, big, big))
    assert torch.equal(outcome.value, big + big)  # q doubled in place, k and v untouched
    assert outcome.mutated == (0,)


def test_a_namedtuple_result_comes_back_as_a_tuple_with_the_unread_results_as_shapes(submit):
    s = submit("""
        import collections
        import torch

        Pair = collections.namedtuple("Pair", "output weights")

        def attention(q, k, v, mask=None, scale=None):
            return Pair(q + 1, q * 2)
    """)
    outcome = s.call("attention", (torch.ones(2, 2),) * 3, keep=[0])
    assert outcome.status == "ok" and isinstance(outcome.value, tuple)
    assert torch.equal(outcome.value[0], torch.full((2, 2), 2.0)) and outcome.value[1].device.type == "meta"


def test_the_same_call_on_the_same_arguments_is_made_once_for_every_check_that_asks_it(submit):
    s = submit("CALLS = []\ndef softmax(x, dim=-1):\n    CALLS.append(1)\n    return x * 0 + len(CALLS)\n")
    first, again = (s.call("softmax", (torch.ones(3),)) for _ in range(2))
    other = s.call("softmax", (torch.ones(3),), {"dim": 0})
    assert first.status == "ok" and again is first and torch.equal(again.value, torch.ones(3))
    assert torch.equal(other.value, torch.full((3,), 2.0))  # other arguments: called again


def test_identical_replies_from_two_submissions_share_one_decoding_and_different_ones_do_not(submit):
    a, b = submit(SOFTMAX, name="a.py"), submit(SOFTMAX, name="b.py")
    c = submit("def softmax(x, dim=-1):\n    return x * 2\n", name="c.py")
    x = torch.tensor([1.0, 2.0, 3.0])
    first, second, other = (s.call("softmax", (x,), reuse="x") for s in (a, b, c))
    assert first.reply is not None and second.reply is first.reply  # the same bytes, decoded once
    assert second is not first and second.value is first.value  # each call its own outcome
    second.seconds = 99.0
    assert first.seconds != 99.0
    assert other.reply != first.reply and torch.equal(other.value, x * 2)
    assert torch.allclose(first.value, torch.softmax(x, 0))


def test_gradients_flow_for_a_correct_function_and_are_none_where_detached(submit):
    s = submit(SOFTMAX + "\ndef layer_norm(x, eps=1e-5):\n    return x.detach() * 2\n")
    x = torch.randn(3, 4, dtype=torch.float64)
    outcome = s.call_grad("softmax", (x,), {"dim": 0}, projection_seed=5)
    leaf = x.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(wire.projection([torch.softmax(leaf, 0)], 5), [leaf])
    assert outcome.status == "ok" and outcome.grad_error is None
    assert set(outcome.grads) == {0}
    torch.testing.assert_close(outcome.grads[0], expected, rtol=0, atol=1e-15)
    detached = s.call_grad("layer_norm", (x,), {"eps": 1e-5}, projection_seed=5)
    assert detached.status == "ok" and detached.grads == {0: None}
    assert "no floating output carries a gradient" in detached.grad_error


def test_a_failing_backward_is_a_grad_error(submit):
    s = submit("""
        def causal_average(x):
            y = x.exp()
            y.mul_(2)  # exp saved its result for backward
            return y
    """)
    outcome = s.call_grad("causal_average", (torch.ones(3),), projection_seed=1)
    assert outcome.status == "ok" and outcome.grads == {0: None}
    assert "modified by an inplace operation" in outcome.grad_error


def test_a_print_flood_is_truncated_without_hanging(submit):
    s = submit("def causal_average(x):\n    print('x' * 200_000_000)\n    return x\n")
    outcome = s.call("causal_average", (torch.ones(1),), timeout=30)
    assert outcome.status == "ok"
    assert outcome.output == "x" * 4096 + "\n[... 199995905 more bytes of output not shown]"


def test_a_print_flood_at_import_is_told_as_such_in_the_feedback(submit):
    """50,000 lines at import: the first lines shown, then that the rest of the output was not kept at all."""
    from attention_core.grading.process import replies  # noqa: PLC0415

    s = submit("for i in range(50_000):\n    print('debug', i, 'x' * 190)\ndef softmax(x, dim=-1):\n    return x\n")
    shown = replies.printed(s.output)
    assert shown.startswith("debug 0 ") and "more lines" in shown
    assert re.search(r"\[\.\.\. \d+ more bytes of output not shown\]$", shown), shown[-300:]


def test_what_a_file_draws_unseeded_at_import_is_the_same_every_time(submit):
    """A demo's unseeded draws print the same numbers at each grading: the same file, the same results.json."""
    source = "import random, torch\nprint(torch.randn(3).tolist(), random.random())\ntorch.randn(5)\n"
    first, again = submit(source), submit(source, name="again.py")
    assert first.status == again.status == "ok"
    assert first.output == again.output and first.output.startswith("["), (first.output, again.output)


def test_the_server_never_imports_the_package(submit, worker):
    assert not [m for m in worker.server_modules() if m.split(".")[0] == "attention_core"]
    cmdline = open(f"/proc/{worker.pid}/cmdline", "rb").read().split(b"\0")
    assert cmdline[1:3] == [b"-I", b"-S"] and cmdline[3].endswith(b"attention_core/grading/server/worker.py")
    s = submit(
        "import sys\nprint([m for m in sys.modules if 'attention_core' in m])\ndef softmax(x, dim=-1):\n    return x\n"
    )
    assert s.output == "[]\n"


def test_a_reply_over_the_limit_is_refused(submit, worker):
    limit = worker.reply_limit
    worker.reply_limit = 10_000
    try:
        s = submit("""
            import os, struct, torch

            def softmax(x, dim=-1):
                return torch.zeros(10_000)

            def causal_average(x):
                fd = next(int(fd) for fd in os.listdir("/proc/self/fd")
                          if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"))
                os.write(fd, struct.pack("!QQ", 1 << 40, 0))
                return x
        """)
        big = s.call("softmax", (torch.ones(1),))
        assert big.status == "raised" and big.message == "the result is 40100 bytes, over the limit of 10000"
        forged = s.call("causal_average", (torch.ones(1),))
        assert forged.status == "crashed"
        assert forged.message.startswith(
            f"the reply is {(1 << 40) + 16} bytes, over the 10000 bytes this call can need"
        )
    finally:
        worker.reply_limit = limit


def test_a_reply_over_what_its_call_can_need_fails_that_call_alone(submit):
    s = submit("""
        import torch

        def softmax(x, dim=-1):
            return torch.zeros(1_000_000)  # 4 MB where the call needs a few bytes

        def causal_average(x):
            return x.cumsum(-2) / torch.arange(1, x.shape[-2] + 1)[:, None]
    """)
    first = s.call("causal_average", (torch.ones(2, 3),), limit=64_000)
    process = s.pid
    big = s.call("softmax", (torch.ones(3),), limit=64_000)
    assert (big.status, big.message) == (
        "too large",
        "results of 4000000 bytes, over the 64000 bytes this call can need: they were not sent",
    )
    big_grad = s.call_grad("softmax", (torch.ones(3),), projection_seed=1, limit=64_000)
    assert big_grad.status == "too large" and big_grad.grads is None  # (nor its 4 MB of gradients sent)
    right = s.call("causal_average", (torch.ones(2, 3) * 2,), limit=64_000)  # the same process goes on
    assert first.status == right.status == "ok" and torch.equal(right.value, torch.ones(2, 3) * 2)
    assert s.pid == process


def test_the_time_budget_ends_calls_once_spent(submit):
    s = submit(SOFTMAX + "\ndef causal_average(x):\n    while True:\n        pass\n", budget=1.0)
    assert s.call("causal_average", (torch.ones(1),), timeout=0.6).status == "timeout"
    second = s.call("causal_average", (torch.ones(1),), timeout=0.6)
    # Cut to what is left of the budget (imports counted): of its CPU time, or of its wall-clock time, which
    # the first call and the replacement's import spent a little more of; on a loaded machine they may have spent
    # all of it, and the call is refused before it starts. (The limit it was given is read from its message: the
    # time it took is the machine's, past its limit by however late the watch saw it.)
    told = re.fullmatch(
        r"the call did not return within (0\.\d+) s of CPU time|the submission's time budget of 1 s "
        r"is spent( \(in wall-clock time: it waited rather than computed\))?",
        second.message,
    )
    assert second.status == "timeout" and told, second.message
    assert told.group(1) is None or float(told.group(1)) < 0.6, second.message
    spent = s.call("softmax", (torch.ones(1),))
    assert (spent.status, spent.message) == ("timeout", "the submission's time budget of 1 s is spent")


def test_closing_right_after_a_crash_kills_the_child_just_forked(submit):
    # The replacement may not have reached setsid() yet: there is no process group to kill then.
    for _ in range(5):
        s = submit("import os\n\ndef causal_average(x):\n    os._exit(1)\n")
        assert s.call("causal_average", (torch.ones(1),)).status == "crashed"
        replacement = s.pid
        s.close()
        assert not alive(replacement)
    with pytest.raises(ValueError, match="closed"):
        s.call("causal_average", (torch.ones(1),))


def host_pids(marker):
    """The pids (as this machine sees them) of the processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read() and alive(int(entry)):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def test_closing_kills_the_child_and_what_it_started(worker, tmp_path):
    marker = f"spawned-{os.getpid()}-{time.monotonic_ns()}"
    path = tmp_path / "spawner.py"
    path.write_text(f"""import subprocess, os\np = subprocess.Popen([{sys.executable!r}, "-c", "import time; time.sleep(60)",
                  {marker!r}], start_new_session=False)  # (a session of its own is refused)\n""")
    s = worker.open(path)
    child = s.pid
    for _ in range(250):
        if host_pids(marker):
            break
        time.sleep(0.02)
    (grandchild,) = host_pids(marker)
    assert alive(child) and alive(grandchild)
    s.close()
    assert not alive(child)
    for _ in range(500):  # the orphan is collected by init once killed
        if not alive(grandchild):
            break
        time.sleep(0.02)
    assert not alive(grandchild)


def test_closing_the_worker_ends_the_server_and_every_child(tmp_path):
    (tmp_path / "sub.py").write_text(SOFTMAX)
    w = Worker()
    submissions = [w.open(tmp_path / "sub.py") for _ in range(3)]
    pids = [w.pid, *(s.pid for s in submissions)]
    assert all(alive(pid) for pid in pids)
    w.close()
    assert not any(alive(pid) for pid in pids)
    zombies = subprocess.run(["ps", "-o", "stat=", "--ppid", str(os.getpid())], capture_output=True, text=True)
    assert "Z" not in zombies.stdout


@pytest.mark.parametrize(
    "body, error",
    [
        ({"tensor": ["float32", [2], 0, 4]}, "4 bytes for a float32 tensor of shape (2,)"),
        ({"tensor": ["object", [1], 0, 8]}, "dtype not allowed on the wire: object"),
        ({"tensor": ["float64", [1], 8, 8]}, "a tensor's bytes lie outside the message"),
        ({"pickle": "gASVAAAA"}, "unknown value in a message"),
    ],
)
def test_the_wire_refuses_malformed_tensors(body, error):
    import json

    with pytest.raises(wire.WireError, match=error.replace("(", r"\(").replace(")", r"\)")):
        wire.decode(json.dumps(body).encode(), bytearray(8))


def test_the_wire_names_what_it_does_not_carry():
    data = wire.encode({"a": {1, 2}, "b": torch.ones(2).to_sparse()})
    n_text, _ = wire.HEADER.unpack_from(data)
    value = wire.decode(data[16 : 16 + n_text], bytearray())
    assert value == {"a": wire.Opaque("set"), "b": wire.Opaque("tensor (torch.sparse_coo, cpu)")}


def test_a_submission_holds_no_descriptor_but_its_own(worker, tmp_path):
    path = tmp_path / "fds.py"
    path.write_text(
        "import os\n\ndef causal_average(x):\n    raise RuntimeError(sorted(map(int, os.listdir('/proc/self/fd'))))\n"
    )
    first, second = worker.open(path), worker.open(path)  # the first's pipes are open in the server meanwhile
    try:
        outcome = second.call("causal_average", (torch.ones(1),))
    finally:
        first.close()
        second.close()
    # stdin, stdout, stderr, its socket, and the listing's own descriptor: nothing of the server or the first
    assert len(eval(outcome.message.split(":", 1)[1])) == 5, outcome.message


FORK_MEMORY = """
import os, time

def softmax(x, dim=-1):
    kids = []
    for _ in range(3):  # each within the per-process limit, together over the submission's
        pid = os.fork()
        if pid == 0:
            block = b"x" * (700 << 20)
            time.sleep(4)  # held until the others have theirs
            os._exit(0)
        kids.append(pid)
    ended = [os.waitpid(pid, 0)[1] for pid in kids]
    raise RuntimeError("KILLED " + str(sum(os.WIFSIGNALED(status) for status in ended)))
"""


def cgroup_v1_writable():
    from attention_core.grading.server import cgroups

    dirs = cgroups.dirs("attention-sandbox-probe")
    if set(dirs) != {"memory", "pids"} or os.geteuid() != 0:
        return False
    try:
        for path in dirs.values():
            os.mkdir(path)
        return True
    except OSError:
        return False
    finally:
        cgroups.remove("attention-sandbox-probe")


@pytest.mark.skipif(not cgroup_v1_writable(), reason="no writable v1 memory and pids cgroups here (root only)")
def test_a_cgroup_bounds_the_memory_of_all_of_a_submissions_processes_together(tmp_path):
    from attention_core.grading.server import cgroups

    path = tmp_path / "fork_memory.py"
    path.write_text(FORK_MEMORY)
    with Worker(memory_limit=3 << 29) as w:  # 1.5 GiB: one 700 MB block fits a process, three do not fit one cgroup
        with w.open(path) as s:
            guard = s.pid
            assert "cgroup" in s.protections["held"]
            outcome = s.call("softmax", (torch.ones(2),), timeout=20)
    assert outcome.status == "crashed" or int(outcome.message.rsplit(" ", 1)[1]) >= 1, outcome.message
    for folder in {os.path.dirname(p) for p in cgroups.dirs("probe").values()}:
        assert not [n for n in os.listdir(folder) if n.startswith("attention-sandbox-") and n.endswith(f"-{guard}")]


def test_a_link_in_a_submission_folder_changes_nothing_it_points_to(worker, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    folder = tmp_path / "linked"
    folder.mkdir()
    (folder / "__init__.py").write_text("def causal_average(x):\n    return x\n")
    (folder / "to_outside").symlink_to(outside)
    with worker.open(folder) as s:
        assert s.status == "ok"
    assert outside.stat().st_mode & 0o777 == 0o700


def test_a_submission_whose_sandbox_cannot_be_built_does_not_run(worker, tmp_path):
    folder = tmp_path / "with_fifo"
    folder.mkdir()
    (folder / "__init__.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    os.mkfifo(folder / "pipe")
    with worker.open(folder) as s:
        if "namespaces" not in s.protections["held"]:
            pytest.skip("no namespaces here: the fallback runs the submission without a fresh root")
        assert s.status == "import error" and "the submission was not run" in s.message
    assert not (tmp_path / "ran").exists()


def test_a_forged_message_from_a_submission_is_a_clear_failure_not_a_grader_crash(submit):
    s = submit("""
        import json, os, struct
        text = json.dumps({"device": "bogus"}).encode()
        os.write(3, struct.pack("!QQ", len(text), 0) + text)
    """)
    assert s.status == "import error" and "malformed" in s.message


def test_a_submission_has_its_own_ipc_namespace(submit):
    s = submit("""
        import os
        def softmax(x, dim=-1):
            raise RuntimeError(os.readlink("/proc/self/ns/ipc"))
    """)
    if "namespaces" not in s.protections["held"]:
        pytest.skip("no namespaces here")
    assert os.readlink("/proc/self/ns/ipc") not in s.call("softmax", (torch.ones(1),)).message


def test_when_the_server_dies_the_submission_and_what_it_started_die_too(tmp_path):
    marker = f"orphan-{os.getpid()}-{time.monotonic_ns()}"
    path = tmp_path / "sleeper.py"
    path.write_text(
        f"import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 600', {marker!r}],"
        f" start_new_session=False)  # (a session of its own is refused)\n"
    )
    w = Worker()
    w.open(path)
    for _ in range(250):
        if host_pids(marker):
            break
        time.sleep(0.02)
    assert host_pids(marker)
    os.kill(w.pid, 9)
    for _ in range(250):
        if not host_pids(marker):
            break
        time.sleep(0.02)
    assert not host_pids(marker)
    w.close()


AHEAD = """
import os, sys, time
import torch

def softmax(x, dim=-1):
    print("softmax", float(x.detach().sum()))
    return x * 2

def causal_average(x):
    print("causal_average")
    return x + 1

def layer_norm(x, eps=1e-5):
    if float(x.sum()) < 0:
        time.sleep(30)
    if float(x.sum()) == 0:
        os._exit(3)
    print("layer_norm")
    return x - 1
"""


def test_a_call_said_to_come_next_is_sent_with_the_last_reply_and_answers_as_itself(submit):
    s = submit(AHEAD)
    x, y = torch.ones(3), torch.zeros(2)
    s.ahead("softmax", (x,))
    first = s.call("causal_average", (y,))
    assert s._ahead is not None  # the request is with the process while the caller looks at the reply
    said = s.call("softmax", (x,))
    assert s._ahead is None
    assert torch.equal(first.value, y + 1) and first.output == "causal_average\n"
    assert torch.equal(said.value, x * 2) and said.output == "softmax 3.0\n"


def test_a_different_call_made_first_waits_for_the_call_said_and_keeps_its_answer(submit):
    s = submit(AHEAD)
    x = torch.ones(3)
    s.ahead("softmax", (x,), projection_seed=0)
    s.call("causal_average", (x,))
    s.ahead("causal_average", (x + 5,))  # said next now: sent with the next reply read for a call made
    other = s.call("layer_norm", (x,))  # not the call said: that one's reply is read first and kept
    said = s.call_grad("softmax", (x,), projection_seed=0)
    assert torch.equal(other.value, x - 1) and other.output == "layer_norm\n"
    assert torch.equal(s.call("causal_average", (x + 5,)).value, x + 6)
    assert torch.equal(said.value, x * 2) and said.output == "softmax 3.0\n" and said.grads[0][1] is not None


def test_a_call_sent_ahead_that_hangs_or_dies_fails_as_itself_and_the_others_go_on(submit):
    s = submit(AHEAD)
    x = torch.ones(3)
    for bad, status in ((-x, "timeout"), (torch.zeros(3), "crashed")):
        s.ahead("layer_norm", (bad,))
        s.call("causal_average", (x,), timeout=1.0)
        other = s.call("softmax", (x,), timeout=1.0)  # made first: it waits out the call said
        said = s.call("layer_norm", (bad,), timeout=1.0)
        assert other.status == "ok" and torch.equal(other.value, x * 2) and other.output == "softmax 3.0\n"
        assert said.status == status, said
        assert s.call("causal_average", (x,)).status == "ok"  # a fresh process
    s.ahead("layer_norm", (-x,))
    s.call("causal_average", (-x,), timeout=1.0)
    assert s.call("layer_norm", (-x,), timeout=0.5).status == "timeout"  # its limit counts from the sending


def test_a_submission_sees_a_fixed_environment_not_the_graders(submit, monkeypatch):
    s = submit("""
        import json, os
        print(json.dumps(dict(os.environ)))
    """)
    seen = json.loads(s.output.strip().splitlines()[-1])
    allowed = {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "LD_LIBRARY_PATH",
        "GLIBC_TUNABLES",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "HOME",
        "TMPDIR",
    }
    assert {k for k in seen if not k.startswith("LC_")} <= allowed, sorted(seen)
    assert seen["PATH"].split(os.pathsep) == [os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]


def test_a_submission_s_process_limit_is_its_own_whatever_its_neighbour_holds(submit):
    hoarder = submit(
        SOFTMAX
        + """
import os
import time

KIDS = []
for _ in range(100):  # near the limit of 128 processes, held while the neighbour runs
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    KIDS.append(pid)
""",
        name="hoarder.py",
    )
    neighbour = submit(
        SOFTMAX.replace("def softmax(x, dim=-1):", "def softmax(x, dim=-1, _n=[0]):")
        + """
import os
import time


def causal_average(x):
    made = 0
    for _ in range(100):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(120)
            os._exit(0)
        made += 1
    return torch.full((1,), float(made))
""",
        name="neighbour.py",
    )
    assert hoarder.start().status == "ok", hoarder.message
    if "limits" not in neighbour.start().protections["held"]:
        pytest.skip(f"the limits are not in force here: {neighbour.protections['missing']}")
    assert neighbour.call("causal_average", (torch.ones(1),)).value.tolist() == [100.0]


def test_a_call_sent_ahead_is_held_to_its_cpu_time_whatever_the_grader_does_meanwhile(submit):
    s = submit("""
        import time
        import torch

        def softmax(x, dim=-1):
            start = time.process_time()
            while time.process_time() - start < float(x[0]):  # x[0] seconds of CPU time
                pass
            return x

        def causal_average(x):
            return x
    """)
    for cpu, busy, status in ((0.7, 0.9, "timeout"), (0.1, 1.5, "ok")):
        s.ahead("softmax", (torch.tensor([cpu]),))
        assert s.call("causal_average", (torch.ones(1),), timeout=0.5).status == "ok"  # sends softmax's call
        time.sleep(busy)  # the grader judges for longer than the call computes
        outcome = s.call("softmax", (torch.tensor([cpu]),), timeout=0.5)
        assert outcome.status == status, (cpu, busy, outcome.message)


def test_a_submission_that_only_sleeps_ends_within_its_budget_of_wall_clock_time(submit):
    s = submit(
        SOFTMAX + "\nimport time\n\ndef layer_norm(x, eps=1e-5):\n    time.sleep(0.4)\n    return x\n", budget=1.0
    )
    outcomes = [s.call("layer_norm", (torch.full((1,), float(i)),), timeout=1.0) for i in range(5)]  # 5 calls
    assert outcomes[0].status == "ok" and outcomes[-1].status == "timeout"
    assert "time budget of 1 s is spent" in outcomes[-1].message
    # The calls' own time as the grader counts it (not this test's clock, which a loaded machine stretches): the
    # budget's wall-clock second, the call that spent it cut to what was left (late by however late the watch saw
    # it: five whole calls would take 2 s), the later ones refused at once.
    assert sum(o.seconds for o in outcomes) < 1.0 + 0.5 and outcomes[-1].seconds == 0


def test_a_request_for_a_process_stopped_while_it_waits_leaves_no_reply_for_the_next(monkeypatch):
    """^C while a process waits for the forking process's reply (a pid) must not leave that reply to be read as
    the next request's: the next server would be known by another's pid (signals and waits sent astray)."""
    from attention_core.grading.process import forks  # noqa: PLC0415

    own = forks._Forks()
    received, asked = forks._received, []

    def stopped_once(sock, size):
        if not asked:
            asked.append(size)
            raise KeyboardInterrupt
        return received(sock, size)

    monkeypatch.setattr(forks, "_received", stopped_once)
    try:
        with pytest.raises(KeyboardInterrupt):
            own.server()
        server = own.server()
        try:
            time.sleep(0.5)  # (the first request's server has read the end of its socket by now, and ended)
            assert server.alive()
            with open(f"/proc/{server.pid}/comm") as comm:
                assert comm.read().strip() == "ac-server"
        finally:
            server.ctl.close()
            server.wait(10)
    finally:
        own.close()
