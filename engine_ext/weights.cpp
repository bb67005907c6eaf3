#include "weights.h"

#include "finite.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "window_model.h"

namespace strata {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
    return r + "]";
}

int64_t elements(const TensorRef& t) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    return n;
}

}  // namespace

// Every window streams the dense weights (and its experts) from DRAM. On 4 KiB pages that
// stream takes a TLB miss and a page walk every 4 KiB; on 2 MiB pages the same reads run
// faster (bench/README.md, "Weights on huge pages"). The copies the engine makes (tensors that
// do not start on a 64-byte boundary, as in checkpoints written by transformers, and f16
// converted to f32) therefore live in anonymous chunks that ask for transparent huge pages
// (MADV_HUGEPAGE: the default "madvise" mode of Linux gives them only when asked).
// STRATA_HUGE_PAGES=0 leaves them on small pages (for comparisons).
namespace {
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kChunkBytes = size_t(64) << 20;
bool want_huge_pages() {
    const char* v = std::getenv("STRATA_HUGE_PAGES");
    if (v && std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
        throw std::invalid_argument(std::string("STRATA_HUGE_PAGES='") + v +
                                    "': use 0 or 1 (1, the default: weight copies on 2 MiB pages)");
    return !(v && std::strcmp(v, "0") == 0);
}
}  // namespace

WeightSource::CopyArena::~CopyArena() {
    for (auto& c : chunks_) munmap(c.base, c.len);
}

uint8_t* WeightSource::CopyArena::alloc(size_t nbytes) {
    const size_t need = (nbytes + 63) / 64 * 64;
    if (chunks_.empty() || chunks_.back().len - chunks_.back().used < need) {
        const size_t len = std::max(kChunkBytes, (need + kHugePage - 1) / kHugePage * kHugePage);
        // over-map by one huge page so that the chunk can start on a 2 MiB boundary
        void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) throw std::bad_alloc();
        uint8_t* r = static_cast<uint8_t*>(raw);
        uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(r) + kHugePage - 1) / kHugePage * kHugePage);
        if (base > r) munmap(r, size_t(base - r));
        if (base + len < r + len + kHugePage) munmap(base + len, size_t(r + len + kHugePage - (base + len)));
#ifdef MADV_HUGEPAGE
        if (want_huge_pages()) madvise(base, len, MADV_HUGEPAGE);
#endif
        chunks_.push_back({base, len, 0});
    }
    Chunk& c = chunks_.back();
    uint8_t* p = c.base + c.used;
    c.used += need;
    return p;
}

std::string layer_name(int l, const char* rest) { return "layers." + std::to_string(l) + "." + rest; }

WeightSource::WeightSource(const std::vector<TensorRef>& tensors) : tensors_(tensors) {
    want_huge_pages();  // a bad setting is an error at load, whether or not a copy is made
    for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!index_.emplace(tensors_[i].name, i).second)
            throw ModelError("tensor " + tensors_[i].name + " is listed twice (" + tensors_[i].path + ")");
    }
}

WeightSource::~WeightSource() {
    for (auto& kv : maps_)
        if (kv.second.ptr && kv.second.size) munmap(kv.second.ptr, kv.second.size);
}

const TensorRef& WeightSource::ref(const std::string& name) const {
    auto it = index_.find(name);
    if (it == index_.end()) throw ModelError("missing tensor " + name);
    return tensors_[it->second];
}

WFormat WeightSource::format_of(const TensorRef& t) const {
    WFormat f;
    if (!format_from_name(t.dtype, f))
        throw ModelError(t.path + ": tensor " + t.name + " has unsupported dtype " + t.dtype);
    return f;
}

const uint8_t* WeightSource::bytes(const TensorRef& t, size_t nbytes) {
    auto it = maps_.find(t.path);
    if (it == maps_.end()) {
        int fd = ::open(t.path.c_str(), O_RDONLY);
        if (fd < 0) throw ModelError("cannot open " + t.path + ": " + std::strerror(errno));
        struct stat st;
        if (fstat(fd, &st) != 0) {
            ::close(fd);
            throw ModelError("cannot stat " + t.path);
        }
        Mapping m;
        m.size = size_t(st.st_size);
        if (m.size > 0) {
            m.ptr = mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m.ptr == MAP_FAILED) {
                ::close(fd);
                throw ModelError("cannot map " + t.path + ": " + std::strerror(errno));
            }
        }
        ::close(fd);
        it = maps_.emplace(t.path, m).first;
    }
    const Mapping& m = it->second;
    if (t.offset < 0 || uint64_t(t.offset) + nbytes > m.size)
        throw ModelError(t.path + ": tensor " + t.name + " runs past the end of the file (truncated?)");
    return static_cast<const uint8_t*>(m.ptr) + t.offset;
}

