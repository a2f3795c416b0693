"""No function in the package is over 120 lines (issue 55): the longest were rendering (the report's and the card's
builders, now a section per function) and one stack's or format's many fields (now a helper each)."""

from __future__ import annotations

import ast

from test_import_layers import MODULES

LIMIT = 120


def test_no_package_function_is_over_120_lines():
    long = {
        f"{name}.{node.name}": node.end_lineno - node.lineno + 1
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > LIMIT
    }
    assert long == {}
