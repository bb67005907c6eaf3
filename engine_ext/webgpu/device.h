// One WebGPU device: adapter choice, limits, buffers, a pipeline cache and window recording
// (every dispatch of a window goes into one command encoder and one submit).
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "webgpu/shader_source.h"
#include "webgpu/wgpu_api.h"

namespace strata::webgpu {

// The items of a comma list as an environment setting gives it ("a,b:3"), empty ones kept
// ("a," has two), so each setting's parser refuses them in its own words.
std::vector<std::string> comma_items(const std::string& list);

struct DeviceOptions {
    std::string library;     // path of libwgpu_native (the wheel's wgpu/resources/)
    std::string shader_dir;  // folder of *.wgsl (installed with the package)
    // "auto": a real GPU (discrete, then integrated), never a software adapter;
    // "software": only a CPU adapter (lavapipe), for CI; "any": a GPU if there is one, else software.
    std::string adapter = "auto";
    // Upper bound for one weight chunk; 0 = min(max storage binding, 1 GiB). Tests lower it.
    uint64_t max_chunk_bytes = 0;
};

struct AdapterInfo {
    std::string device, vendor, description, backend, type;
    uint32_t vendor_id = 0, device_id = 0;
    bool software = false;
};

struct DeviceLimits {
    uint64_t max_storage_binding = 0, max_buffer = 0, chunk_bytes = 0;
    uint32_t max_storage_buffers_per_stage = 0, max_workgroup_storage = 0;
    uint32_t max_invocations_per_workgroup = 0, max_workgroups_per_dimension = 0;
    uint32_t min_storage_offset_alignment = 0, min_uniform_offset_alignment = 0;
};

class Device;

// A storage buffer on the device (released with the last owner).
class Buffer {
public:
    Buffer(const WgpuApi& api, WGPUBuffer handle, uint64_t size);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    WGPUBuffer handle() const { return handle_; }
    uint64_t size() const { return size_; }
    // Never reused, unlike handles: cached bind groups are keyed by it.
    uint64_t id() const { return id_; }

private:
    const WgpuApi& api_;
    WGPUBuffer handle_;
    uint64_t size_;
    uint64_t id_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// A bound range of a buffer: the whole buffer (from a BufferPtr), or `size` bytes from
// `offset` (a multiple of the adapter's storage offset alignment).
struct BufRef {
    BufferPtr buf;
    uint64_t offset = 0, size = 0;
    BufRef() = default;
    BufRef(std::nullptr_t) {}
    BufRef(BufferPtr b) : buf(std::move(b)), size(buf ? buf->size() : 0) {}
    BufRef(BufferPtr b, uint64_t off, uint64_t bytes) : buf(std::move(b)), offset(off), size(bytes) {}
    explicit operator bool() const { return bool(buf); }
};

struct Pipeline {
    WGPUComputePipeline pipeline = nullptr;
    WGPUBindGroupLayout layout = nullptr;
    const char* entry = "";  // the entry point's name (the profile's default label)
};

// GPU time of the dispatches of one label (STRATA_WEBGPU_PROFILE=1): how many ran, their
// summed timestamp deltas, and the weight bytes their kernels said they read.
struct ProfileEntry {
    uint64_t count = 0;
    double ns = 0;
    uint64_t bytes = 0;
};

// The dispatches of one window, encoded and submitted together by submit().
class Recorder {
public:
    explicit Recorder(Device& device) : device_(device) {}
    // Binding 0 of the pipeline's group 0 is its uniform parameter block (`params`, up to 16 KiB,
    // padded to whole 256-byte slots); `buffers` bind to 1, 2, ... in order (a null entry leaves its number unbound, for
    // entry points of a shared file that use only some bindings).
    void dispatch(const Pipeline& pipeline, const void* params, size_t params_bytes,
                  std::vector<BufRef> buffers, uint32_t groups_x, uint32_t groups_y = 1,
                  uint32_t groups_z = 1);
    // While profiling: the last dispatch's label in the profile (default: its entry point) and
    // the weight bytes it reads (for GB/s). Callers build labels only when profiling() is true.
    bool profiling() const;
    void annotate(std::string label, uint64_t bytes);
    // After every dispatch of the window: copy `bytes` of `src` from `offset` into `dst` (host).
    void download(const BufferPtr& src, uint64_t offset, uint64_t bytes, void* dst);
    // Encodes everything, submits once, waits, and fills the downloads. Without `wait` (no
    // downloads recorded) the GPU starts on what is recorded while the host encodes what
    // follows; the buffers it uses stay alive until the next waiting submit.
    void submit(bool wait = true);
    bool empty() const { return dispatches_.empty() && downloads_.empty(); }
    size_t dispatches() const { return dispatches_.size(); }
    // Seconds from the queue submit to its completion in the last submit() (encoding excluded).
    double last_run_seconds() const { return last_run_seconds_; }
    // Seconds the host spent encoding the last submit (bind groups, passes, copies).
    double last_encode_seconds() const { return last_encode_seconds_; }

private:
    struct Dispatch {
        Pipeline pipeline;
        size_t params_offset, params_size;
        std::vector<BufRef> buffers;
        uint32_t groups[3];
        std::string label;  // profiling only
        uint64_t bytes = 0;
    };
    struct Download {
        BufferPtr src;
        uint64_t offset, bytes;
        void* dst;
    };
    Device& device_;
    std::vector<uint8_t> params_;
    std::vector<Dispatch> dispatches_;
    std::vector<Download> downloads_;
    std::vector<BufferPtr> in_flight_;  // buffers of submits not waited for yet
    double last_run_seconds_ = 0;
    double last_encode_seconds_ = 0;
    size_t last_copies_ = 1;  // how many times the last dispatch was recorded (STRATA_WEBGPU_REPEAT)
};

class Device {
public:
    explicit Device(const DeviceOptions& options);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const AdapterInfo& adapter() const { return adapter_; }
    const DeviceLimits& limits() const { return limits_; }
    const WgpuApi& api() const { return api_; }
    std::string library_version() const { return version_string(api_.version); }

