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
            {"SUMS", L.act_sums ? "1" : "0"},
            {"FMT", std::to_string(L.fmt_id)},
            {"LANES", L.block_elems == 32 ? "32" : "8"},
            {"BW", std::to_string(L.payload_words)},
            {"D_REGION", L.d_byte >= 0 ? "1" : "0"}};
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
    const uint64_t groups = (blocks + kWorkgroup - 1) / kWorkgroup;
    const uint32_t gx = uint32_t(std::min<uint64_t>(groups, device_.limits().max_workgroups_per_dimension));
    const uint32_t gy = uint32_t((groups + gx - 1) / gx);
    QuantParams p{T, K, 0, 0, x_off, x_stride, 0, 0, 0, gx, uint32_t(uint64_t(T) * K / 4),
                  uint32_t(uint64_t(T) * (K / 4 + K / L.block_elems))};
    r.dispatch(pipeline("matmul_quant.wgsl", "quantize_rows", quant_defines(L, kTokenBlock)), &p, sizeof p,
               {x, xq}, gx, gy);
}

void Kernels::matmul_quant(Recorder& r, const BufRef& xq, uint32_t T, const GpuMatrix& m, const BufRef& y,
                           uint32_t y_off, uint32_t y_stride) {
    const QuantLayout& L = quant_layout(m.format);
    if (T == 0) throw std::invalid_argument("webgpu matmul_quant: no rows");
    if (!y_stride) y_stride = m.rows;
    if (y_stride < m.rows) throw std::invalid_argument("webgpu matmul_quant: row stride below the row length");
    need_words(xq, quant_act_words(m.format, T, m.cols), "matmul_quant", "xq");
    need_words(y, y_off + uint64_t(T - 1) * y_stride + m.rows, "matmul_quant", "y");
    const uint32_t lanes = L.block_elems == 32 ? 32 : 8, rows_per_group = kWorkgroup / lanes;
    const Pipeline& pl = pipeline("matmul_quant.wgsl", "matmul_quant", quant_defines(L, kTokenBlock));
    const uint32_t max_groups = device_.limits().max_workgroups_per_dimension;
    for (const auto& c : m.chunks) {
        const uint32_t groups = (c.rows + rows_per_group - 1) / rows_per_group;
        const uint32_t gx = std::min(groups, max_groups), gy = (groups + gx - 1) / gx;
        QuantParams p{T, m.cols, c.rows, m.row_words, 0, 0, y_off, y_stride, c.row0, gx, uint32_t(uint64_t(T) * m.cols / 4),
                      uint32_t(uint64_t(T) * (m.cols / 4 + m.cols / L.block_elems))};
        r.dispatch(pl, &p, sizeof p, {nullptr, xq, c.ref(), y}, gx, gy);
    }
}

}  // namespace strata::webgpu
