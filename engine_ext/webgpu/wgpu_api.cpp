#include "webgpu/wgpu_api.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace strata::webgpu {

std::string version_string(unsigned v) {
    return std::to_string(v >> 24) + "." + std::to_string((v >> 16) & 0xff) + "." +
           std::to_string((v >> 8) & 0xff) + "." + std::to_string(v & 0xff);
}

namespace {

WgpuApi load_table(const std::string& path) {
    // RTLD_LOCAL: wgpu-py may load the same file into this process too; keep our symbols apart.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        throw std::runtime_error("cannot load wgpu-native library " + path + ": " +
                                 (why ? why : "unknown error") +
                                 " (install the pinned wheel: pip install wgpu==0.32.0)");
    }
    WgpuApi api;
    api.library_path = path;
#define STRATA_WGPU_RESOLVE(name)                                                              \
    api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name));                    \
    if (!api.name) throw std::runtime_error(path + " lacks " #name " (wrong wgpu-native build)");
    STRATA_WGPU_FUNCTIONS(STRATA_WGPU_RESOLVE)
#undef STRATA_WGPU_RESOLVE
    api.version = api.wgpuGetVersion();
    if ((api.version >> 24) != kWgpuNativeMajor || ((api.version >> 16) & 0xff) != kWgpuNativeMinor)
        throw std::runtime_error(path + " is wgpu-native " + version_string(api.version) +
                                 ", strata was built for " + std::to_string(kWgpuNativeMajor) + "." +
                                 std::to_string(kWgpuNativeMinor) + ".x (pip install wgpu==0.32.0)");
    return api;  // the handle stays open for the life of the process, as the table points into it
}

}  // namespace

const WgpuApi& load_wgpu(const std::string& library_path) {
    static std::mutex mutex;
    static WgpuApi* loaded = nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    if (!loaded) {
        loaded = new WgpuApi(load_table(library_path));
    } else if (!library_path.empty() && library_path != loaded->library_path) {
        throw std::runtime_error("wgpu-native already loaded from " + loaded->library_path +
                                 ", cannot switch to " + library_path);
    }
    return *loaded;
}

}  // namespace strata::webgpu
