"""Notebook submissions: an ``.ipynb`` becomes a module that runs its code cells as "run all" would.

Each test writes a notebook with nbformat, converts it with ``write_module`` and imports the
result in-process under a fresh name (the run's reports go to ``sys.stderr``, which capfd holds).
"""

import importlib.util
import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import traceback

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from attention_core.grading.intake import notebooks
from attention_core.grading.intake.notebooks import NotebookError, is_notebook, module_source, write_module
from attention_core.grading.server.child import NotebookExport
from tests.outputs import HEAD, folder, grade_head

_names = itertools.count()


def write_notebook(folder, *cells, name="student.ipynb"):
    """A notebook at ``folder/name``; a str is a code cell, anything else a cell as it is."""
    path = folder / name
    nbformat.write(new_notebook(cells=[new_code_cell(c) if isinstance(c, str) else c for c in cells]), path)
    return path


@pytest.fixture
def load(tmp_path, monkeypatch, capfd):
    """``load(*cells)`` -> (the imported module, its stderr lines); ``load.out``: what it printed to stdout."""

    def load(*cells):
        module_file = write_module(write_notebook(tmp_path, *cells), tmp_path)
        name = f"notebook_submission_{next(_names)}"
        spec = importlib.util.spec_from_file_location(name, module_file)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)  # as the worker registers it
        capfd.readouterr()
        spec.loader.exec_module(module)
        captured = capfd.readouterr()
        load.out = captured.out
        return module, captured.err.splitlines()

    return load


def student_names(module):
    return {name for name in vars(module) if not (name.startswith("__") and name.endswith("__"))}


def test_cells_share_one_module_and_only_code_cells_run(load):
    module, err = load(
        new_markdown_cell("ignored_markdown = 1\n# Attention"),
        "def attention(x):\n    return helper(x) * 2",  # calls a helper a later cell defines
        new_raw_cell("ignored_raw = 1"),
        new_code_cell(
            "def helper(x):\n    return x + 1\n\nanswer = 41",
            execution_count=7,
            outputs=[
                new_output("execute_result", {"text/plain": "99"}, execution_count=7),
                new_output("stream", text="answer = 99\nhelper = None\n"),
            ],
        ),
        "class Point:\n    def __init__(self, x):\n        self.x = x",
    )
    assert err == []
    assert module.attention(1) == 4
    assert module.answer == 41  # the stored output says 99: it is never used
    assert student_names(module) == {"attention", "helper", "answer", "Point"}
    assert module.Point.__module__ == module.__name__
    assert pickle.loads(pickle.dumps(module.Point(3))).x == 3  # by reference, as from a .py module


def test_a_cell_that_raises_is_reported_and_later_cells_still_run(load):
    module, err = load(
        "x = 1",
        new_markdown_cell("Markdown does not count in the cell numbers"),
        "import matplotlib_not_installed\nnever = 1",
        "def deep():\n    return 1 / 0\n\nvalue = deep()",
        "def later():\n    return x + 1",
    )
    assert err == [
        "notebook: code cell 2, line 1: ModuleNotFoundError: No module named 'matplotlib_not_installed'",
        "notebook: code cell 3, line 2: ZeroDivisionError: division by zero",
    ]  # the deepest line in cell 3
    assert module.later() == 2
    assert not hasattr(module, "never") and not hasattr(module, "value")


def test_a_syntax_error_is_reported_with_its_cell_and_line(load):
    module, err = load("ok = 1", "first = 1\ndef broken(:\n    pass", "after = ok + 1")
    assert len(err) == 1 and err[0].startswith("notebook: code cell 2, line 2: SyntaxError: ")
    assert module.after == 2
    assert not hasattr(module, "first")  # the cell does not compile, so none of it runs


def test_system_exit_is_an_error_of_its_cell_and_keyboard_interrupt_stops(load):
    module, err = load("import sys\nsys.exit(3)", "raise SystemExit", "after = 1")
    assert err == ["notebook: code cell 1, line 2: SystemExit: 3", "notebook: code cell 2, line 1: SystemExit"]
    assert module.after == 1
    with pytest.raises(KeyboardInterrupt):
        load("raise KeyboardInterrupt", "never = 1")


