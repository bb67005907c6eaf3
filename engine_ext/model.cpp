#include "model.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "finite.h"
#include "kernels_cpu.h"
#include "routing.h"

namespace strata {

namespace {

constexpr int kMaxDraftWindow = 16;  // decode windows (root + drafts); longer runs are prefill
constexpr int kChunk = 64;  // rows per pass through the layers; windows up to this fit in one

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

double now_us() {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

int dtype_size(const std::string& d) {
    if (d == "F32") return 4;
    if (d == "BF16" || d == "F16") return 2;
    return 0;
}

std::string lname(int l, const char* rest) { return "layers." + std::to_string(l) + "." + rest; }

// softplus as torch defines it (beta 1, threshold 20)
inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// WeightSource

WeightSource::WeightSource(const std::vector<TensorRef>& tensors) : tensors_(tensors) {
    for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!index_.emplace(tensors_[i].name, i).second)
            throw ModelError("tensor " + tensors_[i].name + " is listed twice (" + tensors_[i].path + ")");
    }
}

WeightSource::~WeightSource() {
    for (auto& kv : maps_)
        if (kv.second.ptr && kv.second.size) munmap(kv.second.ptr, kv.second.size);
}

const TensorRef& WeightSource::ref(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw ModelError("missing tensor " + name);
    return tensors_[it->second];
}

const uint8_t* WeightSource::bytes(const TensorRef& t, size_t nbytes) {
    auto it = maps_.find(t.path);
    if (it == maps_.end()) {
        int fd = ::open(t.path.c_str(), O_RDONLY);
        if (fd < 0) throw ModelError("cannot open " + t.path + ": " + std::strerror(errno));
        struct stat st;
        if (fstat(fd, &st) != 0) {
            ::close(fd);
            throw ModelError("cannot stat " + t.path);
        }
        Mapping m;
        m.size = size_t(st.st_size);
        if (m.size > 0) {
            m.ptr = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m.ptr == MAP_FAILED) {
                ::close(fd);
                throw ModelError("cannot map " + t.path + ": " + std::strerror(errno));
            }
        }
        ::close(fd);
        it = maps_.emplace(t.path, m).first;
    }
    const Mapping& m = it->second;
    if (t.offset < 0 || uint64_t(t.offset) + nbytes > m.size)
        throw ModelError(t.path + ": tensor " + t.name + " runs past the end of the file (truncated?)");
    return static_cast<const uint8_t*>(m.ptr) + t.offset;
}

void WeightSource::check_finite(const TensorRef& t, const uint8_t* p, int64_t n) const {
    const DType dt = t.dtype == "F32" ? DType::F32 : t.dtype == "BF16" ? DType::BF16 : DType::F16;
    const int64_t at = first_non_finite(p, n, dt);
    if (at >= 0)
        throw ModelError(t.path + ": tensor " + t.name + " holds NaN or Inf values (first at element " +
                         std::to_string(at) + "); the checkpoint is damaged");
}

