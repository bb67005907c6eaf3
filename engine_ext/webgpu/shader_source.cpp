#include "webgpu/shader_source.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace strata::webgpu {

namespace {

// Lines naga refuses: the `enable` directives for extensions it turns on from device features.
bool naga_drops(const std::string& line) {
    std::string trimmed = line.substr(0, line.find("//"));
    std::string compact;
    for (char c : trimmed)
        if (c != ' ' && c != '\t' && c != '\r') compact += c;
    return compact == "enablesubgroups;";
}

// {{NAME}} -> its define, {{include FILE}} -> FILE's text, itself substituted.
std::string substitute(const std::string& source, const std::string& file, const ShaderDefines& defines,
                       const ShaderIncludes& includes, int depth) {
    std::string substituted;
    substituted.reserve(source.size());
    size_t pos = 0;
    while (true) {
        size_t open = source.find("{{", pos);
        if (open == std::string::npos) {
            substituted.append(source, pos, std::string::npos);
            break;
        }
        size_t close = source.find("}}", open + 2);
        if (close == std::string::npos) throw std::runtime_error(file + ": unterminated '{{' placeholder");
        std::string name = source.substr(open + 2, close - open - 2);
        substituted.append(source, pos, open - pos);
        pos = close + 2;
        if (name.rfind("include ", 0) == 0) {
            std::string inc = name.substr(8);
            auto named = defines.find(inc);  // a define's key: the file that define names
            if (named != defines.end()) inc = named->second;
            if (!includes) throw std::runtime_error(file + ": {{" + name + "}} but no include reader");
            if (inc.empty() || inc.find('/') != std::string::npos || inc.find('\\') != std::string::npos)
                throw std::runtime_error(file + ": bad include name '" + inc + "' (a file of the same folder)");
            if (depth >= kMaxIncludeDepth)
                throw std::runtime_error(file + ": includes nested deeper than " + std::to_string(kMaxIncludeDepth));
            substituted += substitute(includes(inc), inc, defines, includes, depth + 1);
            continue;
        }
        auto it = defines.find(name);
        if (it == defines.end()) throw std::runtime_error(file + ": no value for placeholder {{" + name + "}}");
        substituted += it->second;
    }
    return substituted;
}

}  // namespace

std::string preprocess_wgsl(const std::string& source, const std::string& file,
                            const ShaderDefines& defines, ShaderDialect dialect, const ShaderIncludes& includes) {
    std::string substituted = substitute(source, file, defines, includes, 0);
    if (dialect == ShaderDialect::Dawn) return substituted;
    std::istringstream lines(substituted);
    std::string line, out;
    while (std::getline(lines, line)) {
        if (naga_drops(line)) line = "// (naga) " + line;
        out += line;
        out += '\n';
    }
    return out;
}

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read shader " + path + " (is strata installed with its shaders/?)");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

std::string ShaderLibrary::load(const std::string& file, const ShaderDefines& defines,
                                ShaderDialect dialect) const {
    std::string path = dir_ + "/" + file;
    return preprocess_wgsl(read_text(path), path, defines, dialect,
                           [this](const std::string& name) { return read_text(dir_ + "/" + name); });
}

}  // namespace strata::webgpu
