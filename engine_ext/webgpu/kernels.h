// The WGSL kernels of shaders/, one recording function per op: each appends its dispatches to
// a window's Recorder (nothing runs until Recorder::submit). Shapes are checked here, with a
// one-line error naming the op and the argument.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "webgpu/device.h"
#include "webgpu/weight_pool.h"

namespace strata::webgpu {

// The float formats, then the GGUF block formats (quant_layout.h: their device rows).
enum class WeightFormat { F32, F16, BF16, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_XS };
// "f32" | "f16" | "bf16" | "q8_0" | "q5_0" | "q5_1" | "q4_k" | "q5_k" | "q6_k" (any case)
WeightFormat parse_weight_format(const std::string& name);

// A row-major weight matrix on the device, split by rows into chunks no larger than the
// device's chunk size (binding limit, at most 1 GiB). A chunk is `bytes` of `buffer` from
// `offset`: a buffer of its own, or a slot of a WeightPool arena.
struct GpuMatrix {
    WeightFormat format = WeightFormat::F32;
    uint32_t rows = 0, cols = 0, row_words = 0;
    struct Chunk {
        uint32_t row0, rows;
        BufferPtr buffer;
        uint64_t offset = 0, bytes = 0;
        BufRef ref() const { return BufRef(buffer, offset, bytes); }
    };
    std::vector<Chunk> chunks;
};

// `row_bytes` is the stride of the host rows (>= the packed row; a multiple of 4 on the device).
// With a pool the chunks take slots of its arenas, else a buffer each.
GpuMatrix upload_matrix(Device& device, const void* data, WeightFormat format, uint32_t rows, uint32_t cols,
                        uint64_t row_bytes, WeightPool* pool = nullptr);
// New contents of the same shape into the matrix's own chunks (no unsubmitted dispatch may read them).
void rewrite_matrix(Device& device, const GpuMatrix& m, const void* data, uint64_t row_bytes);

class Kernels {
public:
    static constexpr uint32_t kWorkgroup = 64;   // every kernel; fixed so results never depend on T
    static constexpr uint32_t kTokenBlock = 8;   // matmul rows per pass over a weight row
    static constexpr uint32_t kMaxExperts = 1024;
    static constexpr uint32_t kMaxStorageBuffers = 10;  // the most any kernel binds (gdn_inputs, routed)
    static constexpr uint32_t kGdnColumns = 16;  // state columns (threads) per gdn_window workgroup
    static constexpr uint32_t kGdnParts = 8;     // gdn_step: threads per state column
    // Norm rows at least this wide (the hidden size, not a head) take the norm workgroup size
    // (STRATA_WEBGPU_NORM_WG, default kNormWorkgroup): one workgroup per row, so a 2048 row is 32
    // values a thread at 64 and 8 at 256 (the NVIDIA A/B of 2026-12-05: 256 and 1024 decoded
    // faster than 64; 256 is within WebGPU's default limits, so every adapter has it). The size
    // depends on the row's width only, never on T, and every kernel of the norm family (norm,
    // norm_quant, moe_norm, norm_rotary) takes it by the same rule, so folded and unfolded paths
    // keep the same bits.
    static constexpr uint32_t kNormWideRow = 1024;
    static constexpr uint32_t kNormWorkgroup = 256;

    // The half-precision matmuls' row loop (STRATA_WEBGPU_XLOAD): lanes (default,
    // matmul_rows_lanes.wgsl): 4 weight rows per workgroup, 16 threads per row, x from storage;
    // direct (matmul_rows_direct.wgsl): one row per workgroup, 64 threads per row; staged
    // (matmul_rows.wgsl): 4 rows per workgroup, x staged in workgroup memory, the values of
    // direct, 7x slower than direct at T=1 on the H200 (2026-12-03)
    explicit Kernels(Device& device);
    // Weight rows per workgroup of the half-precision vec4 matmuls (4; 1 with XLOAD=direct).
    uint32_t rows_per_workgroup() const { return rb_; }
    Device& device() { return device_; }

