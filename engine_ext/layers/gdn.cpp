#include "layers/gdn.h"

#include <algorithm>

#include <cmath>
#include <cstring>

#include "window_model.h"

namespace strata {

GdnLayer::GdnLayer(const LayerEnv& env, WeightLoader& w, int l, bool lazy_fold) : env_(env), lazy_(lazy_fold) {
    const ModelSpec& s = env.spec;
    key_dim_ = s.lin_nk * s.lin_dk;
    value_dim_ = s.lin_nv * s.lin_dv;
    conv_dim_ = 2 * key_dim_ + value_dim_;
    if (s.lin_nk <= 0 || s.lin_nv % s.lin_nk != 0)
        throw ModelError("linear_num_value_heads must be a multiple of linear_num_key_heads");
    if (s.lin_dv > 512 || s.lin_dk <= 0 || s.lin_dv <= 0 || s.conv_k < 1)
        throw ModelError("unsupported linear attention head size");
    const int nv = s.lin_nv;
    if (s.gdn_fused) {
        qkvz_ = w.linear(layer_name(l, "linear_attn.in_proj_qkvz"), 2 * key_dim_ + 2 * value_dim_, s.hidden, false);
        ba_ = w.linear(layer_name(l, "linear_attn.in_proj_ba"), 2 * nv, s.hidden, false);
        // their outputs interleave per key-head group; run() reorders them (canonical_from_fused)
    } else {
        qkv_ = w.linear(layer_name(l, "linear_attn.in_proj_qkv"), conv_dim_, s.hidden, false);
        z_ = w.linear(layer_name(l, "linear_attn.in_proj_z"), value_dim_, s.hidden, false);
        // GGUF qwen3next files split qkvz by kind but keep b/a fused per key-head group
        ba_fused_ = w.source().has(layer_name(l, "linear_attn.in_proj_ba.weight"));
        if (ba_fused_) {
            ba_ = w.linear(layer_name(l, "linear_attn.in_proj_ba"), 2 * nv, s.hidden, false);
        } else {
            b_ = w.linear(layer_name(l, "linear_attn.in_proj_b"), nv, s.hidden, false);
            a_ = w.linear(layer_name(l, "linear_attn.in_proj_a"), nv, s.hidden, false);
        }
        build_split_perm();
    }
    out_ = w.linear(layer_name(l, "linear_attn.out_proj"), s.hidden, value_dim_, false);
    conv_w_ = w.vec(layer_name(l, "linear_attn.conv1d.weight"), int64_t(conv_dim_) * s.conv_k);
    if (w.source().has(layer_name(l, "linear_attn.A"))) {
        A_ = w.vec(layer_name(l, "linear_attn.A"), nv);  // GGUF stores A = -exp(A_log) itself
    } else {
        std::vector<float> alog = w.vec(layer_name(l, "linear_attn.A_log"), nv);
        A_.resize(nv);
        for (int h = 0; h < nv; ++h) A_[h] = -std::exp(alog[h]);
    }
    dt_bias_ = w.vec(layer_name(l, "linear_attn.dt_bias"), nv);
    norm_w_ = w.vec(layer_name(l, "linear_attn.norm.weight"), s.lin_dv);
    if (s.lin_v_tiled) untile_value_heads();
    S_.assign(size_t(nv) * s.lin_dk * s.lin_dv, 0.f);
    hist_.assign(size_t(s.conv_k - 1) * conv_dim_, 0.f);
    S_scr_.assign(S_.size(), 0.f);
    hist_scr_.assign(hist_.size(), 0.f);
    Backend& be = env.be;
    auto bytes = [](const std::vector<float>& v) { return v.size() * sizeof(float); };
    dev_conv_w_.set(be, conv_w_.data(), bytes(conv_w_), true);
    dev_A_.set(be, A_.data(), bytes(A_), true);
    dev_dt_.set(be, dt_bias_.data(), bytes(dt_bias_), true);
    dev_norm_.set(be, norm_w_.data(), bytes(norm_w_), true);
    dev_S_.set(be, S_.data(), bytes(S_), true);
    dev_hist_.set(be, hist_.data(), bytes(hist_), true);
    dev_S_scr_.set(be, S_scr_.data(), bytes(S_scr_), true);
    dev_hist_scr_.set(be, hist_scr_.data(), bytes(hist_scr_), true);
}

// The fused projections' interleaved [q_g k_g v_g z_g] [b_g a_g] groups into canonical
// [q k v z b a] rows: six strided copies (perm_ spelled out per block) in one batch, so they run
// where the activations are (one dispatch on the GPU).
void GdnLayer::canonical_from_fused(const float* raw, float* P, int n) {
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    const int nk = s.lin_nk, dk = s.lin_dk, r = s.lin_nv / s.lin_nk, dv = s.lin_dv;
    const int W1 = 2 * key_dim_ + 2 * value_dim_, W = W1 + 2 * s.lin_nv;
    const int gw = 2 * dk + 2 * r * dv;
    be.copy_many({{{raw, W, gw}, {P, W, dk}, n, nk, dk},
                  {{raw + dk, W, gw}, {P + key_dim_, W, dk}, n, nk, dk},
                  {{raw + 2 * dk, W, gw}, {P + 2 * key_dim_, W, r * dv}, n, nk, r * dv},
                  {{raw + 2 * dk + r * dv, W, gw}, {P + 2 * key_dim_ + value_dim_, W, r * dv}, n, nk, r * dv},
                  {{raw + W1, W, 2 * r}, {P + W1, W, r}, n, nk, r},
                  {{raw + W1 + r, W, 2 * r}, {P + W1 + s.lin_nv, W, r}, n, nk, r}});
}

void GdnLayer::advance_history(const float* hist, const float* x, int ldx, int n, float* hist_out) {
    const int K1 = env_.spec.conv_k - 1, cd = conv_dim_;
    if (K1 <= 0) return;
    const int from_hist = std::max(0, K1 - n);  // rows of the new history that come from the old one
    // the last K1 rows of [hist; x] into another array, in one batch (one dispatch on the GPU)
    std::vector<Backend::CopyJob> jobs;
    if (from_hist) jobs.push_back({{hist + size_t(n) * cd, cd, 0}, {hist_out, cd, 0}, from_hist, 1, cd});
    if (K1 > from_hist)
        jobs.push_back({{x + size_t(n - (K1 - from_hist)) * ldx, ldx, 0}, {hist_out + size_t(from_hist) * cd, cd, 0},
                        K1 - from_hist, 1, cd});
    env_.be.copy_many(jobs);
}

// Value head h = g*r + i (grouped by key head g, the canonical order) sits at g + i*nk in a
// tiled file (qwen35moe GGUF: the v0 of every key head, then the v1s ...).
int GdnLayer::file_head(int h) const {
    const ModelSpec& s = env_.spec;
    if (!s.lin_v_tiled) return h;
    const int r = s.lin_nv / s.lin_nk;
    return (h % r) * s.lin_nk + h / r;
}

// Split projections land in [qkv | z | b a] in file order; perm_ (empty when that already is
// canonical) picks the canonical column from it.
void GdnLayer::build_split_perm() {
    const ModelSpec& s = env_.spec;
    if (!ba_fused_ && !s.lin_v_tiled) return;
    const int nv = s.lin_nv, r = s.lin_nv / s.lin_nk, dv = s.lin_dv;
    const int W1 = conv_dim_ + value_dim_;
    perm_.resize(W1 + 2 * nv);
    for (int c = 0; c < int(perm_.size()); ++c) perm_[c] = c;
    for (int h = 0; h < nv; ++h) {
        const int f = file_head(h);
        for (int j = 0; j < dv; ++j) {
            perm_[2 * key_dim_ + h * dv + j] = 2 * key_dim_ + f * dv + j;
            perm_[conv_dim_ + h * dv + j] = conv_dim_ + f * dv + j;
        }
        if (ba_fused_) {
            const int g = h / r, i = h % r;
            perm_[W1 + h] = W1 + g * 2 * r + i;
            perm_[W1 + nv + h] = W1 + g * 2 * r + r + i;
        } else {
            perm_[W1 + h] = W1 + f;
            perm_[W1 + nv + h] = W1 + nv + f;
        }
    }
    build_perm_copies();
}

// perm_ spelled as a few strided copies: q and k as they are; v and z whole, or (tiled) for each
// i the value heads g*r + i of every key head g from the file's contiguous run i*nk..; b and a
// from the fused [b(g) a(g)] pairs per key head, or (tiled) like the value heads. Checked against
// perm_ column by column; any mismatch leaves perm_copies_ empty (the host permutation).
void GdnLayer::build_perm_copies() {
    const ModelSpec& s = env_.spec;
    perm_copies_.clear();
    if (perm_.empty()) return;
    const int nk = s.lin_nk, nv = s.lin_nv, r = s.lin_nv / s.lin_nk, dv = s.lin_dv;
    const int V = 2 * key_dim_, Z = conv_dim_, W1 = conv_dim_ + value_dim_;
    std::vector<PermCopy> c = {{0, 0, 0, 0, 1, 2 * key_dim_}};
    for (int base : {V, Z}) {
        if (!s.lin_v_tiled) {
            c.push_back({base, 0, base, 0, 1, value_dim_});
        } else {
            for (int i = 0; i < r; ++i) c.push_back({base + i * nk * dv, dv, base + i * dv, r * dv, nk, dv});
        }
    }
    for (int which = 0; which < 2; ++which) {  // b, then a
        const int dst = W1 + which * nv;
        if (ba_fused_) {
            c.push_back({W1 + which * r, 2 * r, dst, r, nk, r});
        } else if (s.lin_v_tiled) {
            for (int i = 0; i < r; ++i) c.push_back({dst + i * nk, 1, dst + i, r, nk, 1});
        } else {
            c.push_back({dst, 0, dst, 0, 1, nv});
        }
    }
    std::vector<int> got(perm_.size(), -1);
    for (const PermCopy& p : c)
        for (int h = 0; h < p.heads; ++h)
            for (int j = 0; j < p.dim; ++j) {
                const size_t d = size_t(p.dst) + size_t(h) * p.dhs + j;
                if (d >= got.size() || got[d] != -1) return;  // out of range or written twice
                got[d] = p.src + h * p.shs + j;
            }
    if (got != perm_) return;
    perm_copies_ = std::move(c);
}

// Per-head parameters of a tiled file into canonical order (the projections are permuted per
// run by perm_, the output projection's input by tile_output).
void GdnLayer::untile_value_heads() {
    const ModelSpec& s = env_.spec;
    const int nv = s.lin_nv, dv = s.lin_dv, K = s.conv_k;
    std::vector<float> A(nv), dt(nv), conv(conv_w_);
    for (int h = 0; h < nv; ++h) {
        const int f = file_head(h);
        A[h] = A_[f];
        dt[h] = dt_bias_[f];
        for (int j = 0; j < dv; ++j)
            std::memcpy(conv.data() + size_t(2 * key_dim_ + h * dv + j) * K,
                        conv_w_.data() + size_t(2 * key_dim_ + f * dv + j) * K, sizeof(float) * K);
    }
    A_.swap(A);
    dt_bias_.swap(dt);
    conv_w_.swap(conv);
}

void GdnLayer::begin_window(int T, bool keep_rows) {
    T_ = T;
    keep_rows_ = keep_rows;
    if (!keep_rows) return;
    const int nv = env_.spec.lin_nv;
    pre_.resize(size_t(T) * conv_dim_);
    qs_.resize(size_t(T) * key_dim_);
    ks_.resize(size_t(T) * key_dim_);
    vs_.resize(size_t(T) * value_dim_);
    dec_.resize(size_t(T) * nv);
    beta_.resize(size_t(T) * nv);
    // the per-row inputs live where the ops run; a moved array is re-attached (contents unused)
    Backend& be = env_.be;
    dev_pre_.set(be, pre_.data(), pre_.size() * sizeof(float), false);
    dev_q_.set(be, qs_.data(), qs_.size() * sizeof(float), false);
    dev_k_.set(be, ks_.data(), ks_.size() * sizeof(float), false);
    dev_v_.set(be, vs_.data(), vs_.size() * sizeof(float), false);
    dev_dec_.set(be, dec_.data(), dec_.size() * sizeof(float), false);
    dev_beta_.set(be, beta_.data(), beta_.size() * sizeof(float), false);
}

void GdnLayer::run(const float* h, int n, int64_t /*p0*/, int row0, float* out) {
    const bool first = row0 == 0;
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    const int nk = s.lin_nk, nv = s.lin_nv, dk = s.lin_dk, dv = s.lin_dv, K = s.conv_k;
    const int W = 2 * key_dim_ + 2 * value_dim_ + 2 * nv;  // canonical [q k v z b a]
    ScratchScope sc(env_.scratch);
    float* P = sc.alloc<float>(size_t(n) * W);
    if (s.gdn_fused) {
        float* raw = sc.alloc<float>(size_t(n) * W);
        int W1 = 2 * key_dim_ + 2 * value_dim_;
        be.matmul({{h, n, s.hidden, qkvz_.w, nullptr, raw, W}, {h, n, s.hidden, ba_.w, nullptr, raw + W1, W}});
        canonical_from_fused(raw, P, n);
    } else {
        float* raw = perm_.empty() ? nullptr : sc.alloc<float>(size_t(n) * W);
        float* dst = perm_.empty() ? P : raw;
        std::vector<MatJob> jobs = {{h, n, s.hidden, qkv_.w, nullptr, dst, W},
                                    {h, n, s.hidden, z_.w, nullptr, dst + conv_dim_, W}};
        if (ba_fused_) {
            jobs.push_back({h, n, s.hidden, ba_.w, nullptr, dst + conv_dim_ + value_dim_, W});
        } else {
            jobs.push_back({h, n, s.hidden, b_.w, nullptr, dst + conv_dim_ + value_dim_, W});
            jobs.push_back({h, n, s.hidden, a_.w, nullptr, dst + conv_dim_ + value_dim_ + nv, W});
        }
        be.matmul(jobs);
        if (!perm_copies_.empty()) {  // GGUF head orders: strided copies where the data is
            std::vector<Backend::CopyJob> cj;
            cj.reserve(perm_copies_.size());
            for (const PermCopy& p : perm_copies_)
                cj.push_back({{raw + p.src, W, p.shs}, {P + p.dst, W, p.dhs}, n, p.heads, p.dim});
            be.copy_many(cj);
        } else if (!perm_.empty()) {  // a layout the copies do not cover: a host permutation
            be.to_host(raw, sizeof(float) * size_t(n) * W);
            for (int t = 0; t < n; ++t)
                for (int c = 0; c < W; ++c) P[size_t(t) * W + c] = raw[size_t(t) * W + perm_[c]];
            be.from_host(P, sizeof(float) * size_t(n) * W);
        }
    }
    const std::vector<float>& hist = first ? hist_ : hist_scr_;
    float* C = sc.alloc<float>(size_t(n) * conv_dim_);
    ConvArgs ca;
    ca.x = P;
    ca.ldx = W;
    ca.hist = hist.data();
    ca.w = conv_w_.data();
    ca.n = n;
    ca.channels = conv_dim_;
    ca.K = K;
    ca.out = C;
    if (keep_rows_) ca.x_rows = pre_.data() + size_t(row0) * conv_dim_;  // the input rows kept for the fold
    // step inputs: straight into the kept per-row buffers when the window keeps them
    float *q, *k, *v, *de, *be_;
    if (keep_rows_) {
        q = qs_.data() + size_t(row0) * key_dim_;
        k = ks_.data() + size_t(row0) * key_dim_;
        v = vs_.data() + size_t(row0) * value_dim_;
        de = dec_.data() + size_t(row0) * nv;
        be_ = beta_.data() + size_t(row0) * nv;
    } else {
        q = sc.alloc<float>(size_t(n) * key_dim_);
        k = sc.alloc<float>(size_t(n) * key_dim_);
        v = sc.alloc<float>(size_t(n) * value_dim_);
        de = sc.alloc<float>(size_t(n) * nv);
        be_ = sc.alloc<float>(size_t(n) * nv);
    }
    GdnInputsArgs gi;
    gi.conv = C;
    gi.b = P + conv_dim_ + value_dim_;
    gi.a = gi.b + nv;
    gi.ld_ba = W;
    gi.A = A_.data();
    gi.dt_bias = dt_bias_.data();
    gi.n = n;
    gi.n_k = nk;
    gi.n_v = nv;
    gi.d_k = dk;
    gi.d_v = dv;
    gi.q = q;
    gi.k = k;
    gi.v = v;
    gi.decay = de;
    gi.beta = be_;
    float* O = sc.alloc<float>(size_t(n) * value_dim_);
    GdnStepArgs st;
    st.S0 = first ? S_.data() : S_scr_.data();
    st.S = S_scr_.data();
    st.q = q;
    st.k = k;
    st.v = v;
    st.decay = de;
    st.beta = be_;
    st.n = n;
    st.n_k = nk;
    st.n_v = nv;
    st.d_k = dk;
    st.d_v = dv;
    st.out = O;
    // the scratch history advances over these rows (the last K-1 of [history; rows]) after the
    // conv, which reads the history
    if (keep_rows_) {  // the fold reads the step inputs later
        be.causal_conv(ca);
        advance_history(hist.data(), P, W, n, hist_scr_.data());
        be.gdn_inputs(gi);
        be.gdn_step(st);
    } else {  // the conv output and step inputs are scratch: a backend may fuse the three
        be.conv_gdn_inputs_step(ca, gi, st);
        advance_history(hist.data(), P, W, n, hist_scr_.data());
    }
    be.gated_rmsnorm({O, value_dim_, dv}, {P + conv_dim_, W, dv}, n, nv, dv, norm_w_.data(), s.eps);
    const float* o_in = O;
    if (s.lin_v_tiled) {  // the output projection's input columns are in the file's head order
        float* Of = sc.alloc<float>(size_t(n) * value_dim_);
        for (int hh = 0; hh < nv; ++hh)
            be.copy({O + size_t(hh) * dv, value_dim_, 0}, {Of + size_t(file_head(hh)) * dv, value_dim_, 0}, n, 1, dv);
        o_in = Of;
    }
    be.matmul({{o_in, n, value_dim_, out_.w, nullptr, out, s.hidden}});
}

void GdnLayer::fold(int keep) {
    const ModelSpec& s = env_.spec;
    GdnStepArgs st;
    st.S0 = S_.data();
    st.S = S_.data();
    st.q = qs_.data();
    st.k = ks_.data();
    st.v = vs_.data();
    st.decay = dec_.data();
    st.beta = beta_.data();
    st.n = keep;
    st.n_k = s.lin_nk;
    st.n_v = s.lin_nv;
    st.d_k = s.lin_dk;
    st.d_v = s.lin_dv;
    st.out = nullptr;
    env_.be.gdn_step(st);
    // the new history straight into the scratch one, which becomes the history (the next run
    // rewrites the scratch one before reading it)
    advance_history(hist_.data(), pre_.data(), conv_dim_, keep, hist_scr_.data());
    std::swap(hist_, hist_scr_);
}

bool GdnLayer::commit(int keep) {
    if (keep == T_) {
        std::swap(S_, S_scr_);
        std::swap(hist_, hist_scr_);
        return false;
    }
    if (!keep_rows_) throw WindowError("commit: this window kept no per-row GDN inputs (internal error)");
    if (lazy_) {
        pending_ = keep;
        return false;
    }
    fold(keep);
    return true;
}

bool GdnLayer::flush() {
    if (pending_ <= 0) return false;
    int k = pending_;
    pending_ = 0;
    fold(k);
    return true;
}

size_t GdnLayer::weight_bytes() const {
    size_t b = qkvz_.bytes() + ba_.bytes() + qkv_.bytes() + z_.bytes() + b_.bytes() + a_.bytes() + out_.bytes();
    return b + (conv_w_.size() + A_.size() + dt_bias_.size() + norm_w_.size()) * sizeof(float);
}

size_t GdnLayer::state_bytes(int64_t) const { return (S_.size() + hist_.size()) * sizeof(float); }

void GdnLayer::save(StateWriter& w, int64_t) const {
    env_.be.to_host(S_.data(), S_.size() * sizeof(float));
    env_.be.to_host(hist_.data(), hist_.size() * sizeof(float));
    w.floats(S_.data(), S_.size());
    w.floats(hist_.data(), hist_.size());
}

void GdnLayer::load(StateReader& r, int64_t) {
    r.floats(S_.data(), S_.size());
    r.floats(hist_.data(), hist_.size());
    env_.be.from_host(S_.data(), S_.size() * sizeof(float));
    env_.be.from_host(hist_.data(), hist_.size() * sizeof(float));
    pending_ = 0;
}

void GdnLayer::reset() {
    std::fill(S_.begin(), S_.end(), 0.f);
    std::fill(hist_.begin(), hist_.end(), 0.f);
    env_.be.from_host(S_.data(), S_.size() * sizeof(float));
    env_.be.from_host(hist_.data(), hist_.size() * sizeof(float));
    pending_ = 0;
}

}  // namespace strata
