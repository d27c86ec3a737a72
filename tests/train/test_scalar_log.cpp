// The scalar logger: its JSON lines read back by an independent reader and by the report's
// parser, a resumed log cut to its checkpoint, sinks fed by the same call, and report.html
// drawing any names series by series.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "models/train/run_report.h"
#include "models/train/scalar_log.h"
#include "tests/test_files.h"
#include "tests/train/json_reader.h"

using namespace tandem;
using namespace tandem::train;
using namespace tandem::testing;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string points_of(const std::string& html, const std::string& series) {
  const size_t at = html.find("<polyline data-series=\"" + series + "\"");
  REQUIRE(at != std::string::npos);
  const size_t begin = html.find("points=\"", at) + 8;
  return html.substr(begin, html.find('"', begin) - begin);
}

// The chart (figure) whose id is `id`.
std::string figure_of(const std::string& html, const std::string& id) {
  const size_t at = html.find("<figure class=\"chart\" id=\"" + id + "\"");
  REQUIRE(at != std::string::npos);
  return html.substr(at, html.find("</figure>", at) - at);
}

struct RecordingSink : ScalarSink {
  std::vector<std::pair<int64_t, Scalars>> got;
  void add_scalars(int64_t iteration, const Scalars& scalars) override { got.emplace_back(iteration, scalars); }
};

}  // namespace

TEST_CASE("scalars_json writes MetricsLog's line shape for any names", "[scalar_log]") {
  const std::string line = scalars_json(12, {{"loss_d", 0.123456789}, {"acc/top1", 75.0}, {"say \"hi\"\\", 1e-7}});
  CHECK(line == "{\"iteration\": 12, \"loss_d\": 0.123457, \"acc/top1\": 75, \"say \\\"hi\\\"\\\\\": 1e-07}");
  const JsonValue v = JsonReader::parse(scalars_json(12, {{"loss_d", 0.123456789}, {"acc/top1", 75.0}}));
  CHECK(v.at("iteration").is_integer());
  CHECK(v.at("loss_d").number == Approx(0.123457).epsilon(1e-9));
  CHECK(v.at("acc/top1").number == 75.0);
  // Non-finite values as Python's json module spells them.
  CHECK(scalars_json(1, {{"a", std::nan("")}, {"b", INFINITY}, {"c", -INFINITY}}) ==
        "{\"iteration\": 1, \"a\": NaN, \"b\": Infinity, \"c\": -Infinity}");
}

TEST_CASE("parse_scalars_json reads back what scalars_json and metrics_json write", "[scalar_log]") {
  const Scalars logged = {{"loss_d", 0.5}, {"odd \"name\"", -2.25}, {"lr", 2e-4}};
  const auto parsed = parse_scalars_json(scalars_json(7, logged));
  REQUIRE(parsed);
  CHECK(parsed->first == 7);
  CHECK(parsed->second == logged);
  const auto nonfinite = parse_scalars_json(scalars_json(3, {{"a", std::nan("")}, {"b", -INFINITY}}));
  REQUIRE(nonfinite);
  CHECK(std::isnan(nonfinite->second[0].second));
  CHECK(nonfinite->second[1].second == -INFINITY);
  // tandem-train's line: the numbers, the rss array left out.
  models::LogPoint p;
  p.iteration = 20;
  p.loss_d = 1.5;
  p.loss_g = 0.25;
  p.terms = {{"gp", 0.125}};
  p.ms_per_step = 4;
  p.bytes_per_step = 1000;
  p.rss_mb = {1.5, 2.5};
  const auto train_line = parse_scalars_json(models::metrics_json(p));
  REQUIRE(train_line);
  CHECK(train_line->first == 20);
  CHECK(train_line->second == Scalars{{"loss_d", 1.5}, {"loss_g", 0.25}, {"gp", 0.125},
                                      {"ms_per_step", 4}, {"bytes_per_step", 1000}});
  // Torn or foreign lines.
  for (const char* bad : {"{\"iteration\": 25, \"loss_d\": 1.0, \"lo", "{\"iteration\": 2.5}", "{\"loss\": 1}",
                          "{\"iteration\": 1, \"a\": 1}}", "{\"iteration\": 1, \"a\" 1}", ""}) {
    INFO(bad);
    CHECK_FALSE(parse_scalars_json(bad));
  }
}

