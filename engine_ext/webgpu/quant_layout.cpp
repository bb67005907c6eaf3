#include "webgpu/quant_layout.h"

#include <cstring>
#include <stdexcept>

namespace strata::webgpu {

namespace {

// fmt_id, block elems, GGUF block bytes, payload words, moved d byte, activation sums
const QuantLayout kQ8_0{0, 32, 34, 8, 0, false};
const QuantLayout kQ5_0{1, 32, 22, 5, 0, false};
const QuantLayout kQ5_1{2, 32, 24, 6, -1, true};
const QuantLayout kQ4_K{3, 256, 144, 36, -1, false};
const QuantLayout kQ5_K{4, 256, 176, 44, -1, false};
const QuantLayout kQ6_K{5, 256, 210, 52, 208, false};
const QuantLayout kIQ4_XS{6, 256, 136, 34, -1, false};

}  // namespace

bool is_quant(WeightFormat f) {
    return f == WeightFormat::Q8_0 || f == WeightFormat::Q5_0 || f == WeightFormat::Q5_1 || f == WeightFormat::Q4_K ||
           f == WeightFormat::Q5_K || f == WeightFormat::Q6_K || f == WeightFormat::IQ4_XS;
}

const QuantLayout& quant_layout(WeightFormat f) {
    switch (f) {
        case WeightFormat::Q8_0: return kQ8_0;
        case WeightFormat::Q5_0: return kQ5_0;
        case WeightFormat::Q5_1: return kQ5_1;
        case WeightFormat::Q4_K: return kQ4_K;
        case WeightFormat::Q5_K: return kQ5_K;
        case WeightFormat::Q6_K: return kQ6_K;
        case WeightFormat::IQ4_XS: return kIQ4_XS;
        default: throw std::invalid_argument("webgpu: not a block format");
    }
}

uint32_t quant_row_words(WeightFormat f, uint32_t cols) {
    const QuantLayout& L = quant_layout(f);
    if (cols == 0 || cols % L.block_elems)
        throw std::invalid_argument("webgpu weights: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(L.block_elems));
    const uint32_t nb = cols / L.block_elems;
    return nb * L.payload_words + (L.d_byte >= 0 ? (nb + 1) / 2 : 0);
}

void repack_quant_row(WeightFormat f, const uint8_t* src, uint32_t cols, uint32_t* dst) {
    const QuantLayout& L = quant_layout(f);
    const uint32_t nb = cols / L.block_elems, words = quant_row_words(f, cols);
    std::memset(dst, 0, size_t(words) * 4);
    auto* out = reinterpret_cast<uint8_t*>(dst);  // little-endian words, as the device reads them
    for (uint32_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + size_t(b) * L.block_bytes;
        uint8_t* pay = out + size_t(b) * L.payload_words * 4;
        if (L.d_byte < 0) {
            std::memcpy(pay, blk, L.block_bytes);
            continue;
        }
        // the block without its two scale bytes, then the scale into the row's f16 region
        const uint32_t d = uint32_t(L.d_byte);
        std::memcpy(pay, blk, d);
        std::memcpy(pay + d, blk + d + 2, L.block_bytes - d - 2);
        std::memcpy(out + size_t(nb) * L.payload_words * 4 + size_t(b) * 2, blk + d, 2);
    }
}

uint64_t quant_act_scales_at(uint32_t T, uint32_t K) { return uint64_t(T) * (K / 4); }

uint64_t quant_act_sums_at(WeightFormat f, uint32_t T, uint32_t K) {
    return quant_act_scales_at(T, K) + uint64_t(T) * (K / quant_layout(f).block_elems);
}

uint64_t quant_act_words(WeightFormat f, uint32_t T, uint32_t K) { return quant_act_sums_at(f, T, K) + uint64_t(T) * (K / 32); }

}  // namespace strata::webgpu
