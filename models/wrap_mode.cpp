#include "models/wrap_mode.h"

namespace tandem::models {

namespace {

struct NamedMode {
  WrapMode mode;
  const char* name;
};

constexpr NamedMode kWrapModes[] = {
    {WrapMode::whole, "whole"}, {WrapMode::separate, "separate"}, {WrapMode::none, "none"}};

}  // namespace

std::optional<WrapMode> parse_wrap_mode(std::string_view name) {
  for (const NamedMode& m : kWrapModes) {
    if (name == m.name) return m.mode;
  }
  return std::nullopt;
}

const char* wrap_mode_name(WrapMode mode) {
  for (const NamedMode& m : kWrapModes) {
    if (mode == m.mode) return m.name;
  }
  return "unknown";  // only for a value cast from outside the enumerators
}

}  // namespace tandem::models
