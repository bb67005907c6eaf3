"""Widgets of the strata TUI. Panels read a `TelemetryLog` and repaint when told to (the
app's ~10 Hz panel timer), never per token."""
