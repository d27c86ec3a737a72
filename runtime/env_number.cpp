#include "runtime/env_number.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "runtime/error.h"

namespace tandem {

std::optional<double> env_number(const char* name, double min, double max, const std::string& unit) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  const bool ok =
      end != text && *end == '\0' && errno == 0 && std::isfinite(value) && value >= min && value <= max;
  TANDEM_CHECK(ok, name << "='" << text << "' must be a number of " << unit << " from "
                        << std::setprecision(15) << min << " to " << max);
  return value;
}

}  // namespace tandem
