// How a GAN is wrapped for data parallelism: one DistributedDataParallel for the whole
// model, one Reducer per part, or none (the model alone, no communication).
//
// Contract: the modes' names are "whole", "separate" and "none" (the --wrap flag's values
// and what messages print). wrap_mode_name(mode) is the name; parse_wrap_mode(name) is the
// mode of that exact name, nullopt for any other string, so that each caller reports a bad
// name as its own kind of error (a usage error naming the flag, an Error naming the field).
#pragma once

#include <optional>
#include <string_view>

namespace tandem::models {

enum class WrapMode { whole, separate, none };

std::optional<WrapMode> parse_wrap_mode(std::string_view name);
const char* wrap_mode_name(WrapMode mode);

}  // namespace tandem::models
