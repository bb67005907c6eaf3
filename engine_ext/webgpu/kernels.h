// The WGSL kernels of shaders/, one recording function per op: each appends its dispatches to
// a window's Recorder (nothing runs until Recorder::submit). Shapes are checked here, with a
// one-line error naming the op and the argument.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "webgpu/device.h"

namespace strata::webgpu {

enum class WeightFormat { F32, F16, BF16 };
WeightFormat parse_weight_format(const std::string& name);  // "f32" | "f16" | "bf16"

// A row-major weight matrix on the device, split by rows into chunks no larger than the
// device's chunk size (binding limit, at most 1 GiB).
struct GpuMatrix {
    WeightFormat format = WeightFormat::F32;
    uint32_t rows = 0, cols = 0, row_words = 0;
    struct Chunk {
        uint32_t row0, rows;
        BufferPtr buffer;
    };
    std::vector<Chunk> chunks;
};

// `row_bytes` is the stride of the host rows (>= the packed row; a multiple of 4 on the device).
GpuMatrix upload_matrix(Device& device, const void* data, WeightFormat format, uint32_t rows, uint32_t cols,
                        uint64_t row_bytes);

class Kernels {
public:
    static constexpr uint32_t kWorkgroup = 64;   // every kernel; fixed so results never depend on T
    static constexpr uint32_t kTokenBlock = 8;   // matmul rows per pass over a weight row
    static constexpr uint32_t kMaxExperts = 1024;
    static constexpr uint32_t kMaxStorageBuffers = 10;  // the most any kernel binds (gdn_inputs)

    explicit Kernels(Device& device) : device_(device) {}
    Device& device() { return device_; }

    // y[T][m.rows] = x[T][m.cols] * m^T
    void matmul(Recorder& r, const BufferPtr& x, uint32_t T, const GpuMatrix& m, const BufferPtr& y);
    void rmsnorm(Recorder& r, const BufferPtr& x, const BufferPtr& w, const BufferPtr& y, uint32_t rows,
                 uint32_t D, float eps, float weight_offset);
    void rmsnorm_gated(Recorder& r, const BufferPtr& x, const BufferPtr& z, const BufferPtr& w,
                       const BufferPtr& y, uint32_t rows, uint32_t D, float eps, float weight_offset);
    // x [T][heads][D] in place; cos_sin [T][2][rot_dim/2]
    void rotary(Recorder& r, const BufferPtr& x, const BufferPtr& cos_sin, uint32_t T, uint32_t heads,
                uint32_t D, uint32_t rot_dim);
    void embedding(Recorder& r, const BufferPtr& ids, uint32_t T, const GpuMatrix& table, const BufferPtr& y);
    // op: add, add_scaled, scale, silu, swiglu, sigmoid_mul, bias_add (b of bias_len floats,
    // repeated over the rows of a); b unused by scale and silu
    void elementwise(Recorder& r, const std::string& op, const BufferPtr& a, const BufferPtr& b,
                     const BufferPtr& y, uint32_t n, float s = 0.0f, uint32_t bias_len = 0);
    // y row t (stride ld_out) = the first `cols` floats of src row ids[t] (stride ld_src)
    void gather(Recorder& r, const BufferPtr& src, uint32_t ld_src, uint32_t src_rows, const BufferPtr& ids,
                uint32_t n, uint32_t cols, const BufferPtr& y, uint32_t ld_out);
    void router_topk(Recorder& r, const BufferPtr& logits, const BufferPtr& ids, const BufferPtr& weights,
                     uint32_t T, uint32_t E, uint32_t k, bool renormalize);
    void kv_write(Recorder& r, const BufferPtr& k, const BufferPtr& v, const BufferPtr& k_cache,
                  const BufferPtr& v_cache, uint32_t T, uint32_t row, uint32_t pos0);
    // scores: scratch of at least T * Hq * (pos0 + T) floats
    void attention(Recorder& r, const BufferPtr& q, const BufferPtr& k_cache, const BufferPtr& v_cache,
                   const BufferPtr& scores, const BufferPtr& out, uint32_t T, uint32_t Hq, uint32_t Hk,
                   uint32_t D, uint32_t pos0, float scale);
    void gdn_window(Recorder& r, const BufferPtr& q, const BufferPtr& k, const BufferPtr& v, const BufferPtr& g,
                    const BufferPtr& beta, const BufferPtr& state, const BufferPtr& out, uint32_t T,
                    uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv, uint32_t commit_rows, float scale);
    // The engine's GDN split: inputs from the conv output, then the step from S0 into S.
    void gdn_inputs(Recorder& r, const BufferPtr& conv, const BufferPtr& b, const BufferPtr& a, uint32_t ld_ba,
                    const BufferPtr& A, const BufferPtr& dt_bias, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk,
                    uint32_t Dv, const BufferPtr& q, const BufferPtr& k, const BufferPtr& v, const BufferPtr& decay,
                    const BufferPtr& beta);
    void gdn_step(Recorder& r, const BufferPtr& S0, const BufferPtr& S, const BufferPtr& q, const BufferPtr& k,
                  const BufferPtr& v, const BufferPtr& decay, const BufferPtr& beta, const BufferPtr& out, uint32_t T,
                  uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv);
    // shared / shared_gate may be null (no shared expert)
    void moe_combine(Recorder& r, const BufferPtr& D, uint32_t d_rows, const BufferPtr& slot, const BufferPtr& w,
                     uint32_t T, uint32_t k, uint32_t H, const BufferPtr& shared, const BufferPtr& shared_gate,
                     const BufferPtr& out);
    // hist: [Kc-1][C], oldest first
    void causal_conv(Recorder& r, const BufferPtr& x, const BufferPtr& w, const BufferPtr& hist,
                     const BufferPtr& y, uint32_t T, uint32_t C, uint32_t Kc, uint32_t commit_rows);

private:
    const Pipeline& pipeline(const std::string& file, const std::string& entry, ShaderDefines extra = {});
    uint32_t stride_groups(uint64_t n) const;  // workgroups for a grid-stride loop over n items
    Device& device_;
};

}  // namespace strata::webgpu
