// Small integer hashing shared by the drafter, the sampler's counter-based RNG and the fake model.
#pragma once
#include <cstdint>

namespace strata {

// splitmix64's finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

}  // namespace strata
