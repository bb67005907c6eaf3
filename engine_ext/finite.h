// Finite-value check for weights as they are mapped or read: a NaN or Inf weight would turn
// every logit into NaN much later, far from its cause, so the engine refuses it where it enters.
// The check looks only at exponent bits (all ones = NaN or Inf) in a branch-free loop that the
// compiler vectorises; it returns where the first bad value is.
#pragma once
#include <cstdint>
#include <cstring>

#include "format.h"

namespace strata {

namespace detail {
template <typename U>
inline int64_t first_all_ones(const uint8_t* p, int64_t n, U mask) {
    constexpr int64_t kBlock = 4096;  // early exit granularity; the inner loop vectorises
    for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t e = b + kBlock < n ? b + kBlock : n;
        int bad = 0;
        for (int64_t i = b; i < e; ++i) {
            U v;
            std::memcpy(&v, p + i * int64_t(sizeof(U)), sizeof(U));
            bad |= (v & mask) == mask;
        }
        if (bad)
            for (int64_t i = b; i < e; ++i) {
                U v;
                std::memcpy(&v, p + i * int64_t(sizeof(U)), sizeof(U));
                if ((v & mask) == mask) return i;
            }
    }
    return -1;
}
}  // namespace detail

// Index of the first NaN/Inf among `n` values of a float format at `p`, or -1 when all are
// finite. Block formats are not scanned here (their f16 scales are a small part of the bytes;
// a NaN scale shows up as NaN logits and is left to a later check).
inline int64_t first_non_finite(const void* p, int64_t n, WFormat format) {
    const auto* b = static_cast<const uint8_t*>(p);
    switch (format) {
        case WFormat::F32: return detail::first_all_ones<uint32_t>(b, n, 0x7f800000u);
        case WFormat::BF16: return detail::first_all_ones<uint16_t>(b, n, uint16_t(0x7f80));
        case WFormat::F16: return detail::first_all_ones<uint16_t>(b, n, uint16_t(0x7c00));
        default: return -1;
    }
}

}  // namespace strata
