"""The numbers behind the TUI panels, the settings strip's parser, the keymap and the diff
rendering, checked without a terminal."""
from __future__ import annotations

import io

import pytest

from strata.edit import diff_hunks
from strata.protocol import GenerationSettings, WindowStats
from strata.tui.keymap import ALL_KEYS, parse_keymap
from strata.telemetry import percentile, ratio, summarize
from strata.tui.telemetry import ExpertHeat, TelemetryLog, bucket_means
from strata.tui.widgets.diff_view import render_hunks
from strata.tui.widgets.heatmap import binned, gradient
from strata.tui.widgets.settings_strip import parse_settings


def win(T=1, drafted=0, accept=0, emitted=1, us=1000.0, **kw) -> WindowStats:
    return WindowStats(T=T, n_drafted=drafted, n_accept=accept, keep=emitted, emitted=emitted,
                       window_us=us, **kw)


def test_ratio_and_percentile_guard_empty_input():
    assert ratio(3, 0) == 0.0
    assert percentile([], 50) == 0.0
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)  # interpolated
    assert percentile([7.0], 95) == 7.0


def test_bucket_means_average_rather_than_take_the_max():
    values = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert bucket_means(values, 3) == [0.5, 0.5, 0.0]
    assert bucket_means(values, 10) == values
    assert bucket_means([], 4) == []


def test_panel_summary_is_the_decode_loops_summary():
    stats = [win(T=4, drafted=3, accept=3, emitted=4, us=2000.0),
             win(T=4, drafted=3, accept=1, emitted=2, us=2000.0),
             win(T=1, emitted=1, us=1000.0)]
    log = TelemetryLog()
    log.extend(stats)
    s = log.summary()
    assert s == summarize(stats)
    assert s.windows == 3 and s.tokens == 7
    assert s.acceptance == pytest.approx(4 / 6)
    assert s.mean_keep == pytest.approx(7 / 3)
    assert s.tokens_per_s == pytest.approx(7 / 0.005)
    assert s.t_hist == {1: 1, 4: 2}
    assert summarize([]).tokens_per_s == 0.0


def test_expert_heat_decays_and_marks_the_experts_the_engine_reports_cold():
    heat = ExpertHeat(decay=0.5)
    heat.add(win(experts=[[0, 1], [2]], union_per_layer=[2, 1], cold_misses=3,
                 cold_experts=[[0, 1], [2]], cache_slots_total=3))
    assert heat.n_layers == 2 and heat.n_experts == 3
    assert heat.cold == {(0, 0), (0, 1), (1, 2)}
    heat.add(win(experts=[[0, 5], [2]], cold_misses=1, cold_experts=[[5], []], cache_slots_total=3))
    assert heat.n_experts == 6
    assert heat.cold == {(0, 5)}
    assert heat.heat[0, 0] == pytest.approx(1.5)      # 1 * 0.5 + 1
    assert heat.heat[0, 1] == pytest.approx(0.5)
    heat.add(win(experts=[[3], [2]], cold_misses=0, cache_slots_total=3))
    assert heat.cold == set()                         # no misses reported: nothing is marked
    heat.add(win(experts=[[4], [0]]))
    assert heat.hottest(0, 1)[0][0] == 4               # the latest selection is hottest


def test_cold_marks_are_exactly_the_fake_engines_misses():
    from strata.testing.fake import FakeGenerator

    gen = FakeGenerator(n_layers=4, n_experts=16, top_k=2, cache_slots=6)
    heat = ExpertHeat()
    marked = reported = 0
    for ev in gen.stream(gen.encode("hello hello hello hello"), GenerationSettings(max_new=40)):
        if ev.stats.T:
            heat.add(ev.stats)
            assert len(heat.cold) == ev.stats.cold_misses
            assert all(e in ev.stats.experts[layer] for layer, e in heat.cold)
            marked += len(heat.cold)
            reported += ev.stats.cold_misses
    assert reported > 0 and marked == reported


