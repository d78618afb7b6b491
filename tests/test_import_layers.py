"""The Python layers point down only: no module imports one that (directly or not) imports it back, and the
core modules (pyhorovod/*.py: _api, basics, the numpy front, ...) never import the layers built on them
(pyhorovod.torch, pyhorovod.runner, pyhorovod.scaling).

Imports are read from the source (ast), every one of them: those at module level and those inside
functions, which run later but still tie the two modules together. `from pyhorovod import x` counts as an
import of the module pyhorovod.x when x is one, else of the package pyhorovod.
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "pyhorovod")

ABOVE_CORE = ("pyhorovod.torch", "pyhorovod.runner", "pyhorovod.scaling")
# Entry points that start the launcher: above everything, though they sit beside the core modules.
ENTRY_POINTS = {"pyhorovod.run", "pyhorovod.__main__"}

# Cycles tolerated, each with why it is still there (none today). This list may only shrink.
KNOWN_CYCLES = {
}
# Core modules that still import a layer above them, with why. This list may only shrink.
KNOWN_UPWARD = {
}


def _modules():
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            path = os.path.join(folder, f)
            if f.endswith(".so"):  # an extension module (pyhorovod._core): imports nothing of ours
                parts = os.path.relpath(path, ROOT).split(".")[0].split(os.sep)
                found[".".join(parts)] = None
                continue
            if not f.endswith(".py"):
                continue
            parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name, path, modules):
    is_package = path.endswith("__init__.py")
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in modules else source)
    edges = set()
    for t in targets:
        # `import a.b.c` imports the deepest of its names that is one of ours
        while t and t not in modules:
            t = t.rpartition(".")[0]
        if t and t != name:
            edges.add(t)
    return edges


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) if path else set() for name, path in modules.items()}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(frozenset(component))
    return result


def _is_core(name):
    """A module in pyhorovod/ itself (not in a sub-package), the launcher's entry points excepted."""
    path = _modules()[name]
    return (path is not None and os.path.dirname(path) == PACKAGE and not path.endswith("__init__.py")
            and name not in ENTRY_POINTS)


def _is_above(name):
    return any(name == top or name.startswith(top + ".") for top in ABOVE_CORE)


def test_no_import_cycles():
    found = set(_cycles(_graph()))
    unexpected = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not unexpected, f"import cycles: {unexpected}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


def test_core_modules_do_not_import_the_layers_above():
    graph = _graph()
    upward = {(m, t) for m, targets in graph.items() if _is_core(m) for t in targets if _is_above(t)}
    unexpected = sorted(upward - set(KNOWN_UPWARD))
    assert not unexpected, f"core modules importing torch/runner/scaling: {unexpected}"
    gone = sorted(set(KNOWN_UPWARD) - upward)
    assert not gone, f"no longer imported: remove them from KNOWN_UPWARD: {gone}"


def test_the_reader_sees_late_imports():
    """The check would be empty if function-level imports were missed: _api's users import it late too."""
    graph = _graph()
    assert "pyhorovod._api" in graph["pyhorovod._numpy_allreduce"]
    assert "pyhorovod._cuda_arrays" in graph["pyhorovod._numpy_exchange"]
    assert "pyhorovod._numpy_ops" in graph["pyhorovod._autotune"]  # a function-level import
