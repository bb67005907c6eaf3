#include "model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "layers/attention.h"
#include "layers/gdn.h"
#include "state_blob.h"

namespace strata {

namespace {

// Windows of up to kExactRows rows (backend.h; decode windows are far below) run on the exact
// kernels, so each row is bit-identical to serial decoding, and keep every row's inputs so that
// any prefix can be committed by a fold. Longer runs are prefill: passes of at most kPassRows
// rows with the backend in prefill mode (faster kernels, checked with a tolerance). A prefill
// cut short replays the kept prefix on the exact kernels, so what it commits is exactly what
// serial decoding would have committed.
constexpr int kPassRows = 512;

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Engine::Engine(const ModelSpec& spec, const std::vector<TensorRef>& tensors, std::shared_ptr<ExpertStore> store,
               const EngineOptions& opt)
    : spec_(spec),
      opt_(opt),
      src_(std::make_shared<WeightSource>(tensors)),
      be_(make_backend(opt.backend, opt.threads > 0 ? opt.threads
                                                  : std::max(1, int(std::thread::hardware_concurrency())))) {
    const ModelSpec& s = spec_;
    if (s.vocab <= 0 || s.hidden <= 0 || s.n_layers <= 0 || int(s.layer_linear.size()) != s.n_layers ||
        int(s.layer_moe.size()) != s.n_layers)
        throw ModelError("model spec is inconsistent (vocab/hidden/layers)");
    ctx_ = opt.ctx > 0 ? opt.ctx : (s.max_pos > 0 ? s.max_pos : 32768);
    // rotary frequencies, computed in f32 like the reference
    int half = s.rot_dim / 2;
    inv_freq_.resize(half);
    for (int i = 0; i < half; ++i) {
        float e = float(2 * i) / float(s.rot_dim);
        inv_freq_[i] = 1.0f / std::pow(float(s.rope_theta), e);
    }
    WeightLoader w(*src_, spec_, *be_);
    embed_ = w.mat("embed_tokens.weight", s.vocab, s.hidden, Op::Embed);
    if (s.tie) {
        if (!be_->supports(Op::Matmul, embed_.format))
            throw ModelError(std::string("tied embed_tokens.weight is stored as ") + format_info(embed_.format).name +
                             ", which the " + be_->name() + " backend cannot use as the LM head (matmul)");
        head_ = embed_;
    } else {
        head_ = w.mat("lm_head.weight", s.vocab, s.hidden);
    }
    final_norm_ = w.norm("norm.weight", s.hidden);
    LayerEnv env{spec_, *be_, ctx_, scratch_};
    blocks_.resize(s.n_layers);
    FfnBlock* prev_moe = nullptr;
    for (int l = 0; l < s.n_layers; ++l) {
        Block& B = blocks_[l];
        B.in_norm = w.norm(layer_name(l, "input_layernorm.weight"), s.hidden);
        B.post_norm = w.norm(layer_name(l, "post_attention_layernorm.weight"), s.hidden);
        if (s.layer_linear[l])
            B.mixer = std::make_unique<GdnLayer>(env, w, l, opt_.lazy_fold);
        else
            B.mixer = std::make_unique<AttentionLayer>(env, w, l, inv_freq_);
        stateful_.push_back(B.mixer.get());
        B.ffn = std::make_unique<FfnBlock>(env, w, l, s.layer_moe[l] ? n_moe_layers_++ : -1);
        if (B.ffn->moe()) {
            if (prev_moe) prev_moe->set_next_moe(B.ffn.get());
            prev_moe = B.ffn.get();
        }
    }
    if (n_moe_layers_ > 0 && (s.top_k <= 0 || s.top_k > s.n_experts))
        throw ModelError("num_experts_per_tok must be in 1..num_experts");
    store_ = store ? std::move(store) : std::make_shared<ResidentExpertStore>(src_, spec_, *be_);
    // weights every run reads once (the LM head runs for at least one row of every window)
    dense_bytes_ = int64_t(head_.bytes() + final_norm_.size() * sizeof(float));
    for (const auto& B : blocks_)
        dense_bytes_ += int64_t(B.mixer->weight_bytes() + B.ffn->dense_weight_bytes() +
                                (B.in_norm.size() + B.post_norm.size()) * sizeof(float));
    expert_bytes_.assign(n_moe_layers_, 0);
    tele_.union_per_layer.assign(n_moe_layers_, 0);
    auto attach = [&](const std::vector<float>& v) {
        attached_.push_back(std::make_unique<Attached>());
        attached_.back()->set(*be_, v.data(), v.size() * sizeof(float), true);
    };
    attach(final_norm_);
    for (const auto& B : blocks_) {
        attach(B.in_norm);
        attach(B.post_norm);
    }
    // a backend with device copies of the cache's slots makes them when the reads land
    if (ExpertSlotHooks hooks = be_->expert_slot_hooks()) store_->set_slot_hooks(this, std::move(hooks));
}

Engine::~Engine() { store_->clear_slot_hooks(this); }

// ---------------------------------------------------------------------------------------------
// forward

void Engine::forward_pass(const int32_t* tokens, int n, int64_t p0, int row0, float* logits, bool last_only,
                          bool prefill) {
    const ModelSpec& s = spec_;
    const int H = s.hidden;
    Backend& be = *be_;
    struct ExactAfter {  // the backend leaves every pass in exact mode, even on an exception
        Backend& be;
        ~ExactAfter() { be.set_prefill(false); }
    } exact_after{be};
    be.set_prefill(prefill);
    scratch_.reset(&be);  // what does not fit the arena this pass is attached too
    arena_.set(be, scratch_.base(), scratch_.capacity(), false);  // activations live on the device
    ScratchScope sc(scratch_);
    float* x = sc.alloc<float>(size_t(n) * H);
    float* h = sc.alloc<float>(size_t(n) * H);
    float* o = sc.alloc<float>(size_t(n) * H);
    const size_t xs = size_t(n) * H;
    MoeWindow win;
    win.store = store_.get();
    win.routing = &routing_;
    win.has_drafts = window_has_drafts_;
    win.tele = &tele_;
    win.union_per_moe = &run_union_;
    win.expert_bytes = &expert_bytes_;
    win.late_ids = &late_ids_;
    be.embed(embed_, tokens, n, x);
    // each residual add goes with the norm that follows it (one fused op where the backend can)
    if (!blocks_.empty()) be.rmsnorm({x, H, 0}, {h, H, 0}, n, 1, H, blocks_[0].in_norm.data(), s.eps);
    // the last residual add goes with the final norm where every row wants logits
    const bool final_fused = logits && !last_only && !blocks_.empty();
    for (size_t b = 0; b < blocks_.size(); ++b) {
        auto& B = blocks_[b];
        B.mixer->run(h, n, p0, row0, o);
        be.add_rmsnorm(x, o, n, H, {h, H, 0}, B.post_norm.data(), s.eps);
        // the next norm: the next block's, or the final one (final_fused); the block may do the
        // add and norm itself (a MoE block's combine, fused where the backend can)
        const float* next_w = b + 1 < blocks_.size() ? blocks_[b + 1].in_norm.data()
                              : final_fused          ? final_norm_.data()
                                                     : nullptr;
        const Backend::AddNorm then{x, {h, H, 0}, next_w, s.eps};
        if (B.ffn->run(h, n, o, win, next_w ? &then : nullptr)) continue;
        if (next_w)
            be.add_rmsnorm(x, o, n, H, {h, H, 0}, next_w, s.eps);
        else
            be.add(x, o, xs);
    }
    if (!logits) return;
    int first = last_only ? n - 1 : 0;
    int rows = n - first;
    if (!final_fused) be.rmsnorm({x + size_t(first) * H, H, 0}, {h, H, 0}, rows, 1, H, final_norm_.data(), s.eps);
    float* dst = last_only ? logits : logits + size_t(row0) * s.vocab;
    // the LM head is exact in every mode: a row's logits never depend on how many rows asked
    // for logits (a last-only prefill gives the full run's last row, bit for bit)
    be.set_prefill(false);
    be.matmul({{h, rows, H, head_, nullptr, dst, s.vocab}});
}

void Engine::check_tokens(const int32_t* tokens, int T) const {
    for (int t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= spec_.vocab)
            throw std::invalid_argument("token id " + std::to_string(tokens[t]) + " at row " + std::to_string(t) +
                                        " is outside the vocabulary (0.." + std::to_string(spec_.vocab - 1) + ")");
}

void Engine::begin_window(int T, bool keep_rows) {
    for (auto* L : stateful_) L->begin_window(T, keep_rows);
}

const float* Engine::run(const int32_t* tokens, int T) { return run_ex(tokens, T, false); }

const float* Engine::run_ex(const int32_t* tokens, int T, bool last_only, float* out) {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("run: the previous window is not committed yet (call commit(keep) first)");
    if (T < 1) throw WindowError("run: a window needs at least one token");
    if (pos_ + T > ctx_)
        throw WindowError("run: window of " + std::to_string(T) + " tokens at position " + std::to_string(pos_) +
                          " goes past the context limit " + std::to_string(ctx_));
    check_tokens(tokens, T);
    double t0 = now_us();
    tele_ = WindowTelemetry();
    tele_.pos0 = pos_;
    tele_.T = T;
    double f0 = now_us();
    bool folded = false;
    for (auto* L : stateful_) folded = L->flush() || folded;
    if (folded) tele_.fold_us = now_us() - f0;
    // windows that fit in one pass keep their rows' inputs so that any prefix can be committed
    const bool keep_rows = T > 1 && T <= kExactRows;
    const bool prefill = T > kExactRows;
    window_has_drafts_ = T > 1 && T <= kDecodeRows;
    begin_window(T, keep_rows);
    run_union_.assign(n_moe_layers_, {});
    late_ids_.clear();
    if (!out) {
        logits_.resize(size_t(last_only ? 1 : T) * spec_.vocab);
        out = logits_.data();
    }
    try {
        for (int r0 = 0; r0 < T; r0 += kPassRows) {
            int n = std::min(kPassRows, T - r0);
            bool last_pass = r0 + n == T;
            forward_pass(tokens + r0, n, pos_ + r0, r0, (last_only && !last_pass) ? nullptr : out,
                         last_only, prefill);
        }
    } catch (...) {
        // nothing committed changed: the run wrote only scratch state and cells past pos
        store_->drain_telemetry(tele_);
        throw;
    }
    open_ = true;
    last_T_ = T;
    last_rows_ = last_only ? 1 : T;
    last_kept_rows_ = keep_rows;
    if (!keep_rows && T > 1)
        last_tokens_.assign(tokens, tokens + T);
    else
        last_tokens_.clear();
    // telemetry: union per MoE layer and the experts themselves; the weight bytes touched
    tele_.expert_offsets.assign(1, 0);
    tele_.weight_bytes = dense_bytes_;
    if (!spec_.tie) {  // a tied embedding is the LM head, counted whole already
        std::vector<int32_t> distinct(tokens, tokens + T);
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        tele_.weight_bytes += int64_t(distinct.size() * embed_.row_bytes);
    }
    for (auto& [m, ids] : late_ids_) {  // read back with the logits
        auto& u = run_union_[size_t(m)];
        u.insert(u.end(), ids->begin(), ids->end());
    }
    late_ids_.clear();
    for (int m = 0; m < n_moe_layers_; ++m) {
        auto& u = run_union_[m];
        std::sort(u.begin(), u.end());
        u.erase(std::unique(u.begin(), u.end()), u.end());
        tele_.weight_bytes += int64_t(u.size()) * expert_bytes_[m];
        tele_.union_per_layer.push_back(int(u.size()));
        tele_.expert_ids.insert(tele_.expert_ids.end(), u.begin(), u.end());
        tele_.expert_offsets.push_back(int(tele_.expert_ids.size()));
    }
    store_->drain_telemetry(tele_);
    tele_.run_us = now_us() - t0;
    return out;
}

void Engine::commit(int keep) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!open_) throw WindowError("commit: no open window (commit exactly once after each run)");
    if (keep < 1 || keep > last_T_)
        throw WindowError("commit: keep=" + std::to_string(keep) + " is out of range 1.." + std::to_string(last_T_));
    double t0 = now_us();
    bool did_fold = false;
    if (keep == last_T_ || last_kept_rows_) {
        for (auto* L : stateful_) did_fold = L->commit(keep) || did_fold;
    } else {
        // long run (prefill) cut short: replay the kept rows from the committed state
        begin_window(keep, false);
        for (int r0 = 0; r0 < keep; r0 += kPassRows) {
            int n = std::min(kPassRows, keep - r0);
            forward_pass(last_tokens_.data() + r0, n, pos_ + r0, r0, nullptr, false, false);
        }
        for (auto* L : stateful_) L->commit(keep);
        did_fold = true;
    }
    pos_ += keep;
    open_ = false;
    tele_.keep = keep;
    if (did_fold) tele_.fold_us += now_us() - t0;
}

