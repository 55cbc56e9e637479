r"""Docstrings in PyG's form, read from the AST of every module (a few seconds; only the cross-reference check imports).

PyG documents every argument as ``name (type, optional): text (default: ...)``, the constructor's
arguments in the class docstring, and a layer's tensors in a ``Shapes:`` section. This test checks:

* **Form**, for every public definition: each entry of an ``Args:`` section is ``name: text`` (untyped)
  or ``name (type): text`` or ``name (type, optional): text``; one name per entry (not ``rank, world_size:``);
  an ``optional`` entry says ``(default: ...)`` (``*args``/``**kwargs`` excepted, as in PyG); an entry names
  a parameter of the function (of ``__init__`` for a class docstring); a parameter with a default value
  is documented ``optional``, one without is not.
* **Typed share**: at least :data:`MIN_TYPED_SHARE` of all these entries give a type.
* **Coverage**, for every function and class a package exports (its ``__all__``, the root's and every
  subpackage's): an ``Args:`` section documents every parameter (``self``/``cls`` left out; ``*args`` and
  ``**kwargs`` as ``*args``/``**kwargs``), a class's in the class docstring (a dataclass's or NamedTuple's
  fields in ``Args:`` or ``Attributes:``); an exported ``torch.nn.Module``
  with a ``forward``, and an exported function or class taking a tensor named as PyG names node and edge
  tensors (``x``, ``edge_index``, ...), has a ``Shapes:`` section.
* **Cross-references**: every ``:mod:``/``:class:``/``:func:``/``:meth:`` (also ``:attr:``, ``:data:``,
  ``:obj:``, ``:exc:``) target ``pyg_sparsecomm...`` or ``~pyg_sparsecomm...`` in a docstring names a module of
  the package or an attribute of one (imported as Sphinx would import it), so a reference
  to a path a module moved away from cannot come back.

*Public* is what a user can import and read in the API docs: a function or class whose name has no
leading underscore, defined at module level (also under a module-level ``if``/``try``) of a module whose
path has no ``_``-prefixed part (``_lazy.py``, ``partition/_threads.py`` and ``__main__.py`` are private),
plus the public methods of public classes that take arguments other than ``self``/``cls`` (properties,
``@overload`` stubs and property setters left out). A name in an ``__all__`` is resolved through the
package's imports and lazy-export tables to the module that defines it; such definitions are public by
this rule too, so ``__all__`` adds the coverage requirement, not the form one.
"""
import ast
import dataclasses
import importlib
import pathlib
import re

import pyg_sparsecomm

PACKAGE = pathlib.Path(pyg_sparsecomm.__file__).parent
NAME = "pyg_sparsecomm"

#: issue 47: at least this share of the public ``Args:`` entries give a type
MIN_TYPED_SHARE = 0.90

_ENTRY = re.compile(r"(?P<name>\*{0,2}[A-Za-z_]\w*)(?P<rest>.*)")
#: PyG's names of node- and edge-level tensors: an exported function with such a parameter annotated as a
#: tensor documents its shapes in ``Shapes:``
NODE_AND_EDGE_TENSORS = {"x", "edge_index", "edge_attr", "edge_weight", "edge_label_index"}
_SKIPPED_DECORATORS = {"overload", "setter", "deleter", "property", "cached_property"}


@dataclasses.dataclass
class Entry:
    name: str
    type: str | None  # None: untyped
    optional: bool
    text: str
    line: str

    @property
    def typed(self) -> bool:
        """A type given (PyG writes ``**kwargs (optional): ...`` without one)."""
        return self.type is not None or (self.name.startswith("*") and self.optional)


