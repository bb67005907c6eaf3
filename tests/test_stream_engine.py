"""The engine over a pack: exact mode (streamed == resident, bit for bit, at every cache size down
to one layer's top-k, for T=1 and drafted windows), IO telemetry, and faults that leave the
engine usable."""
from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

import strata
from strata import pack
from strata.errors import ModelError

pytest.importorskip("strata._engine")
pytest.importorskip("strata.model")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

E, K, LAYERS = 16, 4, 3


def _hf_checkpoint(folder, seed=0, experts=E, dtype=None):
    """A tiny qwen3_next (Gated DeltaNet + gated attention + MoE with a shared expert)."""
    cfg = transformers.Qwen3NextConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, moe_intermediate_size=24,
        shared_expert_intermediate_size=24, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention", "linear_attention"][:LAYERS],
        num_experts=experts, num_experts_per_tok=K, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[], max_position_embeddings=256)
    torch.manual_seed(seed)
    model = transformers.Qwen3NextForCausalLM(cfg).to(dtype or torch.bfloat16)
    with torch.no_grad():  # the default init is tiny; make routing and outputs non-trivial
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    model.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return _hf_checkpoint(tmp_path_factory.mktemp("hf") / "m")


@pytest.fixture(scope="module")
def packed(ckpt, tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("pk") / "m.strata")
    pack.convert(ckpt, dst)
    return dst


def _script(seed=0, steps=10):
    """A prompt, then windows of T=1 and drafted windows with random keeps."""
    rng = random.Random(seed)
    out = [([rng.randrange(96) for _ in range(7)], 7)]
    for i in range(steps):
        T = 1 if i % 3 == 0 else rng.randint(2, 5)
        out.append(([rng.randrange(96) for _ in range(T)], rng.randint(1, T)))
    return out


def _play(eng, script):
    logits = []
    for toks, keep in script:
        logits.append(np.array(eng.run(toks), copy=True))
        eng.commit(keep)
    return logits


def test_model_id_matches_source(ckpt, packed):
    assert strata.load(packed).model_id == strata.load(ckpt).model_id
    assert strata.load(packed, expert_cache="0.5").expert_store.slots == LAYERS * E // 2


@pytest.mark.parametrize("cache_slots,io_mode,eviction,readahead", [
    (None, "direct", "lru", False),          # everything fits
    ("half", "page_cache", "lru", True),
    ("quarter", "direct", "lfu", False),
    (K, "direct", "lru", False),             # one layer's top-k: drafted unions overflow it
    (K, "page_cache", "lfu", True),
])
def test_exact_at_every_cache_size(ckpt, packed, cache_slots, io_mode, eviction, readahead):
    script = _script(seed=1)
    ref = _play(strata.load(ckpt), script)
    info = pack.read_pack(packed)
    stride = info.ex["stride"]
    cache = {None: None, "half": "0.5", "quarter": "25%"}.get(cache_slots, None)
    if isinstance(cache_slots, int):
        cache = cache_slots * stride
    eng = pack.load_pack(packed, expert_cache=cache, io_mode=io_mode, eviction=eviction, readahead=readahead,
                         io_threads=2)
    got = _play(eng, script)
    for i, (a, b) in enumerate(zip(ref, got)):
        assert a.shape == b.shape and np.array_equal(a, b), f"window {i} differs"
    store = eng.expert_store
    if isinstance(cache_slots, int):
        assert store.slots == cache_slots
    t = eng.last_telemetry()
    assert t["cache_slots_total"] == store.slots
    assert len(t["union_per_layer"]) == LAYERS


def test_f16_checkpoint_streams_as_f32_exactly(tmp_path):
    src = _hf_checkpoint(tmp_path / "f16", seed=4, dtype=torch.float16)
    dst = str(tmp_path / "f16.strata")
    assert pack.convert(src, dst)["experts"]["dtype"] == "f32"
    script = _script(seed=6, steps=5)
    ref = _play(strata.load(src), script)
    got = _play(strata.load(dst, expert_cache=K * pack.read_pack(dst).ex["stride"]), script)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got))


