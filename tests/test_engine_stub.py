"""app/strata/_engine.pyi covers every public binding of the compiled module: module functions,
classes and their methods (bases included), and the submodules stubbed as `name: _Class`."""
from __future__ import annotations

import ast
import types
from pathlib import Path

from strata import _engine

STUB = Path(__file__).resolve().parents[1] / "app" / "strata" / "_engine.pyi"


def _stub_tree() -> tuple[dict[str, ast.ClassDef], dict[str, ast.ClassDef | None]]:
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    return classes, _members(tree.body, classes)


def _members(body: list[ast.stmt], classes: dict[str, ast.ClassDef]) -> dict[str, ast.ClassDef | None]:
    """Stubbed names -> the class node that describes them (None for plain functions/values)."""
    out: dict[str, ast.ClassDef | None] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = None
        elif isinstance(node, ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann = ast.unparse(node.annotation)
            if ann.startswith("type[") and ann.endswith("]"):
                ann = ann[5:-1]
            out[node.target.id] = classes.get(ann)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = None
    return out


def _class_members(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> dict[str, ast.ClassDef | None]:
    out = _members(node.body, classes)
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            for name, value in _class_members(classes[base.id], classes).items():
                out.setdefault(name, value)
    return out


def _unstubbed(obj: object, stub: dict[str, ast.ClassDef | None], classes: dict[str, ast.ClassDef],
               path: str) -> list[str]:
    missing: list[str] = []
    for name in dir(obj):
        if name.startswith("_"):
            continue
        if name not in stub:
            missing.append(path + name)
            continue
        value, node = getattr(obj, name), stub[name]
        if node is not None and isinstance(value, (types.ModuleType, type)):
            missing += _unstubbed(value, _class_members(node, classes), classes, path + name + ".")
    return missing


def test_every_binding_of_the_engine_module_is_stubbed():
    classes, top = _stub_tree()
    assert _unstubbed(_engine, top, classes, "") == []


def test_the_stub_names_only_what_the_module_has():
    classes, top = _stub_tree()
    private = {name for name in top if name.startswith("_")}  # submodule shapes (_Ops, _WebGpu...)
    extra = [name for name in top if name not in private and not hasattr(_engine, name)]
    if not hasattr(_engine, "webgpu"):  # a build with STRATA_WEBGPU=OFF has no webgpu submodule
        extra = [name for name in extra if name != "webgpu"]
    assert extra == []