MatView WeightSource::mat(const std::string& name, int rows, int cols) {
    const TensorRef& t = ref(name);
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    bool ok = n == int64_t(rows) * cols && !t.shape.empty() && t.shape[0] == rows;
    if (!ok)
        throw ModelError(t.path + ": tensor " + name + " has shape " + shape_str(t.shape) +
                         ", expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    int ds = dtype_size(t.dtype);
    if (!ds) throw ModelError(t.path + ": tensor " + name + " has unsupported dtype " + t.dtype);
    const uint8_t* p = bytes(t, size_t(n) * ds);
    check_finite(t, p, n);
    MatView v;
    v.rows = rows;
    v.cols = cols;
    // owned copies are 64-byte aligned (whole cache lines per vector load)
    auto alloc = [&](size_t nbytes) {
        owned_.emplace_back(nbytes + 64);
        uint8_t* q = owned_.back().data();
        return q + (64 - reinterpret_cast<uintptr_t>(q) % 64) % 64;
    };
    if (t.dtype == "F16") {
        float* dst = reinterpret_cast<float*>(alloc(size_t(n) * 4));
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        v.dtype = DType::F32;
        v.data = dst;
        return v;
    }
    v.dtype = t.dtype == "F32" ? DType::F32 : DType::BF16;
    if (reinterpret_cast<uintptr_t>(p) % 64 != 0) {
        // Misaligned rows make every vector load a split load (~15% slower kernels): keep an
        // aligned copy. Checkpoints written by strata (devmodel, packs) are aligned already.
        uint8_t* q = alloc(size_t(n) * ds);
        std::memcpy(q, p, size_t(n) * ds);
        p = q;
    }
    v.data = p;
    return v;
}

std::vector<float> WeightSource::vec(const std::string& name, int64_t n) {
    const TensorRef& t = ref(name);
    int64_t m = 1;
    for (auto d : t.shape) m *= d;
    if (m != n)
        throw ModelError(t.path + ": tensor " + name + " has shape " + shape_str(t.shape) + ", expected " +
                         std::to_string(n) + " elements");
    int ds = dtype_size(t.dtype);
    if (!ds) throw ModelError(t.path + ": tensor " + name + " has unsupported dtype " + t.dtype);
    const uint8_t* p = bytes(t, size_t(n) * ds);
    check_finite(t, p, n);
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) {
        if (t.dtype == "F32") {
            std::memcpy(&out[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            out[i] = t.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// ResidentExpertStore

ResidentExpertStore::ResidentExpertStore(std::shared_ptr<WeightSource> src, const ModelSpec& s)
    : src_(std::move(src)) {
    layers_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
        if (!s.layer_moe[l]) continue;
        layers_[l].resize(s.n_experts);
        for (int e = 0; e < s.n_experts; ++e) {
            std::string p = "layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
            ExpertView& v = layers_[l][e];
            v.gate = src_->mat(p + "gate_proj.weight", s.moe_inter, s.hidden);
            v.up = src_->mat(p + "up_proj.weight", s.moe_inter, s.hidden);
            v.down = src_->mat(p + "down_proj.weight", s.hidden, s.moe_inter);
        }
    }
}

void ResidentExpertStore::acquire_layer(int layer, const std::vector<int>& experts,
                                        const std::vector<int>&, std::vector<ExpertView>& out) {
    out.clear();
    const auto& L = layers_.at(layer);
    for (int e : experts) out.push_back(L.at(e));
}

// ---------------------------------------------------------------------------------------------
// Engine: construction

Engine::Engine(const ModelSpec& spec, const std::vector<TensorRef>& tensors,
               std::shared_ptr<ExpertStore> store, const EngineOptions& opt)
    : spec_(spec),
      opt_(opt),
      src_(std::make_shared<WeightSource>(tensors)),
      be_(make_backend(opt.backend, opt.threads > 0 ? opt.threads
                                                  : std::max(1, int(std::thread::hardware_concurrency())))) {
    const ModelSpec& s = spec_;
    if (s.vocab <= 0 || s.hidden <= 0 || s.n_layers <= 0 || int(s.layer_linear.size()) != s.n_layers ||
        int(s.layer_moe.size()) != s.n_layers)
        throw ModelError("model spec is inconsistent (vocab/hidden/layers)");
    auto norm = [&](const std::string& name, int n) {
        std::vector<float> w = src_->vec(name, n);
        if (s.norm_plus_one)
            for (auto& x : w) x = 1.0f + x;
        return w;
    };
    auto linear = [&](const std::string& base, int rows, int cols, bool bias) {
        Linear L;
        L.w = src_->mat(base + ".weight", rows, cols);
        if (bias) L.bias = src_->vec(base + ".bias", rows);
        return L;
    };
    embed_ = src_->mat("embed_tokens.weight", s.vocab, s.hidden);
    head_ = s.tie ? embed_ : src_->mat("lm_head.weight", s.vocab, s.hidden);
    final_norm_ = norm("norm.weight", s.hidden);
    key_dim_ = s.lin_nk * s.lin_dk;
    value_dim_ = s.lin_nv * s.lin_dv;
    conv_dim_ = 2 * key_dim_ + value_dim_;
    layers_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
        Layer& L = layers_[l];
        L.linear = s.layer_linear[l] != 0;
        L.moe = s.layer_moe[l] != 0;
        L.in_norm = norm(lname(l, "input_layernorm.weight"), s.hidden);
        L.post_norm = norm(lname(l, "post_attention_layernorm.weight"), s.hidden);
        if (L.linear) {
            if (s.lin_nk <= 0 || s.lin_nv % s.lin_nk != 0)
                throw ModelError("linear_num_value_heads must be a multiple of linear_num_key_heads");
            if (s.lin_dv > 512 || s.lin_dk <= 0 || s.lin_dv <= 0 || s.conv_k < 1)
                throw ModelError("unsupported linear attention head size");
            GdnLayer& G = L.gdn;
            int nv = s.lin_nv, r = s.lin_nv / s.lin_nk;
            if (s.gdn_fused) {
                G.qkvz = linear(lname(l, "linear_attn.in_proj_qkvz"), 2 * key_dim_ + 2 * value_dim_, s.hidden, false);
                G.ba = linear(lname(l, "linear_attn.in_proj_ba"), 2 * nv, s.hidden, false);
                int W = 2 * key_dim_ + 2 * value_dim_;
                G.perm.resize(W + 2 * nv);
                int gw = 2 * s.lin_dk + 2 * r * s.lin_dv;
                for (int g = 0; g < s.lin_nk; ++g) {
                    for (int i = 0; i < s.lin_dk; ++i) {
                        G.perm[g * s.lin_dk + i] = g * gw + i;
                        G.perm[key_dim_ + g * s.lin_dk + i] = g * gw + s.lin_dk + i;
                    }
                    for (int j = 0; j < r * s.lin_dv; ++j) {
                        G.perm[2 * key_dim_ + g * r * s.lin_dv + j] = g * gw + 2 * s.lin_dk + j;
                        G.perm[2 * key_dim_ + value_dim_ + g * r * s.lin_dv + j] =
                            g * gw + 2 * s.lin_dk + r * s.lin_dv + j;
                    }
                    for (int i = 0; i < r; ++i) {
                        G.perm[W + g * r + i] = W + g * 2 * r + i;
                        G.perm[W + nv + g * r + i] = W + g * 2 * r + r + i;
                    }
                }
            } else {
                G.qkv = linear(lname(l, "linear_attn.in_proj_qkv"), conv_dim_, s.hidden, false);
                G.z = linear(lname(l, "linear_attn.in_proj_z"), value_dim_, s.hidden, false);
                G.b = linear(lname(l, "linear_attn.in_proj_b"), nv, s.hidden, false);
                G.a = linear(lname(l, "linear_attn.in_proj_a"), nv, s.hidden, false);
            }
            G.out = linear(lname(l, "linear_attn.out_proj"), s.hidden, value_dim_, false);
            G.conv_w = src_->vec(lname(l, "linear_attn.conv1d.weight"), int64_t(conv_dim_) * s.conv_k);
            std::vector<float> alog = src_->vec(lname(l, "linear_attn.A_log"), nv);
            G.A.resize(nv);
            for (int h = 0; h < nv; ++h) G.A[h] = -std::exp(alog[h]);
            G.dt_bias = src_->vec(lname(l, "linear_attn.dt_bias"), nv);
            G.norm_w = src_->vec(lname(l, "linear_attn.norm.weight"), s.lin_dv);
            G.S.assign(size_t(nv) * s.lin_dk * s.lin_dv, 0.f);
            G.hist.assign(size_t(s.conv_k - 1) * conv_dim_, 0.f);
            G.S_scr.assign(G.S.size(), 0.f);
            G.hist_scr.assign(G.hist.size(), 0.f);
        } else {
            AttnLayer& A = L.attn;
            int qrows = s.n_heads * s.head_dim * (s.attn_gated ? 2 : 1);
            A.q = linear(lname(l, "self_attn.q_proj"), qrows, s.hidden, s.attn_bias);
            A.k = linear(lname(l, "self_attn.k_proj"), s.n_kv * s.head_dim, s.hidden, s.attn_bias);
            A.v = linear(lname(l, "self_attn.v_proj"), s.n_kv * s.head_dim, s.hidden, s.attn_bias);
            A.o = linear(lname(l, "self_attn.o_proj"), s.hidden, s.n_heads * s.head_dim, s.attn_bias);
            A.qn = norm(lname(l, "self_attn.q_norm.weight"), s.head_dim);
            A.kn = norm(lname(l, "self_attn.k_norm.weight"), s.head_dim);
        }
        if (L.moe) {
            L.moe_index = n_moe_layers_++;
            L.router = linear(lname(l, "mlp.gate"), s.n_experts, s.hidden, false);
            if (s.shared_inter > 0) {
                L.has_shared = true;
                L.mlp.gate = linear(lname(l, "mlp.shared_expert.gate_proj"), s.shared_inter, s.hidden, false);
                L.mlp.up = linear(lname(l, "mlp.shared_expert.up_proj"), s.shared_inter, s.hidden, false);
                L.mlp.down = linear(lname(l, "mlp.shared_expert.down_proj"), s.hidden, s.shared_inter, false);
                L.shared_gate = linear(lname(l, "mlp.shared_expert_gate"), 1, s.hidden, false);
            }
        } else {
            L.mlp.gate = linear(lname(l, "mlp.gate_proj"), s.inter, s.hidden, false);
            L.mlp.up = linear(lname(l, "mlp.up_proj"), s.inter, s.hidden, false);
            L.mlp.down = linear(lname(l, "mlp.down_proj"), s.hidden, s.inter, false);
        }
    }
    if (n_moe_layers_ > 0 && (s.top_k <= 0 || s.top_k > s.n_experts))
        throw ModelError("num_experts_per_tok must be in 1..num_experts");
    store_ = store ? std::move(store) : std::make_shared<ResidentExpertStore>(src_, spec_);
    // rotary frequencies, computed in f32 like the reference
    int half = s.rot_dim / 2;
    inv_freq_.resize(half);
    for (int i = 0; i < half; ++i) {
        float e = float(2 * i) / float(s.rot_dim);
        inv_freq_[i] = 1.0f / std::pow(float(s.rope_theta), e);
    }
    ctx_ = opt.ctx > 0 ? opt.ctx : (s.max_pos > 0 ? s.max_pos : 32768);
    tele_.union_per_layer.assign(n_moe_layers_, 0);
}

Engine::~Engine() = default;

// ---------------------------------------------------------------------------------------------
// blocks

void Engine::ensure_cells(AttnLayer& A, int64_t need) {
    if (need <= A.cells) return;
    int64_t cap = std::max<int64_t>(need, std::min<int64_t>(ctx_, std::max<int64_t>(256, A.cells * 2)));
    size_t w = size_t(spec_.n_kv) * spec_.head_dim;
    A.kc.resize(size_t(cap) * w);
    A.vc.resize(size_t(cap) * w);
    A.cells = cap;
}

void Engine::attn_block(Layer& L, int /*li*/, const float* h, int n, int64_t p0, float* out) {
    const ModelSpec& s = spec_;
    AttnLayer& A = L.attn;
    int hd = s.head_dim, nh = s.n_heads, nkv = s.n_kv;
    int qw = nh * hd * (s.attn_gated ? 2 : 1), kw = nkv * hd;
    int W = qw + 2 * kw;
    std::vector<float> P(size_t(n) * W);
    std::vector<MatJob> jobs = {{h, n, s.hidden, A.q.w, A.q.b(), P.data(), W},
                                {h, n, s.hidden, A.k.w, A.k.b(), P.data() + qw, W},
                                {h, n, s.hidden, A.v.w, A.v.b(), P.data() + qw + kw, W}};
    be_->matmul(jobs);
    ensure_cells(A, p0 + n);
    int half = s.rot_dim / 2;
    std::vector<float> Q(size_t(n) * nh * hd), G(s.attn_gated ? size_t(n) * nh * hd : 0);
    std::vector<float> cs(half), sn(half), tmp(hd);
    auto rope = [&](float* x) {
        for (int i = 0; i < half; ++i) {
            float x1 = x[i], x2 = x[i + half];
            x[i] = x1 * cs[i] - x2 * sn[i];
            x[i + half] = x2 * cs[i] + x1 * sn[i];
        }
    };
    for (int t = 0; t < n; ++t) {
        int64_t p = p0 + t;
        for (int i = 0; i < half; ++i) {
            float f = float(p) * inv_freq_[i];
            cs[i] = std::cos(f);
            sn[i] = std::sin(f);
        }
        const float* row = P.data() + size_t(t) * W;
        for (int hh = 0; hh < nh; ++hh) {
            const float* src = s.attn_gated ? row + size_t(hh) * 2 * hd : row + size_t(hh) * hd;
            float* q = Q.data() + (size_t(t) * nh + hh) * hd;
            rmsnorm_row(src, A.qn.data(), s.eps, hd, q);
            rope(q);
            if (s.attn_gated) std::memcpy(G.data() + (size_t(t) * nh + hh) * hd, src + hd, sizeof(float) * hd);
        }
        float* kc = A.kc.data() + size_t(p) * kw;
        float* vc = A.vc.data() + size_t(p) * kw;
        for (int g = 0; g < nkv; ++g) {
            rmsnorm_row(row + qw + size_t(g) * hd, A.kn.data(), s.eps, hd, kc + size_t(g) * hd);
            rope(kc + size_t(g) * hd);
        }
        std::memcpy(vc, row + qw + kw, sizeof(float) * kw);
    }
    // attention per (row, head): one fixed order over cells, independent of the other rows
    std::vector<float> O(size_t(n) * nh * hd);
    float scale = 1.0f / std::sqrt(float(hd));
    int rep = nh / nkv;
    auto task = [&](int i) {
        int t = i / nh, hh = i % nh, g = hh / rep;
        int64_t p = p0 + t;
        const float* q = Q.data() + (size_t(t) * nh + hh) * hd;
        std::vector<float> sc(size_t(p) + 1);
        float mx = -INFINITY;
        for (int64_t j = 0; j <= p; ++j) {
            sc[j] = dot_f32(q, A.kc.data() + size_t(j) * kw + size_t(g) * hd, hd) * scale;
            mx = std::max(mx, sc[j]);
        }
        float sum = 0.f;
        for (int64_t j = 0; j <= p; ++j) {
            sc[j] = std::exp(sc[j] - mx);
            sum += sc[j];
        }
        float* o = O.data() + (size_t(t) * nh + hh) * hd;
        std::fill(o, o + hd, 0.f);
        for (int64_t j = 0; j <= p; ++j) {
            const float* v = A.vc.data() + size_t(j) * kw + size_t(g) * hd;
            float w = sc[j];
            for (int d = 0; d < hd; ++d) o[d] = STRATA_FMA(w, v[d], o[d]);
        }
        float inv = 1.0f / sum;
        for (int d = 0; d < hd; ++d) o[d] *= inv;
        if (s.attn_gated) {
            const float* gt = G.data() + (size_t(t) * nh + hh) * hd;
            for (int d = 0; d < hd; ++d) o[d] *= sigmoidf_(gt[d]);
        }
    };
    if (int64_t(n) * nh * (p0 + n) * hd > 20000)
        be_->parallel_for(n * nh, task);
    else
        for (int i = 0; i < n * nh; ++i) task(i);
    be_->matmul({{O.data(), n, nh * hd, A.o.w, A.o.b(), out, s.hidden}});
}

void Engine::gdn_step(const float* Sin, float* S, const float* q, const float* k, const float* v,
                      float decay, float beta, float* out) const {
    // Sin may equal S (in place); each element is read before it is written
    const int dk = spec_.lin_dk, dv = spec_.lin_dv;
    float mem[512], delta[512];
    for (int j = 0; j < dv; ++j) mem[j] = 0.f;
    for (int i = 0; i < dk; ++i) {
        const float* src = Sin + size_t(i) * dv;
        float* row = S + size_t(i) * dv;
        float ki = k[i];
        for (int j = 0; j < dv; ++j) {
            float sv = src[j] * decay;
            row[j] = sv;
            mem[j] = STRATA_FMA(sv, ki, mem[j]);
        }
    }
    for (int j = 0; j < dv; ++j) {
        delta[j] = (v[j] - mem[j]) * beta;
        out[j] = 0.f;
    }
    for (int i = 0; i < dk; ++i) {
        float* row = S + size_t(i) * dv;
        float ki = k[i], qi = q[i];
        for (int j = 0; j < dv; ++j) {
            row[j] = STRATA_FMA(ki, delta[j], row[j]);
            out[j] = STRATA_FMA(row[j], qi, out[j]);
        }
    }
}

void Engine::gdn_block(Layer& L, const float* h, int n, int row0, bool keep_rows, float* out) {
    // The committed state (S, hist) is only read here: the run's state goes to S_scr/hist_scr,
    // and commit() adopts it (keep == T) or folds the kept rows into the committed state.
    const bool first = row0 == 0;
    const ModelSpec& s = spec_;
    GdnLayer& G = L.gdn;
    const int nk = s.lin_nk, nv = s.lin_nv, dk = s.lin_dk, dv = s.lin_dv, K = s.conv_k;
    const int r = nv / nk;
    const int W = 2 * key_dim_ + 2 * value_dim_ + 2 * nv;  // canonical [q k v z b a]
    std::vector<float> P(size_t(n) * W);
    if (s.gdn_fused) {
        std::vector<float> raw(size_t(n) * W);
        int W1 = 2 * key_dim_ + 2 * value_dim_;
        be_->matmul({{h, n, s.hidden, G.qkvz.w, nullptr, raw.data(), W},
                            {h, n, s.hidden, G.ba.w, nullptr, raw.data() + W1, W}});
        for (int t = 0; t < n; ++t) {
            const float* src = raw.data() + size_t(t) * W;
            float* dst = P.data() + size_t(t) * W;
            for (int c = 0; c < W; ++c) dst[c] = src[G.perm[c]];
        }
    } else {
        be_->matmul({{h, n, s.hidden, G.qkv.w, nullptr, P.data(), W},
                            {h, n, s.hidden, G.z.w, nullptr, P.data() + conv_dim_, W},
                            {h, n, s.hidden, G.b.w, nullptr, P.data() + conv_dim_ + value_dim_, W},
                            {h, n, s.hidden, G.a.w, nullptr, P.data() + conv_dim_ + value_dim_ + nv, W}});
    }
    // causal depthwise conv over [history; rows] + SiLU
    const std::vector<float>& hist = first ? G.hist : G.hist_scr;
    std::vector<float> C(size_t(n) * conv_dim_);
    for (int t = 0; t < n; ++t) {
        for (int c = 0; c < conv_dim_; ++c) {
            const float* w = G.conv_w.data() + size_t(c) * K;
            float acc = 0.f;
            for (int j = 0; j < K; ++j) {
                int src = t - (K - 1) + j;
                float x = src >= 0 ? P[size_t(src) * W + c] : hist[size_t(K - 1 + src) * conv_dim_ + c];
                acc = STRATA_FMA(w[j], x, acc);
            }
            C[size_t(t) * conv_dim_ + c] = silu(acc);
        }
    }
    if (keep_rows)
        for (int t = 0; t < n; ++t)
            std::memcpy(G.pre.data() + size_t(row0 + t) * conv_dim_, P.data() + size_t(t) * W,
                        sizeof(float) * conv_dim_);
    // advance the history over these rows
    {
        std::vector<float> all(size_t(K - 1 + n) * conv_dim_);
        std::memcpy(all.data(), hist.data(), sizeof(float) * hist.size());
        for (int t = 0; t < n; ++t)
            std::memcpy(all.data() + size_t(K - 1 + t) * conv_dim_, P.data() + size_t(t) * W,
                        sizeof(float) * conv_dim_);
        std::memcpy(G.hist_scr.data(), all.data() + size_t(n) * conv_dim_, sizeof(float) * G.hist_scr.size());
    }
    // step inputs per row
    std::vector<float> qs(size_t(n) * key_dim_), ks(size_t(n) * key_dim_), vs(size_t(n) * value_dim_);
    std::vector<float> dec(size_t(n) * nv), bet(size_t(n) * nv);
    const float qscale = 1.0f / std::sqrt(float(dk));
    for (int t = 0; t < n; ++t) {
        const float* c = C.data() + size_t(t) * conv_dim_;
        for (int g = 0; g < nk; ++g) {
            const float* qi = c + size_t(g) * dk;
            const float* ki = c + key_dim_ + size_t(g) * dk;
            float sq = 0.f, sk = 0.f;
            for (int i = 0; i < dk; ++i) {
                sq += qi[i] * qi[i];
                sk += ki[i] * ki[i];
            }
            float iq = 1.0f / std::sqrt(sq + 1e-6f), ik = 1.0f / std::sqrt(sk + 1e-6f);
            float* qo = qs.data() + size_t(t) * key_dim_ + size_t(g) * dk;
            float* ko = ks.data() + size_t(t) * key_dim_ + size_t(g) * dk;
            for (int i = 0; i < dk; ++i) {
                qo[i] = (qi[i] * iq) * qscale;
                ko[i] = ki[i] * ik;
            }
        }
        std::memcpy(vs.data() + size_t(t) * value_dim_, c + 2 * key_dim_, sizeof(float) * value_dim_);
        const float* prow = P.data() + size_t(t) * W;
        const float* b = prow + conv_dim_ + value_dim_;
        const float* a = b + nv;
        for (int hh = 0; hh < nv; ++hh) {
            float g = G.A[hh] * softplus(a[hh] + G.dt_bias[hh]);
            dec[size_t(t) * nv + hh] = std::exp(g);
            bet[size_t(t) * nv + hh] = sigmoidf_(b[hh]);
        }
    }
    if (keep_rows) {
        auto cp = [&](std::vector<float>& dst, const std::vector<float>& src, int w) {
            std::memcpy(dst.data() + size_t(row0) * w, src.data(), sizeof(float) * size_t(n) * w);
        };
        cp(G.qs, qs, key_dim_);
        cp(G.ks, ks, key_dim_);
        cp(G.vs, vs, value_dim_);
        cp(G.dec, dec, nv);
        cp(G.beta, bet, nv);
    }
    // recurrence: value heads in parallel, rows in order
    std::vector<float> O(size_t(n) * value_dim_);
    auto head = [&](int hh) {
        int g = hh / r;
        float* Sh = G.S_scr.data() + size_t(hh) * dk * dv;
        const float* S0 = first ? G.S.data() + size_t(hh) * dk * dv : Sh;
        for (int t = 0; t < n; ++t)
            gdn_step(t == 0 ? S0 : Sh, Sh, qs.data() + size_t(t) * key_dim_ + size_t(g) * dk,
                     ks.data() + size_t(t) * key_dim_ + size_t(g) * dk,
                     vs.data() + size_t(t) * value_dim_ + size_t(hh) * dv, dec[size_t(t) * nv + hh],
                     bet[size_t(t) * nv + hh], O.data() + size_t(t) * value_dim_ + size_t(hh) * dv);
    };
    if (int64_t(nv) * dk * dv * n > 16384)
        be_->parallel_for(nv, head);
    else
        for (int hh = 0; hh < nv; ++hh) head(hh);
    // gated RMSNorm per head: norm(o) * w * silu(z)
    for (int t = 0; t < n; ++t) {
        const float* z = P.data() + size_t(t) * W + conv_dim_;
        for (int hh = 0; hh < nv; ++hh) {
            float* o = O.data() + size_t(t) * value_dim_ + size_t(hh) * dv;
            rmsnorm_row(o, G.norm_w.data(), s.eps, dv, o);
            for (int j = 0; j < dv; ++j) o[j] = o[j] * silu(z[size_t(hh) * dv + j]);
        }
    }
    be_->matmul({{O.data(), n, value_dim_, G.out.w, nullptr, out, s.hidden}});
}

void Engine::ffn_block(Layer& L, int li, const float* h, int n, float* out) {
    const ModelSpec& s = spec_;
    const int H = s.hidden;
    if (!L.moe) {
        int I = s.inter;
        std::vector<float> g(size_t(n) * I), u(size_t(n) * I);
        be_->matmul({{h, n, H, L.mlp.gate.w, nullptr, g.data(), I},
                            {h, n, H, L.mlp.up.w, nullptr, u.data(), I}});
        for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
        be_->matmul({{g.data(), n, I, L.mlp.down.w, nullptr, out, H}});
        return;
    }
    const int E = s.n_experts, k = s.top_k, SI = s.shared_inter;
    std::vector<float> logits(size_t(n) * E), sg(n), shg(size_t(n) * SI), shu(size_t(n) * SI);
    std::vector<MatJob> jobs = {{h, n, H, L.router.w, nullptr, logits.data(), E}};
    if (L.has_shared) {
        jobs.push_back({h, n, H, L.mlp.gate.w, nullptr, shg.data(), SI});
        jobs.push_back({h, n, H, L.mlp.up.w, nullptr, shu.data(), SI});
        jobs.push_back({h, n, H, L.shared_gate.w, nullptr, sg.data(), 1});
    }
    be_->matmul(jobs);
    std::vector<int> idx(size_t(n) * k);
    std::vector<float> wts(size_t(n) * k);
    if (routing_.approximate()) {
        // cache-aware routing (opt-in, changes the model): needs what is resident right now
        std::vector<uint8_t> ready(static_cast<size_t>(E), 0);
        for (int e = 0; e < E; ++e) ready[size_t(e)] = store_->is_ready(li, e) ? 1 : 0;
        const int per = window_has_drafts_ ? n : 1;  // prefill rows are all roots
        for (int t = 0; t < n; t += per)
            route_window(logits.data() + size_t(t) * E, per, E, k, s.norm_topk, routing_, ready.data(),
                         idx.data() + size_t(t) * k, wts.data() + size_t(t) * k);
        tele_.approximate = true;
    } else {
        for (int t = 0; t < n; ++t)
            route_topk(logits.data() + size_t(t) * E, E, k, s.norm_topk, idx.data() + size_t(t) * k,
                       wts.data() + size_t(t) * k);
    }
    std::vector<int> uni = expert_union(idx.data(), n, k);
    std::vector<int> root(idx.begin(), idx.begin() + k);
    std::sort(root.begin(), root.end());
    std::vector<ExpertView> views;
    store_->acquire_layer(li, uni, root, views);
    // read-ahead for the next MoE layer: its router applied to this hidden state (issued after
    // this layer's experts are pinned, so that it can never evict them)
    if (store_->wants_prefetch()) {
        for (int nl = li + 1; nl < s.n_layers; ++nl) {
            if (!layers_[nl].moe) continue;
            const int pn = routing_.root_only_readahead ? 1 : n;
            std::vector<float> nlog(size_t(pn) * E);
            be_->matmul({{h, pn, H, layers_[nl].router.w, nullptr, nlog.data(), E}});
            std::vector<int> pi(size_t(pn) * k);
            std::vector<float> pw(size_t(pn) * k);
            for (int t = 0; t < pn; ++t)
                route_topk(nlog.data() + size_t(t) * E, E, k, s.norm_topk, pi.data() + size_t(t) * k,
                           pw.data() + size_t(t) * k);
            store_->prefetch(nl, expert_union(pi.data(), pn, k));
            break;
        }
    }
    if (views.size() != uni.size()) {
        store_->release_layer(li);
        throw ModelError("expert store returned " + std::to_string(views.size()) + " experts for layer " +
                         std::to_string(li) + ", expected " + std::to_string(uni.size()));
    }
    // record the union for telemetry
    auto& ru = run_union_[L.moe_index];
    ru.insert(ru.end(), uni.begin(), uni.end());
    // group rows by expert: each expert's weights are read once for all its rows
    const int I = s.moe_inter;
    int U = int(uni.size());
    std::vector<int> slot_of(size_t(n) * k);   // (row, rank) -> position in the gathered buffers
    std::vector<int> start(U + 1, 0), count(U, 0);
    std::vector<int> pos_in_uni(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {
        int u = int(std::lower_bound(uni.begin(), uni.end(), idx[i]) - uni.begin());
        pos_in_uni[i] = u;
        count[u]++;
    }
    for (int u = 0; u < U; ++u) start[u + 1] = start[u] + count[u];
    std::vector<int> fill(U, 0);
    std::vector<int> row_of(size_t(n) * k);
    for (int i = 0; i < n * k; ++i) {  // rows in order within each expert
        int u = pos_in_uni[i];
        int sl = start[u] + fill[u]++;
        slot_of[i] = sl;
        row_of[sl] = i / k;
    }
    int NS = n * k;
    std::vector<float> X(size_t(NS) * H), GU(size_t(NS) * 2 * I), D(size_t(NS) * H);
    for (int sl = 0; sl < NS; ++sl)
        std::memcpy(X.data() + size_t(sl) * H, h + size_t(row_of[sl]) * H, sizeof(float) * H);
    std::vector<MatJob> j1, j2;
    for (int u = 0; u < U; ++u) {
        const float* xu = X.data() + size_t(start[u]) * H;
        float* gu = GU.data() + size_t(start[u]) * 2 * I;
        j1.push_back({xu, count[u], H, views[u].gate, nullptr, gu, 2 * I});
        j1.push_back({xu, count[u], H, views[u].up, nullptr, gu + I, 2 * I});
    }
    try {
        be_->matmul(j1);
        for (int sl = 0; sl < NS; ++sl) {
            float* gu = GU.data() + size_t(sl) * 2 * I;
            for (int i = 0; i < I; ++i) gu[i] = silu(gu[i]) * gu[I + i];
        }
        for (int u = 0; u < U; ++u)
            j2.push_back({GU.data() + size_t(start[u]) * 2 * I, count[u], 2 * I, views[u].down, nullptr,
                          D.data() + size_t(start[u]) * H, H});
        be_->matmul(j2);
    } catch (...) {
        store_->release_layer(li);
        throw;
    }
    store_->release_layer(li);
    if (L.has_shared) {
        for (size_t i = 0; i < shg.size(); ++i) shg[i] = silu(shg[i]) * shu[i];
        be_->matmul({{shg.data(), n, SI, L.mlp.down.w, nullptr, out, H}});
    }
    // each row: its experts in its own rank order, then the gated shared expert
    std::vector<float> acc(H);
    for (int t = 0; t < n; ++t) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int j = 0; j < k; ++j) {
            float w = wts[size_t(t) * k + j];
            const float* d = D.data() + size_t(slot_of[size_t(t) * k + j]) * H;
            for (int c = 0; c < H; ++c) acc[c] = STRATA_FMA(w, d[c], acc[c]);
        }
        float* o = out + size_t(t) * H;
        if (L.has_shared) {
            float gte = sigmoidf_(sg[t]);
            for (int c = 0; c < H; ++c) o[c] = acc[c] + gte * o[c];
        } else {
            std::memcpy(o, acc.data(), sizeof(float) * H);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// forward

void Engine::forward_chunk(const int32_t* tokens, int n, int64_t p0, int row0, bool keep_rows,
                           float* logits, bool last_only) {
    const ModelSpec& s = spec_;
    const int H = s.hidden;
    std::vector<float> x(size_t(n) * H), h(size_t(n) * H), o(size_t(n) * H);
    for (int t = 0; t < n; ++t) row_to_f32(embed_, tokens[t], x.data() + size_t(t) * H);
    for (int l = 0; l < s.n_layers; ++l) {
        Layer& L = layers_[l];
        for (int t = 0; t < n; ++t)
            rmsnorm_row(x.data() + size_t(t) * H, L.in_norm.data(), s.eps, H, h.data() + size_t(t) * H);
        if (L.linear)
            gdn_block(L, h.data(), n, row0, keep_rows, o.data());
        else
            attn_block(L, l, h.data(), n, p0, o.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
        for (int t = 0; t < n; ++t)
            rmsnorm_row(x.data() + size_t(t) * H, L.post_norm.data(), s.eps, H, h.data() + size_t(t) * H);
        ffn_block(L, l, h.data(), n, o.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    }
    if (!logits) return;
    int first = last_only ? n - 1 : 0;
    int rows = n - first;
    for (int t = first; t < n; ++t)
        rmsnorm_row(x.data() + size_t(t) * H, final_norm_.data(), s.eps, H, h.data() + size_t(t - first) * H);
    float* dst = last_only ? logits : logits + size_t(row0) * s.vocab;
    be_->matmul({{h.data(), rows, H, head_, nullptr, dst, s.vocab}});
}

void Engine::check_tokens(const int32_t* tokens, int T) const {
    for (int t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= spec_.vocab)
            throw std::invalid_argument("token id " + std::to_string(tokens[t]) + " at row " +
                                        std::to_string(t) + " is outside the vocabulary (0.." +
                                        std::to_string(spec_.vocab - 1) + ")");
}

const float* Engine::run(const int32_t* tokens, int T) { return run_ex(tokens, T, false); }

const float* Engine::run_ex(const int32_t* tokens, int T, bool last_only) {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("run: the previous window is not committed yet (call commit(keep) first)");
    if (T < 1) throw WindowError("run: a window needs at least one token");
    if (pos_ + T > ctx_)
        throw WindowError("run: window of " + std::to_string(T) + " tokens at position " +
                          std::to_string(pos_) + " goes past the context limit " + std::to_string(ctx_));
    check_tokens(tokens, T);
    double t0 = now_us();
    tele_ = WindowTelemetry();
    tele_.pos0 = pos_;
    tele_.T = T;
    double f0 = now_us();
    bool folded = pending_fold_ > 0;
    flush_pending();
    if (folded) tele_.fold_us = now_us() - f0;
    const bool keep_rows = T > 1 && T <= kChunk;
    window_has_drafts_ = T > 1 && T <= kMaxDraftWindow;
    for (auto& L : layers_) {
        if (!L.linear) continue;
        GdnLayer& G = L.gdn;
        if (keep_rows) {
            G.pre.resize(size_t(T) * conv_dim_);
            G.qs.resize(size_t(T) * key_dim_);
            G.ks.resize(size_t(T) * key_dim_);
            G.vs.resize(size_t(T) * value_dim_);
            G.dec.resize(size_t(T) * spec_.lin_nv);
            G.beta.resize(size_t(T) * spec_.lin_nv);
        }
    }
    run_union_.assign(n_moe_layers_, {});
    logits_.resize(size_t(last_only ? 1 : T) * spec_.vocab);
    try {
        for (int r0 = 0; r0 < T; r0 += kChunk) {
            int n = std::min(kChunk, T - r0);
            bool last_chunk = r0 + n == T;
            forward_chunk(tokens + r0, n, pos_ + r0, r0, keep_rows,
                          (last_only && !last_chunk) ? nullptr : logits_.data(), last_only);
        }
    } catch (...) {
        // nothing committed changed: the run wrote only scratch state and cells past pos
        store_->drain_telemetry(tele_);
        throw;
    }
    open_ = true;
    last_T_ = T;
    last_rows_ = last_only ? 1 : T;
    if (T > kChunk)
        last_tokens_.assign(tokens, tokens + T);
    else
        last_tokens_.clear();
    // telemetry: union per MoE layer and the experts themselves
    tele_.expert_offsets.assign(1, 0);
    for (int m = 0; m < n_moe_layers_; ++m) {
        auto& u = run_union_[m];
        std::sort(u.begin(), u.end());
        u.erase(std::unique(u.begin(), u.end()), u.end());
        tele_.union_per_layer.push_back(int(u.size()));
        tele_.expert_ids.insert(tele_.expert_ids.end(), u.begin(), u.end());
        tele_.expert_offsets.push_back(int(tele_.expert_ids.size()));
    }
    store_->drain_telemetry(tele_);
    tele_.run_us = now_us() - t0;
    return logits_.data();
}

void Engine::fold_rows(int keep) {
    const int nv = spec_.lin_nv, dk = spec_.lin_dk, dv = spec_.lin_dv, K = spec_.conv_k;
    const int r = spec_.lin_nk > 0 ? nv / spec_.lin_nk : 1;  // qwen3_moe: no GDN layers at all
    for (auto& L : layers_) {
        if (!L.linear) continue;
        GdnLayer& G = L.gdn;
        auto head = [&](int hh) {
            int g = hh / r;
            float* Sh = G.S.data() + size_t(hh) * dk * dv;
            std::vector<float> o(dv);
            for (int t = 0; t < keep; ++t)
                gdn_step(Sh, Sh, G.qs.data() + size_t(t) * key_dim_ + size_t(g) * dk,
                         G.ks.data() + size_t(t) * key_dim_ + size_t(g) * dk,
                         G.vs.data() + size_t(t) * value_dim_ + size_t(hh) * dv, G.dec[size_t(t) * nv + hh],
                         G.beta[size_t(t) * nv + hh], o.data());
        };
        if (int64_t(nv) * dk * dv * keep > 16384)
            be_->parallel_for(nv, head);
        else
            for (int hh = 0; hh < nv; ++hh) head(hh);
        std::vector<float> all(size_t(K - 1 + keep) * conv_dim_);
        std::memcpy(all.data(), G.hist.data(), sizeof(float) * G.hist.size());
        std::memcpy(all.data() + G.hist.size(), G.pre.data(), sizeof(float) * size_t(keep) * conv_dim_);
        std::memcpy(G.hist.data(), all.data() + size_t(keep) * conv_dim_, sizeof(float) * G.hist.size());
    }
}

void Engine::flush_pending() {
    if (pending_fold_ > 0) {
        int k = pending_fold_;
        pending_fold_ = 0;
        fold_rows(k);
    }
}

void Engine::commit(int keep) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!open_) throw WindowError("commit: no open window (commit exactly once after each run)");
    if (keep < 1 || keep > last_T_)
        throw WindowError("commit: keep=" + std::to_string(keep) + " is out of range 1.." +
                          std::to_string(last_T_));
    double t0 = now_us();
    bool did_fold = false;
    {
        if (keep == last_T_) {
            for (auto& L : layers_)
                if (L.linear) {
                    std::swap(L.gdn.S, L.gdn.S_scr);
                    std::swap(L.gdn.hist, L.gdn.hist_scr);
                }
        } else if (last_T_ <= kChunk) {
            if (opt_.lazy_fold) {
                pending_fold_ = keep;
            } else {
                fold_rows(keep);
                did_fold = true;
            }
        } else {
            // long run (prefill) cut short: recompute the kept rows from the committed state
            for (int r0 = 0; r0 < keep; r0 += kChunk) {
                int n = std::min(kChunk, keep - r0);
                forward_chunk(last_tokens_.data() + r0, n, pos_ + r0, r0, false, nullptr, false);
            }
            for (auto& L : layers_)
                if (L.linear) {
                    std::swap(L.gdn.S, L.gdn.S_scr);
                    std::swap(L.gdn.hist, L.gdn.hist_scr);
                }
            did_fold = true;
        }
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
    pending_fold_ = 0;
    last_T_ = 0;
    for (auto& L : layers_)
        if (L.linear) {
            std::fill(L.gdn.S.begin(), L.gdn.S.end(), 0.f);
            std::fill(L.gdn.hist.begin(), L.gdn.hist.end(), 0.f);
        }
}

// ---------------------------------------------------------------------------------------------
// state snapshots: magic, version, model id, pos, per layer (KV cells < pos | S, conv history),
// a 64-bit checksum of everything before it

namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'T'};
constexpr uint32_t kStateVersion = 2;

// Checksum of a state blob: four independent FNV-1a-style lanes over 8-byte words (fast on
// blobs of tens of MB), folded together with the length.
uint64_t blob_checksum(const char* p, size_t n) {
    const uint64_t prime = 1099511628211ull;
    uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                     0x165667b19e3779f9ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; ++l) {
            uint64_t w;
            std::memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * prime;
        }
    uint64_t r = 1469598103934665603ull ^ uint64_t(n);
    for (; i < n; ++i) r = (r ^ uint8_t(p[i])) * prime;
    for (int l = 0; l < 4; ++l) r = (r ^ (h[l] ^ (h[l] >> 29))) * prime;
    return r;
}
template <typename T>
void put(std::string& b, const T& v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_floats(std::string& b, const float* p, size_t n) {
    b.append(reinterpret_cast<const char*>(p), n * sizeof(float));
}
}  // namespace

std::string Engine::save_state() {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("save_state: a window is open (commit it first)");
    flush_pending();
    std::string b;
    b.append(kMagic, 8);
    put(b, kStateVersion);
    put(b, uint32_t(opt_.model_id.size()));
    b.append(opt_.model_id);
    put(b, int64_t(pos_));
    size_t kw = size_t(spec_.n_kv) * spec_.head_dim;
    for (auto& L : layers_) {
        if (L.linear) {
            put_floats(b, L.gdn.S.data(), L.gdn.S.size());
            put_floats(b, L.gdn.hist.data(), L.gdn.hist.size());
        } else {
            if (pos_ > 0) {
                put_floats(b, L.attn.kc.data(), size_t(pos_) * kw);
                put_floats(b, L.attn.vc.data(), size_t(pos_) * kw);
            }
        }
    }
    put(b, blob_checksum(b.data(), b.size()));
    return b;
}

void Engine::load_state(const std::string& b) {
    std::lock_guard<std::mutex> lk(mu_);
    if (open_) throw WindowError("load_state: a window is open (commit it first)");
    const size_t head = 8 + 4 + 4;
    if (b.size() < head + 8 + 8 || std::memcmp(b.data(), kMagic, 8) != 0)
        throw ModelError("state blob is not a strata engine state");
    uint64_t stored;
    std::memcpy(&stored, b.data() + b.size() - 8, 8);
    if (blob_checksum(b.data(), b.size() - 8) != stored) throw ModelError("state blob checksum mismatch (corrupt)");
    uint32_t ver, idlen;
    std::memcpy(&ver, b.data() + 8, 4);
    std::memcpy(&idlen, b.data() + 12, 4);
    if (ver != kStateVersion) throw ModelError("state blob version " + std::to_string(ver) + " is not supported");
    if (head + idlen + 8 + 8 > b.size()) throw ModelError("state blob is truncated");
    std::string id = b.substr(head, idlen);
    if (id != opt_.model_id)
        throw ModelError("state blob belongs to model " + id + ", this engine is " + opt_.model_id);
    int64_t pos;
    std::memcpy(&pos, b.data() + head + idlen, 8);
    size_t kw = size_t(spec_.n_kv) * spec_.head_dim;
    size_t expect = head + idlen + 8 + 8;
    if (pos < 0 || pos > ctx_) throw ModelError("state blob position " + std::to_string(pos) + " is out of range");
    for (auto& L : layers_)
        expect += L.linear ? (L.gdn.S.size() + L.gdn.hist.size()) * 4 : size_t(pos) * kw * 8;
    if (expect != b.size()) throw ModelError("state blob size does not match this model");
    const char* p = b.data() + head + idlen + 8;
    for (auto& L : layers_) {
        if (L.linear) {
            std::memcpy(L.gdn.S.data(), p, L.gdn.S.size() * 4);
            p += L.gdn.S.size() * 4;
            std::memcpy(L.gdn.hist.data(), p, L.gdn.hist.size() * 4);
            p += L.gdn.hist.size() * 4;
        } else if (pos > 0) {
            ensure_cells(L.attn, pos);
            std::memcpy(L.attn.kc.data(), p, size_t(pos) * kw * 4);
            p += size_t(pos) * kw * 4;
            std::memcpy(L.attn.vc.data(), p, size_t(pos) * kw * 4);
            p += size_t(pos) * kw * 4;
        }
    }
    pos_ = pos;
    pending_fold_ = 0;
    last_T_ = 0;
}

}  // namespace strata
