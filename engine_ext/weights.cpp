#include "weights.h"

#include "finite.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::string layer_name(int l, const char* rest) { return "layers." + std::to_string(l) + "." + rest; }

WeightSource::WeightSource(const std::vector<TensorRef>& tensors) : tensors_(tensors) {
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
    auto alloc = [&](size_t nb) {
        owned_.emplace_back(nb + 64);
        uint8_t* q = owned_.back().data();
        return q + (64 - reinterpret_cast<uintptr_t>(q) % 64) % 64;
    };
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
