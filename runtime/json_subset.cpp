#include "runtime/json_subset.h"

#include <cstdio>
#include <limits>

#include "runtime/error.h"

namespace tandem {

const char* json_kind_name(Json::Kind kind) {
  switch (kind) {
    case Json::Kind::object:
      return "an object";
    case Json::Kind::array:
      return "an array";
    case Json::Kind::string:
      return "a string";
    case Json::Kind::integer:
      return "an integer";
  }
  return "?";
}

namespace {

class JsonParser {
 public:
  JsonParser(std::string_view text, const std::string& source, const char* what)
      : text_(text), source_(source), what_(what) {}

  Json parse_document() {
    skip_space();
    Json value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected data after the top-level value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TANDEM_FAIL(source_ << ": corrupt " << what_ << ": invalid JSON at byte " << pos_ << " of the " << what_
                        << ": " << what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void expect(char c) {
    if (pos_ >= text_.size()) fail(std::string("expected '") + c + "', found the end of the header");
    if (text_[pos_] != c) fail(std::string("expected '") + c + "', found " + describe(text_[pos_]));
    ++pos_;
  }

  static std::string describe(char c) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) return std::string("'") + c + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", u);
    return buf;
  }

  Json parse_value(int depth) {
    if (depth > kMaxJsonDepth) fail("nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
    if (pos_ >= text_.size()) fail("expected a value, found the end of the header");
    char c = text_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      Json s;
      s.kind = Json::Kind::string;
      s.text = parse_string();
      return s;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_integer();
    fail("expected a value, found " + describe(c));
  }

  Json parse_object(int depth) {
    Json obj;
    obj.kind = Json::Kind::object;
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return obj;
    }
    for (;;) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      if (obj.find(key) != nullptr) fail("duplicate key \"" + key + "\"");
      skip_space();
      expect(':');
      skip_space();
      obj.keys.push_back(std::move(key));
      obj.values.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return obj;
    }
  }

  Json parse_array(int depth) {
    Json arr;
    arr.kind = Json::Kind::array;
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return arr;
    }
    for (;;) {
      skip_space();
      arr.values.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return arr;
    }
  }

  Json parse_integer() {
    Json n;
    n.kind = Json::Kind::integer;
    if (peek() == '-') {
      n.negative = true;
      ++pos_;
    }
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (n.magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) fail("integer out of range");
      n.magnitude = n.magnitude * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) fail("expected digits");
    if (pos_ - start > 1 && text_[start] == '0') fail("integer with a leading zero");
    char c = peek();
    if (c == '.' || c == 'e' || c == 'E')
      fail("only integers are expected (this JSON subset has no fractions or exponents)");
    return n;
  }

  unsigned parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        fail("bad hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character " + describe(c) + " inside a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = parse_hex4();
          if (cp >= 0xd800 && cp < 0xdc00) {
            if (text_.substr(pos_, 2) != "\\u") fail("unpaired surrogate in \\u escape");
            pos_ += 2;
            unsigned low = parse_hex4();
            if (low < 0xdc00 || low >= 0xe000) fail("unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          } else if (cp >= 0xdc00 && cp < 0xe000) {
            fail("unpaired surrogate in \\u escape");
          }
          append_utf8(out, cp);
          break;
        }
        default:
          --pos_;
          fail("unknown escape \\" + std::string(1, e));
      }
    }
  }

  std::string_view text_;
  const std::string& source_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace

Json parse_json_subset(std::string_view text, const std::string& source, const char* what) {
  return JsonParser(text, source, what).parse_document();
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += c;  // UTF-8 bytes pass through: JSON text is UTF-8
        }
    }
  }
  out += '"';
}

}  // namespace tandem
