#include "webgpu/device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "hash.h"

namespace strata::webgpu {

namespace {

std::string view(WGPUStringView s) {
    if (!s.data) return {};
    return s.length == WGPU_STRLEN ? std::string(s.data) : std::string(s.data, s.length);
}

WGPUStringView label(const char* text) { return WGPUStringView{text, WGPU_STRLEN}; }

const char* backend_name(WGPUBackendType t) {
    switch (t) {
        case WGPUBackendType_Vulkan: return "vulkan";
        case WGPUBackendType_Metal: return "metal";
        case WGPUBackendType_D3D12: return "d3d12";
        case WGPUBackendType_D3D11: return "d3d11";
        case WGPUBackendType_OpenGL: return "opengl";
        case WGPUBackendType_OpenGLES: return "opengles";
        default: return "other";
    }
}

const char* adapter_type_name(WGPUAdapterType t) {
    switch (t) {
        case WGPUAdapterType_DiscreteGPU: return "discrete-gpu";
        case WGPUAdapterType_IntegratedGPU: return "integrated-gpu";
        case WGPUAdapterType_CPU: return "cpu";
        default: return "unknown";
    }
}

constexpr uint64_t kOneGiB = 1ull << 30;
constexpr uint64_t kUniformSlot = 256;  // WebGPU's largest minUniformBufferOffsetAlignment
// A parameter block takes whole slots; 16 KiB stays well inside WebGPU's 64 KiB uniform binding.
constexpr uint64_t kMaxParams = 16384;

const char* kNoAdapterHint =
#ifdef __APPLE__
    "Metal should be built in; check that this Mac supports Metal";
#else
    "install a Vulkan driver: your GPU vendor's driver, or mesa-vulkan-drivers (apt-get install "
    "mesa-vulkan-drivers libvulkan1) for Mesa GPUs and the lavapipe software adapter";
#endif

}  // namespace

Buffer::Buffer(const WgpuApi& api, WGPUBuffer handle, uint64_t size) : api_(api), handle_(handle), size_(size) {
    static std::atomic<uint64_t> next{1};
    id_ = next++;
}

Buffer::~Buffer() {
    if (handle_) {
        api_.wgpuBufferDestroy(handle_);
        api_.wgpuBufferRelease(handle_);
    }
}

void Device::on_error(WGPUDevice const*, WGPUErrorType, WGPUStringView message, void* self, void*) {
    auto* device = static_cast<Device*>(self);
    std::lock_guard<std::mutex> lock(device->errors_mutex_);
    if (device->pending_error_.empty()) device->pending_error_ = view(message);
}

void Device::throw_pending_error(const std::string& context) {
    std::string error;
    {
        std::lock_guard<std::mutex> lock(errors_mutex_);
        error.swap(pending_error_);
    }
    if (!error.empty()) {
        // wgpu-native messages span several lines; the first names the problem.
        std::string first = error.substr(0, error.find('\n'));
        throw std::runtime_error("webgpu: " + context + ": " + (first.empty() ? error : first) +
                                 (first.size() < error.size() ? " | " + error.substr(first.size() + 1, 400) : ""));
    }
}

Device::Device(const DeviceOptions& options)
    : api_(load_wgpu(options.library)), options_(options), shaders_(options.shader_dir) {
    if (options.adapter != "auto" && options.adapter != "software" && options.adapter != "any")
        throw std::invalid_argument("unknown webgpu adapter choice '" + options.adapter +
                                    "' (use auto, software or any)");
    instance_ = api_.wgpuCreateInstance(nullptr);
    if (!instance_) throw std::runtime_error("webgpu: cannot create a wgpu-native instance");

    // Native backends only (Vulkan, Metal, D3D12): the GL backend is too limited for compute.
    WGPUInstanceEnumerateAdapterOptions enum_options{};
    enum_options.backends = WGPUInstanceBackend_Primary;
    size_t count = api_.wgpuInstanceEnumerateAdapters(instance_, &enum_options, nullptr);
    std::vector<WGPUAdapter> adapters(count);
    if (count) api_.wgpuInstanceEnumerateAdapters(instance_, &enum_options, adapters.data());

    auto rank = [](WGPUAdapterType t) {
        return t == WGPUAdapterType_DiscreteGPU ? 0 : t == WGPUAdapterType_IntegratedGPU ? 1 : t == WGPUAdapterType_CPU ? 3 : 2;
    };
    int best = -1, best_rank = 99;
    std::vector<std::string> seen;
    for (size_t i = 0; i < adapters.size(); ++i) {
        WGPUAdapterInfo info = WGPU_ADAPTER_INFO_INIT;
        api_.wgpuAdapterGetInfo(adapters[i], &info);
        bool software = info.adapterType == WGPUAdapterType_CPU;
        seen.push_back(view(info.device) + (software ? " (software)" : ""));
        int r = rank(info.adapterType);
        bool allowed = options.adapter == "any" || (options.adapter == "auto" ? !software : software);
        if (allowed && r < best_rank) {
            best = int(i);
            best_rank = r;
        }
        api_.wgpuAdapterInfoFreeMembers(info);
    }
    for (size_t i = 0; i < adapters.size(); ++i)
        if (int(i) != best) api_.wgpuAdapterRelease(adapters[i]);
    if (best < 0) {
        api_.wgpuInstanceRelease(instance_);
        instance_ = nullptr;
        std::string found;
        for (auto& s : seen) found += (found.empty() ? "" : ", ") + s;
        if (options.adapter == "auto" && !seen.empty())
            throw std::runtime_error("webgpu: no GPU adapter (only " + found +
                                     "); auto never picks a software adapter: " + kNoAdapterHint);
        throw std::runtime_error(std::string("webgpu: no ") +
                                 (options.adapter == "software" ? "software " : "") + "adapter found" +
                                 (found.empty() ? "" : " (saw " + found + ")") + ": " + kNoAdapterHint);
    }
    adapter_handle_ = adapters[best];

    WGPUAdapterInfo info = WGPU_ADAPTER_INFO_INIT;
    api_.wgpuAdapterGetInfo(adapter_handle_, &info);
    adapter_.device = view(info.device);
    adapter_.vendor = view(info.vendor);
    adapter_.description = view(info.description);
    adapter_.backend = backend_name(info.backendType);
    adapter_.type = adapter_type_name(info.adapterType);
    adapter_.vendor_id = info.vendorID;
    adapter_.device_id = info.deviceID;
    adapter_.software = info.adapterType == WGPUAdapterType_CPU;
    api_.wgpuAdapterInfoFreeMembers(info);

    // Ask for everything the adapter offers: the binding size decides the weight chunking.
    WGPULimits supported = WGPU_LIMITS_INIT;
    if (api_.wgpuAdapterGetLimits(adapter_handle_, &supported) != WGPUStatus_Success)
        throw std::runtime_error("webgpu: cannot read the adapter limits of " + adapter_.device);

    repeat_ = repeat_from_env();
    if (!repeat_.empty()) {
        std::string what;
        for (const auto& [entry, n] : repeat_) what += (what.empty() ? "" : ", ") + entry + " x" + std::to_string(n);
        std::fprintf(stderr, "strata: STRATA_WEBGPU_REPEAT: %s; for timing only, results are wrong\n", what.c_str());
    }

    // STRATA_WEBGPU_PROFILE=1: timestamp queries, inside the pass where the adapter allows it.
    std::vector<WGPUFeatureName> features;
    const char* prof = std::getenv("STRATA_WEBGPU_PROFILE");
    if (prof && *prof && std::string(prof) != "0") {
        auto inside = WGPUFeatureName(WGPUNativeFeature_TimestampQueryInsidePasses);
        if (api_.wgpuAdapterHasFeature(adapter_handle_, inside)) {
            features = {WGPUFeatureName_TimestampQuery, inside};
            profile_mode_ = 1;
            profile_status_ = "timestamps inside the pass, after every dispatch";
        } else if (api_.wgpuAdapterHasFeature(adapter_handle_, WGPUFeatureName_TimestampQuery)) {
            features = {WGPUFeatureName_TimestampQuery};
            profile_mode_ = 2;
            profile_status_ = "timestamps around one pass per dispatch";
        } else {
            profile_mode_ = -1;
            profile_status_ = "not available: " + adapter_.device + " has no timestamp queries";
        }
    }

    WGPUDeviceDescriptor desc = WGPU_DEVICE_DESCRIPTOR_INIT;
    desc.label = label("strata");
    desc.requiredLimits = &supported;
    desc.requiredFeatureCount = features.size();
    desc.requiredFeatures = features.data();
    desc.uncapturedErrorCallbackInfo.callback = &Device::on_error;
    desc.uncapturedErrorCallbackInfo.userdata1 = this;
    struct Request {
        bool done = false;
        WGPUDevice device = nullptr;
        std::string message;
    } request;
    WGPURequestDeviceCallbackInfo cb = WGPU_REQUEST_DEVICE_CALLBACK_INFO_INIT;
    cb.mode = WGPUCallbackMode_AllowProcessEvents;
    cb.callback = [](WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView message, void* ud, void*) {
        auto* r = static_cast<Request*>(ud);
        r->done = true;
        if (status == WGPURequestDeviceStatus_Success) r->device = device;
        else r->message = view(message);
    };
    cb.userdata1 = &request;
    api_.wgpuAdapterRequestDevice(adapter_handle_, &desc, cb);
    while (!request.done) api_.wgpuInstanceProcessEvents(instance_);
    if (!request.device)
        throw std::runtime_error("webgpu: cannot open a device on " + adapter_.device + ": " + request.message);
    device_ = request.device;
    queue_ = api_.wgpuDeviceGetQueue(device_);

    WGPULimits got = WGPU_LIMITS_INIT;
    api_.wgpuDeviceGetLimits(device_, &got);
    limits_.max_storage_binding = got.maxStorageBufferBindingSize;
    limits_.max_buffer = got.maxBufferSize;
    limits_.max_storage_buffers_per_stage = got.maxStorageBuffersPerShaderStage;
    limits_.max_workgroup_storage = got.maxComputeWorkgroupStorageSize;
    limits_.max_invocations_per_workgroup = got.maxComputeInvocationsPerWorkgroup;
    limits_.max_workgroups_per_dimension = got.maxComputeWorkgroupsPerDimension;
    limits_.min_storage_offset_alignment = got.minStorageBufferOffsetAlignment;
    limits_.min_uniform_offset_alignment = got.minUniformBufferOffsetAlignment;
    uint64_t chunk = std::min({limits_.max_storage_binding, limits_.max_buffer, kOneGiB});
    if (options.max_chunk_bytes) chunk = std::min(chunk, options.max_chunk_bytes);
    limits_.chunk_bytes = chunk & ~uint64_t(255);
}

void Device::release_bind_groups() {
    for (auto& [key, g] : bind_groups_) api_.wgpuBindGroupRelease(g);
    bind_groups_.clear();
}

WGPUBuffer Device::grow(WGPUBuffer& buf, uint64_t& have, uint64_t bytes, uint64_t floor, WGPUBufferUsage usage,
                        const char* name) {
    if (buf) api_.wgpuBufferRelease(buf);  // a submit in flight keeps its own reference
    uint64_t size = std::max<uint64_t>(floor, have * 2);
    while (size < bytes) size *= 2;
    WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
    desc.label = label(name);
    desc.usage = usage;
    desc.size = size;
    buf = api_.wgpuDeviceCreateBuffer(device_, &desc);
    have = size;
    return buf;
}

WGPUBuffer Device::uniform_ring(uint64_t bytes) {
    if (bytes <= uniform_ring_bytes_) return uniform_ring_;
    release_bind_groups();  // they name the old buffer
    return grow(uniform_ring_, uniform_ring_bytes_, bytes, 64 * kUniformSlot,
                WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst, "dispatch parameters");
}

WGPUBindGroup Device::bind_group(const Pipeline& pipeline, uint64_t params_offset, uint64_t params_size,
                                 const std::vector<BufRef>& buffers) {
    // the key's words in a buffer that is reused (no allocation per dispatch), hashed as they go
    std::vector<uint64_t>& key = bind_key_;
    key.clear();
    uint64_t h = kFnvOffset;
    auto put = [&key, &h](uint64_t v) {
        key.push_back(v);
        h = fnv1a(h, v);
        h ^= h >> 29;
    };
    put(reinterpret_cast<uintptr_t>(pipeline.layout));
    put(params_offset);
    put(params_size);
    for (size_t i = 0; i < buffers.size(); ++i) {
        if (!buffers[i]) continue;
        put(buffers[i].buf->id() << 8 | i);  // ids count up from 1 (never near 2^56), i below 256
        put(buffers[i].offset);
        put(buffers[i].size);
    }
    auto it = bind_groups_.find(BindKey{h, &key});
    if (it != bind_groups_.end()) return it->second;
    if (bind_groups_.size() >= 16384) release_bind_groups();  // stale keys (freed buffers) pile up otherwise
    std::vector<WGPUBindGroupEntry> entries(1, WGPU_BIND_GROUP_ENTRY_INIT);
    entries[0].binding = 0;
    entries[0].buffer = uniform_ring_;
    entries[0].offset = params_offset;
    entries[0].size = params_size;
    for (size_t i = 0; i < buffers.size(); ++i) {
        if (!buffers[i]) continue;  // a binding number this entry point does not use
        WGPUBindGroupEntry e = WGPU_BIND_GROUP_ENTRY_INIT;
        e.binding = uint32_t(i + 1);
        e.buffer = buffers[i].buf->handle();
        e.offset = buffers[i].offset;
        e.size = buffers[i].size;
        entries.push_back(e);
    }
    WGPUBindGroupDescriptor bdesc = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
    bdesc.layout = pipeline.layout;
    bdesc.entryCount = entries.size();
    bdesc.entries = entries.data();
    WGPUBindGroup group = api_.wgpuDeviceCreateBindGroup(device_, &bdesc);
    ++bind_groups_made_;
    bind_groups_.emplace(BindKey{h, nullptr, key}, group);
    return group;
}

WGPUBuffer Device::readback_buffer(uint64_t bytes) {
    if (bytes <= readback_bytes_) return readback_;
    return grow(readback_, readback_bytes_, bytes, uint64_t(64) << 10, WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst,
                "window readback");
}

Device::~Device() {
    release_bind_groups();
    if (uniform_ring_) api_.wgpuBufferRelease(uniform_ring_);
    if (readback_) api_.wgpuBufferRelease(readback_);
    for (auto& [key, p] : pipelines_) {
        api_.wgpuBindGroupLayoutRelease(p.layout);
        api_.wgpuComputePipelineRelease(p.pipeline);
    }
    if (queue_) api_.wgpuQueueRelease(queue_);
    if (device_) api_.wgpuDeviceRelease(device_);
    if (adapter_handle_) api_.wgpuAdapterRelease(adapter_handle_);
    if (instance_) api_.wgpuInstanceRelease(instance_);
}

BufferPtr Device::create_buffer(uint64_t bytes, const char* what) {
    // Storage bindings are whole 4-byte words; never bind an empty buffer.
    uint64_t size = std::max<uint64_t>(16, (bytes + 15) & ~uint64_t(15));
    if (size > limits_.max_buffer)
        throw std::runtime_error(std::string("webgpu: ") + what + " needs " + std::to_string(size) +
                                 " bytes, above this adapter's buffer limit " + std::to_string(limits_.max_buffer));
    WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
    desc.label = label(what);
    desc.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
    desc.size = size;
    WGPUBuffer handle = api_.wgpuDeviceCreateBuffer(device_, &desc);
    throw_pending_error(std::string("creating ") + what);
    if (!handle) throw std::runtime_error(std::string("webgpu: cannot allocate ") + what);
    return std::make_shared<Buffer>(api_, handle, size);
}

BufferPtr Device::upload(const void* data, uint64_t bytes, const char* what) {
    BufferPtr buffer = create_buffer(bytes, what);
    write(buffer, 0, data, bytes);
    return buffer;
}

void Device::write(const BufferPtr& buffer, uint64_t offset, const void* data, uint64_t bytes) {
    if (offset + bytes > buffer->size()) throw std::out_of_range("webgpu: write past the end of a buffer");
    // writeBuffer wants a multiple of 4 bytes: pad the tail through a small copy.
    uint64_t whole = bytes & ~uint64_t(3);
    if (whole) api_.wgpuQueueWriteBuffer(queue_, buffer->handle(), offset, data, whole);
    if (whole < bytes) {
        uint8_t tail[4] = {0, 0, 0, 0};
        std::memcpy(tail, static_cast<const uint8_t*>(data) + whole, bytes - whole);
        api_.wgpuQueueWriteBuffer(queue_, buffer->handle(), offset + whole, tail, 4);
    }
}

const Pipeline& Device::pipeline(const std::string& file, const std::string& entry, const ShaderDefines& defines) {
    std::string key = file + ":" + entry;
    for (auto& [k, v] : defines) key += "|" + k + "=" + v;
    auto it = pipelines_.find(key);
    if (it != pipelines_.end()) return it->second;

    std::string code = shaders_.load(file, defines, ShaderDialect::Naga);
    WGPUShaderSourceWGSL wgsl = WGPU_SHADER_SOURCE_WGSL_INIT;
    wgsl.code = WGPUStringView{code.data(), code.size()};
    WGPUShaderModuleDescriptor mdesc = WGPU_SHADER_MODULE_DESCRIPTOR_INIT;
    mdesc.nextInChain = &wgsl.chain;
    mdesc.label = label(file.c_str());
    WGPUShaderModule module = api_.wgpuDeviceCreateShaderModule(device_, &mdesc);
    throw_pending_error("compiling " + file);

    WGPUComputePipelineDescriptor pdesc = WGPU_COMPUTE_PIPELINE_DESCRIPTOR_INIT;
    pdesc.label = label(entry.c_str());
    pdesc.compute.module = module;
    pdesc.compute.entryPoint = WGPUStringView{entry.data(), entry.size()};
    Pipeline p;
    p.pipeline = api_.wgpuDeviceCreateComputePipeline(device_, &pdesc);
    api_.wgpuShaderModuleRelease(module);
    throw_pending_error("building " + file + ":" + entry);
    p.layout = api_.wgpuComputePipelineGetBindGroupLayout(p.pipeline, 0);
    p.entry = entry_names_.insert(entry).first->c_str();
    return pipelines_.emplace(key, p).first->second;
}

void Device::wait_idle() { api_.wgpuDevicePoll(device_, true, nullptr); }

void Recorder::dispatch(const Pipeline& pipeline, const void* params, size_t params_bytes,
                        std::vector<BufRef> buffers, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (params_bytes > kMaxParams) throw std::logic_error("webgpu: parameter block above 16 KiB");
    uint32_t max_groups = device_.limits_.max_workgroups_per_dimension;
    if (gx > max_groups || gy > max_groups || gz > max_groups)
        throw std::logic_error("webgpu: dispatch of " + std::to_string(gx) + "x" + std::to_string(gy) + "x" +
                               std::to_string(gz) + " workgroups exceeds the adapter limit");
    size_t offset = params_.size();
    size_t slots = std::max<size_t>(1, (params_bytes + kUniformSlot - 1) / kUniformSlot);
    params_.resize(offset + slots * kUniformSlot, 0);
    std::memcpy(params_.data() + offset, params, params_bytes);
    // (the caller's list moved in: a dispatch's buffers are not copied again)
    dispatches_.push_back(Dispatch{pipeline, offset, slots * kUniformSlot, std::move(buffers), {gx, gy, gz}});
    last_copies_ = 1;
    if (!device_.repeat_.empty()) {  // STRATA_WEBGPU_REPEAT (timing only)
        auto it = device_.repeat_.find(pipeline.entry);
        for (; it != device_.repeat_.end() && last_copies_ < size_t(it->second); ++last_copies_)
            dispatches_.push_back(dispatches_.back());
    }
}

bool Recorder::profiling() const { return device_.profile_mode_ > 0; }

std::vector<std::string> comma_items(const std::string& list) {
    std::vector<std::string> out;
    for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        out.push_back(list.substr(pos, comma - pos));
        pos = comma + 1;
    }
    return out;
}

