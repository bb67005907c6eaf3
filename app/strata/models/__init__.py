"""Where models come from: an explicit path, or a known alias of a model bundled with strata.
Never a network lookup."""
from __future__ import annotations

from pathlib import Path

from ..errors import ModelError

BUNDLED_DIR = Path(__file__).resolve().parent
DEFAULT_ALIAS = "strata-tiny"
ALIASES = {"strata-tiny": "strata-tiny", "default": "strata-tiny", "tiny": "strata-tiny"}


def bundled_model_path(alias: str = DEFAULT_ALIAS) -> Path:
    return BUNDLED_DIR / ALIASES[alias]


def resolve_model(model: str | Path | None) -> Path:
    """`None` -> the bundled default model; an alias -> its bundled folder; else a path.
    Raises ModelError (one line) when nothing usable is there."""
    if model is None or str(model) in ALIASES:
        path = bundled_model_path(ALIASES.get(str(model), DEFAULT_ALIAS) if model else DEFAULT_ALIAS)
        if not (path / "config.json").is_file():
            raise ModelError(
                f"bundled model {path.name!r} is not installed at {path}; pass --model PATH "
                "(a Hugging Face checkpoint folder or a strata pack)"
            )
        return path
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelError(f"{path}: no such model folder or pack (aliases: {', '.join(sorted(ALIASES))})")
    return path
