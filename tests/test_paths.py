from pathlib import Path

from strata import paths


def _clear(monkeypatch):
    for var in ("STRATA_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(var, raising=False)


def test_strata_home_wins_over_xdg(monkeypatch, tmp_path):
    _clear(monkeypatch)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    assert paths.data_dir() == tmp_path / "home" / "data"
    assert paths.session_db() == tmp_path / "home" / "data" / "sessions.sqlite3"
    assert paths.config_dir() == tmp_path / "home" / "config"
    assert paths.source() == "STRATA_HOME"


def test_a_relative_strata_home_is_taken_from_the_current_folder(monkeypatch, tmp_path):
    # it was ignored like a relative XDG value, so the sessions went to the platform's folder
    _clear(monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATA_HOME", "state-here")
    assert paths.source() == "STRATA_HOME"
    assert paths.session_db() == tmp_path / "state-here" / "data" / "sessions.sqlite3"


def test_xdg_then_platformdirs(monkeypatch, tmp_path):
    _clear(monkeypatch)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    assert paths.data_dir() == tmp_path / "xdg-data" / "strata"
    assert paths.source() == "XDG"
    # a relative XDG value is invalid per the spec and ignored
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    import platformdirs

    assert paths.cache_dir() == Path(platformdirs.user_cache_dir("strata", appauthor=False))


def test_all_paths_names_every_location(monkeypatch, tmp_path):
    _clear(monkeypatch)
    monkeypatch.setenv("STRATA_HOME", str(tmp_path))
    data = paths.all_paths()
    assert set(data) >= {"data", "config", "cache", "state", "sessions", "blobs", "source"}
    assert not (tmp_path / "data").exists()  # reporting paths creates nothing
