#include "webgpu/webgpu_backend.h"


#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace strata::webgpu {

namespace {

WeightFormat to_weight_format(WFormat f) {
    switch (f) {
        case WFormat::F32: return WeightFormat::F32;
        case WFormat::F16: return WeightFormat::F16;
        case WFormat::BF16: return WeightFormat::BF16;
        default:
            throw std::runtime_error(std::string("webgpu: no kernel for ") + format_info(f).name + " weights");
    }
}

// rows x heads vectors of `dim` at (p, ld, hs) <-> one contiguous [rows*heads][dim] array
std::vector<float> pack(const float* p, int ld, int hs, int rows, int heads, int dim) {
    std::vector<float> out(size_t(rows) * heads * dim);
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
            std::memcpy(&out[(size_t(r) * heads + h) * dim], p + size_t(r) * ld + size_t(h) * hs, sizeof(float) * dim);
    return out;
}

void unpack(const std::vector<float>& in, float* p, int ld, int hs, int rows, int heads, int dim) {
    for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
            std::memcpy(p + size_t(r) * ld + size_t(h) * hs, &in[(size_t(r) * heads + h) * dim], sizeof(float) * dim);
}

}  // namespace

WebGpuBackend::WebGpuBackend(const DeviceOptions& options)
    : device_(std::make_unique<Device>(options)), kernels_(std::make_unique<Kernels>(*device_)) {
    // gdn_inputs binds the most storage buffers of any kernel (10; the WebGPU default limit is 8)
    uint32_t have = device_->limits().max_storage_buffers_per_stage;
    if (have < Kernels::kMaxStorageBuffers)
        throw std::runtime_error("webgpu: " + device_->adapter().device + " allows " + std::to_string(have) +
                                 " storage buffers per shader stage, strata's kernels need " +
                                 std::to_string(Kernels::kMaxStorageBuffers));
}

bool WebGpuBackend::supports(Op op, WFormat f) const {
    if (op_has_format(op)) return f == WFormat::F32 || f == WFormat::F16 || f == WFormat::BF16;
    return true;
}

const GpuMatrix& WebGpuBackend::weights(const MatView& W) {
    WeightFormat format = to_weight_format(W.format);
    // The device copy is current when the view is the same matrix with the same contents
    // version: refilled memory (an expert cache slot) comes with a new version, so no host pass
    // over the weights is needed to notice it.
    auto it = weights_.find(W.data);
    if (it != weights_.end()) {
        const CachedMatrix& c = it->second;
        if (c.version == W.version && c.format == W.format && c.rows == W.rows && c.cols == W.cols &&
            c.row_bytes == W.row_bytes)
            return c.matrix;
        weights_.erase(it);  // new contents at this address (a refilled expert slot)
    }
    GpuMatrix m = upload_matrix(*device_, W.data, format, uint32_t(W.rows), uint32_t(W.cols), W.row_bytes);
    return weights_.emplace(W.data, CachedMatrix{W.version, W.format, W.rows, W.cols, W.row_bytes, std::move(m)})
        .first->second.matrix;
}

BufferPtr WebGpuBackend::up(const float* p, size_t n, const char* what) {
    return device_->upload(p, n * sizeof(float), what);
}

void WebGpuBackend::embed(const MatView& W, const int32_t* ids, int n, float* out) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<uint32_t> u(n);
    for (int i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= W.rows)
            throw std::out_of_range("embed: token id " + std::to_string(ids[i]) + " outside the vocabulary of " +
                                    std::to_string(W.rows));
        u[i] = uint32_t(ids[i]);
    }
    const GpuMatrix& m = weights(W);
    auto bids = device_->upload(u.data(), u.size() * 4, "ids");
    auto y = device_->create_buffer(size_t(n) * W.cols * 4, "embeddings");
    Recorder r = device_->record();
    kernels_->embedding(r, bids, uint32_t(n), m, y);
    r.download(y, 0, size_t(n) * W.cols * 4, out);
    r.submit();
}

