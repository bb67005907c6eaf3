// WGSL sources read from the installed package's shaders/ folder, run through a small
// preprocessor: `{{NAME}}` placeholders take the pipeline's defines (workgroup sizes, block
// sizes), `{{include FILE}}` takes the text of another file of the same folder (itself
// preprocessed: one inner loop shared by several kernel files, identical by construction;
// FILE may be a define's key, then the file is the one that define names), and
// the dialect differences between naga (wgpu-native) and Dawn are applied in one
// place so the shader files stay portable.
#pragma once
#include <functional>
#include <map>
#include <string>

namespace strata::webgpu {

using ShaderDefines = std::map<std::string, std::string>;

enum class ShaderDialect {
    Naga,  // wgpu-native: rejects `enable subgroups;` (subgroups come from a device feature)
    Dawn,  // Chromium/Dawn: requires `enable subgroups;` before subgroup builtins are used
};

// The text of an included file by its name (ShaderLibrary: a file of its folder).
using ShaderIncludes = std::function<std::string(const std::string& name)>;

// Pure text transform, exposed for the tests. Throws std::runtime_error naming `file` when a
// placeholder has no define or is unterminated, or an include cannot be resolved (no reader,
// a name with a path separator, includes nested deeper than kMaxIncludeDepth).
constexpr int kMaxIncludeDepth = 4;
std::string preprocess_wgsl(const std::string& source, const std::string& file,
                            const ShaderDefines& defines, ShaderDialect dialect,
                            const ShaderIncludes& includes = nullptr);

class ShaderLibrary {
public:
    explicit ShaderLibrary(std::string dir) : dir_(std::move(dir)) {}
    const std::string& dir() const { return dir_; }
    // The preprocessed text of dir/file; throws (naming the path) when it cannot be read.
    std::string load(const std::string& file, const ShaderDefines& defines, ShaderDialect dialect) const;

private:
    std::string dir_;
};

}  // namespace strata::webgpu
