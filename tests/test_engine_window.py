"""Window/commit contract: exact rollback against serial decoding, batch invariance, transaction rules,
state snapshots."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402
from strata.errors import ModelError, WindowError  # noqa: E402

from hf_models import make_hf_model  # noqa: E402

LIN, FULL = "linear_attention", "full_attention"
POS0 = [0, 1, 2, 3, 41, 42, 43, 44]  # every pos0 mod 4, short and longer contexts
SEQ_LEN = max(POS0) + 8 + 2


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("win") / "m"
    # three GDN layers around one attention layer: rollback is mostly about the recurrence
    path, _ = make_hf_model(str(folder), "qwen3_next", seed=11, num_hidden_layers=4,
                            layer_types=[LIN, FULL, LIN, LIN])
    return path


@pytest.fixture(scope="module")
def serial(model_path):
    """Serial T=1 reference: logits of every position and the state blob after every step."""
    rng = np.random.default_rng(5)
    seq = rng.integers(0, 96, SEQ_LEN).tolist()
    eng = strata.load(model_path, threads=2)
    logits, states = [], [eng.save_state()]
    for t in seq:
        logits.append(eng.run([t])[0].copy())
        eng.commit(1)
        states.append(eng.save_state())
    return seq, np.stack(logits), states


@pytest.mark.parametrize("fold", ["eager", "lazy"])
def test_forced_rejection_matches_serial(model_path, serial, fold):
    seq, ref_logits, states = serial
    eng = strata.load(model_path, threads=2, fold=fold)
    for pos0 in POS0:
        for T in range(2, 9):
            for keep in range(1, T + 1):
                eng.load_state(states[pos0])
                assert eng.pos == pos0
                # drafts: the true continuation up to keep, then a wrong token
                window = seq[pos0:pos0 + T]
                if keep < T:
                    window = window[:keep] + [(seq[pos0 + keep] + 1) % 96] + window[keep + 1:]
                out = eng.run(window)
                # rows up to keep saw the true prefix: bit-identical to serial decoding
                assert np.array_equal(out[:keep], ref_logits[pos0:pos0 + keep]), (pos0, T, keep)
                eng.commit(keep)
                assert eng.pos == pos0 + keep
                # continue one token: logits and the whole state equal serial decoding
                nxt = eng.run([seq[pos0 + keep]])
                assert np.array_equal(nxt[0], ref_logits[pos0 + keep]), (pos0, T, keep)
                eng.commit(1)
                assert eng.save_state() == states[pos0 + keep + 1], (pos0, T, keep)


def test_logits_into_a_caller_array(model_path, serial):
    """run(out=...) writes the logits into the caller's array and returns that array; the same
    bits as a fresh one. A wrong array is refused with a one-line ValueError before anything runs."""
    seq, ref_logits, states = serial
    eng = strata.load(model_path, threads=2)
    buf = np.full((3, eng.vocab_size), np.nan, np.float32)
    got = eng.run(seq[:3], out=buf)
    assert got is buf
    eng.commit(1)
    assert np.array_equal(buf[0], ref_logits[0])
    last = np.zeros((1, eng.vocab_size), np.float32)
    assert eng.run(seq[1:3], last_only=True, out=last) is last
    assert np.array_equal(last[0], ref_logits[2])
    eng.commit(2)
    V = eng.vocab_size
    bad = [np.zeros((1, V), np.float64), np.zeros((2, V), np.float32), np.zeros((V,), np.float32),
           np.zeros((1, 2 * V), np.float32)[:, ::2], [[0.0] * V]]
    ro = np.zeros((1, V), np.float32)
    ro.flags.writeable = False
    for b in bad + [ro]:
        with pytest.raises(ValueError, match=r"out must be a writable C-contiguous float32 array of shape \(1, ") as e:
            eng.run([seq[3]], out=b)
        assert "\n" not in str(e.value)
    assert eng.pos == 3 and not eng.window_open
    assert np.array_equal(eng.run([seq[3]], out=np.empty((1, V), np.float32))[0], ref_logits[3])


def test_eager_commit_state_equals_serial(model_path, serial):
    seq, _, states = serial
    eng = strata.load(model_path, threads=1)
    for pos0 in (0, 3, 42):
        for T in (2, 5, 8):
            for keep in range(1, T + 1):
                eng.load_state(states[pos0])
                eng.run(seq[pos0:pos0 + T])
                eng.commit(keep)
                assert eng.save_state() == states[pos0 + keep]


def test_batch_invariance_random_windows(model_path, serial):
    """A row's logits depend only on its prefix: not on T, the rows after it, or the thread count."""
    _, _, states = serial
    rng = np.random.default_rng(9)
    engines = [strata.load(model_path, threads=n) for n in (1, 2)]
    for trial in range(12):
        pos0 = int(rng.integers(0, 40))
        T = int(rng.integers(2, 17))
        window = rng.integers(0, 96, T).tolist()
        eng = engines[trial % 2]
        eng.load_state(states[pos0])
        full = eng.run(window)
        eng.commit(1)
        for i in rng.choice(T, size=min(3, T), replace=False):
            i = int(i)
            other = engines[(trial + 1) % 2]
            other.load_state(states[pos0])
            tail = rng.integers(0, 96, int(rng.integers(0, 4))).tolist()
            part = other.run(window[:i + 1] + tail)
            other.commit(1)
            assert np.array_equal(part[i], full[i]), (pos0, T, i)


