// GGUF block formats on the webgpu backend: how a quantized weight row is laid out on the device
// (shaders/matmul_quant.wgsl reads it) and what the kernels need to know per format. GGUF blocks
// are not all whole 32-bit words (Q8_0 is 34 bytes, Q5_0 22, Q6_K 210), so rows are repacked on
// upload: Q4_K, Q5_K, Q5_1 and IQ4_XS blocks are whole words already and keep GGUF's bytes; Q8_0, Q5_0 and
// Q6_K blocks lose their f16 scale `d`, which moves to a region of f16 pairs after the row's
// blocks. No value changes, and the device row is the stored row's size rounded up to a word
// (plus at most one pad f16).
#pragma once
#include <cstdint>

#include "webgpu/kernels.h"

namespace strata::webgpu {

struct QuantLayout {
    int fmt_id;             // the shader's FMT: 0 Q8_0, 1 Q5_0, 2 Q5_1, 3 Q4_K, 4 Q5_K, 5 Q6_K, 6 IQ4_XS
    uint32_t block_elems;   // weights per block (32 or 256); also the activation block
    uint32_t block_bytes;   // GGUF bytes per block
    uint32_t payload_words; // device words per block (without a moved scale)
    int32_t d_byte;         // byte of the f16 scale moved to the scale region; -1: none moved
    bool act_sums;          // the activation blocks carry ggml's Q8_1 sums (Q5_1)
};

bool is_quant(WeightFormat f);
// Throws std::invalid_argument for a float format.
const QuantLayout& quant_layout(WeightFormat f);
// u32 words of one device row of `cols` weights (cols a whole number of blocks).
uint32_t quant_row_words(WeightFormat f, uint32_t cols);
// One GGUF row (cols / block_elems blocks at src) into quant_row_words words at dst.
void repack_quant_row(WeightFormat f, const uint8_t* src, uint32_t cols, uint32_t* dst);
// Words of the quantized activations of T rows of K values (codes, block scales, per-32 sums),
// and where the scales and the sums start in them.
uint64_t quant_act_words(WeightFormat f, uint32_t T, uint32_t K);
uint64_t quant_act_scales_at(uint32_t T, uint32_t K);
uint64_t quant_act_sums_at(WeightFormat f, uint32_t T, uint32_t K);
// Threads per weight row of the quantized matmuls: one per float lane of the CPU's kernel (8 for
// the 256-blocks; 32, four groups of 8, for the 32-blocks).
inline uint32_t quant_lanes(const QuantLayout& L) { return L.block_elems == 32 ? 32 : 8; }

}  // namespace strata::webgpu
