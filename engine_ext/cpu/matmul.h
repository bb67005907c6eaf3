// CPU matrix products over weight formats. Every output element is computed by one fixed code
// path whatever the number of rows T, the tile shape or the thread count.
#pragma once
#include <vector>

#include "backend.h"
#include "format.h"
#include "threadpool.h"

namespace strata {

// The CPU kernels of one weight format. A format joins the CPU backend by registering these
// (register_cpu_format); F32 and BF16 are built in, F16 is converted to F32 at load.
struct CpuFormatKernels {
    // Y[t*ldy + r] = dot(X[t*ldx ..], row r of W) (+ bias[r]) for r in [r0, r1), t < T, with one
    // fixed reduction order per output element, independent of T and of [r0, r1).
    void (*matmul_range)(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y,
                         int ldy, int r0, int r1) = nullptr;
    // One row of W as f32 (embedding gather).
    void (*row_to_f32)(const MatView& W, int row, float* out) = nullptr;
    // Optional prefill kernel (prefill mode, jobs of more than 64 rows): same
    // contract, its own fixed order, checked with a tolerance, not bit-identical to
    // matmul_range; ranges [r0, r1) should be multiples of gemm_block. Null: matmul_range.
    void (*gemm_range)(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y, int ldy,
                       int r0, int r1) = nullptr;
    int gemm_block = 4;
};
void register_cpu_format(WFormat f, const CpuFormatKernels& k);
const CpuFormatKernels& cpu_format_kernels(WFormat f);

// Dispatches to the format's kernel (throws for a format without one).
void matmul_range(const float* X, int T, int ldx, const MatView& W, const float* bias, float* Y,
                  int ldy, int r0, int r1);
// Runs every job, splitting each over its output rows (never over the reduction axis).
void matmul_jobs(ThreadPool& pool, const std::vector<MatJob>& jobs, bool prefill = false);

// Fixed-order dot product of two f32 vectors (same scheme as the f32 matmul).
float dot_f32(const float* a, const float* b, int n);

// Y[t*ldy + r] = dot_f32(X + t*ldx, W + r*ldw, cols) for t < T, r in [r0, r1), bit for bit,
// computed with the f32 matmul's tiles (each W row read once for all T rows). Single-threaded.
void dot_rows_f32(const float* X, int T, int ldx, const float* W, int ldw, int cols, float* Y, int ldy, int r0,
                  int r1);

}  // namespace strata