def test_telemetry_log_io_deltas_cover_the_last_interval_only():
    log = TelemetryLog(interval_windows=2)
    for i in range(5):
        log.add(win(hits=10, cold_misses=i, bytes_read=100, cache_slots_used=i, cache_slots_total=8))
    assert log.io_totals()["hits"] == 50
    assert log.io_interval()["cold_misses"] == 3 + 4
    assert log.hit_rate() == pytest.approx(50 / 60)
    assert log.occupancy() == (4, 8)
    assert log.offered_kept(2) == [(0, 0), (0, 0)]
    v = log.version
    log.clear()
    assert log.windows == [] and log.version > v


def test_heatmap_binning_uses_means_and_keeps_cold_marks():
    import numpy as np

    heat = np.zeros((4, 8))
    heat[0, 0] = 1.0
    values, marks, lbins = binned(heat, {(3, 7)}, rows=2, cols=4)
    assert values.shape == (2, 4)
    assert values[0, 0] == pytest.approx(1.0 / 4)     # mean of a 2x2 bin
    assert marks[1, 3] and marks.sum() == 1
    assert lbins == [(0, 2), (2, 4)]
    assert gradient(0.0) != gradient(1.0)


def test_parse_settings_accepts_valid_fields_and_names_the_bad_one():
    base = GenerationSettings()
    s = parse_settings(base, False, "5", "0.7", "42")
    assert (s.draft, s.max_draft, s.temperature, s.seed) == ("none", 5, 0.7, 42)
    assert parse_settings(base, True, "auto", "0", "0").max_draft is None
    with pytest.raises(ValueError, match="max draft"):
        parse_settings(base, True, "99", "0", "0")
    with pytest.raises(ValueError, match="temperature"):
        parse_settings(base, True, "3", "hot", "0")
    with pytest.raises(ValueError, match="seed"):
        parse_settings(base, True, "3", "0", "-1")


def test_every_binding_has_an_id_and_a_tooltip_and_ids_are_unique():
    ids = [k.id for keys in ALL_KEYS.values() for k in keys]
    assert len(ids) == len(set(ids))
    for keys in ALL_KEYS.values():
        for k in keys:
            assert k.tooltip and k.binding().id == k.id
    review = {k.id: k.key for k in ALL_KEYS["edit review"]}
    assert [review[f"review.{n}"] for n in ("accept", "reject", "edit-again", "undo", "next-hunk", "prev-hunk")] \
        == ["a", "r", "e", "u", "j", "k"]


def test_parse_keymap_rejects_unknown_ids():
    assert parse_keymap({"chat.save": "ctrl+w"}) == {"chat.save": "ctrl+w"}
    with pytest.raises(ValueError, match="chat.nope"):
        parse_keymap({"chat.nope": "x"})
    with pytest.raises(ValueError, match="non-empty"):
        parse_keymap({"chat.save": ""})


def test_render_hunks_marks_the_current_hunk_and_records_its_row():
    old = "".join(f"line {i}\n" for i in range(20))
    new = old.replace("line 2\n", "LINE 2\n").replace("line 17\n", "LINE 17\n")
    hunks = diff_hunks(old, new)
    text, rows = render_hunks(hunks, current=1)
    assert len(hunks) == 2 and rows[0] == 0 and rows[1] > rows[0]
    lines = text.plain.splitlines()
    assert lines[rows[1]].startswith("> @@") and "hunk 2/2" in lines[rows[1]]
    assert "- line 2" in lines and "+ LINE 2" in lines


