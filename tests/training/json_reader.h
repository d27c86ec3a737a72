// A strict reader for the JSON that tandem-train writes (objects, arrays, numbers, strings
// without escapes, true/false/null), written independently of the writer so that tests can
// check that a line really is JSON. Throws std::runtime_error at the first offence.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::testing {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object } kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  std::string text;  // a string's value, or a number's spelling
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;

  const JsonValue& at(const std::string& key) const {
    auto it = members.find(key);
    if (kind != Kind::object || it == members.end()) throw std::runtime_error("no member '" + key + "'");
    return it->second;
  }
  bool is_integer() const { return kind == Kind::number && text.find_first_of(".eE") == std::string::npos; }
};

class JsonReader {
 public:
  static JsonValue parse(const std::string& text) {
    JsonReader r(text);
    JsonValue v = r.value();
    r.skip_space();
    if (r.pos_ != text.size()) r.fail("trailing characters");
    return v;
  }

 private:
  explicit JsonReader(const std::string& text) : s_(text) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("invalid JSON at byte " + std::to_string(pos_) + ": " + what + " in: " + s_);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool take(const std::string& word) {
    if (s_.compare(pos_, word.size(), word) != 0) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue value() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end");
    JsonValue v;
    char c = s_[pos_];
    if (c == '{') return object();
    if (c == '[') return array();
    if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.text = string();
    } else if (take("true")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = true;
    } else if (take("false")) {
      v.kind = JsonValue::Kind::boolean;
    } else if (take("null")) {
      v.kind = JsonValue::Kind::null;
    } else {
      v.kind = JsonValue::Kind::number;
      v.text = number();
      v.number = std::strtod(v.text.c_str(), nullptr);
    }
    return v;
  }

  std::string string() {
    expect('"');
    size_t end = s_.find('"', pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(pos_, end - pos_);
    if (out.find('\\') != std::string::npos) fail("escapes are not expected");
    pos_ = end + 1;
    return out;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    const size_t begin = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == from) fail("expected a digit");
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    return s_.substr(begin, pos_ - begin);
  }

  // The opening bracket, items separated by commas, the closing bracket.
  template <typename ReadItem>
  void sequence(char open, char close, ReadItem read_item) {
    expect(open);
    skip_space();
    if (take(std::string(1, close))) return;
    do {
      read_item();
      skip_space();
    } while (take(","));
    expect(close);
  }

  JsonValue array() {
    JsonValue v;
    v.kind = JsonValue::Kind::array;
    sequence('[', ']', [&] { v.items.push_back(value()); });
    return v;
  }

  JsonValue object() {
    JsonValue v;
    v.kind = JsonValue::Kind::object;
    sequence('{', '}', [&] {
      skip_space();
      std::string key = string();
      if (v.members.count(key)) fail("duplicate key '" + key + "'");
      expect(':');
      v.members[key] = value();
    });
    return v;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace tandem::testing
