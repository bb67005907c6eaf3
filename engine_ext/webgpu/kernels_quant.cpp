// The GGUF block-format matmuls of Kernels (shaders/matmul_quant.wgsl): activation rows to int8
// blocks as the CPU backend makes them, then integer block dot products with the CPU's float
// lanes and tree (see the shader's header).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "webgpu/kernels.h"
#include "webgpu/quant_layout.h"

namespace strata::webgpu {

namespace {

void need_words(const BufRef& b, uint64_t words, const char* op, const char* arg) {
    if (!b) throw std::invalid_argument(std::string("webgpu ") + op + ": " + arg + " is missing");
    if (b.size < words * 4)
        throw std::invalid_argument(std::string("webgpu ") + op + ": " + arg + " holds " + std::to_string(b.size / 4) +
                                    " values, needs " + std::to_string(words));
}

struct QuantParams {
    uint32_t T, K, N, row_words, x_off, x_stride, y_off, y_stride, col0, groups_x, d_off, e_off;
};

ShaderDefines quant_defines(const QuantLayout& L, uint32_t token_block) {
    return {{"TB", std::to_string(token_block)},
            {"ABLK", std::to_string(L.block_elems)},
            {"VPT", std::to_string(std::max<uint32_t>(1, L.block_elems / Kernels::kWorkgroup))},
            {"SUMS", L.act_sums ? "1" : "0"},
            {"FMT", std::to_string(L.fmt_id)},
            {"LANES", std::to_string(quant_lanes(L))},
            {"BW", std::to_string(L.payload_words)},
            {"D_REGION", L.d_byte >= 0 ? "1" : "0"},
            {"MAX_JOBS", std::to_string(Kernels::kQuantGatherEntries)}};
}

}  // namespace

void Kernels::quantize_rows(Recorder& r, const BufRef& x, uint32_t x_off, uint32_t x_stride, uint32_t T, uint32_t K,
                            WeightFormat f, const BufRef& xq) {
    const QuantLayout& L = quant_layout(f);
    if (T == 0 || K == 0 || K % L.block_elems)
        throw std::invalid_argument("webgpu quantize_rows: " + std::to_string(K) + " values per row are not whole blocks of " +
                                    std::to_string(L.block_elems));
    if (!x_stride) x_stride = K;
    if (x_stride < K) throw std::invalid_argument("webgpu quantize_rows: row stride below the row length");
    need_words(x, x_off + uint64_t(T - 1) * x_stride + K, "quantize_rows", "x");
    need_words(xq, quant_act_words(f, T, K), "quantize_rows", "xq");
    const uint64_t blocks = uint64_t(T) * (K / L.block_elems);
    const uint64_t per_group = std::max<uint64_t>(1, kWorkgroup / L.block_elems);  // blocks per workgroup
    const uint64_t groups = (blocks + per_group - 1) / per_group;
    const uint32_t gx = uint32_t(std::min<uint64_t>(groups, device_.limits().max_workgroups_per_dimension));
    const uint32_t gy = uint32_t((groups + gx - 1) / gx);
    QuantParams p{T, K, 0, 0, x_off, x_stride, 0, 0, 0, gx, uint32_t(quant_act_scales_at(T, K)),
                  uint32_t(quant_act_sums_at(f, T, K))};
    r.dispatch(pipeline("matmul_quant.wgsl", "quantize_rows", quant_defines(L, kTokenBlock)), &p, sizeof p,
               {x, xq}, gx, gy);
}

void Kernels::quantizing_producer(Recorder& r, const char* entry, const BufRef& x, const BufRef& z, const BufRef& w,
                                  const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset,
                                  WeightFormat f, const BufRef& xq, uint32_t heads) {
    const QuantLayout& L = quant_layout(f);
    const std::string op = entry;
    const bool swiglu = op == "swiglu_quant", gated = op == "rmsnorm_gated_quant";
    if (!swiglu && !gated && op != "rmsnorm_quant" && op != "add_rmsnorm_quant")
        throw std::invalid_argument("webgpu: no quantizing producer '" + op + "'");
    if (heads != 1 && !gated) throw std::invalid_argument("webgpu " + op + ": one head per row");
    const uint32_t K = heads * D;  // values per quantized row
    if (rows == 0 || D == 0 || heads == 0 || K % L.block_elems)
        throw std::invalid_argument("webgpu " + op + ": " + std::to_string(K) + " values per row are not whole blocks of " +
                                    std::to_string(L.block_elems));
    const uint64_t n = uint64_t(rows) * K;
    need_words(x, n, entry, "x");
    if (op != "rmsnorm_quant") need_words(z, n, entry, swiglu ? "up" : gated ? "gate" : "addend");
    if (!swiglu) need_words(w, D, entry, "weight");
    need_words(y, n, entry, "y");
    need_words(xq, quant_act_words(f, rows, K), entry, "xq");
    const uint32_t gx = std::min(rows, device_.limits().max_workgroups_per_dimension);
    struct {
        uint32_t rows, D;
        float eps, off;
        uint32_t gx, d_off, e_off, heads, z_off, z_ld, z_hs;
    } p{rows, D, eps, weight_offset, gx, uint32_t(quant_act_scales_at(rows, K)), uint32_t(quant_act_sums_at(f, rows, K)),
        heads, 0, K, D};  // the gate packed
    r.dispatch(pipeline("norm_quant.wgsl", entry, norm_defines(D, quant_defines(L, kTokenBlock))), &p, sizeof p, {x, w, y, z, xq}, gx,
               (rows + gx - 1) / gx);
}

void Kernels::matmul_quant(Recorder& r, const BufRef& xq, uint32_t T, const GpuMatrix& m, const BufRef& y,
                           uint32_t y_off, uint32_t y_stride) {
    const QuantLayout& L = quant_layout(m.format);
    if (T == 0) throw std::invalid_argument("webgpu matmul_quant: no rows");
    if (!y_stride) y_stride = m.rows;
    if (y_stride < m.rows) throw std::invalid_argument("webgpu matmul_quant: row stride below the row length");
    need_words(xq, quant_act_words(m.format, T, m.cols), "matmul_quant", "xq");
    need_words(y, y_off + uint64_t(T - 1) * y_stride + m.rows, "matmul_quant", "y");
    const uint32_t rows_per_group = kWorkgroup / quant_lanes(L);
    const Pipeline& pl = pipeline("matmul_quant.wgsl", "matmul_quant", quant_defines(L, kTokenBlock));
    const uint32_t max_groups = device_.limits().max_workgroups_per_dimension;
    for (const auto& c : m.chunks) {
        const uint32_t groups = (c.rows + rows_per_group - 1) / rows_per_group;
        const uint32_t gx = std::min(groups, max_groups), gy = (groups + gx - 1) / gx;
        QuantParams p{T, m.cols, c.rows, m.row_words, 0, 0, y_off, y_stride, c.row0, gx,
                      uint32_t(quant_act_scales_at(T, m.cols)), uint32_t(quant_act_sums_at(m.format, T, m.cols))};
        const BufRef w = c.ref();
        r.dispatch(pl, &p, sizeof p, {nullptr, xq, w, w, w, w, y}, gx, gy);
    }
}

void Kernels::matmul_quant_gathered(Recorder& r, const BufRef& xq, uint32_t T, const BufRef& y,
                                    const std::vector<QuantJob>& jobs) {
    auto check = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("webgpu matmul_quant_gathered: " + what);
    };
    check(!jobs.empty() && T > 0, "no jobs or no rows");
    const GpuMatrix& m0 = *jobs[0].m;
    const QuantLayout& L = quant_layout(m0.format);
    const uint32_t rows_per_group = kWorkgroup / quant_lanes(L);
    need_words(xq, quant_act_words(m0.format, T, m0.cols), "matmul_quant_gathered", "xq");
    struct Entry {
        uint32_t first_group, rows, buffer, word;  // weights: the chunk's first word in its buffer
        uint32_t y_off, y_stride, col0, pad;
    };
    struct {
        uint32_t T, K, row_words, groups_x, total_groups, n_entries, d_off, e_off;
        Entry e[kQuantGatherEntries];
    } p{};
    std::vector<BufRef> bound;  // distinct weight buffers, bound whole
    uint64_t groups = 0;
    uint32_t n = 0;
    for (const QuantJob& j : jobs) {
        const GpuMatrix& m = *j.m;
        check(m.format == m0.format && m.cols == m0.cols && m.row_words == m0.row_words, "matrices of one format and width");
        check(j.y_stride >= m.rows, "row stride below the row length");
        need_words(y, j.y_off + uint64_t(T - 1) * j.y_stride + m.rows, "matmul_quant_gathered", "y");
        for (const auto& c : m.chunks) {
            check(n < kQuantGatherEntries, "more than " + std::to_string(kQuantGatherEntries) + " chunks");
            const int wb = weight_binding(bound, c.buffer);
            check(wb >= 0, "weights in more than 4 buffers");
            const uint32_t b = uint32_t(wb);
            check(c.offset % 4 == 0 && c.offset / 4 <= UINT32_MAX, "chunk offset");
            p.e[n++] = Entry{uint32_t(groups), c.rows, b, uint32_t(c.offset / 4), j.y_off, j.y_stride, c.row0, 0};
            groups += (c.rows + rows_per_group - 1) / rows_per_group;
        }
    }
    check(groups <= UINT32_MAX, "too many rows");
    const uint32_t gx = uint32_t(std::min<uint64_t>(groups, device_.limits().max_workgroups_per_dimension));
    p.T = T;
    p.K = m0.cols;
    p.row_words = m0.row_words;
    p.groups_x = gx;
    p.total_groups = uint32_t(groups);
    p.n_entries = n;
    p.d_off = uint32_t(quant_act_scales_at(T, m0.cols));
    p.e_off = uint32_t(quant_act_sums_at(m0.format, T, m0.cols));
    const Pipeline& pl = pipeline("matmul_quant.wgsl", "matmul_quant_gathered", quant_defines(L, kTokenBlock));
    std::vector<BufRef> b = {nullptr, xq};
    push_weight_bindings(b, bound);
    b.push_back(y);
    // the parameter block is sent whole: its size, and so its place in the uniform ring, stays fixed
    r.dispatch(pl, &p, sizeof p, b, gx, uint32_t((groups + gx - 1) / gx));
}

