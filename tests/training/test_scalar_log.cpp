// The scalar logger: its JSON lines read back by an independent reader and by the report's
// parser, a resumed log cut to its checkpoint, and sinks fed by the same call.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "models/training/scalar_log.h"
#include "tests/test_files.h"
#include "tests/training/json_reader.h"

using namespace tandem;
using namespace tandem::training;
using namespace tandem::testing;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct RecordingSink : ScalarSink {
  std::vector<std::pair<int64_t, Scalars>> got;
  void add_scalars(int64_t iteration, const Scalars& scalars) override {
    got.emplace_back(iteration, scalars);
  }
};

}  // namespace

TEST_CASE("scalars_json writes MetricsLog's line shape for any names", "[scalar_log]") {
  const std::string line =
      scalars_json(12, {{"loss_d", 0.123456789}, {"acc/top1", 75.0}, {"say \"hi\"\\", 1e-7}});
  CHECK(line == "{\"iteration\": 12, \"loss_d\": 0.123457, \"acc/top1\": 75, \"say \\\"hi\\\"\\\\\": 1e-07}");
  const JsonValue v = JsonReader::parse(scalars_json(12, {{"loss_d", 0.123456789}, {"acc/top1", 75.0}}));
  CHECK(v.at("iteration").is_integer());
  CHECK(v.at("loss_d").number == Approx(0.123457).epsilon(1e-9));
  CHECK(v.at("acc/top1").number == 75.0);
  // Non-finite values as null: JSON has no NaN or infinity.
  CHECK(scalars_json(1, {{"a", std::nan("")}, {"b", INFINITY}, {"c", -INFINITY}}) ==
        "{\"iteration\": 1, \"a\": null, \"b\": null, \"c\": null}");
  CHECK(JsonReader::parse(scalars_json(1, {{"a", std::nan("")}})).at("a").kind == JsonValue::Kind::null);
}

TEST_CASE("parse_scalars_json reads back what scalars_json writes", "[scalar_log]") {
  const Scalars logged = {{"loss_d", 0.5}, {"odd \"name\"", -2.25}, {"lr", 2e-4}};
  const auto parsed = parse_scalars_json(scalars_json(7, logged));
  REQUIRE(parsed);
  CHECK(parsed->first == 7);
  CHECK(parsed->second == logged);
  const auto nonfinite = parse_scalars_json(scalars_json(3, {{"a", std::nan("")}, {"b", -INFINITY}}));
  REQUIRE(nonfinite);
  CHECK(std::isnan(nonfinite->second[0].second));
  CHECK(std::isnan(nonfinite->second[1].second));  // null: the sign of an infinity is not kept
  const auto older = parse_scalars_json("{\"iteration\": 3, \"a\": NaN, \"b\": -Infinity}");
  REQUIRE(older);
  CHECK(std::isnan(older->second[0].second));
  CHECK(older->second[1].second == -INFINITY);
  // Torn or foreign lines.
  for (const char* bad :
       {"{\"iteration\": 25, \"loss_d\": 1.0, \"lo", "{\"iteration\": 2.5}", "{\"loss\": 1}",
        "{\"iteration\": 1, \"a\": 1}}", "{\"iteration\": 1, \"a\" 1}", ""}) {
    INFO(bad);
    CHECK_FALSE(parse_scalars_json(bad));
  }
}

TEST_CASE("a ScalarLog writes one flushed line per call and feeds its sinks", "[scalar_log]") {
  TempDir tmp("scalar_log");
  RecordingSink sink;
  {
    ScalarLog log(tmp.file("run/logs"));  // made when missing
    CHECK(log.writes());
    log.attach(sink);
    CHECK(log.log(10, {{"loss", 2.0}, {"acc", 0.5}}) == Scalars{{"loss", 2.0}, {"acc", 0.5}});
    log.log(20, {{"loss", 1.0}}, Reduce::mean);  // one process: the mean is the value
    // Flushed: readable while the log is open.
    CHECK(lines_of(log.path()) == std::vector<std::string>{"{\"iteration\": 10, \"loss\": 2, \"acc\": 0.5}",
                                                           "{\"iteration\": 20, \"loss\": 1}"});
  }
  REQUIRE(sink.got.size() == 2);
  CHECK(sink.got[1] == std::make_pair(int64_t{20}, Scalars{{"loss", 1.0}}));
  // Resumed from iteration 10: the later line goes, the resumed run logs it again.
  ScalarLog resumed(tmp.file("run/logs"), nullptr, 10);
  resumed.log(20, {{"loss", 0.75}});
  CHECK(lines_of(resumed.path()) == std::vector<std::string>{"{\"iteration\": 10, \"loss\": 2, \"acc\": 0.5}",
                                                             "{\"iteration\": 20, \"loss\": 0.75}"});
  // From iteration 0 the file starts empty.
  ScalarLog fresh(tmp.file("run/logs"));
  CHECK(lines_of(fresh.path()).empty());
}
