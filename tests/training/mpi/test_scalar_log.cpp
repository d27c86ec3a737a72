// ScalarLog across ranks: Reduce::mean gives every rank the same averages (against the mean
// worked out here), rank 0 alone writes metrics.jsonl and calls its sinks.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "models/training/scalar_log.h"
#include "tests/mpi_world.h"

using namespace tandem;
using namespace tandem::training;
using tandem::testing::world;
namespace fs = std::filesystem;

namespace {

struct CountingSink : ScalarSink {
  int calls = 0;
  void add_scalars(int64_t, const Scalars&) override { ++calls; }
};

}  // namespace

TEST_CASE("Reduce::mean averages over the ranks; rank 0 writes", "[scalar_log]") {
  const int rank = world()->rank(), size = world()->size();
  const fs::path dir = fs::path(TANDEM_TEST_BIN_DIR) / ("scalar_log_np" + std::to_string(size));
  if (rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world()->barrier("fresh dir")->wait();
  CountingSink sink;
  {
    ScalarLog log(dir.string(), world().get());
    CHECK(log.writes() == (rank == 0));
    log.attach(sink);
    // Rank r logs loss r + 1 and acc 10 r: means (size + 1) / 2 and 5 (size - 1).
    const Scalars means = log.log(5, {{"loss", rank + 1.0}, {"acc", 10.0 * rank}}, Reduce::mean);
    CHECK(means == Scalars{{"loss", (size + 1) / 2.0}, {"acc", 5.0 * (size - 1)}});
    // Without a reduction nothing is exchanged: each rank keeps its own, rank 0's are written.
    CHECK(log.log(6, {{"loss", rank + 1.0}}) == Scalars{{"loss", rank + 1.0}});
  }
  CHECK(sink.calls == (rank == 0 ? 2 : 0));
  world()->barrier("logged")->wait();
  if (rank == 0) {
    std::ifstream in(dir / "metrics.jsonl");
    std::string first, second, more;
    std::getline(in, first);
    std::getline(in, second);
    CHECK(first == scalars_json(5, {{"loss", (size + 1) / 2.0}, {"acc", 5.0 * (size - 1)}}));
    CHECK(second == "{\"iteration\": 6, \"loss\": 1}");
    CHECK_FALSE(std::getline(in, more));
    fs::remove_all(dir);
  }
}