def test_long_run_cut_short_recomputes_exactly(model_path, serial):
    seq, ref_logits, states = serial
    eng = strata.load(model_path, threads=2)
    eng.run(seq[:SEQ_LEN - 1])  # one chunk: folded from the kept per-row inputs
    eng.commit(30)
    assert eng.save_state() == states[30]
    eng.reset()
    long_seq = (seq * 3)[:150]  # several chunks: the kept rows are recomputed
    eng.run(long_seq)
    eng.commit(45)
    assert eng.save_state() == states[45]
    out = eng.run([seq[45]])
    assert np.array_equal(out[0], ref_logits[45])


def test_transaction_rules_leave_engine_usable(model_path, serial):
    seq, ref_logits, states = serial
    eng = strata.load(model_path, threads=2, ctx=20)
    assert eng.context_limit == 20
    with pytest.raises(WindowError, match="commit"):
        eng.commit(1)  # commit without run
    with pytest.raises(WindowError):
        eng.run([])
    eng.run(seq[:3])
    with pytest.raises(WindowError, match="not committed"):
        eng.run(seq[3:4])  # run while open
    for bad in (0, 4, -1):
        with pytest.raises(WindowError, match="out of range"):
            eng.commit(bad)
    with pytest.raises(WindowError, match="window is open"):
        eng.save_state()
    with pytest.raises(WindowError, match="window is open"):
        eng.load_state(states[0])
    eng.commit(3)
    with pytest.raises(WindowError):
        eng.commit(1)  # double commit
    with pytest.raises(WindowError, match="context limit"):
        eng.run(seq[3:22])
    with pytest.raises(ValueError, match="vocabulary"):
        eng.run([5, 96])
    with pytest.raises(ValueError):
        eng.run([-1])
    # still exact after every refusal
    assert eng.pos == 3
    assert eng.save_state() == states[3]
    out = eng.run([seq[3]])
    assert np.array_equal(out[0], ref_logits[3])
    eng.commit(1)


def test_state_blob_checks(model_path, serial, tmp_path):
    _, _, states = serial
    eng = strata.load(model_path, threads=1)
    blob = states[10]
    eng.load_state(blob)
    assert eng.pos == 10
    bad = bytearray(blob)
    bad[40] ^= 1
    with pytest.raises(ModelError, match="checksum"):
        eng.load_state(bytes(bad))
    with pytest.raises(ModelError):
        eng.load_state(blob[:-9])
    with pytest.raises(ModelError, match="not a strata"):
        eng.load_state(b"hello world, this is not a state blob")
    other, _ = make_hf_model(str(tmp_path / "o"), "qwen3_next", seed=11, num_hidden_layers=2,
                             layer_types=[LIN, FULL])
    eng2 = strata.load(other, threads=1)
    assert eng2.model_id != eng.model_id
    with pytest.raises(ModelError, match="belongs to model"):
        eng2.load_state(blob)
    assert eng.pos == 10 and eng.save_state() == blob