void Engine::reset() {
    std::lock_guard<std::mutex> lk(mu_);
    pos_ = 0;
    open_ = false;
    last_T_ = 0;
    for (auto* L : stateful_) L->reset();
}

// ---------------------------------------------------------------------------------------------
// state snapshots (state_blob.h): every stateful layer's state at the committed position

std::string Engine::save_state() {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("save_state: a window is open (commit it first)");
    for (auto* L : stateful_) L->flush();
    std::string b;
    begin_blob(b, {opt_.model_id, pos_});
    StateWriter w(b);
    for (auto* L : stateful_) L->save(w, pos_);
    finish_blob(b);
    return b;
}

void Engine::load_state(const std::string& b) {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("load_state: a window is open (commit it first)");
    size_t body = 0;
    BlobHeader h = read_blob_header(b, opt_.model_id, body);
    if (h.pos < 0 || h.pos > ctx_)
        throw ModelError("state blob position " + std::to_string(h.pos) + " is out of range");
    size_t expect = 0;
    for (auto* L : stateful_) expect += L->state_bytes(h.pos);
    if (blob_size(opt_.model_id, expect) != b.size()) throw ModelError("state blob size does not match this model");
    StateReader r(b.data() + body);
    for (auto* L : stateful_) L->load(r, h.pos);
    pos_ = h.pos;
    last_T_ = 0;
}

}  // namespace strata
