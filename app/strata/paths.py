"""Where strata keeps its files: `STRATA_HOME`, then the XDG variables, then platformdirs.

`strata paths` prints these. Nothing here creates a directory; callers that write use
`ensure_dir`.
"""
from __future__ import annotations

import os
from pathlib import Path

APP = "strata"
KINDS = ("data", "config", "cache", "state")
_XDG = {"data": "XDG_DATA_HOME", "config": "XDG_CONFIG_HOME", "cache": "XDG_CACHE_HOME",
        "state": "XDG_STATE_HOME"}


def _env_dir(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    path = os.path.expanduser(value)
    if os.path.isabs(path):
        return Path(path)
    if name == "STRATA_HOME":  # our own variable: a relative folder is taken from the current one,
        return Path(os.path.abspath(path))  # not silently ignored (STRATA_HOME=state went to ~/.local)
    return None  # the XDG spec says relative paths are invalid and must be ignored


def base_dir(kind: str) -> Path:
    """The directory for one kind of file ("data", "config", "cache", "state")."""
    if kind not in KINDS:
        raise ValueError(f"unknown directory kind {kind!r}")
    home = _env_dir("STRATA_HOME")
    if home is not None:
        return home / kind
    xdg = _env_dir(_XDG[kind])
    if xdg is not None:
        return xdg / APP
    import platformdirs

    fn = {"data": platformdirs.user_data_dir, "config": platformdirs.user_config_dir,
          "cache": platformdirs.user_cache_dir, "state": platformdirs.user_state_dir}[kind]
    return Path(fn(APP, appauthor=False))


def data_dir() -> Path:
    return base_dir("data")


def config_dir() -> Path:
    return base_dir("config")


def cache_dir() -> Path:
    return base_dir("cache")


def state_dir() -> Path:
    return base_dir("state")


def session_db() -> Path:
    """The SQLite session store."""
    return data_dir() / "sessions.sqlite3"


def blob_dir() -> Path:
    """Engine-state blobs (checkpoints, saved sessions)."""
    return data_dir() / "blobs"


def config_file() -> Path:
    return config_dir() / "config.toml"


def source() -> str:
    """Which rule chose the directories (for `strata paths`)."""
    if _env_dir("STRATA_HOME") is not None:
        return "STRATA_HOME"
    if any(_env_dir(v) is not None for v in _XDG.values()):
        return "XDG"
    return "platformdirs"


def all_paths() -> dict[str, str]:
    return {"source": source(), "data": str(data_dir()), "config": str(config_dir()),
            "cache": str(cache_dir()), "state": str(state_dir()),
            "sessions": str(session_db()), "blobs": str(blob_dir()),
            "config_file": str(config_file())}


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
