// Reader for the expert file of a strata pack (experts.bin): one aligned, CRC32-checked blob
// per (MoE layer, expert), gate | up | down row-major. Python parses the JSON header and the
// checksum table; this side only reads blobs, with O_DIRECT where the file system allows.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "expert_store.h"

namespace strata {

// CRC-32 with the zlib polynomial (same values as Python's zlib.crc32); carry-less multiply
// folding where the CPU has it, slicing-by-8 otherwise.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32_portable(const void* data, size_t n, uint32_t crc = 0);

struct PackGeometry {
    std::string path;             // experts.bin
    int64_t data_offset = 0;      // first blob (multiple of 4096)
    int64_t stride = 0;           // bytes between blobs (multiple of 4096)
    int64_t blob_bytes = 0;       // gate + up + down
    int num_experts = 0;
    int hidden = 0;
    int inter = 0;
    WFormat format = WFormat::BF16;  // stored format of every expert matrix
    std::vector<int> layers;      // model layer index of each pack layer
    std::vector<uint32_t> crcs;   // [pack layer * num_experts + expert]
};

enum class IoMode { Direct = 0, PageCache = 1 };

class PackFile {
public:
    PackFile(PackGeometry geo, IoMode mode);
    ~PackFile();
    PackFile(const PackFile&) = delete;
    PackFile& operator=(const PackFile&) = delete;

    const PackGeometry& geo() const { return geo_; }
    // Pack layer ordinal of a model layer, or -1 when that layer has no streamed experts.
    int ordinal(int model_layer) const;
    // Reads one blob (stride bytes) into `dst` (4096-aligned, stride bytes) and checks its CRC.
    // Returns "" on success or a one-line reason (no layer/expert prefix).
    std::string read_blob(int ord, int expert, void* dst);
    // "direct", "buffered+dontneed" (O_DIRECT refused) or "page_cache".
    const char* mode_name() const;

private:
    PackGeometry geo_;
    IoMode mode_;
    int fd_ = -1;                 // buffered
    int direct_fd_ = -1;          // O_DIRECT, when available
    std::vector<int> ordinal_;    // model layer -> pack ordinal
};

}  // namespace strata
