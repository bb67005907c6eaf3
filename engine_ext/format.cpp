#include "format.h"

#include <atomic>

#include <cctype>
#include <cstring>

namespace strata {

namespace {
// GGUF block geometry (ggml's type traits): Q8_0 = f16 scale + 32 int8; Q5_0 = f16 scale + 4 bytes
// of fifth bits + 16 bytes of nibbles, Q5_1 the same with an f16 min after the scale; the K formats are
// 256-element super-blocks; IQ4_XS = f16 scale + 16-bit high scales + 4 bytes of low scales +
// 128 bytes of 4-bit indices.
const FormatInfo kInfo[kFormatCount] = {
    {"F32", 1, 4, false},     {"BF16", 1, 2, false},  {"F16", 1, 2, false},  {"Q8_0", 32, 34, true},
    {"Q4_K", 256, 144, true}, {"Q5_K", 256, 176, true}, {"Q6_K", 256, 210, true}, {"IQ4_XS", 256, 136, true},
    {"Q5_0", 32, 22, true},  // Q4_K_M files use it where rows are not whole 256-blocks
    {"Q5_1", 32, 24, true},  // and Q5_K_M files this
};
}  // namespace

const FormatInfo& format_info(WFormat f) { return kInfo[int(f)]; }

bool format_from_name(const std::string& name, WFormat& out) {
    std::string up(name);
    for (auto& c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
    for (int i = 0; i < kFormatCount; ++i)
        if (up == kInfo[i].name) {
            out = WFormat(i);
            return true;
        }
    return false;
}

int64_t format_row_bytes(WFormat f, int64_t cols) {
    const FormatInfo& fi = format_info(f);
    if (cols < 0 || cols % fi.block_elems != 0) return -1;
    return cols / fi.block_elems * fi.block_bytes;
}

uint64_t new_content_version() {
    static std::atomic<uint64_t> next{0};
    return ++next;
}

MatView make_mat(const void* data, WFormat format, int rows, int cols) {
    MatView m;
    m.data = data;
    m.format = format;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = size_t(format_row_bytes(format, cols));
    return m;
}

float bf16_to_f32(uint16_t v) {
    uint32_t u = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // subnormal
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400) == 0);
            mant &= 0x3ff;
            u = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace strata
