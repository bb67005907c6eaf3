"""Names a Python rewrite still uses but no longer defines.

A rewrite that deletes a function or an import (or renames a definition) and leaves a call to it
parses, and fails only when that line runs: NameError. `newly_undefined` finds the names a
new file loads from the module's globals (at module level, or in functions and classes where no
enclosing function binds them) that nothing at module level binds any more, that are not
builtins, that the old file bound somewhere, and that the old file did not already use unbound
(a file that takes names from `globals()` or `exec` keeps doing so: no alarm). A new file with
`from m import *`, or one that starts using exec() or globals(), gets no check: any name may
come from there. `_` is left out (gettext.install() puts it among the builtins at run time).

Written from Python's scoping rules with `ast` alone; nothing is imported or run.
"""
from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from .editscope import parse_python

# names every module, class or method has without binding them
_IMPLICIT = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__",
                       "__builtins__", "__path__", "__cached__", "__annotations__", "__class__",
                       "__module__", "__qualname__", "__dict__", "__debug__"})
_BUILTINS = frozenset(dir(builtins))
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_TYPE_ALIAS = getattr(ast, "TypeAlias", None)  # Python 3.12


@dataclass
class _Scope:
    kind: str                    # "module", "class", "function" or "comprehension"
    parent: _Scope | None
    bound: set[str] = field(default_factory=set)
    declared_global: set[str] = field(default_factory=set)
    nonlocal_: set[str] = field(default_factory=set)


@dataclass
class _Names:
    bound_anywhere: set[str]     # bound in any scope, or declared `global`
    unbound_uses: dict[str, list[int]]  # global loads of names nothing binds (builtins left out)
    import_words: dict[str, set[str]]   # a module-level import's name: the module or name it imports
    star: bool                   # a `from m import *` somewhere
    dynamic: bool                # uses exec() or globals(): names may be bound at run time


@dataclass(frozen=True)
class Undefined:
    """A name the new file uses and no longer binds."""

    name: str
    lines: tuple[int, ...]       # where the new file uses it
    words: frozenset[str]        # what an instruction may call its old definition: the name, and
                                 # for an import, the module or name imported under it