def test_magics_and_shell_lines_are_skipped_with_notes(load):
    module, err = load(
        "%matplotlib inline\nimport math",
        "!pip install x\ndef after_pip():\n    return 1",
        "%%time\ndef timed():\n    return 2",
        "flag = True\nif flag:\n    %time y = 1\ndef after_if():\n    return 3",
        "files = !ls\ndef after_files():\n    return 4\n\nraise ValueError('line 5')",
        "%%bash\necho hi\nexit 1",
        'text = """\n!not a shell line\n%not a magic\n"""\nremainder = (10\n%3)',
    )
    assert err == [
        "notebook: code cell 1, line 1: skipped the IPython magic/shell line `%matplotlib inline`",
        "notebook: code cell 2, line 1: skipped the IPython magic/shell line `!pip install x`",
        "notebook: code cell 3, line 1: skipped the IPython magic/shell line `%%time`",
        "notebook: code cell 4, line 3: skipped the IPython magic/shell line `%time y = 1`",
        "notebook: code cell 5, line 1: skipped the IPython magic/shell line `files = !ls`",
        "notebook: code cell 6, line 1: skipped the whole cell, an IPython cell magic `%%bash`",
        "notebook: code cell 5, line 5: ValueError: line 5",  # the cell's own line numbers are kept
    ]
    assert (module.math.pi, module.after_pip(), module.timed(), module.after_if(), module.after_files()) == (
        torch.pi,
        1,
        2,
        3,
        4,
    )
    assert not hasattr(module, "y") and not hasattr(module, "files")
    assert module.text == "\n!not a shell line\n%not a magic\n"  # inside a string: left as it is
    assert module.remainder == 1  # a continued line starting with % is the modulo


def test_a_long_magic_line_is_shortened_in_its_note(load):
    _, err = load("!pip install " + "a" * 100)
    assert err == [
        "notebook: code cell 1, line 1: skipped the IPython magic/shell line `!pip install " + "a" * 44 + "...`"
    ]


def test_the_main_block_does_not_run(load):
    module, _ = load("ran = []\nseen = __name__\nif __name__ == '__main__':\n    ran.append('main')")
    assert module.ran == [] and module.seen == module.__name__


def test_no_helper_name_is_left_in_the_module(load):
    module, _ = load("names_during_run = sorted(globals())", "def f():\n    return 1")
    assert [name for name in vars(module) if "notebook" in name] == []
    assert [name for name in module.names_during_run if "notebook" in name] == []
    assert student_names(module) == {"names_during_run", "f"}


def test_a_shadowed_builtin_does_not_break_the_run(load):
    module, err = load("print = None\ncompile = exec = len = str = 0", "1 / 0", "after = 1")
    assert err == ["notebook: code cell 2, line 1: ZeroDivisionError: division by zero"]
    assert module.after == 1


def test_a_future_import_holds_for_later_cells(load):
    module, err = load("from __future__ import annotations", "def f(x: NotDefinedAnywhere) -> None:\n    pass")
    assert err == []
    assert module.f.__annotations__["x"] == "NotDefinedAnywhere"


def test_a_later_call_names_the_cell_and_line_in_its_traceback(load):
    module, _ = load("a = 1", "b = 2", "c = 3", "def fails():\n    x = 1\n    raise RuntimeError('from cell 4')")
    with pytest.raises(RuntimeError) as info:
        module.fails()
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno) == ("code cell 4", 3)


def test_an_nn_module_defined_in_a_cell_works(load):
    module, err = load(
        "import torch\nfrom torch import nn",
        "class Scale(nn.Module):\n"
        "    def __init__(self, factor):\n"
        "        super().__init__()\n"
        "        self.factor = nn.Parameter(torch.tensor(factor))\n"
        "    def forward(self, x):\n"
        "        return x * self.factor",
    )
    assert err == []
    layer = module.Scale(3.0)
    assert torch.equal(layer(torch.tensor([1.0, 2.0])), torch.tensor([3.0, 6.0]))
    assert [name for name, _ in layer.named_parameters()] == ["factor"]


HOSTILE_DOUBLE = "it's ''' and \\ and \\\\n \u202e\u2066 caf\u00e9 \u2028 \U0001f600 e\u0301 \ufeff"
HOSTILE_SINGLE = 'say """ and \\ and \\" \u00a0 \u200b'
BREAKOUT = "\"); import os; os.system('echo pwned') #"