@dataclasses.dataclass
class Definition:
    module: str
    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    params: list[str]  # documented names: 'x', '*args', '**kwargs'
    with_default: set[str]
    tensors: set[str] = dataclasses.field(default_factory=set)  # parameters annotated as tensors
    record: bool = False  # a dataclass or NamedTuple: its fields may be documented as 'Attributes:'

    @property
    def where(self) -> str:
        return f"{self.module}.{self.qualname}"


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = [NAME, *path.relative_to(PACKAGE).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _is_public_module(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def _top_level(body: list[ast.stmt]):
    """Statements run at import (into module-level ``if``/``try`` blocks, not into functions)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _top_level(block)


def _decorator_names(node) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _signature(function, drop_first: bool) -> tuple[list[str], set[str], set[str]]:
    """The documented names of a function's parameters, those of them with a default and those
    annotated as tensors."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    if drop_first and positional:
        positional = positional[1:]
    params = [a.arg for a in positional]
    with_default = set(params[len(params) - len(args.defaults):]) if args.defaults else set()
    if args.vararg:
        params.append(f"*{args.vararg.arg}")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(arg.arg)
        if default is not None:
            with_default.add(arg.arg)
    if args.kwarg:
        params.append(f"**{args.kwarg.arg}")
    tensors = {a.arg for a in [*positional, *args.kwonlyargs]
               if a.annotation is not None and "Tensor" in ast.unparse(a.annotation)}
    return params, with_default, tensors


def _field_without_default(value: ast.expr) -> bool:
    """``field(repr=False)``: a dataclass field that still has no default value."""
    return isinstance(value, ast.Call) and ast.unparse(value.func) in {"field", "dataclasses.field"} \
        and not {keyword.arg for keyword in value.keywords} & {"default", "default_factory"}


def _class_fields(node: ast.ClassDef) -> tuple[list[str], set[str], set[str]] | None:
    """A dataclass's or NamedTuple's constructor parameters (its annotated fields), else None."""
    bases = {ast.unparse(base) for base in node.bases}
    if "dataclass" not in _decorator_names(node) and not bases & {"NamedTuple", "typing.NamedTuple"}:
        return None
    params, with_default, tensors = [], set(), set()
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and "ClassVar" not in ast.unparse(stmt.annotation):
            params.append(stmt.target.id)
            if stmt.value is not None and not _field_without_default(stmt.value):
                with_default.add(stmt.target.id)
            if "Tensor" in ast.unparse(stmt.annotation):
                tensors.add(stmt.target.id)
    return params, with_default, tensors


def _init_of(node: ast.ClassDef) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
            return stmt
    return None


def _class_signature(node: ast.ClassDef, module: str, resolver: "Resolver", depth: int = 0):
    """A class's constructor parameters: its ``__init__``'s, its fields' (dataclass, NamedTuple), else
    those of the first base class defined in the package that has some."""
    init = _init_of(node)
    if init is not None:
        return _signature(init, drop_first=True)
    fields = _class_fields(node)
    if fields is not None:  # a dataclass's fields follow those of the dataclasses it extends
        for base in reversed(node.bases):
            found = resolver.resolve(module, ast.unparse(base))
            if found is not None and isinstance(found[1], ast.ClassDef) and _class_fields(found[1]) is not None \
                    and depth < 10:
                inherited = _class_signature(found[1], found[0], resolver, depth + 1)
                fields = ([p for p in inherited[0] if p not in fields[0]] + fields[0],
                          inherited[1] | fields[1], inherited[2] | fields[2])
        return fields
    if depth > 10:
        return [], set(), set()
    for base in node.bases:
        found = resolver.resolve(module, ast.unparse(base))
        if found is not None and isinstance(found[1], ast.ClassDef):
            return _class_signature(found[1], found[0], resolver, depth + 1)
    return [], set(), set()


def _definitions(module: str, tree: ast.Module, resolver: "Resolver") -> list[Definition]:
    """The module's public functions, classes and methods (see the module docstring)."""
    out = []
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_") \
                and not _decorator_names(node) & _SKIPPED_DECORATORS:
            out.append(Definition(module, node.name, node, *_signature(node, drop_first=False)))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            record = _init_of(node) is None and _class_fields(node) is not None
            out.append(Definition(module, node.name, node, *_class_signature(node, module, resolver), record=record))
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not stmt.name.startswith("_") \
                        and not _decorator_names(stmt) & _SKIPPED_DECORATORS:
                    static = "staticmethod" in _decorator_names(stmt)
                    signature = _signature(stmt, drop_first=not static)
                    if signature[0]:
                        out.append(Definition(module, f"{node.name}.{stmt.name}", stmt, *signature))
    return out


def _balanced(text: str) -> int:
    """The index just past the parenthesis closing the one ``text`` starts with, or -1."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0)
        if depth == 0:
            return i + 1
    return -1


def _parse_entry(first: str, more: list[str]) -> Entry | str:
    """One ``Args:`` entry, or a string saying why it is not in PyG's form."""
    match = _ENTRY.fullmatch(first)
    if match is None:
        return f"not 'name (type): text': {first!r}"
    name, rest = match["name"], match["rest"]
    kind, optional = None, False
    if rest.startswith(" ("):
        end = _balanced(rest[1:])
        if end < 0:
            return f"unbalanced parentheses: {first!r}"
        kind = rest[2:end].strip()
        rest = rest[end + 1:]
        if kind == "optional" or kind.endswith(", optional"):
            optional, kind = True, kind.removesuffix("optional").rstrip(", ") or None
    if not rest.startswith(":"):
        return f"one 'name (type): text' per entry: {first!r}"
    return Entry(name, kind, optional, " ".join([rest[1:].strip(), *(m.strip() for m in more)]).strip(), first)


def args_entries(docstring: str | None, sections: tuple[str, ...] = ("Args:",)) -> list[Entry | str] | None:
    """The entries of a docstring's ``Args:`` section (or the first of ``sections``; None: none)."""
    if not docstring:
        return None
    lines = docstring.expandtabs().split("\n")
    heads = [i for i, line in enumerate(lines) if line.strip() in sections]
    if not heads:
        return None
    head = heads[0]
    section_indent = len(lines[head]) - len(lines[head].lstrip())
    entries: list[list[str]] = []
    indent = None
    for line in lines[head + 1:]:
        if not line.strip():
            continue
        current = len(line) - len(line.lstrip())
        if current <= section_indent or (indent is not None and current < indent):
            break
        if indent is None:
            indent = current
        if current == indent:
            entries.append([line.strip()])
        else:
            entries[-1].append(line)
    return [_parse_entry(first, more) for first, *more in entries]


def _where_documented(definition: Definition) -> str | None:
    return ast.get_docstring(definition.node)


def entries_of(definition: Definition) -> list[Entry | str] | None:
    """The parameter entries of a definition's docstring: its ``Args:`` (a record's fields may be
    its ``Attributes:``, as a record a function returns documents them)."""
    sections = ("Args:", "Attributes:") if definition.record else ("Args:",)
    return args_entries(_where_documented(definition), sections)


@dataclasses.dataclass
class Report:
    entries: int = 0
    typed: int = 0
    form: list[str] = dataclasses.field(default_factory=list)


def check_form(definitions: list[Definition]) -> Report:
    report = Report()
    for definition in definitions:
        entries = entries_of(definition)
        for entry in entries or ():
            if isinstance(entry, str):
                report.form.append(f"{definition.where}: {entry}")
                report.entries += 1
                continue
            report.entries += 1
            report.typed += entry.typed
            star = entry.name.startswith("*")
            known = {p.lstrip("*") for p in definition.params}
            if entry.name.lstrip("*") not in known:
                report.form.append(f"{definition.where}: '{entry.name}' is no parameter "
                                   f"(parameters: {', '.join(definition.params) or 'none'})")
            elif entry.optional and not star and "(default:" not in entry.text:
                report.form.append(f"{definition.where}: '{entry.name}' is optional but says no '(default: ...)'")
            elif not star and entry.type is not None and (entry.name in definition.with_default) != entry.optional:
                has = "has" if entry.name in definition.with_default else "has no"
                report.form.append(f"{definition.where}: '{entry.name}' {has} default value: write "
                                   f"'{entry.name} ({entry.type}{'' if has == 'has no' else ', optional'}): ...'")
    return report


# --- what the packages export ------------------------------------------------------------------------

def _exports_table(tree: ast.Module) -> dict[str, str]:
    """name -> relative module, from the lazy-export dicts (``{"name": ".module"}`` literals, dict
    comprehensions over a tuple of names and ``table["name"] = ".module"``)."""
    table = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) \
                        and isinstance(value.value, str) and value.value.startswith("."):
                    table[key.value] = value.value
        elif isinstance(node, ast.DictComp) and isinstance(node.value, ast.Constant):
            for generator in node.generators:
                for element in getattr(generator.iter, "elts", ()):
                    table[element.value] = node.value.value
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) \
                and isinstance(node.value, ast.Constant) and isinstance(node.targets[0].slice, ast.Constant):
            table[node.targets[0].slice.value] = node.value.value
    return table


