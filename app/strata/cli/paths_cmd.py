"""`strata paths`: where strata keeps its files."""
from __future__ import annotations

from . import app, common
from .common import JsonOpt


@app.command(short_help="Print where strata keeps its files.")
def paths(as_json: bool = JsonOpt) -> None:
    """Print where strata keeps its files."""
    from .. import paths as paths_mod

    data = paths_mod.all_paths()
    if as_json:
        common.print_json(data)
        return
    for key, value in data.items():
        print(f"{key:<12} {value}")