void WebGpuBackend::rmsnorm(RowsC x, RowsF out, int rows, int heads, int dim, const float* w, float eps) {
    if (rows <= 0 || heads <= 0 || dim <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto packed = pack(x.p, x.ld, x.hs, rows, heads, dim);
    auto bx = up(packed.data(), packed.size(), "x");
    auto by = device_->create_buffer(packed.size() * 4, "y");
    Recorder r = device_->record();
    kernels_->rmsnorm(r, bx, up(w, dim, "norm weight"), by, uint32_t(rows * heads), uint32_t(dim), eps, 0.0f);
    r.download(by, 0, packed.size() * 4, packed.data());
    r.submit();
    unpack(packed, out.p, out.ld, out.hs, rows, heads, dim);
}

void WebGpuBackend::gated_rmsnorm(RowsF x, RowsC z, int rows, int heads, int dim, const float* w, float eps) {
    if (rows <= 0 || heads <= 0 || dim <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto px = pack(x.p, x.ld, x.hs, rows, heads, dim);
    auto pz = pack(z.p, z.ld, z.hs, rows, heads, dim);
    auto by = device_->create_buffer(px.size() * 4, "y");
    Recorder r = device_->record();
    kernels_->rmsnorm_gated(r, up(px.data(), px.size(), "x"), up(pz.data(), pz.size(), "z"), up(w, dim, "norm weight"),
                            by, uint32_t(rows * heads), uint32_t(dim), eps, 0.0f);
    r.download(by, 0, px.size() * 4, px.data());
    r.submit();
    unpack(px, x.p, x.ld, x.hs, rows, heads, dim);
}

void WebGpuBackend::matmul(const std::vector<MatJob>& jobs) {
    std::lock_guard<std::mutex> lock(mutex_);
    Recorder r = device_->record();
    std::vector<std::vector<float>> results(jobs.size());
    std::vector<GpuMatrix> keep;  // weights stay alive until the submit, even if evicted meanwhile
    for (size_t j = 0; j < jobs.size(); ++j) {
        const MatJob& job = jobs[j];
        if (job.T <= 0 || job.W.rows <= 0) continue;
        auto px = pack(job.X, job.ldx, 0, job.T, 1, job.W.cols);
        keep.push_back(weights(job.W));
        size_t ny = size_t(job.T) * job.W.rows;
        auto by = device_->create_buffer(ny * 4, "y");
        kernels_->matmul(r, up(px.data(), px.size(), "x"), uint32_t(job.T), keep.back(), by);
        BufferPtr out = by;
        if (job.bias) {
            out = device_->create_buffer(ny * 4, "y + bias");
            kernels_->elementwise(r, "bias_add", by, up(job.bias, job.W.rows, "bias"), out, uint32_t(ny), 0.0f,
                                  uint32_t(job.W.rows));
        }
        results[j].resize(ny);
        r.download(out, 0, ny * 4, results[j].data());
    }
    r.submit();
    for (size_t j = 0; j < jobs.size(); ++j) {
        const MatJob& job = jobs[j];
        if (job.T <= 0 || job.W.rows <= 0) continue;
        unpack(results[j], job.Y, job.ldy, 0, job.T, 1, job.W.rows);
    }
}

void WebGpuBackend::rotary(RowsF x, int rows, int heads, int64_t p0, const float* inv_freq, int half) {
    if (rows <= 0 || heads <= 0 || half <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    // cos/sin per row on the host, with the same f32 angles as the CPU backend: GPU sin/cos of
    // large angles are too coarse, and one table serves every head.
    std::vector<float> cs(size_t(rows) * 2 * half);
    for (int t = 0; t < rows; ++t)
        for (int i = 0; i < half; ++i) {
            float f = float(p0 + t) * inv_freq[i];
            cs[size_t(t) * 2 * half + i] = std::cos(f);
            cs[size_t(t) * 2 * half + half + i] = std::sin(f);
        }
    auto px = pack(x.p, x.ld, x.hs, rows, heads, 2 * half);
    auto bx = up(px.data(), px.size(), "x");
    Recorder r = device_->record();
    kernels_->rotary(r, bx, up(cs.data(), cs.size(), "cos/sin"), uint32_t(rows), uint32_t(heads), uint32_t(2 * half),
                     uint32_t(2 * half));
    r.download(bx, 0, px.size() * 4, px.data());
    r.submit();
    unpack(px, x.p, x.ld, x.hs, rows, heads, 2 * half);
}

void WebGpuBackend::attention(const AttentionArgs& a) {
    if (a.n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t n = uint32_t(a.n), nh = uint32_t(a.n_heads), nkv = uint32_t(a.n_kv), hd = uint32_t(a.head_dim);
    uint32_t p0 = uint32_t(a.p0), cells = p0 + n;
    size_t nq = size_t(n) * nh * hd, nc = size_t(cells) * nkv * hd;
    auto bk = up(a.k_cells, nc, "k cells"), bv = up(a.v_cells, nc, "v cells");
    auto scores = device_->create_buffer(size_t(n) * nh * cells * 4, "scores");
    auto out = device_->create_buffer(nq * 4, "attention out");
    Recorder r = device_->record();
    kernels_->attention(r, up(a.q, nq, "q"), bk, bv, scores, out, n, nh, nkv, hd, p0, a.scale);
    BufferPtr result = out;
    if (a.gate) {
        result = device_->create_buffer(nq * 4, "gated out");
        kernels_->elementwise(r, "sigmoid_mul", out, up(a.gate, nq, "gate"), result, uint32_t(nq));
    }
    r.download(result, 0, nq * 4, a.out);
    r.submit();
}

void WebGpuBackend::causal_conv(const ConvArgs& a) {
    if (a.n <= 0 || a.channels <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto px = pack(a.x, a.ldx, 0, a.n, 1, a.channels);
    size_t ny = size_t(a.n) * a.channels;
    // the layer owns the history: the kernel reads it and leaves it (commit_rows = 0)
    auto hist = up(a.hist, size_t(a.K - 1) * a.channels, "conv history");
    auto y = device_->create_buffer(ny * 4, "conv out");
    Recorder r = device_->record();
    kernels_->causal_conv(r, up(px.data(), px.size(), "x"), up(a.w, size_t(a.channels) * a.K, "conv weight"), hist, y,
                          uint32_t(a.n), uint32_t(a.channels), uint32_t(a.K), 0);
    r.download(y, 0, ny * 4, a.out);
    r.submit();
}

void WebGpuBackend::gdn_inputs(const GdnInputsArgs& a) {
    if (a.n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(a.n), Hk = uint32_t(a.n_k), Hv = uint32_t(a.n_v), Dk = uint32_t(a.d_k), Dv = uint32_t(a.d_v);
    size_t key = size_t(T) * Hk * Dk, val = size_t(T) * Hv * Dv, heads = size_t(T) * Hv;
    size_t conv_dim = 2 * size_t(Hk) * Dk + size_t(Hv) * Dv;
    size_t ba = size_t(T - 1) * a.ld_ba + Hv;
    auto q = device_->create_buffer(key * 4, "q"), k = device_->create_buffer(key * 4, "k");
    auto v = device_->create_buffer(val * 4, "v");
    auto decay = device_->create_buffer(heads * 4, "decay"), beta = device_->create_buffer(heads * 4, "beta");
    Recorder r = device_->record();
    kernels_->gdn_inputs(r, up(a.conv, T * conv_dim, "conv"), up(a.b, ba, "b"), up(a.a, ba, "a"), uint32_t(a.ld_ba),
                         up(a.A, Hv, "A"), up(a.dt_bias, Hv, "dt_bias"), T, Hk, Hv, Dk, Dv, q, k, v, decay, beta);
    r.download(q, 0, key * 4, a.q);
    r.download(k, 0, key * 4, a.k);
    r.download(v, 0, val * 4, a.v);
    r.download(decay, 0, heads * 4, a.decay);
    r.download(beta, 0, heads * 4, a.beta);
    r.submit();
}

void WebGpuBackend::gdn_step(const GdnStepArgs& a) {
    if (a.n <= 0) {
        if (a.S != a.S0) std::memcpy(a.S, a.S0, sizeof(float) * size_t(a.n_v) * a.d_k * a.d_v);
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    uint32_t T = uint32_t(a.n), Hk = uint32_t(a.n_k), Hv = uint32_t(a.n_v), Dk = uint32_t(a.d_k), Dv = uint32_t(a.d_v);
    size_t ns = size_t(Hv) * Dk * Dv, key = size_t(T) * Hk * Dk, val = size_t(T) * Hv * Dv, heads = size_t(T) * Hv;
    auto S = device_->create_buffer(ns * 4, "state");
    auto out = device_->create_buffer(val * 4, "gdn out");
    Recorder r = device_->record();
    kernels_->gdn_step(r, up(a.S0, ns, "S0"), S, up(a.q, key, "q"), up(a.k, key, "k"), up(a.v, val, "v"),
                       up(a.decay, heads, "decay"), up(a.beta, heads, "beta"), out, T, Hk, Hv, Dk, Dv);
    r.download(S, 0, ns * 4, a.S);
    if (a.out) r.download(out, 0, val * 4, a.out);
    r.submit();
}

void WebGpuBackend::router_topk(const float* logits, int n, int n_experts, int k, bool renormalize, int* idx,
                                float* weights) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t nk = size_t(n) * k;
    auto ids = device_->create_buffer(nk * 4, "expert ids"), w = device_->create_buffer(nk * 4, "expert weights");
    std::vector<uint32_t> u(nk);
    Recorder r = device_->record();
    kernels_->router_topk(r, up(logits, size_t(n) * n_experts, "router logits"), ids, w, uint32_t(n),
                          uint32_t(n_experts), uint32_t(k), renormalize);
    r.download(ids, 0, nk * 4, u.data());
    r.download(w, 0, nk * 4, weights);
    r.submit();
    for (size_t i = 0; i < nk; ++i) idx[i] = int(u[i]);
}

void WebGpuBackend::gather(const float* src, int ld_src, const int* idx, int n, int cols, float* dst, int ld_dst) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n <= 0) return;
    std::vector<uint32_t> u(n);
    int max_row = 0;
    for (int i = 0; i < n; ++i) {
        if (idx[i] < 0) throw std::out_of_range("gather: negative row index");
        u[i] = uint32_t(idx[i]);
        max_row = std::max(max_row, idx[i]);
    }
    size_t src_floats = size_t(max_row) * ld_src + cols;
    // dst rows keep their lanes past `cols`: start from the current contents
    size_t ny = size_t(n - 1) * ld_dst + cols;
    auto y = up(dst, ny, "gather dst");
    Recorder r = device_->record();
    kernels_->gather(r, up(src, src_floats, "gather src"), uint32_t(ld_src), uint32_t(max_row + 1),
                     device_->upload(u.data(), u.size() * 4, "gather ids"), uint32_t(n), uint32_t(cols), y,
                     uint32_t(ld_dst));
    r.download(y, 0, ny * 4, dst);
    r.submit();
}

void WebGpuBackend::swiglu(RowsC g, RowsC u, RowsF out, int rows, int n) {
    if (rows <= 0 || n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto pg = pack(g.p, g.ld, 0, rows, 1, n);
    auto pu = pack(u.p, u.ld, 0, rows, 1, n);
    auto y = device_->create_buffer(pg.size() * 4, "swiglu out");
    Recorder r = device_->record();
    kernels_->elementwise(r, "swiglu", up(pg.data(), pg.size(), "g"), up(pu.data(), pu.size(), "u"), y,
                          uint32_t(pg.size()));
    r.download(y, 0, pg.size() * 4, pg.data());
    r.submit();
    unpack(pg, out.p, out.ld, 0, rows, 1, n);
}

void WebGpuBackend::moe_combine(const float* D, const int* slot, const float* w, int n, int k, int H,
                                const float* shared, const float* shared_gate, float* out) {
    if (n <= 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t nk = size_t(n) * k, ny = size_t(n) * H;
    std::vector<uint32_t> u(nk);
    int max_slot = 0;
    for (size_t i = 0; i < nk; ++i) {
        if (slot[i] < 0) throw std::out_of_range("moe_combine: negative slot");
        u[i] = uint32_t(slot[i]);
        max_slot = std::max(max_slot, slot[i]);
    }
    auto y = device_->create_buffer(ny * 4, "moe out");
    Recorder r = device_->record();
    kernels_->moe_combine(r, up(D, size_t(max_slot + 1) * H, "expert outputs"), uint32_t(max_slot + 1),
                          device_->upload(u.data(), nk * 4, "slots"), up(w, nk, "expert weights"), uint32_t(n),
                          uint32_t(k), uint32_t(H), shared ? up(shared, ny, "shared") : nullptr,
                          shared ? up(shared_gate, n, "shared gate") : nullptr, y);
    r.download(y, 0, ny * 4, out);
    r.submit();
}

void WebGpuBackend::add(float* x, const float* y, size_t n) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (n == 0) return;
    auto out = device_->create_buffer(n * 4, "sum");
    Recorder r = device_->record();
    kernels_->elementwise(r, "add", up(x, n, "x"), up(y, n, "y"), out, uint32_t(n));
    r.download(out, 0, n * 4, x);
    r.submit();
}

}  // namespace strata::webgpu