def test_telemetry_counts_real_io(packed):
    info = pack.read_pack(packed)
    stride = info.ex["stride"]
    eng = pack.load_pack(packed, expert_cache=K * stride, io_threads=1)
    eng.run([1, 2, 3, 4, 5])
    t = eng.last_telemetry()
    eng.commit(5)
    assert t["cold_misses"] > 0 and t["bytes_read"] == t["urgent_loads"] * stride
    assert t["cold_misses"] == sum(t["union_per_layer"]) - t["hits"]
    full = pack.load_pack(packed)
    full.run([1, 2, 3])
    full.commit(3)
    full.run([1, 2, 3])  # same tokens at new positions: the experts are mostly warm now
    t2 = full.last_telemetry()
    assert t2["hits"] > 0 and t2["cache_slots_total"] == LAYERS * E


def test_telemetry_names_the_experts_that_missed(packed):
    info = pack.read_pack(packed)
    eng = pack.load_pack(packed, expert_cache=K * info.ex["stride"], io_threads=1)
    seen_cold = 0
    for tokens in ([1, 2, 3, 4, 5], [6], [1, 2], [7, 8, 9]):
        eng.run(tokens)
        t = eng.last_telemetry()
        eng.commit(len(tokens))
        cold = t["cold_experts"]
        assert len(cold) == len(t["experts"])
        # every miss is one selected expert of its layer, and the count matches the counter
        assert sum(len(ids) for ids in cold) == t["cold_misses"]
        for layer, ids in enumerate(cold):
            assert set(ids) <= set(t["experts"][layer]) and ids == sorted(ids)
        seen_cold += t["cold_misses"]
    assert seen_cold > 0
    full = pack.load_pack(packed)
    full.run([1, 2, 3])
    full.commit(3)
    full.run([1, 2, 3])
    t = full.last_telemetry()
    assert all(not ids for ids in t["cold_experts"]) == (t["cold_misses"] == 0)


def _flip(packed, tmp_path, layer, expert):
    p = str(tmp_path / "bad.strata")
    shutil.copytree(packed, p)
    info = pack.read_pack(p)
    ex = info.ex
    off = ex["data_offset"] + (layer * ex["num_experts"] + expert) * ex["stride"] + 17
    with open(info.experts_path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x40]))
    return p


@pytest.mark.parametrize("at", [3, 4])  # a drafted window, then a T=1 step
def test_read_error_mid_window_leaves_engine_usable(ckpt, packed, at):
    script = _script(seed=2, steps=6)
    ref = _play(strata.load(ckpt), script)
    eng = pack.load_pack(packed, expert_cache=K * pack.read_pack(packed).ex["stride"])
    _play(eng, script[:at])
    store = eng.expert_store
    for e in range(E):  # whatever the next window routes to in layer 1 fails once
        store.inject_read_error(1, e, 1)
    toks, keep = script[at]
    assert (len(toks) > 1) == (at == 3)
    with pytest.raises(ModelError, match=r"layer 1 expert \d+: read error"):
        eng.run(toks)
    assert not eng.window_open
    for e in range(E):
        store.inject_read_error(1, e, 0)
    # the failed window changed nothing: the rest of the script matches the reference
    got = _play(eng, script[at:])
    for a, b in zip(ref[at:], got):
        assert np.array_equal(a, b)


def test_corrupt_expert_is_named_and_engine_recovers(ckpt, packed, tmp_path):
    p = _flip(packed, tmp_path, 0, 3)
    eng = pack.load_pack(p, expert_cache=K * pack.read_pack(p).ex["stride"])
    ref = strata.load(ckpt)
    hit = False
    for tok in range(96):  # find a token whose routing touches layer 0 expert 3
        try:
            eng.run([tok])
        except ModelError as e:
            assert "layer 0 expert 3: checksum mismatch" in str(e)
            assert "\n" not in str(e)
            hit = True
            break
        eng.commit(1)
        eng.reset()
    assert hit
    eng.reset()
    ok = next(t for t in range(96) if t != tok)
    try:
        a = eng.run([ok, ok])
    except ModelError:
        pytest.skip("the second token also routes to the corrupt expert")
    b = ref.run([ok, ok])
    assert np.array_equal(a, b)


