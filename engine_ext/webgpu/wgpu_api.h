// The wgpu-native entry points strata uses, loaded at run time with dlopen from the library that
// the pinned `wgpu` wheel ships (wgpu/resources/libwgpu_native-release.so). Nothing links
// against wgpu-native, so a machine without it (or without a GPU driver) still imports strata.
#pragma once
#include <string>

#include <webgpu.h>
#include <wgpu.h>

namespace strata::webgpu {

// wgpu-native release the headers in the pinned wheel (wgpu 0.32.0) describe: 29.0.x.
constexpr unsigned kWgpuNativeMajor = 29;
constexpr unsigned kWgpuNativeMinor = 0;

#define STRATA_WGPU_FUNCTIONS(X)                                                                   \
    X(wgpuGetVersion)                                                                              \
    X(wgpuCreateInstance) X(wgpuInstanceRelease) X(wgpuInstanceEnumerateAdapters)                  \
    X(wgpuInstanceProcessEvents) X(wgpuInstanceWaitAny)                                            \
    X(wgpuAdapterGetInfo) X(wgpuAdapterInfoFreeMembers) X(wgpuAdapterGetLimits)                    \
    X(wgpuAdapterHasFeature) X(wgpuAdapterRequestDevice) X(wgpuAdapterRelease)                     \
    X(wgpuDeviceCreateBuffer) X(wgpuDeviceCreateShaderModule) X(wgpuDeviceCreateComputePipeline)   \
    X(wgpuDeviceCreateBindGroup) X(wgpuDeviceCreateCommandEncoder) X(wgpuDeviceGetQueue)           \
    X(wgpuDeviceGetLimits) X(wgpuDevicePoll) X(wgpuDeviceRelease)                                  \
    X(wgpuComputePipelineGetBindGroupLayout) X(wgpuComputePipelineRelease)                         \
    X(wgpuBindGroupLayoutRelease) X(wgpuBindGroupRelease) X(wgpuShaderModuleRelease)               \
    X(wgpuBufferMapAsync) X(wgpuBufferGetConstMappedRange) X(wgpuBufferUnmap)                      \
    X(wgpuBufferDestroy) X(wgpuBufferRelease)                                                      \
    X(wgpuQueueWriteBuffer) X(wgpuQueueSubmit) X(wgpuQueueRelease)                                 \
    X(wgpuCommandEncoderBeginComputePass) X(wgpuCommandEncoderCopyBufferToBuffer)                  \
    X(wgpuCommandEncoderFinish) X(wgpuCommandEncoderRelease) X(wgpuCommandBufferRelease)           \
    X(wgpuComputePassEncoderSetPipeline) X(wgpuComputePassEncoderSetBindGroup)                     \
    X(wgpuComputePassEncoderDispatchWorkgroups) X(wgpuComputePassEncoderEnd)                       \
    X(wgpuComputePassEncoderRelease)                                                               \
    X(wgpuDeviceCreateQuerySet) X(wgpuQuerySetRelease) X(wgpuCommandEncoderResolveQuerySet)        \
    X(wgpuComputePassEncoderWriteTimestamp) X(wgpuQueueGetTimestampPeriod)

// One table of function pointers, filled once per process.
struct WgpuApi {
#define STRATA_WGPU_POINTER(name) decltype(&::name) name = nullptr;
    STRATA_WGPU_FUNCTIONS(STRATA_WGPU_POINTER)
#undef STRATA_WGPU_POINTER
    std::string library_path;
    unsigned version = 0;  // wgpuGetVersion(): major<<24 | minor<<16 | patch<<8 | build
};

// Loads the library at `library_path` (first call wins; later calls must name the same file) and
// checks its version. Throws std::runtime_error with one line naming the file and the problem.
const WgpuApi& load_wgpu(const std::string& library_path);

std::string version_string(unsigned version);

}  // namespace strata::webgpu