void WeightSource::check_finite(const TensorRef& t, WFormat f, const uint8_t* p, int64_t n) const {
    const int64_t at = first_non_finite(p, n, f);
    if (at >= 0)
        throw ModelError(t.path + ": tensor " + t.name + " holds NaN or Inf values (first at element " +
                         std::to_string(at) + "); the checkpoint is damaged");
}

MatView WeightSource::mat(const std::string& name, int rows, int cols) {
    const TensorRef& t = ref(name);
    int64_t n = elements(t);
    bool ok = n == int64_t(rows) * cols && !t.shape.empty() && t.shape[0] == rows;
    if (!ok)
        throw ModelError(t.path + ": tensor " + name + " has shape " + shape_str(t.shape) +
                         ", expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    WFormat f = format_of(t);
    int64_t rb = format_row_bytes(f, cols);
    if (rb < 0)
        throw ModelError(t.path + ": tensor " + name + " (" + format_info(f).name + ") has " + std::to_string(cols) +
                         " columns, not a whole number of " + std::to_string(format_info(f).block_elems) +
                         "-element blocks");
    size_t nbytes = size_t(rb) * size_t(rows);
    const uint8_t* p = bytes(t, nbytes);
    check_finite(t, f, p, n);
    // owned copies are 64-byte aligned (whole cache lines per vector load)
    auto alloc = [&](size_t nb) { return owned_.alloc(nb); };
    if (f == WFormat::F16) {
        float* dst = reinterpret_cast<float*>(alloc(size_t(n) * 4));
        for (int64_t i = 0; i < n; ++i) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        return make_mat(dst, WFormat::F32, rows, cols);
    }
    if (reinterpret_cast<uintptr_t>(p) % 64 != 0) {
        // Misaligned rows make every vector load a split load (~15% slower kernels): keep an
        // aligned copy. Checkpoints written by strata (devmodel, packs) are aligned already.
        uint8_t* q = alloc(nbytes);
        std::memcpy(q, p, nbytes);
        p = q;
    }
    return make_mat(p, f, rows, cols);
}

std::vector<float> WeightSource::vec(const std::string& name, int64_t n) {
    const TensorRef& t = ref(name);
    int64_t m = elements(t);
    if (m != n)
        throw ModelError(t.path + ": tensor " + name + " has shape " + shape_str(t.shape) + ", expected " +
                         std::to_string(n) + " elements");
    WFormat f = format_of(t);
    if (format_info(f).quantized)
        throw ModelError(t.path + ": tensor " + name + " is stored as " + format_info(f).name +
                         ", expected a float format (F32, BF16, F16)");
    const int ds = format_info(f).block_bytes;
    const uint8_t* p = bytes(t, size_t(n) * ds);
    check_finite(t, f, p, n);
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) {
        if (f == WFormat::F32) {
            std::memcpy(&out[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            out[i] = f == WFormat::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
    }
    return out;
}

MatView WeightLoader::mat(const std::string& name, int rows, int cols, Op op) {
    MatView m = src_.mat(name, rows, cols);
    if (!be_.supports(op, m.format))
        throw ModelError(src_.ref(name).path + ": tensor " + name + " is stored as " + format_info(m.format).name +
                         ", which the " + be_.name() + " backend cannot compute (" + op_name(op) + ")");
    return m;
}

Linear WeightLoader::linear(const std::string& base, int rows, int cols, bool bias) {
    Linear L;
    L.w = mat(base + ".weight", rows, cols);
    if (bias) L.bias = src_.vec(base + ".bias", rows);
    return L;
}

std::vector<float> WeightLoader::norm(const std::string& name, int n) {
    std::vector<float> w = src_.vec(name, n);
    if (spec_.norm_plus_one)
        for (auto& x : w) x = 1.0f + x;
    return w;
}

ResidentExpertStore::ResidentExpertStore(std::shared_ptr<WeightSource> src, const ModelSpec& s, const Backend& be)
    : src_(std::move(src)) {
    WeightLoader w(*src_, s, be);
    layers_.resize(s.n_layers);
    for (int l = 0; l < s.n_layers; ++l) {
        if (!s.layer_moe[l]) continue;
        layers_[l].resize(s.n_experts);
        for (int e = 0; e < s.n_experts; ++e) {
            std::string p = "layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
            ExpertView& v = layers_[l][e];
            v.gate = w.mat(p + "gate_proj.weight", s.moe_inter, s.hidden);
            v.up = w.mat(p + "up_proj.weight", s.moe_inter, s.hidden);
            v.down = w.mat(p + "down_proj.weight", s.hidden, s.moe_inter);
        }
    }
}

void ResidentExpertStore::acquire_layer(int layer, const std::vector<int>& experts,
                                        const std::vector<int>&, std::vector<ExpertView>& out) {
    out.clear();
    const auto& L = layers_.at(layer);
    for (int e : experts) out.push_back(L.at(e));
}

}  // namespace strata
