"""No import circles in the project, and the checker's floors import only downwards.

Every .py file of the project is parsed (never run) with `ast`; each import statement, at module level or
inside a function (a deferred import is a circle all the same, only later), and each importlib.import_module,
runpy.run_module or __import__ of a constant name, becomes an edge to the project's module it names. A file
finds its modules as Python would: first in its own folder (a script's, a test's, a fixture's), then at the
project's root; a script that puts the root first on sys.path (sys.path.insert(0, ...)) the other way round.
Importing a.b.c also runs a/__init__.py and a/b/__init__.py, so they are edges too.
"""
import ast
import os

from conftest import PROJECT_DIR

SKIPPED = {".git", ".venv", "__pycache__", "results", "data", "shared"}
DYNAMIC = {"import_module", "run_module", "__import__"}  # calls that import the module their first argument names
FLOORS = ("checking.running", "checking.rules", "checking.grading", "checking.cli")  # bottom to top


def python_files(root):
    """Every .py file under `root` but the virtual environment, git's folder, caches and outputs."""
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in SKIPPED and not f.startswith("."))
        yield from (os.path.join(folder, name) for name in sorted(files) if name.endswith(".py"))


def module_name(path, root):
    """`path`'s module name relative to `root` (a package's __init__.py is the package)."""
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def search_root(path, root):
    """The folder a file's own imports start from: the root for its packages' modules, else its folder."""
    folder = os.path.dirname(path)
    while folder != root and os.path.isfile(os.path.join(folder, "__init__.py")):
        folder = os.path.dirname(folder)
    return folder


def imported_names(tree, package):
    """(name, names taken from it) for every import in `tree`, at any depth; `package`: for relative ones."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            yield name, tuple(alias.name for alias in node.names)
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in DYNAMIC):
            yield node.args[0].value, ()


def puts_first_on_path(tree):
    """Whether the file calls sys.path.insert(0, ...): its folder then comes after what it put first."""
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "insert"
               and ast.unparse(node.func.value) == "sys.path" and node.args and ast.unparse(node.args[0]) == "0"
               for node in ast.walk(tree))


def import_graph(root):
    """{file: set of files it imports}, over the project's own files under `root`."""
    files = list(python_files(root))
    modules = {}  # (search root, module name) -> file
    for path in files:
        home = search_root(path, root)
        modules[(home, module_name(path, home))] = path
    graph = {}
    for path in files:
        home = search_root(path, root)
        name = module_name(path, home)
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        graph[path] = set()
        order = tuple(dict.fromkeys((root, home) if puts_first_on_path(tree) else (home, root)))
        for name, taken in imported_names(tree, package):
            parts = name.split(".")
            names = [".".join(parts[:i]) for i in range(1, len(parts) + 1)] + [f"{name}.{t}" for t in taken]
            place = next((r for r in order if (r, parts[0]) in modules), None)
            graph[path] |= {modules[(place, n)] for n in names if (place, n) in modules}
    return graph


def find_cycle(graph):
    """One import circle of `graph` ({node: nodes it imports}) as [a, b, ..., a], or None."""
    state = {}  # node -> "open" while on the path, "done" once every path from it is explored

    def visit(node, path):
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target, path)
                if found:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def shown(cycle, root):
    return " -> ".join(os.path.relpath(path, root) for path in cycle)


def floor(module):
    """The index of the checker's floor `module` belongs to, or None (not in a floor)."""
    return next((i for i, name in enumerate(FLOORS) if module == name or module.startswith(name + ".")), None)


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) is None


def test_a_deferred_import_is_followed(tmp_path):
    """Two modules of a package, one importing the other inside a function, and a script beside them."""
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "__init__.py").write_text("")
    (tmp_path / "pack" / "low.py").write_text("def f():\n    from pack.high import g\n    return g\n")
    (tmp_path / "pack" / "high.py").write_text("from . import low\n\ndef g():\n    return low\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "script.py").write_text("import helper\nimport pack.high\n")
    (tmp_path / "tools" / "helper.py").write_text("import importlib\nimportlib.import_module('pack.low')\n")
    graph = import_graph(str(tmp_path))
    assert shown(find_cycle(graph), str(tmp_path)) in ("pack/low.py -> pack/high.py -> pack/low.py",
                                                       "pack/high.py -> pack/low.py -> pack/high.py")
    assert graph[str(tmp_path / "tools" / "helper.py")] == {str(tmp_path / "pack" / "__init__.py"),
                                                             str(tmp_path / "pack" / "low.py")}
    (tmp_path / "pack" / "low.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(str(tmp_path))) is None


def test_the_project_has_no_import_circle():
    cycle = find_cycle(import_graph(PROJECT_DIR))
    assert cycle is None, f"an import circle: {shown(cycle, PROJECT_DIR)}"


def test_the_checkers_floors_import_only_from_below():
    """running/ < rules/ < grading/ < cli.py: a module imports from its own floor or those below it."""
    graph = import_graph(PROJECT_DIR)
    upward = []
    for path, targets in graph.items():
        here = floor(module_name(path, PROJECT_DIR))
        for target in targets:
            there = floor(module_name(target, PROJECT_DIR))
            if here is not None and there is not None and there > here:
                upward.append(f"{os.path.relpath(path, PROJECT_DIR)} imports {os.path.relpath(target, PROJECT_DIR)}")
    assert not upward, "a floor imports from above it:\n" + "\n".join(upward)
    assert {floor(module_name(p, PROJECT_DIR)) for p in graph} >= set(range(len(FLOORS)))  # every floor was seen


def test_the_command_line_script_is_a_thin_shell():
    """check_submission.py parses the options and calls the package: at most 80 lines."""
    with open(os.path.join(PROJECT_DIR, "check_submission.py")) as f:
        assert len(f.read().splitlines()) <= 80