    BufferPtr create_buffer(uint64_t bytes, const char* what);
    BufferPtr upload(const void* data, uint64_t bytes, const char* what);
    void write(const BufferPtr& buffer, uint64_t offset, const void* data, uint64_t bytes);

    // Compiled once per (file, entry point, defines).
    const Pipeline& pipeline(const std::string& file, const std::string& entry,
                             const ShaderDefines& defines = {});

    Recorder record() { return Recorder(*this); }
    uint64_t bind_groups_made() const { return bind_groups_made_; }

    // STRATA_WEBGPU_PROFILE=1 times every dispatch with timestamp queries: written inside the
    // one compute pass after each dispatch where the adapter has timestamp-query-inside-passes
    // (a dispatch's time then includes the barrier before it), else one pass per dispatch with
    // the pass's begin/end timestamps. Profiling makes every submit wait (its queries are read
    // back), so it slows the host side; the GPU times are what it is for.
    // profile_mode(): 0 off, 1 inside passes, 2 one pass per dispatch, -1 asked for but the
    // adapter has no timestamp queries (profile_status() says so in words).
    int profile_mode() const { return profile_mode_; }
    const std::string& profile_status() const { return profile_status_; }
    const std::map<std::string, ProfileEntry>& profile() const { return profile_; }
    // Summed GPU span of the timed submits (first timestamp to last) and how many there were.
    double profile_span_ns() const { return profile_span_ns_; }
    uint64_t profile_submits() const { return profile_submits_; }

    // STRATA_WEBGPU_REPEAT=ENTRY[:N],... (a timing tool, never for use: results are wrong where a
    // repeated kernel is not idempotent): every dispatch of those entry points is recorded N
    // times (default 2), so a decode's time with and without it gives the real cost of a kernel
    // in the pipelined window, which timestamps between dispatches distort (they serialise).
    // Empty when unset; a malformed value throws std::invalid_argument, one line.
    static std::map<std::string, int> repeat_from_env();
    const std::map<std::string, int>& repeat() const { return repeat_; }

private:
    friend class Recorder;
    void wait_idle();
    void throw_pending_error(const std::string& context);
    // The parameter blocks of a submit go into one persistent uniform buffer (slot i of every
    // submit at the same offset), so a dispatch that repeats, as the ops of every decode step
    // do, finds its bind group made already: bind groups are cached by (layout, slot, buffers).
    WGPUBuffer uniform_ring(uint64_t bytes);
    // `buf` (holding `have` bytes) replaced by a new buffer of `usage` for at least `bytes`: the
    // old size doubled, at least `floor`, in powers of two; uniform_ring and readback_buffer grow so
    WGPUBuffer grow(WGPUBuffer& buf, uint64_t& have, uint64_t bytes, uint64_t floor, WGPUBufferUsage usage,
                    const char* name);
    WGPUBindGroup bind_group(const Pipeline& pipeline, uint64_t params_offset, uint64_t params_size,
                             const std::vector<BufRef>& buffers);
    void release_bind_groups();
    // Results are read back through one persistent mappable buffer that only grows (a submit
    // with downloads waits and unmaps it before the next), not a new one per window: a decode
    // step's logits (608 KB at a vocabulary of 151936) no longer allocate and free host-visible
    // memory every token.
    WGPUBuffer readback_buffer(uint64_t bytes);
    WGPUBuffer uniform_ring_ = nullptr;
    uint64_t uniform_ring_bytes_ = 0;
    WGPUBuffer readback_ = nullptr;
    uint64_t readback_bytes_ = 0;
    // (layout, parameter slot, then per bound buffer: id and binding, offset, size) with its hash;
    // a lookup points at the words (probe), a stored key owns them (words)
    struct BindKey {
        uint64_t hash;
        const std::vector<uint64_t>* probe = nullptr;
        std::vector<uint64_t> words;
        const std::vector<uint64_t>& get() const { return probe ? *probe : words; }
        bool operator==(const BindKey& o) const { return hash == o.hash && get() == o.get(); }
    };
    struct BindKeyHash {
        size_t operator()(const BindKey& k) const { return size_t(k.hash); }
    };
    std::unordered_map<BindKey, WGPUBindGroup, BindKeyHash> bind_groups_;
    std::vector<uint64_t> bind_key_;  // the key being looked up
    uint64_t bind_groups_made_ = 0;

    std::map<std::string, int> repeat_;
    int profile_mode_ = 0;
    std::string profile_status_ = "off";
    std::map<std::string, ProfileEntry> profile_;
    double profile_span_ns_ = 0;
    uint64_t profile_submits_ = 0;

    const WgpuApi& api_;
    DeviceOptions options_;
    ShaderLibrary shaders_;
    WGPUInstance instance_ = nullptr;
    WGPUAdapter adapter_handle_ = nullptr;
    WGPUDevice device_ = nullptr;
    WGPUQueue queue_ = nullptr;
    AdapterInfo adapter_;
    DeviceLimits limits_;
    std::map<std::string, Pipeline> pipelines_;
    std::set<std::string> entry_names_;  // Pipeline::entry points into it
    std::mutex errors_mutex_;
    std::string pending_error_;  // filled by the uncaptured-error callback
    static void on_error(WGPUDevice const*, WGPUErrorType, WGPUStringView, void*, void*);
};

}  // namespace strata::webgpu
