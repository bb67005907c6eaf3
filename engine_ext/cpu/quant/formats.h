// GGUF weight formats on the CPU: block geometry, row dequantization and multi-row dot kernels.
// Block layouts are exactly GGUF's (ggml's type ids and byte order), so tensors from a .gguf
// file are used in place, never repacked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata::quant {

// Values are ggml's type ids, as stored in a GGUF tensor info.
enum class QType : int {
    F32 = 0,
    F16 = 1,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    IQ4_XS = 23,
    BF16 = 30,
};

struct Geometry {
    int block_elems = 0;  // weights per block
    int block_bytes = 0;  // bytes per block
};

// Every format this build computes with, in the order names are listed to users.
inline constexpr QType kSupportedTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q5_0, QType::Q5_1,
                                            QType::Q8_0, QType::Q4_K, QType::Q5_K, QType::Q6_K, QType::IQ4_XS};

// False for a ggml type id this build does not compute with.
bool is_supported(int ggml_type);
Geometry geometry(QType t);
const char* type_name(QType t);
// Parses "Q4_K", "q8_0", "f32"...; throws std::invalid_argument naming the value otherwise.
QType parse_type(const std::string& name);
// Bytes of one row of `cols` weights; throws std::invalid_argument when cols is not a whole
// number of blocks.
size_t row_bytes(QType t, int64_t cols);

// One row of `cols` weights (cols a whole number of blocks) to f32: the same IEEE operations,
// in the same order, as gguf-py's NumPy dequantizer, so the result is bit-identical to it.
void dequantize_row(QType t, const void* src, int64_t cols, float* out);

// Which instruction set the dot kernels use. kAuto picks the widest this build has.
enum class Isa : int { kAuto = 0, kScalar = 1, kAvx2 = 2, kAvx512 = 3 };
bool isa_available(Isa isa);
Isa best_isa();

constexpr int kMaxDotRows = 16;

// Y[t*ldy + r] = dot(X[t*ldx ..], W row r) for r in [r0, r1), t in [0, T), T <= 16.
// W rows are `row_bytes` apart. Every weight block is decoded once and used for all T rows;
// each output element has one fixed reduction order whatever T or the other rows (per 256
// weights: four lane accumulators over interleaved 16-wide chunks, summed pairwise, added to
// a running vector; one horizontal sum at the end).
void dot_rows(QType t, const float* X, int T, int ldx, const uint8_t* W, size_t row_bytes, int cols,
              float* Y, int ldy, int r0, int r1, Isa isa = Isa::kAuto);

// Registers the block formats' kernels with the CPU backend (cpu/matmul.h); called once when
// the module loads.
void register_cpu_kernels();

// Process-wide choice for the engine's block-format matmuls: int8 activations (default, fast,
// like llama.cpp) or exact f32 activations against the dequantized rows (slow; bit-identical to
// the same model stored as F32, which is how the loaders are verified).
void set_exact_activations(bool exact);
bool exact_activations();

}  // namespace strata::quant
