"""strata: a local inference shell for large Mixture-of-Experts models.

Public core API (no textual/rich imports here; the TUI and CLI are thin fronts over it):

    eng = strata.load(path)          # "strata-tiny", an HF checkpoint folder or a strata pack
    logits = eng.run(tokens)         # (T, vocab) float32, next-token logits for each row
    eng.commit(keep)                 # exactly once per run
"""
from __future__ import annotations

import os as _os

from .errors import ContextError, EditError, ModelError, SessionError, StrataError, UsageError, WindowError

__version__ = "0.1.0"

# Development builds (scripts/dev-build.sh) put _engine in build/dev-NAME; point there with
# STRATA_DEV_BUILD so a source checkout runs without reinstalling.
_dev_build = _os.environ.get("STRATA_DEV_BUILD")
if _dev_build:
    __path__.insert(0, _os.path.abspath(_dev_build))  # type: ignore[name-defined]

__all__ = [
    "ContextError",
    "EditError",
    "ModelError",
    "SessionError",
    "StrataError",
    "UsageError",
    "WindowError",
    "__version__",
    "load",
]


def load(path, **options):
    """Load a model (a bundled alias such as "strata-tiny", a Hugging Face checkpoint folder or a
    strata pack) into an engine. See strata.loader.load."""
    from .loader import load as _load

    return _load(path, **options)
