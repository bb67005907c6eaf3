"""Settings strip: drafting on/off, max draft, temperature and seed, changeable while the app
runs. Valid edits post `SettingsChanged`; the next generation uses them."""
from __future__ import annotations

import dataclasses

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, Switch

from ...settings import GenerationSettings, SettingsError, engine_limits
from ..messages import SettingsChanged

def parse_settings(base: GenerationSettings, drafting: bool, max_draft: str, temperature: str,
                   seed: str) -> GenerationSettings:
    """New settings from the strip's fields; ValueError names the field that is wrong. The
    ranges are GenerationSettings' own (the same as the command line's)."""
    md = max_draft.strip().lower()
    if md in ("", "auto"):
        max_draft_value = None
    else:
        try:
            max_draft_value = int(md)
        except ValueError:
            raise ValueError(f"max draft must be 'auto' or a whole number, not {max_draft!r}") from None
    try:
        temp = float(temperature)
    except ValueError:
        raise ValueError(f"temperature must be a number, not {temperature!r}") from None
    try:
        seed_value = int(seed)
    except ValueError:
        raise ValueError(f"seed must be a whole number, not {seed!r}") from None
    try:
        new = base.replace(draft="suffix" if drafting else "none", temperature=temp, seed=seed_value)
        return dataclasses.replace(new, max_draft=max_draft_value)
    except SettingsError as exc:
        # the strip labels its fields in words: "max draft", not "--max-draft"
        raise ValueError(f"{exc.setting.replace('_', ' ')} {exc.reason}") from None


class SettingsStrip(Horizontal):
    DEFAULT_CSS = """
    SettingsStrip { height: 1; margin: 1 1 0 1; }
    SettingsStrip Label { padding: 0 1 0 2; color: $text-muted; }
    SettingsStrip Input { width: 8; }
    SettingsStrip Switch { border: none; height: 1; padding: 0; }
    SettingsStrip Switch:focus { border: none; background-tint: $foreground 10%; }
    SettingsStrip Input.-invalid { color: $error; text-style: bold reverse; }
    """

    def __init__(self, settings: GenerationSettings, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.settings = settings
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        s = self.settings
        yield Label("drafting")
        yield Switch(value=s.draft != "none", id="drafting",
                     tooltip="Suffix-lookup drafting on/off (output is identical either way)")
        yield Label("max draft")
        yield Input("auto" if s.max_draft is None else str(s.max_draft), id="max-draft", compact=True,
                    tooltip=f"Drafts per window: 'auto' (length controller) or 0..{engine_limits()['max_draft']}")
        yield Label("temp")
        yield Input(f"{s.temperature:g}", id="temperature", compact=True,
                    tooltip="Sampling temperature; 0 = greedy")
        yield Label("seed")
        yield Input(str(s.seed), id="seed", compact=True, tooltip="Sampling seed (sampled output is reproducible)")

    def _read(self) -> None:
        fields = {"max-draft": "", "temperature": "", "seed": ""}
        for name in fields:
            fields[name] = self.query_one(f"#{name}", Input).value
        drafting = self.query_one("#drafting", Switch).value
        try:
            new = parse_settings(self.settings, drafting, fields["max-draft"],
                                 fields["temperature"], fields["seed"])
        except ValueError as exc:
            self.error = str(exc)
            for name in fields:
                self.query_one(f"#{name}", Input).set_class(name.replace("-", " ") in str(exc)
                                                            or name in str(exc), "-invalid")
            return
        self.error = None
        for name in fields:
            self.query_one(f"#{name}", Input).remove_class("-invalid")
        if new != self.settings:
            self.settings = new
            self.post_message(SettingsChanged(new))

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._read()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self._read()

    def set_settings(self, settings: GenerationSettings) -> None:
        """Show `settings` (e.g. a restored session's) without posting a change."""
        self.settings = settings
        self.query_one("#drafting", Switch).value = settings.draft != "none"
        self.query_one("#max-draft", Input).value = "auto" if settings.max_draft is None else str(settings.max_draft)
        self.query_one("#temperature", Input).value = f"{settings.temperature:g}"
        self.query_one("#seed", Input).value = str(settings.seed)
