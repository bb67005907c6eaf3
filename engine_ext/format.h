// Weight formats: how a matrix row is stored. Every format has a block geometry (elements and
// bytes per block, one block = one element for the float formats); the GGUF block formats use
// GGUF's layouts exactly. Backends say per op which formats they compute on (Backend::supports).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// Values are stable (they appear in pack metadata through the Python side's names only, but
// keep them fixed anyway); kFormatCount sizes per-format tables.
enum class WFormat : int { F32 = 0, BF16 = 1, F16 = 2, Q8_0 = 3, Q4_K = 4, Q5_K = 5, Q6_K = 6, IQ4_XS = 7, Q5_0 = 8,
                     Q5_1 = 9 };
constexpr int kFormatCount = 10;

struct FormatInfo {
    const char* name;     // "F32", "BF16", "Q4_K" ... (safetensors / GGUF spelling)
    int block_elems;      // elements per block
    int block_bytes;      // stored bytes per block
    bool quantized;
};

const FormatInfo& format_info(WFormat f);
// Parses a format name (case-insensitive); returns false for an unknown name.
bool format_from_name(const std::string& name, WFormat& out);
// Stored bytes of one row of `cols` elements; -1 when cols is not a whole number of blocks.
int64_t format_row_bytes(WFormat f, int64_t cols);

// A row-major weight matrix [rows x cols] stored in `format`, rows `row_bytes` apart.
struct MatView {
    const void* data = nullptr;
    WFormat format = WFormat::F32;
    int rows = 0;
    int cols = 0;
    size_t row_bytes = 0;
    // 0: these bytes never change while they live at this address (mapped or loaded weights).
    // Otherwise a process-unique id of the contents (new_content_version()): views of memory
    // that is refilled in place (expert cache slots, caller buffers) get a fresh one per fill,
    // so a backend that keeps device copies of weights can tell new contents at an old address.
    uint64_t version = 0;
    const uint8_t* row(int r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes; }
    size_t bytes() const { return size_t(rows) * row_bytes; }
};

// A view of contiguous rows (row_bytes = format_row_bytes(format, cols)).
MatView make_mat(const void* data, WFormat format, int rows, int cols);
uint64_t new_content_version();

float bf16_to_f32(uint16_t v);
float f16_to_f32(uint16_t v);

}  // namespace strata
