"""Every key binding of the TUI in one place: id, default key, action, description, tooltip.

Screens build their BINDINGS from here, the help screen lists them, and `StrataApp(keymap=...)`
(from the config file's [keys] table) remaps any id to other keys."""
from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    id: str
    key: str
    action: str
    description: str
    tooltip: str
    show: bool = True
    priority: bool = False
    group: str = ""

    def binding(self) -> Binding:
        return Binding(self.key, self.action, self.description, show=self.show, id=self.id,
                       tooltip=self.tooltip, priority=self.priority,
                       group=Binding.Group(self.group) if self.group else None)


APP_KEYS = (
    Key("app.quit", "ctrl+q", "quit", "Quit", "Leave strata (the session is saved if it has a store)",
        priority=True),
    Key("app.help", "f1", "show_help", "Help", "List every key binding and what it does"),
    Key("app.log", "f2", "show_log", "Log", "Status notes and log records of this run"),
    Key("app.heatmap-numbers", "f3", "toggle_heatmap_numbers", "Heatmap numbers",
        "Switch the expert heatmap between colours and a numeric table"),
    Key("app.panels", "f4", "toggle_panels", "Panels", "Show or hide the telemetry panels"),
    Key("app.panels-zoom", "f5", "zoom_panels", "Zoom panels",
        "Give the telemetry panels the whole width (again: back to the normal layout)"),
)

CHAT_KEYS = (
    Key("chat.stop", "escape", "stop", "Stop", "Stop the generation in progress after its current window"),
    Key("chat.undo", "ctrl+z", "undo_turn", "Undo turn",
        "Roll back the last turn to the checkpoint before it (no re-prefill)"),
    Key("chat.retry", "ctrl+r", "retry_turn", "Retry",
        "Regenerate the last reply from the checkpoint before it (uses the current settings)"),
    Key("chat.save", "ctrl+s", "save_session", "Save", "Save the session (turns, settings, engine state)"),
    Key("chat.settings", "ctrl+t", "focus_settings", "Settings", "Move focus to the settings strip"),
)

REVIEW_KEYS = (
    Key("review.accept", "a", "accept", "Accept", "Write the rewrite to the file (atomically)",
        group="decide"),
    Key("review.reject", "r", "reject", "Reject", "Discard this rewrite; the file is untouched",
        group="decide"),
    Key("review.edit-again", "e", "edit_again", "Edit again",
        "Give a new instruction and rewrite again from the file's checkpoint", group="decide"),
    Key("review.undo", "u", "undo", "Undo", "Restore the file as it was before the last accept "
        "(refused if it changed on disk since)", group="decide"),
    Key("review.next-hunk", "j", "next_hunk", "Next hunk", "Jump to the next changed hunk",
        group="hunks"),
    Key("review.prev-hunk", "k", "prev_hunk", "Prev hunk", "Jump to the previous changed hunk",
        group="hunks"),
    Key("review.quit", "q", "quit_edit", "Done", "Leave the edit loop"),
)

REPLAY_KEYS = (
    Key("replay.stop", "escape", "stop", "Stop", "Stop the replay after the current window"),
    Key("replay.restart", "ctrl+r", "restart", "Restart", "Replay the recording again from the start"),
)

ALL_KEYS = {"strata": APP_KEYS, "chat": CHAT_KEYS, "edit review": REVIEW_KEYS, "replay": REPLAY_KEYS}


def bindings(keys: tuple[Key, ...]) -> list[Binding]:
    return [k.binding() for k in keys]


def parse_keymap(table: dict[str, object]) -> dict[str, str]:
    """Validate a config [keys] table: known ids only, string values. ValueError names the key."""
    known = {k.id for keys in ALL_KEYS.values() for k in keys}
    out: dict[str, str] = {}
    for binding_id, keys in table.items():
        if binding_id not in known:
            raise ValueError(f"unknown key binding id {binding_id!r} in [keys] "
                             f"(known: {', '.join(sorted(known))})")
        if not isinstance(keys, str) or not keys.strip():
            raise ValueError(f"key binding {binding_id!r} must be a non-empty string like 'ctrl+s'")
        out[binding_id] = keys.strip()
    return out


def load_keymap(path=None) -> dict[str, str]:
    """The [keys] table of the config file (`strata paths` shows where it is); {} when there is
    no file or no table. A bad file raises UsageError naming the file and the key."""
    from pathlib import Path

    from ..errors import UsageError

    if path is None:
        from ..paths import config_file

        path = config_file()
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the config file ({exc})") from None
    table = data.get("keys", {})
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [keys] must be a table of binding id = \"keys\"")
    try:
        return parse_keymap(table)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