    // y[T][m.rows] = x[T][m.cols] * m^T; x row t at x_off + t*x_stride (floats; 0: m.cols),
    // y row t at y_off + t*y_stride (0: m.rows)
    // Block formats: x is quantized into a buffer of its own first (quantize_rows), then
    // matmul_quant; the backend calls those two itself to reuse one quantized x across jobs.
    // glu (only where glu_ok(m, T)): x is a SwiGLU's two inputs, the value at index i being
    // silu(x[i]) * x[i + glu_off], each as the swiglu dispatch computes it (the same bits, one
    // dispatch fewer).
    void matmul(Recorder& r, const BufRef& x, uint32_t T, const GpuMatrix& m, const BufRef& y, uint32_t x_off = 0,
                uint32_t x_stride = 0, uint32_t y_off = 0, uint32_t y_stride = 0, bool glu = false,
                uint32_t glu_off = 0);
    // Whether a matmul of m over T rows can fold a SwiGLU into its reads of x: f16/bf16 rows of
    // whole vec4 words under the lanes loop (the default XLOAD), not the output head's lanes4.
    bool glu_ok(const GpuMatrix& m, uint32_t T) const;
    // The routed matmuls' folded SwiGLU: the lanes loop only.
    bool routed_glu_ok() const { return rows_file_ == "matmul_rows_lanes.wgsl"; }
    // The GGUF block formats (kernels_quant.cpp, shaders/matmul_quant.wgsl): x rows (T rows of K
    // floats from x_off, x_stride apart) to the int8 blocks the CPU backend computes with for
    // weights of format f, into xq (quant_act_words(f, T, K) words); then y = xq * m^T.
    void quantize_rows(Recorder& r, const BufRef& x, uint32_t x_off, uint32_t x_stride, uint32_t T, uint32_t K,
                       WeightFormat f, const BufRef& xq);
    // A producer that also quantizes the rows it writes (shaders/norm_quant.wgsl), one workgroup
    // per row of heads x D floats: entry rmsnorm_quant (x -> y), add_rmsnorm_quant (x += z,
    // x -> y), rmsnorm_gated_quant (z the gate; each of a row's heads normed alone) or
    // swiglu_quant (y = silu(x) * z; w unused) writes y as rmsnorm / add_rmsnorm / rmsnorm_gated /
    // elementwise swiglu do, and xq as quantize_rows(y, ..., f) does, bit for bit: one dispatch
    // for two. Only rmsnorm_gated_quant takes heads > 1.
    void quantizing_producer(Recorder& r, const char* entry, const BufRef& x, const BufRef& z, const BufRef& w,
                             const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset,
                             WeightFormat f, const BufRef& xq, uint32_t heads = 1);
    void matmul_quant(Recorder& r, const BufRef& xq, uint32_t T, const GpuMatrix& m, const BufRef& y,
                      uint32_t y_off = 0, uint32_t y_stride = 0);
    // matmul_quant of several matrices of one block format and width over one quantized x (q/k/v,
    // a shared expert's gate and up) in one dispatch: each job's chunks are entries of a table
    // (at most kQuantGatherEntries, weights in at most kGatherBuffers buffers), each job with its
    // own place in y (one y buffer). Each row runs matmul_quant's row code: equal bit for bit.
    struct QuantJob {
        const GpuMatrix* m;
        uint32_t y_off, y_stride;
    };
    static constexpr uint32_t kQuantGatherEntries = 32;
    void matmul_quant_gathered(Recorder& r, const BufRef& xq, uint32_t T, const BufRef& y,
                               const std::vector<QuantJob>& jobs);
    // Many products in one dispatch (a MoE layer's experts, q/k/v, router + shared expert):
    // single-chunk f16/bf16 matrices of one width whose rows are whole vec4<u32> (gather_ok),
    // lying in at most kGatherBuffers distinct buffers, each with its own rows of x (one x
    // buffer) and place in y (one y buffer). Each row's result equals matmul's bit for bit.
    struct GatherJob {
        const GpuMatrix* m;
        uint32_t T, x_off, x_stride, y_off, y_stride;
    };
    static constexpr uint32_t kGatherJobs = 128;
    static constexpr uint32_t kGatherBuffers = 4;
    static bool gather_ok(const GpuMatrix& m);
    // A gathered or routed dispatch binds its weights' buffers whole, at most kGatherBuffers:
    // the index of `buffer` among `bound` (added when new), -1 where it would be one too many;
    // and the kGatherBuffers weight bindings appended to `b` (the last repeated where fewer).
    static int weight_binding(std::vector<BufRef>& bound, const BufferPtr& buffer);
    static void push_weight_bindings(std::vector<BufRef>& b, const std::vector<BufRef>& bound);
    // The same for single-chunk f32 matrices (matmul_f32_gathered.wgsl: GGUF's router and shared
    // expert gate), at most kGatherF32Jobs, each row equal to matmul's bit for bit.
    static constexpr uint32_t kGatherF32Jobs = 16;
    static bool gather_f32_ok(const GpuMatrix& m);
    void matmul_f32_gathered(Recorder& r, const BufRef& x, const BufRef& y, const std::vector<GatherJob>& jobs);
    void matmul_gathered(Recorder& r, const BufRef& x, const BufRef& y, const std::vector<GatherJob>& jobs);
    // Matrices chosen on the device (matmul_gathered.wgsl's matmul_half_v4_routed): for each of
    // `pairs` (token, rank) pairs, expert ids[ids_off + p] and its matrices from `table` ((buffer
    // index, vec4 index) per expert and matrix: gate, up, down), weights in at most
    // kGatherBuffers buffers. Gate and up (mat0 0): rows_per_pair 2I, half_rows I, gate rows to
    // y_off, up rows to y_off2; down (mat0 2): rows_per_pair = half_rows = H. Pair p's outputs
    // start at p * y_stride. ids_log (optional) gets each pair's expert. Each row equals
    // matmul's bit for bit.
    struct Routed {
        WeightFormat format;
        uint32_t pairs, k, K, row_words;
        uint32_t rows_per_pair, half_rows, mat0;
        uint32_t x_off, x_stride, x_per_pair, y_off, y_off2, y_stride, ids_off, n_experts;
        bool glu = false;      // (routed_glu_ok() only) x is silu(x) * (x glu_off floats on): a folded SwiGLU
        uint32_t glu_off = 0;
    };
    void matmul_routed(Recorder& r, const BufRef& x, const BufRef& y, const BufRef& ids, const BufRef& table,
                       const std::vector<BufRef>& weights, const BufRef& ids_log, const Routed& a);
    // matmul_routed for the block formats: the pairs' activation rows already quantized in xq
    // (row p / k, or p with x_per_pair; x_off / x_stride unused), table words are word offsets.
    void matmul_quant_routed(Recorder& r, const BufRef& xq, const BufRef& y, const BufRef& ids, const BufRef& table,
                             const std::vector<BufRef>& weights, const BufRef& ids_log, const Routed& a);
    // rows x heads vectors of D floats from (src_off, src_ld, src_hs) to (dst_off, dst_ld, dst_hs)
    void copy(Recorder& r, const BufRef& src, const BufRef& dst, uint32_t rows, uint32_t heads, uint32_t D,
              uint32_t src_off, uint32_t src_ld, uint32_t src_hs, uint32_t dst_off, uint32_t dst_ld, uint32_t dst_hs);
    // Up to kManyCopies such copies from two buffers (src2 may be src) into one (which may be
    // either) in one dispatch; a job reads src, or src2 where its `second` is 1.
    struct CopyJob {
        uint32_t rows, heads, D, src_off, src_ld, src_hs, dst_off, dst_ld, dst_hs;
        uint32_t second = 0;
    };
    static constexpr uint32_t kManyCopies = 16;
    void copy_many(Recorder& r, const BufRef& src, const BufRef& src2, const BufRef& dst,
                   const std::vector<CopyJob>& jobs);
    // rows = tokens x heads vectors of D; x of (token t, head h) at x_off + t * x_ld + h * x_hs
    // (0: packed, heads * D and D); y packed
    void rmsnorm(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& y, uint32_t rows,
                 uint32_t D, float eps, float weight_offset, uint32_t heads = 1, uint32_t x_off = 0,
                 uint32_t x_ld = 0, uint32_t x_hs = 0);
    // x += z, then y = rmsnorm(x) (each value as rmsnorm after add computes it)
    void add_rmsnorm(Recorder& r, const BufRef& x, const BufRef& z, const BufRef& w, const BufRef& y, uint32_t rows,
                     uint32_t D, float eps, float weight_offset);
    // rows = tokens x heads vectors of D; the gate of (token t, head h) at z_off + t * z_ld + h * z_hs
    // (0: packed, heads * D and D)
    void rmsnorm_gated(Recorder& r, const BufRef& x, const BufRef& z, const BufRef& w,
                       const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset, uint32_t heads = 1,
                       uint32_t z_off = 0, uint32_t z_ld = 0, uint32_t z_hs = 0);
    // x [T][heads][D] in place; cos_sin [T][2][rot_dim/2]
    void rotary(Recorder& r, const BufRef& x, const BufRef& cos_sin, uint32_t T, uint32_t heads,
                uint32_t D, uint32_t rot_dim);
    // rmsnorm (rows = T * heads, x where it lies), then rotary on the packed y (T rows of heads x
    // D), each value as those two kernels compute it (shaders/norm_rotary.wgsl)
    void rmsnorm_rotary(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& y, const BufRef& cos_sin,
                        uint32_t T, uint32_t heads, uint32_t D, float eps, uint32_t x_off, uint32_t x_ld,
                        uint32_t x_hs, uint32_t rot_dim);
    void embedding(Recorder& r, const BufRef& ids, uint32_t T, const GpuMatrix& table, const BufRef& y);
    // op: add, add_scaled, scale, silu, swiglu, sigmoid_mul, bias_add (b of bias_len floats,
    // repeated over the rows of a); b unused by scale and silu
    void elementwise(Recorder& r, const std::string& op, const BufRef& a, const BufRef& b,
                     const BufRef& y, uint32_t n, float s = 0.0f, uint32_t bias_len = 0);
    // y row t (stride ld_out) = the first `cols` floats of src row ids[t] (stride ld_src)
    void gather(Recorder& r, const BufRef& src, uint32_t ld_src, uint32_t src_rows, const BufRef& ids,
                uint32_t n, uint32_t cols, const BufRef& y, uint32_t ld_out);
    void router_topk(Recorder& r, const BufRef& logits, const BufRef& ids, const BufRef& weights,
                     uint32_t T, uint32_t E, uint32_t k, bool renormalize);
    void kv_write(Recorder& r, const BufRef& k, const BufRef& v, const BufRef& k_cache,
                  const BufRef& v_cache, uint32_t T, uint32_t row, uint32_t pos0);
    // scores: scratch of at least T * Hq * (pos0 + T) floats; with gate (laid out as out), each
    // output value times the sigmoid of its gate, as the sigmoid_mul kernel computes it
    void attention(Recorder& r, const BufRef& q, const BufRef& k_cache, const BufRef& v_cache,
                   const BufRef& scores, const BufRef& out, uint32_t T, uint32_t Hq, uint32_t Hk,
                   uint32_t D, uint32_t pos0, float scale, const BufRef& gate = BufRef());
    void gdn_window(Recorder& r, const BufRef& q, const BufRef& k, const BufRef& v, const BufRef& g,
                    const BufRef& beta, const BufRef& state, const BufRef& out, uint32_t T,
                    uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv, uint32_t commit_rows, float scale);
    // The engine's GDN split: inputs from the conv output (b and a rows from b_off / a_off of
    // their buffers, ld_ba apart), then the step from S0 into S.
    void gdn_inputs(Recorder& r, const BufRef& conv, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                    const BufRef& A, const BufRef& dt_bias, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk,
                    uint32_t Dv, const BufRef& q, const BufRef& k, const BufRef& v, const BufRef& decay,
                    const BufRef& beta, uint32_t b_off = 0, uint32_t a_off = 0);
    void gdn_step(Recorder& r, const BufRef& S0, const BufRef& S, const BufRef& q, const BufRef& k,
                  const BufRef& v, const BufRef& decay, const BufRef& beta, const BufRef& out, uint32_t T,
                  uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv);
    // gdn_inputs then gdn_step in one dispatch, the step inputs not written (shaders/gdn_fused.wgsl);
    // out and S as the two kernels compute them. Needs Dk a multiple of kGdnParts.
    void gdn_inputs_step(Recorder& r, const BufRef& conv, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                         const BufRef& A, const BufRef& dt_bias, const BufRef& S0, const BufRef& S,
                         const BufRef& out, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv,
                         uint32_t b_off, uint32_t a_off);
    // causal_conv (kernel Kc, history hist, input rows x at x_off + t * ldx), then gdn_inputs_step
    // in one dispatch, the conv output not written either (shaders/gdn_conv_fused.wgsl).
    void conv_gdn_inputs_step(Recorder& r, const BufRef& x, uint32_t x_off, uint32_t ldx, const BufRef& w,
                              const BufRef& hist, uint32_t Kc, const BufRef& b, const BufRef& a, uint32_t ld_ba,
                              const BufRef& A, const BufRef& dt_bias, const BufRef& S0, const BufRef& S,
                              const BufRef& out, uint32_t T, uint32_t Hk, uint32_t Hv, uint32_t Dk, uint32_t Dv,
                              uint32_t b_off, uint32_t a_off);
    // shared / shared_gate may be null (no shared expert)
    void moe_combine(Recorder& r, const BufRef& D, uint32_t d_rows, const BufRef& slot, const BufRef& w,
                     uint32_t T, uint32_t k, uint32_t H, const BufRef& shared, const BufRef& shared_gate,
                     const BufRef& out);
    // moe_combine (without writing its output), then add_rmsnorm: x[t] += combine(t), y[t] =
    // rmsnorm(x[t]) * nw, each value as those two kernels compute it (shaders/moe_norm.wgsl)
    void moe_combine_add_rmsnorm(Recorder& r, const BufRef& D, uint32_t d_rows, const BufRef& slot,
                                 const BufRef& w, uint32_t T, uint32_t k, uint32_t H, const BufRef& shared,
                                 const BufRef& shared_gate, const BufRef& x, const BufRef& nw, const BufRef& y,
                                 float eps);
    // hist: [Kc-1][C], oldest first; x row t at x_off + t * ldx (0: C); x_rows (optional): the
    // T input rows again, packed
    void causal_conv(Recorder& r, const BufRef& x, const BufRef& w, const BufRef& hist,
                     const BufRef& y, uint32_t T, uint32_t C, uint32_t Kc, uint32_t commit_rows,
                     uint32_t x_off = 0, uint32_t ldx = 0, const BufRef& x_rows = nullptr);

private:
    const Pipeline& pipeline(const std::string& file, const std::string& entry, ShaderDefines extra = {});
    // `extra` with the workgroup size of a norm-family kernel over rows of D values (kNormWideRow)
    ShaderDefines norm_defines(uint32_t D, ShaderDefines extra = {}) const;
    uint32_t norm_wg_ = kNormWorkgroup;
    // pipeline()'s answers by a hash of its arguments: a dispatch finds its pipeline without the
    // added defines and the device's key string being built again
    struct Known {
        std::string file, entry;
        ShaderDefines extra;
        const Pipeline* pipeline;
    };
    std::unordered_map<uint64_t, std::vector<Known>> known_;
    void norm_with(Recorder& r, const char* entry, const char* z_name, const BufRef& x, const BufRef& z,
                   const BufRef& w, const BufRef& y, uint32_t rows, uint32_t D, float eps, float weight_offset);
    uint32_t stride_groups(uint64_t n) const;  // workgroups for a grid-stride loop over n items
    // A matrix of at least kHeadRows rows is an output head (no projection is that tall): under
    // the lanes loop its T = 2..8 matmuls run the lanes4 loop (kLanes4Rows rows per workgroup).
    static constexpr uint32_t kHeadRows = 32768;
    static constexpr uint32_t kLanes4Rows = 16;
    bool head_lanes4(uint32_t rows, uint32_t T) const;
    // Window-row split (STRATA_WEBGPU_ROW_SPLIT, unset: on): a half-precision vec4 matmul of
    // fewer than kSplitGroups row groups (workgroups) spreads its T rows of x over `slices`
    // workgroups per row group, t_per rows each, so a narrow matrix fills the GPU at T > 1. Each
    // row of x is summed on its own, so the split changes no bit.
    static constexpr uint64_t kSplitGroups = 2048;
    struct Split {
        uint32_t slices, t_per;
    };
    Split row_split(uint64_t groups, uint32_t T) const;
    bool split_ = true;
    Device& device_;
    std::string rows_file_ = "matmul_rows_lanes.wgsl";
    uint32_t rb_ = 4;
    // The lanes loop also binds x as vec4 (binding kX4Binding) and reads it so where the rows
    // of x start on 16-byte boundaries (x_vec4: 1 for such an offset and stride).
    bool x4_ = false;
    static constexpr uint32_t kX4Binding = 12;
    uint32_t x_vec4(uint32_t x_off, uint32_t x_stride) const;
    std::vector<BufRef> with_x4(std::vector<BufRef> b, const BufRef& x) const;
};

}  // namespace strata::webgpu
