// Reader for the expert file of a strata pack (experts.bin): one aligned, CRC32-checked blob
// per (MoE layer, expert), gate | up | down row-major. Python parses the JSON header and the
// checksum table; this side only reads blobs, with O_DIRECT where the file system allows.
#pragma once
#include <array>
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
    WFormat format = WFormat::BF16;  // stored format of every expert matrix (when mat_formats is empty)
    std::vector<int> layers;      // model layer index of each pack layer
    std::vector<uint32_t> crcs;   // [pack layer * num_experts + expert]
    // Per pack layer: the stored formats of gate, up, down (quantized packs keep a GGUF file's
    // per-layer mix, e.g. Q4_K gate/up with Q6_K down). Empty: every matrix is `format`.
    std::vector<std::array<WFormat, 3>> mat_formats;

    WFormat mat_format(int ord, int m) const { return mat_formats.empty() ? format : mat_formats[size_t(ord)][size_t(m)]; }
    // Bytes of one matrix of a pack layer (0 gate, 1 up, 2 down) and of its whole blob.
    int64_t mat_bytes(int ord, int m) const;
    int64_t layer_blob_bytes(int ord) const { return mat_bytes(ord, 0) + mat_bytes(ord, 1) + mat_bytes(ord, 2); }
    // What one read of a blob of this layer transfers: the blob rounded up to 4096 (<= stride).
    int64_t layer_read_bytes(int ord) const { return (layer_blob_bytes(ord) + 4095) / 4096 * 4096; }
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
    // Reads one blob (layer_read_bytes) into `dst` (4096-aligned, stride bytes) and checks its CRC.
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