def _all_of(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [element.value for element in node.value.elts]
    return []


def _absolute(module: str, is_package: bool, relative: str, level: int) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - level + 1] if level else []
    return ".".join([*base, relative] if relative else base)


class Resolver:
    """Finds the definition (module, AST node) that an exported name stands for."""

    def __init__(self) -> None:
        self.paths = _modules()
        self.trees = {module: ast.parse(path.read_text()) for module, path in self.paths.items()}

    def _is_package(self, module: str) -> bool:
        return self.paths[module].name == "__init__.py"

    def resolve(self, module: str, name: str, depth: int = 0):
        """(module, node) of the function/class ``name`` means in ``module``; None for other values
        (constants, registries)."""
        if depth > 10 or module not in self.trees:
            return None
        tree = self.trees[module]
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return module, node
        for node in _top_level(tree.body):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = _absolute(module, self._is_package(module), node.module or "", node.level)
                        return self.resolve(source, alias.name, depth + 1)
        lazy = _exports_table(tree)
        if name in lazy:
            source = _absolute(module, self._is_package(module), lazy[name].lstrip("."), 1)
            return self.resolve(source, name, depth + 1)
        return None

    def exported(self) -> dict[str, list[str]]:
        """Definition's 'module.qualname' -> the packages exporting it."""
        out: dict[str, list[str]] = {}
        for module, tree in self.trees.items():
            if not self._is_package(module):
                continue
            for name in _all_of(tree):
                found = self.resolve(module, name)
                if found is not None:
                    out.setdefault(f"{found[0]}.{found[1].name}", []).append(module)
        return out


