// Numeric settings read from the environment, strictly.
//
// Contract: env_number(name, min, max, unit) is nullopt when the variable is unset or
// empty. Otherwise its whole text must be a finite number (no trailing characters, no
// inf/nan) within [min, max]; anything else throws an Error naming the variable, its text,
// the range and the unit, e.g. "TANDEM_COLLECTIVE_TIMEOUT_S='1e16' must be a number of
// seconds from 0.001 to 1000000". Callers pick ranges whose conversions (to milliseconds,
// bytes, int64) cannot overflow.
#pragma once

#include <optional>
#include <string>

namespace tandem {

std::optional<double> env_number(const char* name, double min, double max, const std::string& unit);

}  // namespace tandem
