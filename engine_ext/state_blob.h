// The engine state blob: magic, version, model id, committed position, every stateful
// layer's state in layer order, and a 64-bit checksum of everything before it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// Appends one layer's state.
class StateWriter {
public:
    explicit StateWriter(std::string& b) : b_(b) {}
    void floats(const float* p, size_t n) { b_.append(reinterpret_cast<const char*>(p), n * sizeof(float)); }

private:
    std::string& b_;
};

// Reads one layer's state (bounds were checked against state_bytes before loading).
class StateReader {
public:
    explicit StateReader(const char* p) : p_(p) {}
    void floats(float* dst, size_t n);

private:
    const char* p_;
};

struct BlobHeader {
    std::string model_id;
    int64_t pos = 0;
};

// Header of a new blob; finish_blob appends the checksum.
void begin_blob(std::string& b, const BlobHeader& h);
void finish_blob(std::string& b);
// Checks magic, checksum, version and model id; returns the header and where the layer
// states start (a one-line ModelError otherwise).
BlobHeader read_blob_header(const std::string& b, const std::string& expect_model_id, size_t& body_offset);
// Bytes of a blob whose layer states take `body` bytes.
size_t blob_size(const std::string& model_id, size_t body);

}  // namespace strata
