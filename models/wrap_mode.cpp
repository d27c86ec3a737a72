#include "models/wrap_mode.h"

namespace tandem::models {

namespace {

constexpr WrapMode kWrapModes[] = {WrapMode::whole, WrapMode::separate, WrapMode::none};

}  // namespace

std::optional<WrapMode> parse_wrap_mode(std::string_view name) {
  for (WrapMode mode : kWrapModes) {
    if (name == wrap_mode_name(mode)) return mode;
  }
  return std::nullopt;
}

const char* wrap_mode_name(WrapMode mode) {
  switch (mode) {
    case WrapMode::whole:
      return "whole";
    case WrapMode::separate:
      return "separate";
    case WrapMode::none:
      return "none";
  }
  return "unknown";  // only for a value cast from outside the enumerators
}

}  // namespace tandem::models
