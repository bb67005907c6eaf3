// Dot kernels for the block formats with int8 activations: each input row is quantized per
// block (32 weights for Q8_0 / Q5_0 / Q5_1, 256 for the K-quants and IQ4_XS) as llama.cpp's CPU
// backend does (quantize_activation), and the weight x activation products are summed in int32
// (exact, so the order of those sums does not matter); only the per-block scale products (and
// Q5_1's min x block sum) are float, accumulated over blocks in one fixed order into 8 lanes and
// summed by one fixed tree. The scalar, AVX2 and
// AVX-512 builds compute the same integers and the same float operations: their results are
// identical, and a row's result never depends on T or the other rows.
#pragma once
#include <cstddef>
#include <cstdint>

#include "formats.h"

namespace strata::quant {

// True for the formats that take this path.
bool uses_int8_activations(QType t);

// Activation block size for a weight format (32 or 256).
int activation_block(QType t);

// True where the activation blocks also carry their sum (ggml's Q8_1, the Q5_1 partner): the
// weights' min term multiplies it.
bool activation_sums(QType t);

// One activation row quantized per block of `block` values: q[cols], d[cols/block] and, for
// 256-blocks, the sums of each 16 quantized values (bsum16[cols/16]). For 32-blocks, sum32
// (optional, cols/32) gets ggml's Q8_1 block sum: f16(amax/127 * sum of q), the f32 scale
// before its f16 rounding times the exact integer sum, rounded to f16 (to nearest even).
void quantize_activation(const float* x, int cols, int block, int8_t* q, float* d, int16_t* bsum16,
                         float* sum32 = nullptr);

// The AVX-512 VNNI kernels (dot_int8_vnni.cpp): the same integers and float steps as the kernels
// above, computed 64 bytes at a time. False when this build has no VNNI or the format has no such
// kernel (then the AVX2 kernel runs, with the same result).
bool dot_rows_int8_vnni(QType t, const float* X, int T, int ldx, const uint8_t* W, size_t row_bytes, int cols,
                        float* Y, int ldy, int r0, int r1);

void dot_rows_int8(QType t, const float* X, int T, int ldx, const uint8_t* W, size_t row_bytes, int cols,
                   float* Y, int ldy, int r0, int r1, Isa isa);

}  // namespace strata::quant
