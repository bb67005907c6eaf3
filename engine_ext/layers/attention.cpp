#include "layers/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata {

AttentionLayer::AttentionLayer(const LayerEnv& env, WeightLoader& w, int l, const std::vector<float>& inv_freq)
    : env_(env), inv_freq_(inv_freq) {
    const ModelSpec& s = env.spec;
    int qrows = s.n_heads * s.head_dim * (s.attn_gated ? 2 : 1);
    q_ = w.linear(layer_name(l, "self_attn.q_proj"), qrows, s.hidden, s.attn_bias);
    k_ = w.linear(layer_name(l, "self_attn.k_proj"), s.n_kv * s.head_dim, s.hidden, s.attn_bias);
    v_ = w.linear(layer_name(l, "self_attn.v_proj"), s.n_kv * s.head_dim, s.hidden, s.attn_bias);
    o_ = w.linear(layer_name(l, "self_attn.o_proj"), s.hidden, s.n_heads * s.head_dim, s.attn_bias);
    qn_ = w.norm(layer_name(l, "self_attn.q_norm.weight"), s.head_dim);
    kn_ = w.norm(layer_name(l, "self_attn.k_norm.weight"), s.head_dim);
    qn_dev_.set(env.be, qn_.data(), qn_.size() * sizeof(float), true);
    kn_dev_.set(env.be, kn_.data(), kn_.size() * sizeof(float), true);
}

void AttentionLayer::ensure_cells(int64_t need) {
    if (need <= cells_) return;
    int64_t cap = std::max<int64_t>(need, std::min<int64_t>(env_.ctx, std::max<int64_t>(256, cells_ * 2)));
    size_t w = size_t(env_.spec.n_kv) * env_.spec.head_dim;
    // the committed cells move with the arrays: bring them home, then attach the new arrays
    env_.be.to_host(kc_.data(), kc_.size() * sizeof(float));
    env_.be.to_host(vc_.data(), vc_.size() * sizeof(float));
    kc_.resize(size_t(cap) * w);
    vc_.resize(size_t(cap) * w);
    cells_ = cap;
    kc_dev_.set(env_.be, kc_.data(), kc_.size() * sizeof(float), true);
    vc_dev_.set(env_.be, vc_.data(), vc_.size() * sizeof(float), true);
}

void AttentionLayer::run(const float* h, int n, int64_t p0, int /*row0*/, float* out) {
    const ModelSpec& s = env_.spec;
    Backend& be = env_.be;
    const int hd = s.head_dim, nh = s.n_heads, nkv = s.n_kv;
    const int qw = nh * hd * (s.attn_gated ? 2 : 1), kw = nkv * hd;
    const int W = qw + 2 * kw;
    ScratchScope sc(env_.scratch);
    float* P = sc.alloc<float>(size_t(n) * W);
    be.matmul({{h, n, s.hidden, q_.w, q_.b(), P, W},
               {h, n, s.hidden, k_.w, k_.b(), P + qw, W},
               {h, n, s.hidden, v_.w, v_.b(), P + qw + kw, W}});
    ensure_cells(p0 + n);
    const int half = s.rot_dim / 2;
    const int qstride = s.attn_gated ? 2 * hd : hd;  // gated q_proj: [q_h | gate_h] per head
    float* Q = sc.alloc<float>(size_t(n) * nh * hd);
    float* G = s.attn_gated ? sc.alloc<float>(size_t(n) * nh * hd) : nullptr;
    be.rmsnorm_rotary({P, W, qstride}, {Q, nh * hd, hd}, n, nh, hd, qn_.data(), s.eps, p0, inv_freq_.data(), half);
    if (G) be.copy({P + hd, W, 2 * hd}, {G, nh * hd, hd}, n, nh, hd);
    float* kc = kc_.data() + size_t(p0) * kw;
    be.rmsnorm_rotary({P + qw, W, hd}, {kc, kw, hd}, n, nkv, hd, kn_.data(), s.eps, p0, inv_freq_.data(), half);
    be.copy({P + qw + kw, W, 0}, {vc_.data() + size_t(p0) * kw, kw, 0}, n, 1, kw);
    float* O = sc.alloc<float>(size_t(n) * nh * hd);
    AttentionArgs a;
    a.q = Q;
    a.gate = G;
    a.k_cells = kc_.data();
    a.v_cells = vc_.data();
    a.n = n;
    a.n_heads = nh;
    a.n_kv = nkv;
    a.head_dim = hd;
    a.p0 = p0;
    a.scale = 1.0f / std::sqrt(float(hd));
    a.out = O;
    be.attention(a);
    be.matmul({{O, n, nh * hd, o_.w, o_.b(), out, s.hidden}});
}

size_t AttentionLayer::weight_bytes() const {
    return q_.bytes() + k_.bytes() + v_.bytes() + o_.bytes() + (qn_.size() + kn_.size()) * sizeof(float);
}

size_t AttentionLayer::state_bytes(int64_t pos) const {
    return size_t(pos) * size_t(env_.spec.n_kv) * env_.spec.head_dim * 2 * sizeof(float);
}

void AttentionLayer::save(StateWriter& w, int64_t pos) const {
    if (pos <= 0) return;
    size_t kw = size_t(env_.spec.n_kv) * env_.spec.head_dim;
    env_.be.to_host(kc_.data(), size_t(pos) * kw * sizeof(float));
    env_.be.to_host(vc_.data(), size_t(pos) * kw * sizeof(float));
    w.floats(kc_.data(), size_t(pos) * kw);
    w.floats(vc_.data(), size_t(pos) * kw);
}

void AttentionLayer::load(StateReader& r, int64_t pos) {
    if (pos <= 0) return;
    ensure_cells(pos);
    size_t kw = size_t(env_.spec.n_kv) * env_.spec.head_dim;
    r.floats(kc_.data(), size_t(pos) * kw);
    r.floats(vc_.data(), size_t(pos) * kw);
    env_.be.from_host(kc_.data(), size_t(pos) * kw * sizeof(float));
    env_.be.from_host(vc_.data(), size_t(pos) * kw * sizeof(float));
}

}  // namespace strata