def public_definitions(resolver: Resolver) -> list[Definition]:
    return [definition for module, tree in resolver.trees.items() if _is_public_module(module)
            for definition in _definitions(module, tree, resolver)]


def _is_layer(definition: Definition, resolver: "Resolver") -> bool:
    """A ``torch.nn.Module`` (a base class, followed through the package, named ``*Module`` or
    ``MessagePassing``) that defines ``forward``."""
    node = definition.node
    if not isinstance(node, ast.ClassDef):
        return False
    if not any(isinstance(stmt, ast.FunctionDef) and stmt.name == "forward" for stmt in node.body):
        return False
    todo, seen = [(definition.module, node)], set()
    while todo:
        module, klass = todo.pop()
        for base in klass.bases:
            name = ast.unparse(base)
            if name.endswith("Module") or name.endswith("MessagePassing"):
                return True
            found = resolver.resolve(module, name)
            if found is not None and isinstance(found[1], ast.ClassDef) and (found[0], name) not in seen:
                seen.add((found[0], name))
                todo.append(found)
    return False


def check_coverage(definitions: list[Definition], exported: dict[str, list[str]], resolver: "Resolver") -> list[str]:
    offenders = []
    by_name = {definition.where: definition for definition in definitions}
    for where, packages in sorted(exported.items()):
        definition = by_name.get(where)
        if definition is None:
            offenders.append(f"{where} (exported by {', '.join(packages)}) is defined in a private module")
            continue
        entries = entries_of(definition)
        documented = {e.name.lstrip("*") for e in entries or () if not isinstance(e, str)}
        missing = [p for p in definition.params if p.lstrip("*") not in documented]
        record = " (or 'Attributes:', a record)" if definition.record else ""
        if missing and entries is None:
            offenders.append(f"{where} (exported by {', '.join(packages)}): no 'Args:' section{record} "
                             f"(parameters: {', '.join(definition.params)})")
        elif missing:
            offenders.append(f"{where}: 'Args:' misses {', '.join(missing)}")
        tensors = NODE_AND_EDGE_TENSORS & definition.tensors
        if (tensors or _is_layer(definition, resolver)) and "Shapes:" not in (_where_documented(definition) or ""):
            offenders.append(f"{where}: no 'Shapes:' section (a layer, or it takes "
                             f"{', '.join(sorted(tensors)) or 'node or edge tensors'})")
    return offenders


