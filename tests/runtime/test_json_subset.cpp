// The JSON subset of safetensors headers, on its own: values, order, escapes, limits.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/json_subset.h"

using namespace tandem;

namespace {

Json parse(const std::string& text) { return parse_json_subset(text, "test.json", "document"); }

}  // namespace

TEST_CASE("json subset: objects keep file order, integers keep 64 bits, strings decode", "[json]") {
  Json v = parse(R"( {"b": [1, -2, 18446744073709551615], "a": {"x": "caf\u00e9 \ud83d\ude00 \/"}} )");
  REQUIRE(v.kind == Json::Kind::object);
  REQUIRE(v.keys == std::vector<std::string>{"b", "a"});
  const Json* b = v.find("b");
  REQUIRE(b != nullptr);
  REQUIRE(b->values.size() == 3);
  CHECK(b->values[0].magnitude == 1);
  CHECK_FALSE(b->values[0].negative);
  CHECK(b->values[1].negative);
  CHECK(b->values[1].magnitude == 2);
  CHECK(b->values[2].magnitude == 18446744073709551615ull);
  CHECK(v.find("a")->find("x")->text == "caf\xc3\xa9 \xf0\x9f\x98\x80 /");
  CHECK(v.find("missing") == nullptr);
  CHECK(std::string(json_kind_name(Json::Kind::array)) == "an array");
}

TEST_CASE("json subset: a written string reads back to the same bytes", "[json]") {
  const std::string original = "quote\" slash\\ line\nbreak\ttab \x01\x1f caf\xc3\xa9";
  std::string text;
  append_json_string(text, original);
  CHECK(text.find('\n') == std::string::npos);  // control characters are escaped
  CHECK(parse(text).text == original);
}

TEST_CASE("json subset: errors name the source, the byte and the problem", "[json]") {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "at byte 0 of the document: expected a value, found the end"},
      {"1.5", "only integers are expected"},
      {"18446744073709551616", "integer out of range"},
      {"012", "leading zero"},
      {R"({"a":1,"a":2})", "duplicate key \"a\""},
      {R"("\ud83d")", "unpaired surrogate"},
      {"\"a\x01\"", "control character byte 0x01 inside a string"},
      {"[1] 2", "unexpected data after the top-level value"},
      {std::string(kMaxJsonDepth + 2, '[') + std::string(kMaxJsonDepth + 2, ']'),
       "nested more than 32 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK_THROWS_WITH(parse(c.text), Catch::Contains("test.json: corrupt document: invalid JSON at byte") &&
                                         Catch::Contains(c.message));
  }
}
