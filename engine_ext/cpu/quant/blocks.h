// Decoders for one GGUF block each, shared by dequantize_row and the dot kernels.
// The arithmetic mirrors gguf-py's NumPy dequantizer operation for operation (products in
// f32, no fused multiply-add: this folder is compiled with -ffp-contract=off), which is what
// makes dequantization bit-identical to it.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace strata::quant {

constexpr int kQK = 256;   // weights per K-quant / IQ4_XS super-block
constexpr int kQ8 = 32;    // weights per Q8_0 block

inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else {  // subnormal half: normalise
            int shift = 0;
            while ((mant & 0x400) == 0) {
                mant <<= 1;
                ++shift;
            }
            u = sign | (uint32_t(127 - 15 - shift + 1) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

// f32 -> f16, round to nearest even (as F16C's vcvtps2ph with rounding mode 0), overflow to
// infinity, subnormal halves included; NaN becomes a quiet NaN of the same sign.
inline uint16_t float_to_half(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);
    if (a >= 0x47800000u) return uint16_t(sign | 0x7c00);  // >= 2^16 (and inf): infinity
    if (a < 0x38800000u) {  // below 2^-14: a subnormal half m * 2^-24, m = rne(|f| * 2^24)
        float s;
        std::memcpy(&s, &a, 4);
        const float m = s * 16777216.0f;  // exact: a power-of-two scaling of a tiny float
        const float big = 8388608.0f;     // 2^23: (m + big) - big rounds m half to even
        return uint16_t(sign | uint16_t((m + big) - big));
    }
    const uint32_t mant = a & 0x7fffffu, rem = mant & 0x1fffu;
    uint32_t h = (((a >> 23) - 112u) << 10) | (mant >> 13);
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry may reach the exponent or inf
    return uint16_t(sign | h);
}

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);  // GGUF is little-endian, as is every host strata builds for
    return v;
}

inline float bf16_bits_to_float(uint16_t v) {
    const uint32_t u = uint32_t(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Q8_0: f16 d, int8 q[32]; w = q * d.
inline void decode_q8_0(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b));
    const int8_t* q = reinterpret_cast<const int8_t*>(b + 2);
    for (int i = 0; i < kQ8; ++i) out[i] = float(q[i]) * d;
}

// The five-bit code (0..31) of weight i of a Q5_0 / Q5_1 block, from its 32 high bits (u32 at
// `high`, bit i for weight i) and the 16 bytes of nibbles after them (weights 0-15 in the low
// nibbles, 16-31 in the high ones).
inline int q5_code(const uint8_t* high, int i) {
    uint32_t qh;
    std::memcpy(&qh, high, 4);
    const int lo = i < 16 ? (high[4 + i] & 0x0f) : (high[4 + i - 16] >> 4);
    return lo | int(((qh >> i) & 1) << 4);
}

// Q5_0: f16 d, then the high bits and nibbles; w = (q - 16) * d.
inline int q5_0_value(const uint8_t* b, int i) { return q5_code(b + 2, i) - 16; }
inline void decode_q5_0(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b));
    for (int i = 0; i < kQ8; ++i) out[i] = d * float(q5_0_value(b, i));
}

// Q5_1: f16 d, f16 m, then the high bits and nibbles as Q5_0's; the codes are unsigned and
// w = d * q + m.
inline int q5_1_code(const uint8_t* b, int i) { return q5_code(b + 4, i); }
inline void decode_q5_1(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b)), m = half_to_float(load_u16(b + 2));
    for (int i = 0; i < kQ8; ++i) out[i] = d * float(q5_1_code(b, i)) + m;
}

// The 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes of Q4_K / Q5_K:
// bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the
// same for mins; bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and mins 4-7 (high).
inline void k_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// All eight scales and mins at once, four bytes at a time (the same values as k_scale_min).
inline void k_scales_mins(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
    uint32_t a[3];
    std::memcpy(a, s, 12);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t s03 = a[0] & lo6, m03 = a[1] & lo6;
    const uint32_t s47 = (a[2] & lo4) | (((a[0] >> 6) & lo2) << 4);
    const uint32_t m47 = ((a[2] >> 4) & lo4) | (((a[1] >> 6) & lo2) << 4);
    std::memcpy(sc, &s03, 4);
    std::memcpy(sc + 4, &s47, 4);
    std::memcpy(mn, &m03, 4);
    std::memcpy(mn + 4, &m47, 4);
}

// Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 bytes of nibbles. Sub-blocks of 32; byte group
// g (32 bytes) holds sub-block 2g in its low nibbles and 2g+1 in its high nibbles.
// w = (d*sc) * q - (dmin*m).
inline void decode_q4_k(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    for (int j = 0; j < 8; ++j) {
        int sc, mn;
        k_scale_min(scales, j, &sc, &mn);
        const float ds = d * float(sc), dm = dmin * float(mn);
        const uint8_t* g = qs + 32 * (j >> 1);
        const int shift = 4 * (j & 1);
        for (int i = 0; i < 32; ++i) out[32 * j + i] = ds * float((g[i] >> shift) & 0x0f) - dm;
    }
}

// Q5_K: as Q4_K plus 32 bytes of high bits: bit j of byte i is the fifth bit of weight i of
// sub-block j.
inline void decode_q5_k(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b)), dmin = half_to_float(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48;
    for (int j = 0; j < 8; ++j) {
        int sc, mn;
        k_scale_min(scales, j, &sc, &mn);
        const float ds = d * float(sc), dm = dmin * float(mn);
        const uint8_t* g = qs + 32 * (j >> 1);
        const int shift = 4 * (j & 1);
        for (int i = 0; i < 32; ++i) {
            const int q = ((g[i] >> shift) & 0x0f) | (((qh[i] >> j) & 1) << 4);
            out[32 * j + i] = ds * float(q) - dm;
        }
    }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8 scales (one per 16
// weights), f16 d. Each half of 128 weights uses 64 low bytes and 32 high bytes; its quarter s
// (32 weights) takes nibble s>>1 of low bytes 32*(s&1).. and bits 2s..2s+1 of the high bytes.
// w = (d*scale) * (q - 32).
inline void decode_q6_k(const uint8_t* b, float* out) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half_to_float(load_u16(b + 208));
    float ds[16];
    for (int k = 0; k < 16; ++k) ds[k] = d * float(scales[k]);
    for (int half = 0; half < 2; ++half) {
        const uint8_t* l = ql + 64 * half;
        const uint8_t* h = qh + 32 * half;
        for (int s = 0; s < 4; ++s) {
            const uint8_t* lo = l + 32 * (s & 1);
            const int lshift = 4 * (s >> 1);
            const int base = 128 * half + 32 * s;
            for (int i = 0; i < 32; ++i) {
                const int q = (((lo[i] >> lshift) & 0x0f) | (((h[i] >> (2 * s)) & 3) << 4)) - 32;
                out[base + i] = ds[(base + i) >> 4] * float(q);
            }
        }
    }
}

// The 16 non-linear levels of IQ4_NL / IQ4_XS.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_XS: f16 d, u16 high scale bits (2 per sub-block), 4 bytes of low scale nibbles, 128
// bytes of level indices. Sub-block j (32 weights) uses bytes 16j..16j+15: low nibbles are
// weights 0-15, high nibbles 16-31. w = (d*(scale-32)) * level.
inline void decode_iq4_xs(const uint8_t* b, float* out) {
    const float d = half_to_float(load_u16(b));
    const uint16_t sh = load_u16(b + 2);
    const uint8_t* sl = b + 4;
    const uint8_t* qs = b + 8;
    for (int j = 0; j < 8; ++j) {
        const int ls = ((sl[j >> 1] >> (4 * (j & 1))) & 0x0f) | (((sh >> (2 * j)) & 3) << 4);
        const float dl = d * float(ls - 32);
        const uint8_t* g = qs + 16 * j;
        for (int i = 0; i < 16; ++i) {
            out[32 * j + i] = dl * float(kIq4Levels[g[i] & 0x0f]);
            out[32 * j + 16 + i] = dl * float(kIq4Levels[g[i] >> 4]);
        }
    }
}

}  // namespace strata::quant