def test_hostile_cell_text_is_only_ever_the_cells_own_code(load, tmp_path):
    cells = (
        f"double = r\"\"\"{HOSTILE_DOUBLE}\"\"\"\nsingle = r'''{HOSTILE_SINGLE}'''\n# {BREAKOUT}\n",
        BREAKOUT,
        "'''\n\"\"\"\n\\",
        "after = 1",
    )
    source = module_source(write_notebook(tmp_path, *cells))
    compile(source, "generated", "exec")
    module, err = load(*cells)
    assert (module.double, module.single) == (HOSTILE_DOUBLE, HOSTILE_SINGLE)  # round trip, exactly
    assert err[0].startswith(
        "notebook: code cell 2, line 1: SyntaxError: "
    )  # the breakout line is a cell's syntax error
    assert err[1].startswith("notebook: code cell 3, line ")
    assert module.after == 1 and not hasattr(module, "os")
    assert "pwned" not in load.out


def test_is_notebook():
    assert [is_notebook(p) for p in ("a.ipynb", "b.IPyNB", "c.py", "ipynb", "d.ipynb.py")] == [
        True,
        True,
        False,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("student.ipynb", "student"),
        ("My Notebook (1).ipynb", "My_Notebook__1_"),
        ("2-attention.ipynb", "notebook_2_attention"),
        ("class.ipynb", "class_"),
        ("caf\u00e9.ipynb", "caf_"),
    ],
)
def test_the_module_file_is_named_after_the_notebook(tmp_path, name, stem):
    written = write_module(write_notebook(tmp_path, "x = 1", name=name), tmp_path)
    assert written == tmp_path / f"{stem}.py"
    assert stem.isidentifier()