def _names(tree: ast.Module) -> _Names:
    module = _Scope("module", None)
    scopes = [module]
    future_annotations = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                             and any(a.name == "annotations" for a in n.names) for n in tree.body)
    loads: list[tuple[str, int, _Scope]] = []
    import_words: dict[str, set[str]] = {}
    star = dynamic = False
    # (node, scope it is evaluated in, inside an annotation); no recursion: deep files must not
    # blow the stack
    stack: list[tuple[ast.AST, _Scope, bool]] = [(n, module, False) for n in reversed(tree.body)]

    def annotation(node, scope, ann_stack):
        if node is not None:
            ann_stack.append((node, scope, True))

    def type_params(node, scope, later) -> _Scope:
        """The scope a generic's type parameters (`def f[T](x: T)`, Python 3.12) are bound in,
        which its annotations, bases and body see; `scope` when it has none."""
        params = getattr(node, "type_params", None)
        if not params:
            return scope
        inner = _Scope("function", scope)
        scopes.append(inner)
        inner.bound.update(p.name for p in params)
        later += [(c, inner, False) for p in params for c in ast.iter_child_nodes(p)]  # bounds, defaults
        return inner

    while stack:
        node, scope, in_ann = stack.pop()
        if in_ann and future_annotations:
            continue  # postponed annotations are never evaluated
        later: list[tuple[ast.AST, _Scope, bool]] = []
        if isinstance(node, _FUNCTIONS):
            outer = type_params(node, scope, later)
            inner = _Scope("function", outer)
            scopes.append(inner)
            if not isinstance(node, ast.Lambda):
                scope.bound.add(node.name)
                later += [(d, scope, in_ann) for d in node.decorator_list]
                annotation(node.returns, outer, later)
            a = node.args
            later += [(d, scope, in_ann) for d in a.defaults + [d for d in a.kw_defaults if d is not None]]
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                inner.bound.add(arg.arg)
                annotation(arg.annotation, outer, later)
            body = node.body if isinstance(node.body, list) else [node.body]
            later += [(b, inner, False) for b in body]
        elif isinstance(node, ast.ClassDef):
            outer = type_params(node, scope, later)
            inner = _Scope("class", outer)
            scopes.append(inner)
            scope.bound.add(node.name)
            later += [(n, scope, in_ann) for n in node.decorator_list]
            later += [(n, outer, in_ann) for n in node.bases + node.keywords]
            later += [(b, inner, False) for b in node.body]
        elif _TYPE_ALIAS is not None and isinstance(node, _TYPE_ALIAS):  # `type X[T] = list[T]`
            later.append((node.name, scope, in_ann))
            later.append((node.value, type_params(node, scope, later), in_ann))
        elif isinstance(node, _COMPREHENSIONS):
            inner = _Scope("comprehension", scope)
            scopes.append(inner)
            first, *rest = node.generators
            later.append((first.iter, scope, in_ann))  # the first iterable runs outside
            later += [(first.target, inner, in_ann)] + [(c, inner, in_ann) for c in first.ifs]
            later += [(g, inner, in_ann) for g in rest]
            elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            later += [(e, inner, in_ann) for e in elts]
        elif isinstance(node, ast.NamedExpr):
            owner = scope
            while owner.kind == "comprehension" and owner.parent is not None:
                owner = owner.parent  # `:=` in a comprehension binds in the enclosing function
            if isinstance(node.target, ast.Name):
                owner.bound.add(node.target.id)
            later.append((node.value, scope, in_ann))
        elif isinstance(node, ast.AnnAssign):
            later.append((node.target, scope, in_ann))  # `x: int` alone makes x local to a function
            if node.value is not None:
                later.append((node.value, scope, in_ann))
            if scope.kind != "function":  # a function's variable annotations are never evaluated
                annotation(node.annotation, scope, later)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.append((node.id, node.lineno, scope))
                dynamic = dynamic or node.id in ("exec", "globals")
            else:
                scope.bound.add(node.id)  # Store and Del
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name == "*":
                    star = True
                    continue
                bound = a.asname or a.name.split(".")[0]
                scope.bound.add(bound)
                if scope is module:  # `import networkx as nx`: nx, networkx; `import os.path`: os, os.path
                    import_words.setdefault(bound, set()).update({bound, a.name})
        elif isinstance(node, ast.Global):
            scope.declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocal_.update(node.names)
        else:
            name = getattr(node, "name", None)  # except ... as name, match captures
            if isinstance(name, str) and isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
                scope.bound.add(name)
            rest_name = getattr(node, "rest", None)
            if isinstance(node, ast.MatchMapping) and rest_name:
                scope.bound.add(rest_name)
            later += [(c, scope, in_ann) for c in ast.iter_child_nodes(node)]
        stack.extend(reversed(later))

    declared = {n for s in scopes for n in s.declared_global}
    module_bound = module.bound | declared  # `global x` anywhere: x may be bound at module level
    unbound: dict[str, list[int]] = {}
    for name, line, scope in loads:
        if name in module_bound or name in _BUILTINS or name in _IMPLICIT:
            continue
        if _resolves_global(name, scope):
            unbound.setdefault(name, []).append(line)
    return _Names({n for s in scopes for n in s.bound} | declared,
                  {n: sorted(set(lines)) for n, lines in unbound.items()}, import_words, star, dynamic)


def _resolves_global(name: str, scope: _Scope) -> bool:
    """Whether a load of `name` in `scope` looks in the module's globals: not bound in the scope
    itself, nor in an enclosing function (class bodies do not enclose what they contain)."""
    if name in scope.declared_global:
        return True
    s: _Scope | None = scope
    while s is not None and s.kind != "module":
        if s is scope or s.kind != "class":
            if name in s.declared_global:
                return True
            if name in s.bound or name in s.nonlocal_:
                return False
        s = s.parent
    return True


def newly_undefined(old: str, new: str) -> list[Undefined]:
    """The names `new` uses as globals that it no longer binds and `old` did (in any scope), with
    the lines of `new` that use them, in the order they are first used; names `old` already used
    unbound are left out. Empty when either side does not parse, when `new` has a `from m import
    *`, or when it uses exec() or globals() and `old` did not (it may bind names at run time)."""
    told, tnew = parse_python(old), parse_python(new)
    if told is None or tnew is None:
        return []
    before, after = _names(told), _names(tnew)
    if after.star or (after.dynamic and not before.dynamic):
        return []
    out = [Undefined(n, tuple(lines), frozenset({n} | before.import_words.get(n, set())))
           for n, lines in after.unbound_uses.items()
           if n in before.bound_anywhere and n not in before.unbound_uses and n != "_"]
    return sorted(out, key=lambda u: (u.lines[0], u.name))
