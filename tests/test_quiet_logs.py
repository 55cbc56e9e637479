"""The package warns only about what its user did: the sparse tensors it builds for itself say
whether torch checks their invariants (when neither is said, torch warns "Sparse invariant checks
are implicitly disabled" once per process, in every rank of a job that never built one), and its CSR
tensors are made by ``adj.make_csr``, which silences torch's "Sparse CSR tensor support is in beta"."""
import ast
from pathlib import Path

import pyg_sparsecomm

PACKAGE = Path(pyg_sparsecomm.__file__).parent
#: torch's sparse factories taking ``check_invariants``
FACTORIES = {"sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_bsr_tensor", "sparse_bsc_tensor",
             "sparse_compressed_tensor"}


def _calls(names: set[str]) -> list[tuple[str, str, ast.Call]]:
    """``(file:line, innermost enclosing function or '<module>', call)`` of every call in the package to
    an attribute in ``names``."""
    found = []

    def visit(node: ast.AST, where: str, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
            found.append((f"{where}:{node.lineno}", function, node))
        for child in ast.iter_child_nodes(node):
            visit(child, where, function)

    for path in sorted(PACKAGE.rglob("*.py")):
        visit(ast.parse(path.read_text()), f"pyg_sparsecomm/{path.relative_to(PACKAGE)}", "<module>")
    return found


def test_the_packages_sparse_tensors_say_whether_torch_checks_them():
    implicit = [where for where, _, call in _calls(FACTORIES)
                if not any(keyword.arg == "check_invariants" for keyword in call.keywords)]
    assert not implicit, f"pass check_invariants=False (indices the package built) or True: {implicit}"


def test_the_package_makes_csr_tensors_through_make_csr():
    direct = [where for where, function, _ in _calls({"sparse_csr_tensor"}) if function != "make_csr"]
    assert not direct, f"use pyg_sparsecomm.plan.halo_adj.make_csr (torch warns that CSR is in beta): {direct}"
