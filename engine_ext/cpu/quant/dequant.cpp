#include <stdexcept>

#include "blocks.h"
#include "formats.h"

namespace strata::quant {

bool is_supported(int t) {
    for (QType s : kSupportedTypes)
        if (int(s) == t) return true;
    return false;
}

Geometry geometry(QType t) {
    switch (t) {
        case QType::F32: return {1, 4};
        case QType::F16: return {1, 2};
        case QType::BF16: return {1, 2};
        case QType::Q5_0: return {kQ8, 22};
        case QType::Q5_1: return {kQ8, 24};
        case QType::Q8_0: return {kQ8, 34};
        case QType::Q4_K: return {kQK, 144};
        case QType::Q5_K: return {kQK, 176};
        case QType::Q6_K: return {kQK, 210};
        case QType::IQ4_XS: return {kQK, 136};
    }
    throw std::invalid_argument("unsupported ggml type " + std::to_string(int(t)));
}

const char* type_name(QType t) {
    switch (t) {
        case QType::F32: return "F32";
        case QType::F16: return "F16";
        case QType::BF16: return "BF16";
        case QType::Q5_0: return "Q5_0";
        case QType::Q5_1: return "Q5_1";
        case QType::Q8_0: return "Q8_0";
        case QType::Q4_K: return "Q4_K";
        case QType::Q5_K: return "Q5_K";
        case QType::Q6_K: return "Q6_K";
        case QType::IQ4_XS: return "IQ4_XS";
    }
    return "?";
}

QType parse_type(const std::string& name) {
    std::string up;
    for (char c : name) up += char((c >= 'a' && c <= 'z') ? c - 32 : c);
    std::string known;
    for (QType t : kSupportedTypes) {
        if (up == type_name(t)) return t;
        known += (known.empty() ? "" : ", ") + std::string(type_name(t));
    }
    throw std::invalid_argument("unknown weight format '" + name + "' (" + known + ")");
}

size_t row_bytes(QType t, int64_t cols) {
    const Geometry g = geometry(t);
    if (cols <= 0 || cols % g.block_elems != 0)
        throw std::invalid_argument(std::string(type_name(t)) + " row of " + std::to_string(cols) +
                                    " weights is not a whole number of " +
                                    std::to_string(g.block_elems) + "-weight blocks");
    return size_t(cols / g.block_elems) * size_t(g.block_bytes);
}

void dequantize_row(QType t, const void* src, int64_t cols, float* out) {
    const uint8_t* p = static_cast<const uint8_t*>(src);
    const Geometry g = geometry(t);
    const int64_t nb = cols / g.block_elems;
    switch (t) {
        case QType::F32:
            std::memcpy(out, p, size_t(cols) * 4);
            return;
        case QType::F16:
            for (int64_t i = 0; i < cols; ++i) out[i] = half_to_float(load_u16(p + 2 * i));
            return;
        case QType::BF16:
            for (int64_t i = 0; i < cols; ++i) out[i] = bf16_bits_to_float(load_u16(p + 2 * i));
            return;
        case QType::Q5_0:
            for (int64_t b = 0; b < nb; ++b) decode_q5_0(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::Q5_1:
            for (int64_t b = 0; b < nb; ++b) decode_q5_1(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::Q8_0:
            for (int64_t b = 0; b < nb; ++b) decode_q8_0(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::Q4_K:
            for (int64_t b = 0; b < nb; ++b) decode_q4_k(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::Q5_K:
            for (int64_t b = 0; b < nb; ++b) decode_q5_k(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::Q6_K:
            for (int64_t b = 0; b < nb; ++b) decode_q6_k(p + b * g.block_bytes, out + b * g.block_elems);
            return;
        case QType::IQ4_XS:
            for (int64_t b = 0; b < nb; ++b) decode_iq4_xs(p + b * g.block_bytes, out + b * g.block_elems);
            return;
    }
}

}  // namespace strata::quant
