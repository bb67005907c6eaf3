#include "pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

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

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
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

PackFile::PackFile(PackGeometry geo, IoMode mode) : geo_(std::move(geo)), mode_(mode) {
    const size_t n_blobs = geo_.layers.size() * size_t(geo_.num_experts);
    if (geo_.crcs.size() != n_blobs)
        throw ModelError(geo_.path + ": checksum table has " + std::to_string(geo_.crcs.size()) +
                         " entries, expected " + std::to_string(n_blobs));
    if (geo_.stride % 4096 || geo_.data_offset % 4096 || geo_.stride < geo_.blob_bytes)
        throw ModelError(geo_.path + ": blobs are not 4096-byte aligned");
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
#ifdef O_DIRECT
    if (mode_ == IoMode::Direct) direct_fd_ = ::open(geo_.path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
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
    int64_t done = 0;
    while (done < geo_.stride) {
        ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, size_t(geo_.stride - done), off + done);
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
    if (mode_ == IoMode::Direct && fd == fd_) ::posix_fadvise(fd_, off, geo_.stride, POSIX_FADV_DONTNEED);
#endif
    const uint32_t want = geo_.crcs[size_t(ord) * geo_.num_experts + expert];
    const uint32_t got = crc32(dst, size_t(geo_.blob_bytes));
    if (got != want) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "checksum mismatch (crc32 %08x, expected %08x)", got, want);
        return std::string(buf) + ": the pack is corrupt (re-run strata convert)";
    }
    return "";
}

}  // namespace strata