def test_pack_from_another_model_is_refused(ckpt, packed, tmp_path):
    other = _hf_checkpoint(tmp_path / "other", seed=1, experts=8)
    p = str(tmp_path / "mixed.strata")
    shutil.copytree(packed, p)
    shutil.copyfile(os.path.join(other, "config.json"), os.path.join(p, "config.json"))
    with pytest.raises(ModelError, match="different model|another model"):
        pack.load_pack(p)
    # even with the recorded config digest removed, the geometry check catches it
    hp = os.path.join(p, pack.HEADER_NAME)
    h = json.load(open(hp))
    del h["source"]["config_sha256"]
    json.dump(h, open(hp, "w"))
    with pytest.raises(ModelError, match="another model"):
        pack.load_pack(p)


def _drafted_script(seed, steps=8):
    rng = random.Random(seed)
    out = [([rng.randrange(96) for _ in range(6)], 6)]
    for _ in range(steps):
        T = rng.randint(3, 5)
        out.append(([rng.randrange(96) for _ in range(T)], rng.randint(1, T)))
    return out


def _play_tele(eng, script):
    tele = []
    for toks, keep in script:
        eng.run(toks)
        tele.append(dict(eng.last_telemetry()))
        eng.commit(keep)
    return tele


def test_cache_aware_routing_is_marked_and_reads_less(packed):
    stride = pack.read_pack(packed).ex["stride"]
    script = _script(seed=3, steps=12)
    exact = pack.load_pack(packed, expert_cache=LAYERS * E // 2 * stride)
    moce = pack.load_pack(packed, expert_cache=LAYERS * E // 2 * stride, routing="protect=1,bonus=8")
    assert moce.routing()["approximate"] and not exact.routing()["approximate"]
    te, tm = _play_tele(exact, script), _play_tele(moce, script)
    assert not any(t["approximate"] for t in te)
    assert all(t["approximate"] for t in tm)
    assert sum(t["cold_misses"] for t in tm[1:]) < sum(t["cold_misses"] for t in te[1:])


def test_hard_budget_drafts_add_no_cold_experts(packed):
    stride = pack.read_pack(packed).ex["stride"]
    script = _drafted_script(4)
    plain = _play_tele(pack.load_pack(packed, expert_cache=2 * K * stride), script)
    budget = _play_tele(pack.load_pack(packed, expert_cache=2 * K * stride, routing="hard-budget"), script)
    assert sum(t["extra_cold"] for t in plain[1:]) > 0
    # draft rows choose only the root's experts or ready residents: nothing cold beyond the root's
    assert all(t["extra_cold"] == 0 for t in budget[1:])
    assert all(t["approximate"] for t in budget[1:])


def test_root_only_readahead_stays_exact(ckpt, packed):
    script = _script(seed=5)
    ref = _play(strata.load(ckpt), script)
    eng = pack.load_pack(packed, expert_cache="0.5", readahead=True, routing="root-readahead")
    assert not eng.routing()["approximate"]
    got = _play(eng, script)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got))
    assert not eng.last_telemetry()["approximate"]


@pytest.mark.parametrize("text,want", [
    ("off", {}), ("", {}),
    ("protect=2,bonus=1.5", {"protect": 2, "bonus": 1.5, "cache_aware": True}),
    ("hard-budget,anchors=4,root-readahead", {"hard_budget": True, "budget_anchors": 4, "root_only_readahead": True}),
    ("draft_bonus=3", {"draft_bonus": 3.0, "cache_aware": True}),
])
def test_parse_routing(text, want):
    assert pack.parse_routing(text) == want
    assert pack.routing_is_approximate(want) == bool(want.get("cache_aware") or want.get("hard_budget"))


@pytest.mark.parametrize("text", ["protect=x", "bonsu=1", "anchors=2", "protect=-1"])
def test_parse_routing_errors(text):
    from strata.errors import UsageError

    with pytest.raises(UsageError, match="--routing"):
        pack.parse_routing(text)


def test_qwen3_moe_pack_exact_with_drafted_windows(tmp_path):
    """qwen3_moe (attention only, no GDN layers): streamed == resident through T>1 commits."""
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=E, num_experts_per_tok=K,
        norm_topk_prob=True, max_position_embeddings=256)
    torch.manual_seed(2)
    model = transformers.Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    model.save_pretrained(tmp_path / "src")
    pack.convert(str(tmp_path / "src"), str(tmp_path / "dst"))
    script = _script(seed=8, steps=6)
    ref = _play(strata.load(str(tmp_path / "src")), script)
    got = _play(strata.load(str(tmp_path / "dst"), expert_cache=K * pack.read_pack(str(tmp_path / "dst")).ex["stride"]),
                script)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got))