void Kernels::matmul_quant_routed(Recorder& r, const BufRef& xq, const BufRef& y, const BufRef& ids,
                                  const BufRef& table, const std::vector<BufRef>& weights, const BufRef& ids_log,
                                  const Routed& a) {
    if (!a.pairs) return;
    const QuantLayout& L = quant_layout(a.format);
    const uint32_t rows_per_group = kWorkgroup / quant_lanes(L);
    auto check = [](bool ok, const std::string& what) {
        if (!ok) throw std::invalid_argument("webgpu matmul_quant_routed: " + what);
    };
    check(a.K % L.block_elems == 0 && a.row_words == quant_row_words(a.format, a.K), "rows of whole blocks");
    check(!weights.empty() && weights.size() <= kGatherBuffers, "1..4 weight buffers");
    check(a.k > 0 && a.n_experts > 0 && a.half_rows > 0 && a.half_rows <= a.rows_per_pair &&
              (a.mat0 == 0 || (a.mat0 == 2 && a.half_rows == a.rows_per_pair)),
          "pair layout");
    check(a.half_rows % rows_per_group == 0 && a.rows_per_pair % rows_per_group == 0,
          "rows per pair a multiple of " + std::to_string(rows_per_group));
    const uint32_t second = a.rows_per_pair - a.half_rows;
    check(a.y_stride >= std::max(a.half_rows, second), "rows and strides");
    const uint32_t x_rows = a.x_per_pair ? a.pairs : (a.pairs + a.k - 1) / a.k;
    need_words(xq, quant_act_words(a.format, x_rows, a.K), "matmul_quant_routed", "xq");
    need_words(y, a.y_off + uint64_t(a.pairs - 1) * a.y_stride + a.half_rows, "matmul_quant_routed", "y");
    if (second) need_words(y, a.y_off2 + uint64_t(a.pairs - 1) * a.y_stride + second, "matmul_quant_routed", "y");
    need_words(ids, uint64_t(a.ids_off) + a.pairs, "matmul_quant_routed", "ids");
    need_words(table, uint64_t(a.n_experts) * 3 * 2, "matmul_quant_routed", "table");
    if (ids_log) need_words(ids_log, a.pairs, "matmul_quant_routed", "ids log");
    const uint64_t groups = uint64_t(a.pairs) * a.rows_per_pair / rows_per_group;
    check(groups <= UINT32_MAX, "too many rows");
    const uint32_t gx = uint32_t(std::min<uint64_t>(groups, device_.limits().max_workgroups_per_dimension));
    struct {
        uint32_t K, row_words, groups_x, total_groups, rows_per_pair, half_rows, mat0, k;
        uint32_t x_per_pair, y_off, y_off2, y_stride, ids_off, n_experts, log_ids, d_off;
        uint32_t e_off, pad[3];
    } p{a.K, a.row_words, gx, uint32_t(groups), a.rows_per_pair, a.half_rows, a.mat0, a.k,
        a.x_per_pair, a.y_off, a.y_off2, a.y_stride, a.ids_off, a.n_experts, ids_log ? 1u : 0u,
        uint32_t(quant_act_scales_at(x_rows, a.K)), uint32_t(quant_act_sums_at(a.format, x_rows, a.K)), {0, 0, 0}};
    const Pipeline& pl = pipeline("matmul_quant.wgsl", "matmul_quant_routed", quant_defines(L, kTokenBlock));
    std::vector<BufRef> b = {nullptr, xq};
    push_weight_bindings(b, weights);
    b.push_back(y);
    b.push_back(ids);
    b.push_back(table);
    b.push_back(ids_log ? ids_log : ids);
    r.dispatch(pl, &p, sizeof p, b, gx, uint32_t((groups + gx - 1) / gx));
}

}  // namespace strata::webgpu