TEST_CASE("a ScalarLog writes one flushed line per call and feeds its sinks", "[scalar_log]") {
  TempDir tmp("scalar_log");
  RecordingSink sink;
  {
    ScalarLog log(tmp.path.string());
    CHECK(log.writes());
    log.attach(sink);
    CHECK(log.log(10, {{"loss", 2.0}, {"acc", 0.5}}) == Scalars{{"loss", 2.0}, {"acc", 0.5}});
    log.log(20, {{"loss", 1.0}}, Reduce::mean);  // one process: the mean is the value
    // Flushed: readable while the log is open.
    CHECK(lines_of(log.path()) ==
          std::vector<std::string>{"{\"iteration\": 10, \"loss\": 2, \"acc\": 0.5}", "{\"iteration\": 20, \"loss\": 1}"});
  }
  REQUIRE(sink.got.size() == 2);
  CHECK(sink.got[1] == std::make_pair(int64_t{20}, Scalars{{"loss", 1.0}}));
  // Resumed from iteration 10: the later line goes, the resumed run logs it again.
  ScalarLog resumed(tmp.path.string(), nullptr, 10);
  resumed.log(20, {{"loss", 0.75}});
  CHECK(lines_of(resumed.path()) == std::vector<std::string>{"{\"iteration\": 10, \"loss\": 2, \"acc\": 0.5}",
                                                             "{\"iteration\": 20, \"loss\": 0.75}"});
  // From iteration 0 the file starts empty.
  ScalarLog fresh(tmp.path.string());
  CHECK(lines_of(fresh.path()).empty());
}

TEST_CASE("the report draws any names, grouped by prefix, lr on its own chart", "[scalar_log][run_report]") {
  TempDir tmp("scalar_log");
  {
    ScalarLog log(tmp.path.string());
    log.log(10, {{"loss_d", 1.0}, {"loss_g", 3.0}, {"lr", 1e-3}, {"acc/train", 0.5}, {"acc/test", 0.25}});
    log.log(20, {{"loss_d", 2.0}, {"loss_g", 0.0}, {"lr", 5e-4}, {"acc/train", 0.75}, {"acc/test", 0.5}});
    log.log(30, {{"loss_d", 1.5}, {"loss_g", 1.0}, {"lr", 2.5e-4}, {"acc/train", 1.0}, {"acc/test", 0.75}});
  }
  models::RunReport report(tmp.path.string(), "my gan", {}, 30);
  report.load_history(30);
  const std::string html = report.html(models::RunState::finished);
  // Three charts: the losses, the learning rate, the accuracies; no empty ones.
  CHECK(count_of(html, "<svg ") == 3);
  const std::string losses = figure_of(html, "losses"), lr = figure_of(html, "lr"),
                    acc = figure_of(html, "scalars-acc");
  // x 10..30; the losses share 0..3, the accuracies 0.25..1.
  CHECK(points_of(losses, "loss_d (raw)") == "64.0,132.0 304.0,72.0 544.0,102.0");
  CHECK(points_of(losses, "loss_g (raw)") == "64.0,12.0 304.0,192.0 544.0,132.0");
  CHECK(points_of(acc, "acc/test (raw)") == "64.0,192.0 304.0,132.0 544.0,72.0");
  CHECK(count_of(acc, "data-series=\"acc/train (smoothed)\"") == 1);
  // lr alone, unsmoothed, and on no other chart.
  CHECK(points_of(lr, "lr") == "64.0,12.0 304.0,132.0 544.0,192.0");
  CHECK(count_of(losses + acc, "lr") == 0);
  // The latest line: the scalars, no empty rss figure.
  CHECK(count_of(html, "<pre id=\"latest\">iter     30/30  loss_d 1.5000  loss_g 1.0000  lr 0.00025  acc/train "
                       "1.0000  acc/test 0.7500</pre>") == 1);
  CHECK(count_of(html, "rss") == 0);
}

TEST_CASE("tandem-train's lr goes on its own chart, not the penalty terms'", "[scalar_log][run_report]") {
  TempDir tmp("scalar_log");
  models::RunReport report(tmp.path.string(), "t", {}, 20);
  for (int64_t i : {10, 20}) {
    models::LogPoint p;
    p.iteration = i;
    p.total = 20;
    p.ms_per_step = 2;
    p.terms = {{"lr", 1e-4 * static_cast<double>(i)}, {"gp", 0.5}, {"grad_norm_d", 1.0}, {"grad_norm_g", 2.0}};
    report.add_point(p);
  }
  const std::string html = report.html(models::RunState::finished);
  CHECK(count_of(figure_of(html, "terms"), "data-series=\"lr") == 0);
  CHECK(count_of(figure_of(html, "terms"), "data-series=\"gp (raw)\"") == 1);
  CHECK(points_of(figure_of(html, "lr"), "lr") == "64.0,192.0 544.0,12.0");
  CHECK(count_of(figure_of(html, "scalars-grad-norm"), "data-series=\"grad_norm_g (raw)\"") == 1);
  // losses, lr, terms, grad_norm, step time, it/s, bytes
  CHECK(count_of(html, "<svg ") == 7);
  // No rss figures in the point: none in the latest line either.
  CHECK(count_of(html, "rss") == 0);
}
