// Small integer hashing shared by the drafter, the sampler's counter-based RNG, the fake model and
// the GPU backend's lookup keys.
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

// FNV-1a over 64-bit values (bytes, words): fnv1a(kFnvOffset, v0), then fnv1a(h, v1), ...; for
// lookup keys of the GPU backend (pipelines, bind groups), not for anything stored.
constexpr uint64_t kFnvOffset = 14695981039346656037ull;
inline uint64_t fnv1a(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

}  // namespace strata
