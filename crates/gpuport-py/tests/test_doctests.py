"""Every public function, class and method of gpuport has a docstring
example, and every example runs (issue 17).

The public names: what ``gpuport``, ``gpuport.runtime``, ``gpuport.memory``,
``gpuport.torch``, ``gpuport.cupy`` and ``gpuport.numba`` export
(``__all__``; modules and constants aside), and the methods and properties
that each of those classes defines itself (``vars(cls)``: an inherited
member is checked on the class that defines it). An object exported under
two names (``gpuport.Stream`` and ``gpuport.runtime.Stream``) is checked
once, under its first name. ``gpuport.numba`` imports Numba, so it is read
from its source instead: this process imports no peer library.

``test_example_runs`` runs each docstring's examples with :mod:`doctest`
(one test per object, so a failure names it), in fresh globals (an example
imports what it uses), with ELLIPSIS on. The examples run on the host
backend (``device="host"``), so CI, which has no GPU, runs them all but
those of the peer modules: an example of ``gpuport.torch``,
``gpuport.cupy`` or ``gpuport.numba`` needs its peer library and, for most,
a CUDA device, and skips with the reason where one is missing. Those run in
a fresh interpreter each, since they change process-wide state (the peer's
allocator) that must be set before the peer's first CUDA allocation.

``python tests/test_doctests.py NAME`` runs one object's examples (that
fresh interpreter).
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import gc
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import gpuport
from gpuport import runtime as _rt

MODULES = (
    "gpuport",
    "gpuport.runtime",
    "gpuport.memory",
    "gpuport.torch",
    "gpuport.cupy",
    "gpuport.numba",
    "gpuport.distributed",
    "gpuport.distributed.run",
)
# The peer library each module's examples need.
PEERS = {"gpuport.torch": "torch", "gpuport.cupy": "cupy", "gpuport.numba": "numba"}
# Examples of peer modules that need only the peer, not a CUDA device.
RUN_WITHOUT_CUDA = {"gpuport.numba.cuda_spec", "gpuport.numba.ipc_handle_bytes"}
# Modules that import their peer when imported: read from their source, so
# that this process imports no peer (its examples run in their own).
READ_FROM_SOURCE = {"gpuport.numba"}
OPTIONFLAGS = doctest.ELLIPSIS


@dataclasses.dataclass
class Documented:
    name: str  # the qualified name, e.g. "gpuport.MemArray.add_index"
    module: str  # the module that exports it (or its class)
    kind: str  # "module", "function", "class", "method" or "property"
    doc: str = dataclasses.field(repr=False)
    owner: Optional[str] = None  # the class of a method or property
    aliases: Tuple[str, ...] = ()

    @property
    def has_example(self) -> bool:
        return ">>>" in self.doc


def _members(cls: type) -> Iterator[Tuple[str, str, Any]]:
    """``(name, kind, object)`` of the methods and properties ``cls`` defines.

    Not listed: names with a leading underscore, dunders included: those
    implement Python's protocols (``with``, ``int()``, ``len()``,
    ``numpy.from_dlpack`` calling ``__dlpack__``), which the class examples
    use; and plain class attributes (enum members, constants, a class
    re-exported as an attribute), which have no code to show.
    """
    for name, raw in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(raw, property) or inspect.isgetsetdescriptor(raw) or inspect.ismemberdescriptor(raw):
            yield name, "property", raw
        elif isinstance(raw, (staticmethod, classmethod)):
            yield name, "method", raw.__func__
        elif inspect.isfunction(raw) or inspect.ismethoddescriptor(raw) or inspect.isbuiltin(raw):
            yield name, "method", raw


def _from_import(module_name: str, mod: Any) -> Iterator[Tuple[Any, Documented]]:
    yield mod, Documented(module_name, module_name, "module", mod.__doc__ or "")
    for name in mod.__all__:
        obj = getattr(mod, name)
        if inspect.ismodule(obj) or not callable(obj):
            continue  # submodules are walked themselves; constants have no code
        qual = f"{module_name}.{name}"
        if isinstance(obj, type):
            yield obj, Documented(qual, module_name, "class", obj.__doc__ or "")
            for member, kind, raw in _members(obj):
                doc = raw.__doc__ or ""
                yield raw, Documented(f"{qual}.{member}", module_name, kind, doc, owner=qual)
        else:
            yield obj, Documented(qual, module_name, "function", obj.__doc__ or "")


def _from_source(module_name: str) -> Iterator[Tuple[Any, Documented]]:
    """The same as ``_from_import``, read from the module's source (without
    importing it): the functions and classes its ``__all__`` names, and the
    methods and properties of those classes."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin is not None, module_name
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    exported: List[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            exported = ast.literal_eval(node.value)

    def doc(node: Any) -> str:
        return ast.get_docstring(node, clean=False) or ""

    yield None, Documented(module_name, module_name, "module", doc(tree))
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for name in exported:
        node = defs.get(name)
        if node is None:
            continue  # a re-export or a constant
        qual = f"{module_name}.{name}"
        if isinstance(node, ast.ClassDef):
            yield None, Documented(qual, module_name, "class", doc(node))
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                    is_prop = any(getattr(d, "id", None) == "property" for d in m.decorator_list)
                    kind = "property" if is_prop else "method"
                    yield None, Documented(f"{qual}.{m.name}", module_name, kind, doc(m), owner=qual)
        else:
            yield None, Documented(qual, module_name, "function", doc(node))


def collect() -> List[Documented]:
    """Every documented public object."""
    found: Dict[int, Documented] = {}
    by_source: List[Documented] = []
    for module_name in MODULES:
        if module_name in READ_FROM_SOURCE:
            by_source.extend(d for _, d in _from_source(module_name))
            continue
        for obj, d in _from_import(module_name, importlib.import_module(module_name)):
            key = id(obj)
            if key in found:  # the same object under a second name
                found[key].aliases += (d.name,)
            else:
                found[key] = d
    return list(found.values()) + by_source


DOCUMENTED = collect()
BY_NAME = {d.name: d for d in DOCUMENTED}


def _example_source(doc: str) -> str:
    return "".join(ex.source for ex in doctest.DocTestParser().get_examples(doc))


def _shown_in_class_example(d: Documented) -> bool:
    """Whether the example of the property's class reads it (``x.name``)."""
    owner = BY_NAME.get(d.owner or "")
    attr = d.name.rsplit(".", 1)[1]
    return owner is not None and re.search(rf"\.{re.escape(attr)}\b", _example_source(owner.doc)) is not None


def run_examples(name: str, doc: str) -> Tuple[int, str]:
    """Runs ``doc``'s examples: ``(failures, report)``."""
    test = doctest.DocTestParser().get_doctest(doc, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    report: List[str] = []
    result = runner.run(test, out=report.append)
    return result.failed, "".join(report)


def test_the_walk_finds_the_api():
    """A walk that misses whole modules or classes would pass everything below."""
    names = set(BY_NAME) | {a for d in DOCUMENTED for a in d.aliases}
    for expected in (
        "gpuport.MemArray.add_index",
        "gpuport.MemArray.shape",
        "gpuport.Stream.external",
        "gpuport.runtime.Stream",
        "gpuport.runtime.DeviceArray.configure",
        "gpuport.runtime.Pointer.nbytes",
        "gpuport.memory.Allocation.free",
        "gpuport.memory.stats",
        "gpuport.torch.use_gpuport_for_torch",
        "gpuport.cupy.allocator",
        "gpuport.numba.GpuportNumbaMemoryManager.memalloc",
        "gpuport.numba.GpuportNumbaMemoryManager.interface_version",
        "gpuport.GraphError",
    ):
        assert expected in names, f"{expected} was not collected"
    assert len(DOCUMENTED) > 150


def test_every_public_name_has_an_example():
    """Each public function, class and method has a docstring with an example.

    A property may instead be read in its class's example (``a.shape`` in
    ``MemArray``'s): one example then shows all of a class's properties,
    where an example for each would repeat the class's setup a dozen times.
    """
    missing = []
    for d in DOCUMENTED:
        if d.kind == "module" or d.has_example:
            continue
        if d.kind == "property" and _shown_in_class_example(d):
            continue
        missing.append(f"{d.name} ({d.kind})")
    assert not missing, "no docstring example (>>>) in:\n  " + "\n  ".join(missing)


# Examples that export IPC handles, which memory of expandable segments
# refuses (MemoryError::ExpandableIpc): they run on plain segments also when
# the suite runs with GPUPORT_POOL=expandable.
PLAIN_SEGMENTS = {"gpuport.numba.GpuportNumbaMemoryManager.get_ipc_handle"}


def _skip_unless_runnable(d: Documented) -> None:
    peer = PEERS.get(d.module)
    if peer is None:
        return
    if importlib.util.find_spec(peer) is None:
        pytest.skip(f"{d.name}: its example needs {peer}, which is not installed here")
    if d.name not in RUN_WITHOUT_CUDA and not gpuport.is_available("cuda"):
        notes = "; ".join(note for name, _, note in gpuport.backend_status() if name == "cuda")
        pytest.skip(f"{d.name}: its example needs a CUDA device, and cuda is unavailable here: {notes}")


@pytest.mark.parametrize("d", [d for d in DOCUMENTED if d.has_example], ids=lambda d: d.name)
def test_example_runs(d):
    _skip_unless_runnable(d)
    if d.module in PEERS:
        env = dict(os.environ)
        if d.name in PLAIN_SEGMENTS:
            env["GPUPORT_POOL"] = "plain"
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), d.name], capture_output=True, text=True, timeout=300, env=env
        )
        assert proc.returncode == 0, f"{d.name}: its example failed in a fresh interpreter:\n{proc.stdout}{proc.stderr}"
        return
    # Garbage and finished asynchronous work of earlier tests are freed now,
    # not inside an example that counts allocations and frees.
    gc.collect()
    _rt.device_synchronize("host")
    failed, report = run_examples(d.name, d.doc)
    assert failed == 0, report


def _doc_of(name: str) -> str:
    """The docstring of the object called ``name`` (a module, or a module's attribute)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj.__doc__ or ""
    raise LookupError(name)


if __name__ == "__main__":
    failed, report = run_examples(sys.argv[1], _doc_of(sys.argv[1]))
    print(report, end="")
    sys.exit(1 if failed else 0)
