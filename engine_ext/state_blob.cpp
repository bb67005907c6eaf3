#include "state_blob.h"

#include <cstring>

#include "window_model.h"

namespace strata {

namespace {
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'T'};
constexpr uint32_t kStateVersion = 2;
constexpr size_t kHead = 8 + 4 + 4;  // magic, version, id length

// Checksum of a state blob: four independent FNV-1a-style lanes over 8-byte words (fast on
// blobs of tens of MB), folded together with the length.
uint64_t blob_checksum(const char* p, size_t n) {
    const uint64_t prime = 1099511628211ull;
    uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                     0x165667b19e3779f9ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; ++l) {
            uint64_t w;
            std::memcpy(&w, p + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * prime;
        }
    uint64_t r = 1469598103934665603ull ^ uint64_t(n);
    for (; i < n; ++i) r = (r ^ uint8_t(p[i])) * prime;
    for (int l = 0; l < 4; ++l) r = (r ^ (h[l] ^ (h[l] >> 29))) * prime;
    return r;
}
template <typename T>
void put(std::string& b, const T& v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
}  // namespace

void StateReader::floats(float* dst, size_t n) {
    std::memcpy(dst, p_, n * sizeof(float));
    p_ += n * sizeof(float);
}

void begin_blob(std::string& b, const BlobHeader& h) {
    b.append(kMagic, 8);
    put(b, kStateVersion);
    put(b, uint32_t(h.model_id.size()));
    b.append(h.model_id);
    put(b, int64_t(h.pos));
}

void finish_blob(std::string& b) { put(b, blob_checksum(b.data(), b.size())); }

size_t blob_size(const std::string& model_id, size_t body) { return kHead + model_id.size() + 8 + body + 8; }

BlobHeader read_blob_header(const std::string& b, const std::string& expect_model_id, size_t& body_offset) {
    if (b.size() < kHead + 8 + 8 || std::memcmp(b.data(), kMagic, 8) != 0)
        throw ModelError("state blob is not a strata engine state");
    uint64_t stored;
    std::memcpy(&stored, b.data() + b.size() - 8, 8);
    if (blob_checksum(b.data(), b.size() - 8) != stored) throw ModelError("state blob checksum mismatch (corrupt)");
    uint32_t ver, idlen;
    std::memcpy(&ver, b.data() + 8, 4);
    std::memcpy(&idlen, b.data() + 12, 4);
    if (ver != kStateVersion) throw ModelError("state blob version " + std::to_string(ver) + " is not supported");
    if (kHead + size_t(idlen) + 8 + 8 > b.size()) throw ModelError("state blob is truncated");
    BlobHeader h;
    h.model_id = b.substr(kHead, idlen);
    if (h.model_id != expect_model_id)
        throw ModelError("state blob belongs to model " + h.model_id + ", this engine is " + expect_model_id);
    std::memcpy(&h.pos, b.data() + kHead + idlen, 8);
    body_offset = kHead + idlen + 8;
    return h;
}

}  // namespace strata