def _format(title: str, lines: list[str]) -> str:
    return f"{title} ({len(lines)}):\n  " + "\n  ".join(lines)


def test_args_entries_in_pygs_form():
    report = check_form(public_definitions(Resolver()))
    assert not report.form, _format("Args entries not in PyG's form 'name (type, optional): text (default: ...)'",
                                    report.form)


def test_args_entries_typed():
    report = check_form(public_definitions(Resolver()))
    share = report.typed / max(report.entries, 1)
    untyped = [f"{d.where}: {e.name}" for d in public_definitions(Resolver())
               for e in entries_of(d) or () if not isinstance(e, str) and not e.typed]
    assert share >= MIN_TYPED_SHARE, _format(
        f"{report.typed} of {report.entries} Args entries typed ({share:.0%} < {MIN_TYPED_SHARE:.0%}); untyped",
        untyped)


def test_exported_names_document_every_parameter():
    resolver = Resolver()
    offenders = check_coverage(public_definitions(resolver), resolver.exported(), resolver)
    assert not offenders, _format("exported functions/classes with undocumented parameters", offenders)


def test_no_escape_sequences_in_docstrings():
    """``:math:`\\alpha``` in a docstring that is not raw is ``\\x07lpha`` (``\\a``, ``\\b``, ``\\f``, ``\\t``,
    ``\\v`` are valid escapes, so ruff's W605 does not see them): write ``r\"\"\"`` docstrings for math."""
    offenders = []
    for module, tree in Resolver().trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node, clean=False) or ""
                found = re.search(r".{0,30}[\x00-\x08\x0b-\x1f].{0,30}", docstring)
                if found:
                    offenders.append(f"{module}.{getattr(node, 'name', '')}: {found.group()!r}")
    assert not offenders, _format("docstrings with control characters (an escape in a docstring that is not raw)",
                                  offenders)


#: a Sphinx cross-reference into the package: ``:class:`~pyg_sparsecomm.plan.RankPlan```, or relative to the
#: module, ``:func:`~.port.shard_of``` (the roles' targets ``pyg_sparsecomm...`` or ``.name...``)
_REFERENCE = re.compile(
    r":(?:mod|class|func|meth|attr|data|obj|exc):`~?(?P<target>(?:pyg_sparsecomm|)(?:\.\w+)+)(?:\(\))?`")


def references(resolver: Resolver) -> dict[tuple[str, str], list[str]]:
    """Every (module, target) a docstring of the module cross-references -> the docstrings naming it."""
    out: dict[tuple[str, str], list[str]] = {}
    for module, tree in resolver.trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for match in _REFERENCE.finditer(ast.get_docstring(node, clean=False) or ""):
                    out.setdefault((module, match["target"]), []).append(
                        f"{module}.{getattr(node, 'name', '')}".rstrip("."))
    return out


