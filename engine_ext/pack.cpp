#include "pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "finite.h"
#include "window_model.h"

namespace strata {

namespace {

// CRC-32 (zlib polynomial, reflected), slicing-by-8: the same values as Python's zlib.crc32.
struct CrcTables {
    std::array<std::array<uint32_t, 256>, 8> t{};
    CrcTables() {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; ++i)
            for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
};
const CrcTables& crc_tables() {
    static const CrcTables tables;
    return tables;
}

}  // namespace

uint32_t crc32_portable(const void* data, size_t n, uint32_t crc) {
    const auto& t = crc_tables().t;
    const auto* p = static_cast<const uint8_t*>(data);
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
              t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

// Helpers carry the target attribute themselves (lambdas would not inherit it, which breaks
// builds without -march=native).
__attribute__((target("pclmul,sse4.1"))) inline __m128i ld(const uint8_t* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}
__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)),
                         next);
}

// Carry-less multiplication folding (Intel, "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ"), for the reflected zlib polynomial. Works on the raw CRC register (no inversion);
// n must be a multiple of 16 and at least 64. Verifying a blob at disk speed needs this: the
// table version manages well under 1 GB/s per core.
__attribute__((target("pclmul,sse4.1"))) uint32_t crc32_fold(uint32_t reg, const uint8_t* p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly_mu = _mm_set_epi64x(0x1F7011641LL, 0x1DB710641LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x1 = _mm_xor_si128(ld(p), _mm_cvtsi32_si128(int(reg)));
    __m128i x2 = ld(p + 16), x3 = ld(p + 32), x4 = ld(p + 48);
    p += 64;
    n -= 64;
    while (n >= 64) {
        x1 = fold(x1, k1k2, ld(p));
        x2 = fold(x2, k1k2, ld(p + 16));
        x3 = fold(x3, k1k2, ld(p + 32));
        x4 = fold(x4, k1k2, ld(p + 48));
        p += 64;
        n -= 64;
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    while (n >= 16) {
        x1 = fold(x1, k3k4, ld(p));
        p += 16;
        n -= 16;
    }
    // 128 -> 64 bits (appending 32 zero bits), then 64 -> 32 by Barrett reduction
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(k3k4, x1, 0x01), _mm_srli_si128(x1, 8));
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), _mm_srli_si128(x1, 4));
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly_mu, 0x00);
    return uint32_t(_mm_extract_epi32(_mm_xor_si128(x1, t), 1));
}

bool have_pclmul() {
    static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return yes;
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
    if (n < 64 || !have_pclmul()) return crc32_portable(data, n, crc);
    const auto* p = static_cast<const uint8_t*>(data);
    const size_t body = n & ~size_t(15);
    const uint32_t reg = crc32_fold(~crc, p, body);
    return crc32_portable(p + body, n - body, ~reg);
}
#else
uint32_t crc32(const void* data, size_t n, uint32_t crc) { return crc32_portable(data, n, crc); }
#endif

int64_t PackGeometry::mat_bytes(int ord, int m) const {
    const int rows = m == 2 ? hidden : inter, cols = m == 2 ? inter : hidden;
    return int64_t(rows) * format_row_bytes(mat_format(ord, m), cols);
}