std::map<std::string, int> Device::repeat_from_env() {
    std::map<std::string, int> out;
    const char* v = std::getenv("STRATA_WEBGPU_REPEAT");
    if (!v || !*v) return out;
    const std::string all(v);
    auto bad = [&]() {
        return std::invalid_argument("STRATA_WEBGPU_REPEAT='" + all +
                                     "': use a comma list of kernel entry points, each with an optional :N "
                                     "(2 to 64 times; default 2), e.g. add_rmsnorm,router_topk:3");
    };
    for (const std::string& item : comma_items(all)) {
        const size_t colon = item.find(':');
        const std::string entry = item.substr(0, colon);
        int n = 2;
        if (colon != std::string::npos) {
            const std::string count = item.substr(colon + 1);
            char* end = nullptr;
            long c = count.empty() ? 0 : std::strtol(count.c_str(), &end, 10);
            if (count.empty() || *end || c < 2 || c > 64) throw bad();
            n = int(c);
        }
        if (entry.empty() || entry.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
            throw bad();
        out[entry] = n;
    }
    return out;
}

void Recorder::annotate(std::string label, uint64_t bytes) {
    // every copy of a repeated dispatch (STRATA_WEBGPU_REPEAT) takes the label
    for (size_t i = std::min(last_copies_, dispatches_.size()); i > 0; --i) {
        Dispatch& d = dispatches_[dispatches_.size() - i];
        d.label = label;
        d.bytes = bytes;
    }
}

void Recorder::download(const BufferPtr& src, uint64_t offset, uint64_t bytes, void* dst) {
    if (offset + bytes > src->size()) throw std::out_of_range("webgpu: download past the end of a buffer");
    downloads_.push_back(Download{src, offset, bytes, dst});
}

void Recorder::submit(bool wait) {
    if (!wait && !downloads_.empty()) throw std::logic_error("webgpu: a submit with downloads must wait");
    const int prof = device_.profile_mode_ > 0 && !dispatches_.empty() ? device_.profile_mode_ : 0;
    if (prof) wait = true;  // the timestamps are read back at once
    const WgpuApi& api = device_.api_;
    WGPUDevice dev = device_.device_;
    auto t_encode = std::chrono::steady_clock::now();
    if (!params_.empty()) {
        // queue-ordered: a submit still running read its parameters before this write lands
        WGPUBuffer ring = device_.uniform_ring(params_.size());
        api.wgpuQueueWriteBuffer(device_.queue_, ring, 0, params_.data(), params_.size());
    }
    // Downloads go through one mappable staging buffer, each part 4-byte aligned.
    std::vector<uint64_t> staging_offsets;
    uint64_t staging_bytes = 0;
    for (auto& d : downloads_) {
        staging_offsets.push_back(staging_bytes);
        staging_bytes += (d.bytes + 3) & ~uint64_t(3);
    }
    WGPUBuffer staging = staging_bytes ? device_.readback_buffer(staging_bytes) : nullptr;

    // Profiling: timestamps of the first `timed` dispatches (a query set holds at most 4096).
    constexpr uint32_t kMaxQueries = 4096;
    uint32_t timed = 0, queries = 0;
    WGPUQuerySet query_set = nullptr;
    WGPUBuffer resolved = nullptr, readable = nullptr;
    if (prof) {
        timed = uint32_t(std::min<size_t>(dispatches_.size(), prof == 1 ? kMaxQueries - 1 : kMaxQueries / 2));
        queries = prof == 1 ? timed + 1 : 2 * timed;
        WGPUQuerySetDescriptor qdesc = WGPU_QUERY_SET_DESCRIPTOR_INIT;
        qdesc.label = label("dispatch timestamps");
        qdesc.type = WGPUQueryType_Timestamp;
        qdesc.count = queries;
        query_set = api.wgpuDeviceCreateQuerySet(dev, &qdesc);
        WGPUBufferDescriptor bdesc = WGPU_BUFFER_DESCRIPTOR_INIT;
        bdesc.label = label("resolved timestamps");
        bdesc.usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc;
        bdesc.size = uint64_t(queries) * 8;
        resolved = api.wgpuDeviceCreateBuffer(dev, &bdesc);
        bdesc.label = label("timestamp readback");
        bdesc.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst;
        readable = api.wgpuDeviceCreateBuffer(dev, &bdesc);
    }

    WGPUCommandEncoder encoder = api.wgpuDeviceCreateCommandEncoder(dev, nullptr);
    if (!dispatches_.empty()) {
        WGPUComputePassEncoder pass = nullptr;
        WGPUComputePipeline bound = nullptr;  // the pass's pipeline: set again only when it changes
        WGPUPassTimestampWrites writes = WGPU_PASS_TIMESTAMP_WRITES_INIT;
        WGPUComputePassDescriptor pdesc = WGPU_COMPUTE_PASS_DESCRIPTOR_INIT;
        auto end_pass = [&] {
            api.wgpuComputePassEncoderEnd(pass);
            api.wgpuComputePassEncoderRelease(pass);
            pass = nullptr;
            bound = nullptr;
        };
        for (size_t i = 0; i < dispatches_.size(); ++i) {
            auto& d = dispatches_[i];
            if (prof == 2 && i < timed) {  // a pass of its own, timed at its begin and end
                if (pass) end_pass();
                writes.querySet = query_set;
                writes.beginningOfPassWriteIndex = uint32_t(2 * i);
                writes.endOfPassWriteIndex = uint32_t(2 * i + 1);
                pdesc.timestampWrites = &writes;
                pass = api.wgpuCommandEncoderBeginComputePass(encoder, &pdesc);
            } else if (!pass) {
                pass = api.wgpuCommandEncoderBeginComputePass(encoder, nullptr);
                if (prof == 1) api.wgpuComputePassEncoderWriteTimestamp(pass, query_set, 0);
            }
            WGPUBindGroup group = device_.bind_group(d.pipeline, d.params_offset, d.params_size, d.buffers);
            if (d.pipeline.pipeline != bound) {
                api.wgpuComputePassEncoderSetPipeline(pass, d.pipeline.pipeline);
                bound = d.pipeline.pipeline;
            }
            api.wgpuComputePassEncoderSetBindGroup(pass, 0, group, 0, nullptr);
            api.wgpuComputePassEncoderDispatchWorkgroups(pass, d.groups[0], d.groups[1], d.groups[2]);
            if (prof == 1 && i < timed) api.wgpuComputePassEncoderWriteTimestamp(pass, query_set, uint32_t(i + 1));
            if (prof == 2 && i < timed) end_pass();
        }
        if (pass) end_pass();
    }
    if (prof) {
        api.wgpuCommandEncoderResolveQuerySet(encoder, query_set, 0, queries, resolved, 0);
        api.wgpuCommandEncoderCopyBufferToBuffer(encoder, resolved, 0, readable, 0, uint64_t(queries) * 8);
    }
    for (size_t i = 0; i < downloads_.size(); ++i) {
        auto& d = downloads_[i];
        uint64_t aligned = (d.bytes + 3) & ~uint64_t(3);
        api.wgpuCommandEncoderCopyBufferToBuffer(encoder, d.src->handle(), d.offset, staging, staging_offsets[i], aligned);
    }
    WGPUCommandBuffer commands = api.wgpuCommandEncoderFinish(encoder, nullptr);
    auto t_submit = std::chrono::steady_clock::now();
    last_encode_seconds_ = std::chrono::duration<double>(t_submit - t_encode).count();
    api.wgpuQueueSubmit(device_.queue_, 1, &commands);
    api.wgpuCommandBufferRelease(commands);
    api.wgpuCommandEncoderRelease(encoder);

    std::string error;
    if (staging) {
        struct Map {
            bool done = false;
            WGPUMapAsyncStatus status = WGPUMapAsyncStatus_Error;
            std::string message;
        } map;
        WGPUBufferMapCallbackInfo cb = WGPU_BUFFER_MAP_CALLBACK_INFO_INIT;
        cb.mode = WGPUCallbackMode_AllowProcessEvents;
        cb.callback = [](WGPUMapAsyncStatus status, WGPUStringView message, void* ud, void*) {
            auto* m = static_cast<Map*>(ud);
            m->done = true;
            m->status = status;
            m->message = view(message);
        };
        cb.userdata1 = &map;
        api.wgpuBufferMapAsync(staging, WGPUMapMode_Read, 0, staging_bytes, cb);
        while (!map.done) {
            device_.wait_idle();
            api.wgpuInstanceProcessEvents(device_.instance_);
        }
        if (map.status == WGPUMapAsyncStatus_Success) {
            auto* base = static_cast<const uint8_t*>(api.wgpuBufferGetConstMappedRange(staging, 0, staging_bytes));
            for (size_t i = 0; i < downloads_.size(); ++i)
                std::memcpy(downloads_[i].dst, base + staging_offsets[i], downloads_[i].bytes);
            api.wgpuBufferUnmap(staging);
        } else {
            error = "reading results back: " + map.message;
        }
    } else if (wait) {
        device_.wait_idle();
    }
    if (prof) {
        struct Map {
            bool done = false;
            WGPUMapAsyncStatus status = WGPUMapAsyncStatus_Error;
        } map;
        WGPUBufferMapCallbackInfo cb = WGPU_BUFFER_MAP_CALLBACK_INFO_INIT;
        cb.mode = WGPUCallbackMode_AllowProcessEvents;
        cb.callback = [](WGPUMapAsyncStatus status, WGPUStringView, void* ud, void*) {
            auto* m = static_cast<Map*>(ud);
            m->done = true;
            m->status = status;
        };
        cb.userdata1 = &map;
        api.wgpuBufferMapAsync(readable, WGPUMapMode_Read, 0, uint64_t(queries) * 8, cb);
        while (!map.done) {
            device_.wait_idle();
            api.wgpuInstanceProcessEvents(device_.instance_);
        }
        if (map.status == WGPUMapAsyncStatus_Success) {
            std::vector<uint64_t> ts(queries);
            std::memcpy(ts.data(), api.wgpuBufferGetConstMappedRange(readable, 0, uint64_t(queries) * 8),
                        uint64_t(queries) * 8);
            api.wgpuBufferUnmap(readable);
            double period = api.wgpuQueueGetTimestampPeriod(device_.queue_);  // ns per tick
            auto delta = [&](uint64_t a, uint64_t b) { return b > a ? double(b - a) * period : 0.0; };
            for (uint32_t i = 0; i < timed; ++i) {
                const Dispatch& d = dispatches_[i];
                ProfileEntry& e = device_.profile_[d.label.empty() ? std::string(d.pipeline.entry) : d.label];
                e.count += 1;
                e.bytes += d.bytes;
                e.ns += prof == 1 ? delta(ts[i], ts[i + 1]) : delta(ts[2 * i], ts[2 * i + 1]);
            }
            device_.profile_span_ns_ += prof == 1 ? delta(ts[0], ts[timed]) : delta(ts[0], ts[2 * timed - 1]);
            device_.profile_submits_ += 1;
        }
        api.wgpuBufferRelease(readable);
        api.wgpuBufferRelease(resolved);
        api.wgpuQuerySetRelease(query_set);
    }
    if (wait) {
        in_flight_.clear();
    } else {  // Buffer's destructor frees device memory at once: keep what the GPU may still read
        for (auto& d : dispatches_)
            for (auto& b : d.buffers)
                if (b.buf) in_flight_.push_back(b.buf);
    }
    last_run_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_submit).count();
    dispatches_.clear();
    downloads_.clear();
    params_.clear();
    device_.throw_pending_error("running a window");
    if (!error.empty()) throw std::runtime_error("webgpu: " + error);
}

}  // namespace strata::webgpu