def _is_field(owner, name: str) -> bool:
    """``name`` is a field of the class ``owner`` declared without a value (a dataclass's or NamedTuple's
    annotated field is no class attribute)."""
    return isinstance(owner, type) and any(name in vars(klass).get("__annotations__", {}) for klass in owner.__mro__)


def _resolves_absolute(target: str, resolver: Resolver) -> bool:
    parts = target.split(".")
    prefix = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in resolver.paths), default=0)
    if prefix == 0:
        return False
    owner = importlib.import_module(".".join(parts[:prefix]))
    for name in parts[prefix:]:
        if not hasattr(owner, name):
            return name == parts[-1] and _is_field(owner, name)
        owner = getattr(owner, name)
    return True


def resolves(target: str, resolver: Resolver, module: str = NAME) -> bool:
    """``target`` is a module of the package or an attribute (a field) of one, imported as Sphinx would; a
    relative ``.name...`` is looked up in ``module`` and then in each package above it."""
    if not target.startswith("."):
        return _resolves_absolute(target, resolver)
    parts = module.split(".")
    return any(_resolves_absolute(".".join(parts[:i]) + target, resolver) for i in range(len(parts), 0, -1))


def test_cross_references_resolve():
    """Every ``:mod:``/``:class:``/``:func:``/``:meth:`` (``:attr:``, ``:data:``, ...) target in the package
    names a module that exists, or an attribute of one: no reference to a path a module moved away from."""
    resolver = Resolver()
    found = references(resolver)
    assert len(found) > 100  # the scan reads the roles
    stale = [f"{target} (in {', '.join(sorted(set(where)))})" for (module, target), where in sorted(found.items())
             if not resolves(target, resolver, module)]
    assert not stale, _format("docstring cross-references to no module or attribute (moved?)", stale)
    assert not resolves("pyg_sparsecomm.nn.shared_adjacency", resolver)  # a moved module: the check can fail
    assert not resolves("pyg_sparsecomm.plan.NoSuchName", resolver)
    assert not resolves(".layer_rules", resolver, "pyg_sparsecomm.nn.runtime.call")
    assert resolves("pyg_sparsecomm.plan.homogeneous.CommPattern.spans", resolver)  # a dataclass field
    assert resolves(".port.shard_of", resolver, "pyg_sparsecomm.nn.runtime.call")
    assert resolves(".sampling.NeighborSampling", resolver, "pyg_sparsecomm.loader.neighbor_loader")


def test_parser_reads_pygs_form():
    """The checks above can fail: the parser tells PyG's form from the forms it rejects."""
    docstring = """Summary.

    Args:
        x (torch.Tensor): node features
            over two lines (with (nested) parentheses).
        k (int, optional): hops. (default: :obj:`2`)
        rank, world_size: two names.
        group: untyped.
        **kwargs (optional): passed on.

    Returns:
        a tensor.
    """
    x, k, bad, group, kwargs = args_entries(docstring)
    assert (x.name, x.type, x.optional) == ("x", "torch.Tensor", False) and "nested" in x.text
    assert (k.name, k.type, k.optional) == ("k", "int", True)
    assert isinstance(bad, str) and "one 'name (type): text' per entry" in bad
    assert (group.name, group.type) == ("group", None)
    assert (kwargs.name, kwargs.type, kwargs.optional) == ("**kwargs", None, True)
    function = ast.parse("def f(x: Tensor, k=2, *, group=None, **kwargs): pass").body[0]
    definition = Definition("m", "f", function, *_signature(function, drop_first=False))
    function.body.insert(0, ast.Expr(ast.Constant(docstring)))
    report = check_form([definition])
    assert report.entries == 5 and report.typed == 3
    assert any("rank, world_size" in line for line in report.form)
    resolver = Resolver()
    assert check_coverage([definition], {"m.f": ["m"]}, resolver) == [
        "m.f: no 'Shapes:' section (a layer, or it takes x)"]
    definition.params.append("extra")
    assert check_coverage([definition], {"m.f": ["m"]}, resolver)[0] == "m.f: 'Args:' misses extra"
