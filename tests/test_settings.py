"""GenerationSettings: the one place generation settings are validated."""
import math

import pytest

from strata import _engine
from strata.errors import UsageError
from strata.settings import GenerationSettings, SettingsError, engine_limits

FLOATS = ("temperature", "top_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
INTS = ("max_new", "top_k", "seed", "max_draft", "min_match")


def test_limits_come_from_the_engine():
    lim = engine_limits()
    assert lim["max_draft"] == _engine.LIMITS["max_draft"] == 15
    assert lim["max_window"] == lim["max_draft"] + 1
    GenerationSettings(max_draft=lim["max_draft"])
    with pytest.raises(SettingsError, match="--max-draft"):
        GenerationSettings(max_draft=lim["max_draft"] + 1)


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("nan"), 1e308 * 10])
def test_non_finite_floats_are_refused_naming_the_setting(name, value):
    with pytest.raises(SettingsError) as info:
        GenerationSettings(**{name: value})
    assert info.value.setting == name and "--" + name.replace("_", "-") in str(info.value)
    assert isinstance(info.value, UsageError)


@pytest.mark.parametrize("name", INTS)
@pytest.mark.parametrize("value", [2**64, 2**200, -1, 1.5, "3", True, [1], math.nan])
def test_integers_that_do_not_fit_the_engine_are_refused(name, value):
    with pytest.raises(SettingsError) as info:
        GenerationSettings(**{name: value})
    assert info.value.setting == name


def test_largest_values_the_engine_takes_are_accepted():
    lim = engine_limits()
    s = GenerationSettings(max_new=lim["max_new"], seed=lim["max_seed"], top_k=lim["max_top_k"],
                           min_match=lim["max_min_match"])
    assert s.decode_kwargs()["seed"] == 2**64 - 1


def test_whole_floats_become_ints_and_replace_revalidates():
    s = GenerationSettings(max_new=8.0)
    assert s.max_new == 8 and isinstance(s.max_new, int)
    assert s.replace(temperature=None) is s  # an option that was not given changes nothing
    with pytest.raises(SettingsError, match="--temperature"):
        s.replace(temperature=-0.1)
    with pytest.raises(SettingsError, match="not a generation setting"):
        s.replace(colour="blue")
    with pytest.raises(Exception):
        s.max_new = 3  # frozen


def test_from_dict_ignores_unknown_keys_and_checks_known_ones():
    assert GenerationSettings.from_dict({"max_new": 3, "later_field": 1}).max_new == 3
    with pytest.raises(SettingsError, match="--top-p"):
        GenerationSettings.from_dict({"top_p": 0})
    with pytest.raises(SettingsError):
        GenerationSettings.from_dict(["not", "a", "dict"])


def test_decode_kwargs_pick_the_drafter():
    assert GenerationSettings(draft="none").decode_kwargs()["drafter"] == "none"
    assert GenerationSettings(draft="baseline").decode_kwargs()["drafter"] == "baseline"
    assert GenerationSettings(draft="suffix", drafter="baseline").decode_kwargs()["drafter"] == "baseline"



@pytest.mark.parametrize("temperature, seed, max_draft, field", [
    ("nan", "0", "auto", "temperature"), ("inf", "0", "auto", "temperature"), ("5.5", "0", "auto", "temperature"),
    ("0", "-1", "auto", "seed"), ("0", str(2**64), "auto", "seed"), ("0", "0", "16", "max draft"),
])
def test_the_tui_settings_strip_uses_the_same_rules(temperature, seed, max_draft, field):
    from strata.tui.widgets.settings_strip import parse_settings

    with pytest.raises(ValueError) as info:
        parse_settings(GenerationSettings(), True, max_draft, temperature, seed)
    assert str(info.value).startswith(field), info.value


def test_copy_bias_is_checked_and_older_records_ran_without_it():
    assert GenerationSettings().copy_bias is None  # the mode's default
    assert GenerationSettings().decode_kwargs()["copy_bias"] == 0.0
    assert GenerationSettings(copy_bias=2).copy_bias == 2.0
    assert GenerationSettings(copy_bias=2).decode_kwargs()["copy_bias"] == 2.0
    for bad in (-0.5, float("nan"), 1e9, "2"):
        with pytest.raises(SettingsError, match="--copy-bias"):
            GenerationSettings(copy_bias=bad)
    # a record without the key ran before the copy bias existed: it replays without one
    assert GenerationSettings.from_dict({"max_new": 5}).copy_bias == 0.0
    assert GenerationSettings.from_dict({"copy_bias": None}).copy_bias is None
    assert GenerationSettings.from_dict(GenerationSettings(copy_bias=1.5).to_dict()).copy_bias == 1.5


def test_the_settings_strip_reads_the_copy_bias_and_keeps_the_modes_default_unset():
    from strata.tui.widgets.settings_strip import parse_settings

    base = GenerationSettings()
    assert parse_settings(base, True, "auto", "0", "0", "1.5").copy_bias == 1.5
    # the field shows the mode's default; left there, the setting stays the mode's (None)
    assert parse_settings(base, True, "auto", "0", "0", "2", copy_default=2.0).copy_bias is None
    assert parse_settings(base, True, "auto", "0", "0", "0", copy_default=2.0).copy_bias == 0.0
    assert parse_settings(base.replace(copy_bias=1.0), True, "auto", "0", "0", "2", copy_default=2.0).copy_bias == 2.0
    for bad in ("lots", "-1", "1e9"):
        with pytest.raises(ValueError) as info:
            parse_settings(base, True, "auto", "0", "0", bad)
        assert str(info.value).startswith("copy bias"), info.value