PackFile::PackFile(PackGeometry geo, IoMode mode) : geo_(std::move(geo)), mode_(mode) {
    const size_t n_blobs = geo_.layers.size() * size_t(geo_.num_experts);
    if (geo_.crcs.size() != n_blobs)
        throw ModelError(geo_.path + ": checksum table has " + std::to_string(geo_.crcs.size()) +
                         " entries, expected " + std::to_string(n_blobs));
    if (geo_.stride % 4096 || geo_.data_offset % 4096 || geo_.stride < geo_.blob_bytes)
        throw ModelError(geo_.path + ": blobs are not 4096-byte aligned");
    if (!geo_.mat_formats.empty() && geo_.mat_formats.size() != geo_.layers.size())
        throw ModelError(geo_.path + ": " + std::to_string(geo_.mat_formats.size()) + " per-layer format entries for " +
                         std::to_string(geo_.layers.size()) + " expert layers");
    for (size_t o = 0; o < geo_.layers.size(); ++o)
        for (int m = 0; m < 3; ++m) {
            const int cols = m == 2 ? geo_.inter : geo_.hidden;
            if (cols % format_info(geo_.mat_format(int(o), m)).block_elems)
                throw ModelError(geo_.path + ": layer " + std::to_string(geo_.layers[o]) + ": rows of " +
                                 std::to_string(cols) + " weights are not whole " +
                                 format_info(geo_.mat_format(int(o), m)).name + " blocks");
        }
    for (size_t o = 0; o < geo_.layers.size(); ++o)
        if (geo_.layer_read_bytes(int(o)) > geo_.stride)
            throw ModelError(geo_.path + ": layer " + std::to_string(geo_.layers[o]) + ": a blob of " +
                             std::to_string(geo_.layer_blob_bytes(int(o))) + " bytes does not fit the stride of " +
                             std::to_string(geo_.stride));
    fd_ = ::open(geo_.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        throw ModelError(geo_.path + ": cannot open expert file: " + std::strerror(errno));
    struct stat st {};
    const int64_t need = geo_.data_offset + int64_t(n_blobs) * geo_.stride;
    if (::fstat(fd_, &st) == 0 && st.st_size < need) {
        ::close(fd_);
        fd_ = -1;
        throw ModelError(geo_.path + ": truncated expert file (" + std::to_string(st.st_size) +
                         " of " + std::to_string(need) + " bytes)");
    }
#if defined(O_DIRECT)
    if (mode_ == IoMode::Direct) direct_fd_ = ::open(geo_.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
#elif defined(F_NOCACHE)
    if (mode_ == IoMode::Direct) {  // macOS: uncached reads are a per-descriptor flag
        direct_fd_ = ::open(geo_.path.c_str(), O_RDONLY | O_CLOEXEC);
        if (direct_fd_ >= 0 && ::fcntl(direct_fd_, F_NOCACHE, 1) != 0) {
            ::close(direct_fd_);
            direct_fd_ = -1;
        }
    }
#endif
    int max_layer = 0;
    for (int l : geo_.layers) max_layer = std::max(max_layer, l);
    ordinal_.assign(size_t(max_layer) + 1, -1);
    for (size_t i = 0; i < geo_.layers.size(); ++i) ordinal_[size_t(geo_.layers[i])] = int(i);
}

PackFile::~PackFile() {
    if (direct_fd_ >= 0) ::close(direct_fd_);
    if (fd_ >= 0) ::close(fd_);
}

int PackFile::ordinal(int model_layer) const {
    if (model_layer < 0 || size_t(model_layer) >= ordinal_.size()) return -1;
    return ordinal_[size_t(model_layer)];
}

const char* PackFile::mode_name() const {
    if (mode_ == IoMode::PageCache) return "page_cache";
    return direct_fd_ >= 0 ? "direct" : "buffered+dontneed";
}

std::string PackFile::read_blob(int ord, int expert, void* dst) {
    const int64_t off = geo_.data_offset + (int64_t(ord) * geo_.num_experts + expert) * geo_.stride;
    int fd = direct_fd_ >= 0 ? direct_fd_ : fd_;
    const int64_t len = geo_.layer_read_bytes(ord);  // a quantized layer reads only its own bytes
    int64_t done = 0;
    while (done < len) {
        ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, size_t(len - done), off + done);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EINVAL && fd == direct_fd_) {  // O_DIRECT refused at read time: fall back
                fd = fd_;
                continue;
            }
            return std::string("read error at offset ") + std::to_string(off + done) + ": " +
                   std::strerror(errno);
        }
        if (r == 0)
            return "expert file truncated at offset " + std::to_string(off + done) +
                   " (re-run strata convert)";
        done += r;
    }
#ifdef POSIX_FADV_DONTNEED
    // Uncached mode without O_DIRECT: the slot is the cache, so drop the page-cache copy.
    if (mode_ == IoMode::Direct && fd == fd_) ::posix_fadvise(fd_, off, len, POSIX_FADV_DONTNEED);
#endif
    const uint32_t want = geo_.crcs[size_t(ord) * geo_.num_experts + expert];
    const uint32_t got = crc32(dst, size_t(geo_.layer_blob_bytes(ord)));
    if (got != want) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "checksum mismatch (crc32 %08x, expected %08x)", got, want);
        return std::string(buf) + ": the pack is corrupt (re-run strata convert)";
    }
    // the checksum only proves the blob is what convert wrote: refuse weights that were bad there
    const auto* bytes = static_cast<const uint8_t*>(dst);
    int64_t base = 0;
    for (int m = 0; m < 3; ++m) {
        const WFormat f = geo_.mat_format(ord, m);
        const FormatInfo& fi = format_info(f);
        const int64_t mb = geo_.mat_bytes(ord, m);
        const int64_t at = fi.quantized ? -1 : first_non_finite(bytes + base, mb / fi.block_bytes, f);
        if (at >= 0)
            return "weights hold NaN or Inf (value " + std::to_string(at) + " of the " +
                   (m == 0 ? "gate" : m == 1 ? "up" : "down") + " matrix); the source checkpoint is damaged";
        base += mb;
    }
    return "";
}

}  // namespace strata
