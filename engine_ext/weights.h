// Weight mapping: memory-maps checkpoint files and hands out views in their stored format,
// plus the everything-resident expert store built on those views.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.h"
#include "expert_store.h"
#include "format.h"
#include "model_spec.h"

namespace strata {

class WeightSource {
public:
    explicit WeightSource(const std::vector<TensorRef>& tensors);
    ~WeightSource();
    bool has(const std::string& name) const { return index_.count(name) != 0; }
    // A [rows x cols] matrix in its stored format; f16 is converted to f32 once (no backend
    // computes on f16 directly yet).
    MatView mat(const std::string& name, int rows, int cols);
    std::vector<float> vec(const std::string& name, int64_t n);      // any shape with n elements
    const TensorRef& ref(const std::string& name) const;

private:
    struct Mapping {
        void* ptr = nullptr;
        size_t size = 0;
    };
    const uint8_t* bytes(const TensorRef& t, size_t nbytes);
    // ModelError naming the tensor when it holds a NaN or Inf (checked once, at map time)
    void check_finite(const TensorRef& t, WFormat f, const uint8_t* p, int64_t n) const;
    WFormat format_of(const TensorRef& t) const;
    std::vector<TensorRef> tensors_;
    std::unordered_map<std::string, size_t> index_;
    std::unordered_map<std::string, Mapping> maps_;
    // Converted / realigned copies, 64-byte aligned, on transparent huge pages (weights.cpp).
    class CopyArena {
    public:
        CopyArena() = default;
        CopyArena(const CopyArena&) = delete;
        CopyArena& operator=(const CopyArena&) = delete;
        ~CopyArena();
        uint8_t* alloc(size_t nbytes);

    private:
        struct Chunk {
            uint8_t* base;
            size_t len, used;
        };
        std::vector<Chunk> chunks_;
    };
    CopyArena owned_;
};

// A projection: weights and an optional bias.
struct Linear {
    MatView w;
    std::vector<float> bias;  // empty: none
    const float* b() const { return bias.empty() ? nullptr : bias.data(); }
    size_t bytes() const { return w.bytes() + bias.size() * sizeof(float); }
};

// Loads named weights of a model and checks that the backend computes on their formats.
class WeightLoader {
public:
    WeightLoader(WeightSource& src, const ModelSpec& spec, const Backend& be) : src_(src), spec_(spec), be_(be) {}
    MatView mat(const std::string& name, int rows, int cols, Op op = Op::Matmul);
    Linear linear(const std::string& base, int rows, int cols, bool bias);
    std::vector<float> vec(const std::string& name, int64_t n) { return src_.vec(name, n); }
    // RMSNorm weight, (1 + w) folded in for the plus-one variants
    std::vector<float> norm(const std::string& name, int n);
    WeightSource& source() { return src_; }

private:
    WeightSource& src_;
    const ModelSpec& spec_;
    const Backend& be_;
};

std::string layer_name(int layer, const char* rest);

// Every expert in memory (views into the mapped checkpoint).
class ResidentExpertStore : public ExpertStore {
public:
    // Checks that `be` computes on every expert's stored format.
    ResidentExpertStore(std::shared_ptr<WeightSource> src, const ModelSpec& spec, const Backend& be);
    void acquire_layer(int layer, const std::vector<int>& experts, const std::vector<int>& root,
                       std::vector<ExpertView>& out) override;
    void release_layer(int) override {}
    const std::vector<ExpertView>* resident_layer(int layer) const override {
        if (layer < 0 || layer >= int(layers_.size()) || layers_[size_t(layer)].empty()) return nullptr;
        return &layers_[size_t(layer)];
    }

private:
    std::shared_ptr<WeightSource> src_;
    std::vector<std::vector<ExpertView>> layers_;  // [layer][expert] (empty for dense layers)
};

}  // namespace strata
