"""Generation settings, validated once, where they are defined.

Every way in goes through `GenerationSettings`: the CLI options, the TUI settings strip,
session files (`from_dict`), replay overrides and the Python API. A value that is not a finite
number, is out of range, or does not fit the engine raises `SettingsError` (a `UsageError`:
exit code 2) naming the setting, so the fronts never re-check.

The engine's own limits (longest draft, largest integers, ...) come from `strata._engine.LIMITS`;
importing this module does not load the engine (`--help` stays fast), the limits are read on
first validation.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from typing import Any

from .errors import UsageError

__all__ = ["GenerationSettings", "SettingsError", "engine_limits", "DRAFT_MODES", "DRAFTERS",
           "MAX_TEMPERATURE", "MAX_PENALTY"]

DRAFT_MODES = ("none", "suffix", "baseline")
DRAFTERS = ("suffix", "baseline")
# Sampling ranges past which output is noise (temperature) or the logits overflow (penalties).
MAX_TEMPERATURE = 5.0
MAX_PENALTY = 100.0
MAX_COPY_BIAS = 100.0

# Used only when the native module is missing (a source tree without a build): the same numbers
# the engine exports, so validation still answers and loading the model then says what is wrong.
_FALLBACK_LIMITS = {"max_draft": 15, "max_window": 16, "max_new": 2**31 - 1, "max_top_k": 2**31 - 1,
                    "max_min_match": 512, "max_seed": 2**64 - 1, "max_token_id": 2**31 - 1,
                    "max_context": 2**31 - 1, "max_threads": 1024}


@lru_cache(maxsize=1)
def engine_limits() -> dict[str, int]:
    """The engine's limits (`strata._engine.LIMITS`)."""
    try:
        from . import _engine  # noqa: PLC0415
    except ImportError:
        return dict(_FALLBACK_LIMITS)
    return {**_FALLBACK_LIMITS, **{str(k): int(v) for k, v in dict(_engine.LIMITS).items()}}


class SettingsError(UsageError):
    """A generation setting with a bad value: `.setting` is its field name, `.reason` what is
    wrong ("must be ..."); the message names the command-line flag."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{flag(setting)} {reason}")
        self.setting = setting
        self.reason = reason


def flag(name: str) -> str:
    """The command-line spelling of a setting (max_new -> --max-new)."""
    return "--" + name.replace("_", "-")


def _fail(name: str, what: str, value: Any) -> SettingsError:
    return SettingsError(name, f"must be {what}, not {value!r}")


def check_int(name: str, value: Any, lo: int, hi: int) -> int:
    """An integer in lo..hi (bools and floats are refused: 1.5 tokens is not a setting)."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise _fail(name, f"a whole number from {lo} to {hi}", value)
    if not lo <= value <= hi:
        raise _fail(name, f"a whole number from {lo} to {hi}", value)
    return int(value)


def check_float(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """A finite number in [lo, hi] ((lo, hi] with lo_open)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, "a number", value)
    v = float(value)
    low = f"more than {lo:g}" if lo_open else f"at least {lo:g}"
    if not math.isfinite(v):
        raise _fail(name, f"a finite number ({low} and at most {hi:g})", value)
    if (v <= lo if lo_open else v < lo) or v > hi:
        raise _fail(name, f"{low} and at most {hi:g}", value)
    return v


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(name, " or ".join(allowed), value)
    return value


@dataclass(frozen=True)
class GenerationSettings:
    """How one generation runs. Frozen: change it with `.replace(field=value)` (re-validated)."""

    max_new: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    draft: str = "suffix"           # "none" | "suffix" | "baseline"
    drafter: str = "suffix"         # "baseline" | "suffix" (the suffix drafter's kind)
    max_draft: int | None = None    # None = adaptive length controller; K = fixed
    min_match: int = 4
    # added to the logit of the token that continues the session's text where the output copies
    # it (docs/decoding.md, "Copy bias"); None: the mode's default (strata edit: EDIT_COPY_BIAS,
    # everything else 0)
    copy_bias: float | None = None

    def __post_init__(self) -> None:
        lim = engine_limits()
        put = object.__setattr__  # frozen: normalise (e.g. 1.0 -> 1) once, here
        put(self, "max_new", check_int("max_new", self.max_new, 0, lim["max_new"]))
        put(self, "temperature", check_float("temperature", self.temperature, 0.0, MAX_TEMPERATURE))
        put(self, "top_k", check_int("top_k", self.top_k, 0, lim["max_top_k"]))
        put(self, "top_p", check_float("top_p", self.top_p, 0.0, 1.0, lo_open=True))
        put(self, "repetition_penalty", check_float("repetition_penalty", self.repetition_penalty,
                                                    0.0, MAX_PENALTY, lo_open=True))
        for name in ("presence_penalty", "frequency_penalty"):
            put(self, name, check_float(name, getattr(self, name), -MAX_PENALTY, MAX_PENALTY))
        put(self, "seed", check_int("seed", self.seed, 0, lim["max_seed"]))
        _check_choice("draft", self.draft, DRAFT_MODES)
        _check_choice("drafter", self.drafter, DRAFTERS)
        if self.max_draft is not None:
            put(self, "max_draft", check_int("max_draft", self.max_draft, 0, lim["max_draft"]))
        put(self, "min_match", check_int("min_match", self.min_match, 1, lim["max_min_match"]))
        if self.copy_bias is not None:
            put(self, "copy_bias", check_float("copy_bias", self.copy_bias, 0.0, MAX_COPY_BIAS))

    # -- conversions ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GenerationSettings":
        """Settings from a dict (a session file, a stored session): unknown keys are ignored,
        known ones validated. A dict without copy_bias was recorded before the copy bias existed,
        so it ran without one (0), whatever the mode's default is now."""
        if not isinstance(d, dict):
            raise SettingsError("settings", f"must be an object, not {type(d).__name__}")
        return cls(**{"copy_bias": 0.0, **{f.name: d[f.name] for f in fields(cls) if f.name in d}})

    def replace(self, **changes: Any) -> "GenerationSettings":
        """A copy with `changes` (None values are left out: an option that was not given)."""
        given = {k: v for k, v in changes.items() if v is not None}
        unknown = sorted(set(given) - {f.name for f in fields(self)})
        if unknown:
            raise SettingsError(unknown[0], "is not a generation setting")
        return replace(self, **given) if given else self

    def decode_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `_engine.Decoder.start`."""
        drafter = "none" if self.draft == "none" else ("baseline" if self.draft == "baseline" else self.drafter)
        return dict(max_new=self.max_new, temperature=self.temperature, top_k=self.top_k,
                    top_p=self.top_p, repetition_penalty=self.repetition_penalty,
                    presence_penalty=self.presence_penalty, frequency_penalty=self.frequency_penalty,
                    seed=self.seed, drafter=drafter, max_draft=self.max_draft, min_match=self.min_match,
                    copy_bias=self.copy_bias or 0.0)
