"""Settings strip: drafting on/off, max draft, temperature, seed and copy bias, changeable while
the app runs. Valid edits post `SettingsChanged`; the next generation uses them."""
from __future__ import annotations

import dataclasses

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, Switch

from ...settings import GenerationSettings, SettingsError, engine_limits
from ..messages import SettingsChanged

def parse_settings(base: GenerationSettings, drafting: bool, max_draft: str, temperature: str,
                   seed: str, copy_bias: str | None = None, copy_default: float = 0.0) -> GenerationSettings:
    """New settings from the strip's fields; ValueError names the field that is wrong. The
    ranges are GenerationSettings' own (the same as the command line's). A copy bias equal to
    the mode's default (`copy_default`) keeps an unset one unset, so the mode decides it."""
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
    bias = None
    if copy_bias is not None:
        try:
            bias = float(copy_bias)
        except ValueError:
            raise ValueError(f"copy bias must be a number, not {copy_bias!r}") from None
        if base.copy_bias is None and bias == copy_default:
            bias = None
    try:
        new = base.replace(draft="suffix" if drafting else "none", temperature=temp, seed=seed_value,
                           copy_bias=bias)
        return dataclasses.replace(new, max_draft=max_draft_value)
    except SettingsError as exc:
        # the strip labels its fields in words: "max draft", not "--max-draft"
        raise ValueError(f"{exc.setting.replace('_', ' ')} {exc.reason}") from None


class SettingsStrip(Horizontal):
    DEFAULT_CSS = """
    SettingsStrip { height: 1; margin: 1 1 0 1; }
    SettingsStrip Label { padding: 0 1 0 1; color: $text-muted; }
    SettingsStrip Input { width: 6; }
    SettingsStrip Switch { border: none; height: 1; padding: 0; }
    SettingsStrip Switch:focus { border: none; background-tint: $foreground 10%; }
    SettingsStrip Input.-invalid { color: $error; text-style: bold reverse; }
    """

    def __init__(self, settings: GenerationSettings, *, copy_default: float = 0.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.settings = settings
        self.copy_default = copy_default  # the copy bias an unset setting means in this mode
        self.error: str | None = None

    def _copy_text(self, s: GenerationSettings) -> str:
        return f"{self.copy_default if s.copy_bias is None else s.copy_bias:g}"

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
        yield Label("copy")
        yield Input(self._copy_text(s), id="copy-bias", compact=True,
                    tooltip="Copy bias: added to the logit of the token that goes on copying the "
                            "session's text (0 = off)")

    def _read(self) -> None:
        fields = {"max-draft": "", "temperature": "", "seed": "", "copy-bias": ""}
        for name in fields:
            fields[name] = self.query_one(f"#{name}", Input).value
        drafting = self.query_one("#drafting", Switch).value
        try:
            new = parse_settings(self.settings, drafting, fields["max-draft"], fields["temperature"],
                                 fields["seed"], fields["copy-bias"], self.copy_default)
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
        self.query_one("#copy-bias", Input).value = self._copy_text(settings)