def test_lazy_fold_flushes_on_save(model_path, serial):
    seq, _, states = serial
    eng = strata.load(model_path, threads=2, fold="lazy")
    assert eng.fold == "lazy"
    eng.load_state(states[5])
    eng.run(seq[5:11])
    eng.commit(2)
    assert eng.save_state() == states[7]


def test_telemetry_and_window_model(model_path):
    eng = strata.load(model_path, threads=2)
    eng.run([1, 2, 3, 4])
    eng.commit(2)
    t = eng.last_telemetry()
    assert t["T"] == 4 and t["pos0"] == 0 and t["keep"] == 2 and t["run_us"] > 0
    assert len(t["union_per_layer"]) == 4
    offs = t["expert_offsets"]
    assert offs[0] == 0 and len(offs) == 5
    for m in range(4):
        ids = t["expert_ids"][offs[m]:offs[m + 1]]
        assert len(ids) == t["union_per_layer"][m] and 2 <= len(ids) <= 8
        assert ids == sorted(set(ids))
    from strata import _engine

    assert isinstance(eng, _engine.WindowModel)
    assert isinstance(eng.as_window_model(), _engine.WindowModel)
    assert isinstance(eng.expert_store, _engine.ExpertStore)
    assert eng.config["arch"] == "qwen3_next" and eng.vocab_size == 96


def test_failed_single_token_run_changes_nothing(model_path, serial, tmp_path):
    """A run that fails inside (here: an expert read error from the streaming store) must leave the
    committed state untouched, for T=1 too (its GDN step goes to scratch until commit)."""
    pack = pytest.importorskip("strata.pack")
    seq, ref_logits, states = serial
    dst = str(tmp_path / "m.strata")
    pack.convert(model_path, dst)
    eng = pack.load_pack(dst, expert_cache=2 * pack.read_pack(dst).ex["stride"])  # one layer's top-2
    store = eng.expert_store
    if not hasattr(store, "inject_read_error"):
        pytest.skip("streaming store without fault injection")
    for t in seq[:6]:
        eng.run([t])
        eng.commit(1)
    for e in range(8):
        store.inject_read_error(2, e, 1)  # layer 2 is a GDN layer after layer 0 (GDN) stepped
    with pytest.raises(ModelError):
        eng.run([seq[6]])
    assert not eng.window_open and eng.pos == 6
    for e in range(8):
        store.inject_read_error(2, e, 0)
    out = eng.run([seq[6]])
    eng.commit(1)
    assert np.array_equal(out[0], ref_logits[6])


def test_backend_choice(model_path):
    eng = strata.load(model_path, threads=1, backend="cpu")
    assert eng.backend == "cpu" and eng.threads == 1
    with pytest.raises(strata.errors.UsageError, match="unknown backend 'vulkan'"):
        strata.load(model_path, backend="vulkan")


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe_text"])
@pytest.mark.parametrize("fold", ["eager", "lazy"])
def test_forced_rejection_other_archs(tmp_path, arch, fold):
    """The same exactness on the other architectures (no GDN at all; split GDN projections)."""
    path, _ = make_hf_model(str(tmp_path / arch), arch, seed=13, num_hidden_layers=3)
    seq = np.random.default_rng(3).integers(0, 96, 50).tolist()
    ref = strata.load(path, threads=2)
    ref_logits, states = [], [ref.save_state()]
    for t in seq:
        ref_logits.append(ref.run([t])[0].copy())
        ref.commit(1)
        states.append(ref.save_state())
    eng = strata.load(path, threads=2, fold=fold)
    for pos0 in (0, 3, 41):
        for T in range(2, 6):
            for keep in range(1, T + 1):
                eng.load_state(states[pos0])
                window = seq[pos0:pos0 + T]
                if keep < T:
                    window = window[:keep] + [(seq[pos0 + keep] + 1) % 96] + window[keep + 1:]
                out = eng.run(window)
                assert np.array_equal(out[:keep], np.stack(ref_logits[pos0:pos0 + keep]))
                eng.commit(keep)
                nxt = eng.run([seq[pos0 + keep]])
                assert np.array_equal(nxt[0], ref_logits[pos0 + keep])
                eng.commit(1)
                assert eng.save_state() == states[pos0 + keep + 1]
