"""Parsers of the options that only packs take: `--expert-cache SIZE`, `--io-mode`, `--eviction`,
`--routing SPEC`. No numpy and no engine here: `--help` and option checks stay light."""
from __future__ import annotations

import math
import re

from ..errors import UsageError

IO_MODES = ("direct", "page_cache")
EVICTIONS = ("lru", "lfu")

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1000 ** 4, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*|%)\s*$")


def parse_cache_size(text, expert_bytes: int) -> int:
    """Parses `--expert-cache`: bytes ("123456789"), a size ("512MiB", "8GiB", "1.5G"), a fraction
    of the expert bytes ("0.25", "25%") or "all". Returns bytes (capped at expert_bytes)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = repr(text)
    s = str(text).strip()
    hint = "use bytes, a size like 512MiB or 8GiB, a fraction like 0.25, or 'all'"
    if s.lower() in ("all", "full", "100%"):
        return int(expert_bytes)
    m = _SIZE_RE.match(s)
    if not m or m[2].lower() not in _UNITS and m[2] != "%":
        raise UsageError(f"--expert-cache: cannot parse {s!r} ({hint})")
    num, unit = float(m[1]), m[2].lower()
    if not math.isfinite(num):
        raise UsageError(f"--expert-cache: {s[:40]!r} is too large a number ({hint})")
    if unit == "%":
        frac = num / 100.0
    elif unit == "" and num <= 1.0:
        frac = num
    else:
        if unit == "" and not m[1].isdigit():
            raise UsageError(f"--expert-cache: {s!r} is neither a whole number of bytes nor a "
                             f"fraction <= 1 ({hint})")
        size = int(num * _UNITS[unit])
        if size <= 0:
            raise UsageError(f"--expert-cache: {s!r} must be more than 0 bytes")
        return min(size, int(expert_bytes))
    if not 0.0 < frac <= 1.0:
        raise UsageError(f"--expert-cache: fraction {s!r} must be in (0, 1]")
    return max(1, int(frac * expert_bytes))


_ROUTING_KEYS = {
    "protect": ("protect", int), "bonus": ("bonus", float), "draft-protect": ("draft_protect", int),
    "draft-bonus": ("draft_bonus", float), "anchors": ("budget_anchors", int),
}
_MAX_ROUTING_INT = 1 << 16   # protect/anchors count experts: more than any model has
_MAX_BONUS = 50.0            # exp(bonus) multiplies router scores: past this it overflows f32
_ROUTING_FLAGS = {"hard-budget": "hard_budget", "root-readahead": "root_only_readahead"}


def parse_routing(text) -> dict:
    """Parses `--routing`: "off" or comma-separated protect=J, bonus=B, draft-protect=J,
    draft-bonus=B, hard-budget, anchors=N, root-readahead. Returns Engine.set_routing keywords.
    Every mode except root-readahead changes the model (outputs become approximate)."""
    if isinstance(text, dict):
        return dict(text)
    s = str(text or "").strip()
    out: dict = {}
    if s.lower() in ("", "off", "exact", "none"):
        return out
    hint = ("use 'off' or a list like protect=2,bonus=1.5,draft-protect=1,draft-bonus=3,hard-budget,"
            "anchors=4,root-readahead")
    for item in s.split(","):
        item = item.strip().lower().replace("_", "-")
        key, eq, val = item.partition("=")
        if not eq and key in _ROUTING_FLAGS:
            out[_ROUTING_FLAGS[key]] = True
        elif eq and key in _ROUTING_KEYS:
            name, conv = _ROUTING_KEYS[key]
            try:
                out[name] = conv(val)
            except ValueError:
                raise UsageError(f"--routing: {key} needs a number, got {val!r} ({hint})") from None
            if conv is int and not 0 <= out[name] <= _MAX_ROUTING_INT:
                raise UsageError(f"--routing: {key} must be a whole number from 0 to {_MAX_ROUTING_INT}")
            if conv is float and not (math.isfinite(out[name]) and abs(out[name]) <= _MAX_BONUS):
                raise UsageError(f"--routing: {key} must be a finite number from -{_MAX_BONUS:g} to {_MAX_BONUS:g}")
        else:
            raise UsageError(f"--routing: unknown setting {item!r} ({hint})")
    if any(k in out for k in ("protect", "bonus", "draft_protect", "draft_bonus")):
        out["cache_aware"] = True
    if "budget_anchors" in out and not out.get("hard_budget"):
        raise UsageError("--routing: anchors=N only applies together with hard-budget")
    return out


def routing_is_approximate(routing: dict) -> bool:
    return bool(routing.get("cache_aware") or routing.get("hard_budget"))