def test_keymap_loads_from_the_config_file_and_names_bad_entries(tmp_path):
    from strata.errors import UsageError
    from strata.tui.keymap import load_keymap

    assert load_keymap(tmp_path / "missing.toml") == {}
    good = tmp_path / "config.toml"
    good.write_text('[keys]\n"chat.save" = "f9"\n')
    assert load_keymap(good) == {"chat.save": "f9"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[keys]\n"chat.sav" = "f9"\n')
    with pytest.raises(UsageError, match="bad.toml.*chat.sav"):
        load_keymap(bad)


def test_heatmap_columns_bin_wide_models_and_stretch_small_ones_evenly():
    from strata.tui.widgets.heatmap import bin_edges

    assert bin_edges(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert bin_edges(3, 7) == [(0, 1), (1, 2), (2, 3)]
    assert bin_edges(3, 7, stretch=True) == [(0, 1), (0, 1), (1, 2), (1, 2), (2, 3), (2, 3)]
    assert bin_edges(0, 5) == []


def test_control_characters_are_shown_not_sent_to_the_terminal():
    from strata.tui.widgets.transcript import printable

    assert printable("a\x00b\x1b[2J\tc\nd\x7f") == "a\u2400b\u241b[2J\tc\nd\u2421"


def test_expert_geometry_comes_from_the_generator_or_its_engine_config():
    from types import SimpleNamespace

    from strata.testing.fake import FakeGenerator
    from strata.tui.app import expert_geometry

    assert expert_geometry(FakeGenerator(n_layers=6, n_experts=32)) == (6, 32)
    engine = SimpleNamespace(config={"hf_config": {"text_config": {"num_experts": 512}}})
    assert expert_geometry(SimpleNamespace(engine=engine)) == (0, 512)
    assert expert_geometry(SimpleNamespace(engine=SimpleNamespace(config="?"))) == (0, 0)
    engine = SimpleNamespace(config={"num_experts": 16, "layer_moe": [1, 0, 1, 1]})
    assert expert_geometry(SimpleNamespace(engine=engine)) == (3, 16)


def test_cache_panel_says_when_no_experts_are_streamed():
    from rich.console import Console

    from strata.tui.widgets.panels import ColdMissPanel

    def shown(log):
        console = Console(width=60, record=True, file=io.StringIO())
        console.print(ColdMissPanel(log).render_log(60))
        return console.export_text()

    resident = TelemetryLog()
    resident.add(win())
    assert "no streaming store" in shown(resident)
    streamed = TelemetryLog()
    streamed.add(win(hits=3, cold_misses=1, cache_slots_used=4, cache_slots_total=8))
    text = shown(streamed)
    assert "no streaming store" not in text and "75.0%" in text and "4/8" in text


def test_t_histogram_groups_many_window_sizes_in_power_of_two_ranges():
    from strata.tui.widgets.panels import t_hist_rows

    assert t_hist_rows({1: 5, 4: 2}) == [("1", 5), ("4", 2)]
    many = {1: 42, 2: 9, 3: 6, 4: 4, 5: 2, 8: 2, 13: 2, 16: 19}
    assert t_hist_rows(many) == [("1", 42), ("2-3", 15), ("4-7", 6), ("8-15", 4), ("16-31", 19)]


@pytest.mark.parametrize("shape,rows,cols", [((48, 512), 24, 44), ((8, 16), 8, 40), ((5, 7), 2, 3)])
def test_heatmap_bins_are_the_means_of_their_cells(shape, rows, cols):
    import numpy as np

    from strata.tui.widgets.heatmap import bin_edges

    rng = np.random.default_rng(0)
    heat = rng.random(shape)
    cold = {(int(rng.integers(shape[0])), int(rng.integers(shape[1]))) for _ in range(5)}
    values, marks, lbins = binned(heat, cold, rows, cols)
    ebins = bin_edges(shape[1], cols, stretch=True)
    for i, (l0, l1) in enumerate(lbins):
        for j, (e0, e1) in enumerate(ebins):
            assert values[i, j] == pytest.approx(heat[l0:l1, e0:e1].mean())
            assert marks[i, j] == any(l0 <= a < l1 and e0 <= b < e1 for a, b in cold)


def test_cache_panel_flags_approximate_routing():
    from rich.console import Console

    from strata.tui.widgets.panels import ColdMissPanel

    log = TelemetryLog()
    log.add(win(hits=3, cold_misses=1, cache_slots_used=4, cache_slots_total=8, approximate=True))
    console = Console(width=60, record=True, file=io.StringIO())
    console.print(ColdMissPanel(log).render_log(60))
    assert "approximate routing" in console.export_text()
