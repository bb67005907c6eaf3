"""`strata version`: strata's version and whether the engine is built."""
from __future__ import annotations

import sys


from . import app, common
from .common import JsonOpt


@app.command(short_help="Print strata's version.")
def version(as_json: bool = JsonOpt) -> None:
    """Print strata's version."""
    from .. import __version__

    try:
        from .. import _engine  # noqa: F401
        engine = "built"
    except ImportError:
        engine = "missing"
    if as_json:
        common.print_json({"version": __version__, "engine": engine, "python": sys.version.split()[0]})
    else:
        print(f"strata {__version__} (engine {engine})")