@pytest.fixture
def no_hang():
    """A refusal that blocked (a FIFO opened without O_NONBLOCK) fails the test after 5 s instead of hanging."""

    def expired(*_):
        raise TimeoutError("reading the notebook blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _too_large(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "MAX_BYTES", 100)
    return write_notebook(tmp_path, "x = 1\n" * 50)


def _too_many_cells(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "MAX_CELLS", 2)
    return write_notebook(tmp_path, "a = 1", new_markdown_cell("not counted"), "b = 2", "c = 3")


def _cell_too_long(tmp_path, monkeypatch):
    monkeypatch.setattr(notebooks, "MAX_CELL_CHARS", 10)
    return write_notebook(tmp_path, "a = 1", "b = '0123456789'")


def _written(data, name="student.ipynb"):
    def make(tmp_path, _):
        path = tmp_path / name
        path.write_bytes(data)
        return path

    return make


def _fifo(tmp_path, _):
    path = tmp_path / "student.ipynb"
    os.mkfifo(path)
    return path


def _symlink(tmp_path, _):
    target = write_notebook(tmp_path, "x = 1", name="real.ipynb")
    (tmp_path / "student.ipynb").symlink_to(target)
    return tmp_path / "student.ipynb"


def _folder(tmp_path, _):
    (tmp_path / "x.ipynb").mkdir()
    return tmp_path / "x.ipynb"


def _missing(tmp_path, _):
    return tmp_path / "absent.ipynb"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_too_large, "over the limit of 100"),
        (_too_many_cells, "has 3 code cells, over the limit of 2"),
        (_cell_too_long, "code cell 2 is 16 characters long, over the limit of 10"),
        (_written(b'{"cells": [\n  {"cell_type": "code",,}]}'), "is not valid JSON: Expecting property name"),
        (_written(b'{"a": 1}'), "is not a Jupyter notebook"),
        (_written(b"[1, 2]"), "is not a Jupyter notebook"),
        (_written(b"[" * 100_000), "is not a Jupyter notebook"),
        (_written('{"cells": "caf\u00e9"}'.encode("latin-1")), "is not UTF-8 text"),
        (_fifo, "is a FIFO"),
        (_symlink, "is a symbolic link"),
        (_folder, "is a folder"),
        (_missing, "cannot be opened: No such file or directory"),
    ],
    ids=[
        "too-large",
        "too-many-cells",
        "cell-too-long",
        "invalid-json",
        "not-a-notebook",
        "a-list",
        "too-deep",
        "not-utf8",
        "fifo",
        "symlink",
        "folder",
        "missing",
    ],
)
def test_a_file_that_is_not_a_readable_notebook_is_refused(tmp_path, monkeypatch, no_hang, make, problem):
    path = make(tmp_path, monkeypatch)
    with pytest.raises(NotebookError) as info:
        write_module(path, tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and problem in message
    assert "\n" not in message
    assert list(tmp_path.glob("*.py")) == []


def test_a_file_name_that_is_not_printable_stays_on_one_line(tmp_path):
    path = tmp_path / "bad\nname.ipynb"
    path.write_bytes(b"{")
    with pytest.raises(NotebookError) as info:
        module_source(path)
    assert "\n" not in str(info.value) and "bad\\nname.ipynb" in str(info.value)


def test_windows_line_endings_keep_the_line_numbers(load):
    module, err = load("!ls\r\nafter = 1\r\n\r\nraise ValueError('line 4')")
    assert err == [
        "notebook: code cell 1, line 1: skipped the IPython magic/shell line `!ls`",
        "notebook: code cell 1, line 4: ValueError: line 4",
    ]
    assert module.after == 1


def test_a_notebook_of_40000_stored_outputs_is_read_without_parsing_them(tmp_path):
    """Stored outputs are never run: they are dropped before nbformat reads (and validates) the notebook,
    which took 1.8 GB and 19 s of CPU on this notebook when it validated them (0.24 GB, 2 s now, torch included)."""
    cell = {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": "x = 1\n"}
    outputs = [{}] * 40_000  # 120 KB: each an invalid output, which nbformat's validation reported one by one
    notebook = {"cells": [{**cell, "outputs": outputs}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(notebook))
    measure = (
        "import sys\n"
        "from attention_core.grading.intake import notebooks\n"
        "source = notebooks.module_source(sys.argv[1])\n"
        "assert \"'x = 1\\\\n'\" in source, source\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))\n"
    )
    run = subprocess.run([sys.executable, "-c", measure, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    # KiB, this process's own peak (VmHWM: ru_maxrss would carry the forking worker's across the exec)
    assert int(run.stdout) < 400_000, f"{int(run.stdout) // 1024} MB to read it"


def test_more_cells_than_any_notebook_holds_are_refused_before_parsing(tmp_path):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ""}] * (notebooks.MAX_ALL_CELLS + 1)
    path = tmp_path / "many.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(notebooks.NotebookError, match=f"over the limit of {notebooks.MAX_ALL_CELLS}"):
        notebooks.module_source(path)


@pytest.mark.grading
def test_a_notebook_exported_as_a_py_file_is_graded_as_the_notebook_is(tmp_path):
    """Jupyter's "Download as Python" writes each magic and shell line as a call on ``get_ipython()``, which plain
    Python lacks: the lines are left out and told, as a notebook's own are, and a ``%%time`` cell's body runs."""
    correct = (HEAD / "submissions" / "correct.py").read_text(encoding="utf-8")
    exported = (
        "get_ipython().run_line_magic('matplotlib', 'inline')\n"
        "get_ipython().system('pip install torch')\n"
        "files = get_ipython().getoutput('ls')\n"
        "get_ipython().run_cell_magic('bash', '', 'echo hello\\n')\n"
        "import plotting_not_installed_here\n"  # (the file is imported again: each line is told once)
        f"get_ipython().run_cell_magic('time', '', {correct!r})\n"
    )
    (tmp_path / "exported.py").write_text(exported, encoding="utf-8")
    run = grade_head(tmp_path / "exported.py", "--out", tmp_path / "out")
    assert run.returncode == 0, run.stdout[-800:]
    result = json.loads((folder(tmp_path / "out", "exported") / "results.json").read_text(encoding="utf-8"))
    assert result["score"] == result["max_score"] > 0, result["output"][:800]
    for line in ("%matplotlib inline", "!pip install torch", "!ls", "%%bash"):
        assert result["output"].count(f"left out, as a notebook's own line: `{line}") == 1, result["output"][:800]
    assert set(NotebookExport.PYTHON_BODY) == set(notebooks._PYTHON_BODY)  # one rule: the cells whose body runs
