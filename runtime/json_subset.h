// A JSON subset: objects, arrays, strings and integers, all a safetensors header holds.
//
// Contract:
// - parse_json_subset(text, source, what) parses one JSON value filling the whole text
//   (surrounding whitespace allowed). Anything else is an Error "<source>: corrupt <what>:
//   invalid JSON at byte N of the <what>: ..." saying what is wrong: fractions and
//   exponents, duplicate keys, nesting deeper than kMaxJsonDepth, unpaired surrogates,
//   control characters in strings, integers beyond 64 bits.
// - Objects keep their keys in file order; strings are decoded to UTF-8.
// - append_json_string appends `s` as a JSON string literal (quotes, escapes; UTF-8 bytes
//   pass through), which parse_json_subset reads back to the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

constexpr int kMaxJsonDepth = 32;

struct Json {
  enum class Kind { object, array, string, integer };
  Kind kind = Kind::object;
  std::vector<std::string> keys;  // object: keys[i] names values[i], in file order
  std::vector<Json> values;       // object members or array items
  std::string text;               // string
  bool negative = false;          // integer: sign and magnitude
  uint64_t magnitude = 0;

  const Json* find(std::string_view key) const {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &values[i];
    }
    return nullptr;
  }
};

// "an object", "an array", "a string", "an integer": for messages.
const char* json_kind_name(Json::Kind kind);

Json parse_json_subset(std::string_view text, const std::string& source, const char* what);

void append_json_string(std::string& out, const std::string& s);

}  // namespace tandem
