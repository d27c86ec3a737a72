// runtime/host_cost.h on the CPU path: host reads named by their caller's line, syncs and
// copies counted with their waits, nothing counted while off or paused, per-step figures.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "runtime/host_cost.h"
#include "runtime/tensor.h"

using namespace tandem;

namespace {

const host_cost::Site* find_site(const std::vector<host_cost::Site>& sites, const std::string& part) {
  for (const host_cost::Site& s : sites)
    if (s.site.find(part) != std::string::npos) return &s;
  return nullptr;
}

// The number printed after `label` in a table.
double value_after(const std::string& table, const std::string& label) {
  const size_t at = table.find(label);
  if (at == std::string::npos) return -1;
  std::string rest = table.substr(at + label.size());
  if (rest.rfind("# ", 0) == 0) rest = rest.substr(2);
  std::istringstream in(rest);
  double value = -1;
  in >> value;
  return value;
}

}  // namespace

TEST_CASE("host reads are counted by the caller's line, only while counting", "[host_cost]") {
  Tensor t = Tensor::from_values({3}, {1.0, 2.0, 3.0});
  Tensor one = Tensor::from_values({1}, {4.0});
  host_cost::start();
  host_cost::set_counting(false);
  one.item();  // paused: not counted
  host_cost::set_counting(true);
  const int first_line = __LINE__ + 2;
  for (int i = 0; i < 3; ++i) {
    CHECK(one.item() == 4.0);
    CHECK(t.to_vector().size() == 3);
  }
  CHECK(t.at(2) == 3.0);
  const host_cost::Record r = host_cost::stop();
  one.item();  // stopped: not counted
  CHECK(r.host_reads == 7);
  CHECK(r.syncs == 0);  // a CPU tensor's read waits for nothing
  REQUIRE(r.read_sites.size() == 3);
  const std::string file = "tests/runtime/test_host_cost.cpp:";
  const host_cost::Site* item = find_site(r.read_sites, file + std::to_string(first_line) + " ");
  const host_cost::Site* vec = find_site(r.read_sites, file + std::to_string(first_line + 1) + " ");
  REQUIRE(item != nullptr);
  REQUIRE(vec != nullptr);
  CHECK(item->count == 3);
  CHECK(vec->count == 3);
  CHECK(r.read_sites.back().count == 1);             // most frequent first
  CHECK(item->site.find('(') == std::string::npos);  // the function's name, without its signature
  CHECK(host_cost::stop().host_reads == 7);          // stop keeps the totals until the next start
}

TEST_CASE("copies on the host are no syncs; noted syncs and copies are, with their waits", "[host_cost]") {
  host_cost::start();
  Tensor t = Tensor::from_values({2}, {1.0, 2.0});
  Tensor moved = t.to(Device::cpu());
  moved.copy_(t);
  CHECK(host_cost::snapshot().syncs == 0);
  const std::source_location here = std::source_location::current();
  host_cost::note_sync(here, 1500);
  host_cost::note_copy(host_cost::CopyDirection::device_to_host, 4, here, 2500);
  host_cost::note_copy(host_cost::CopyDirection::host_to_device, 8, here, 0);
  host_cost::note_launch();
  host_cost::note_launch();
  host_cost::note_device_malloc();
  host_cost::note_device_free();
  const host_cost::Record r = host_cost::stop();
  CHECK(r.syncs == 3);
  CHECK(r.device_to_host == 1);
  CHECK(r.host_to_device == 1);
  CHECK(r.wait_ns == 4000);
  CHECK(r.launches == 2);
  CHECK(r.device_mallocs == 1);
  CHECK(r.device_frees == 1);
  REQUIRE(r.sync_sites.size() == 1);  // one site: merged
  CHECK(r.sync_sites[0].count == 3);
  CHECK(r.sync_sites[0].bytes == 12);
  CHECK(r.sync_sites[0].wait_ns == 4000);
  CHECK(r.sync_sites[0].site == host_cost::site_name(here));

  // Per step: the totals over 2 steps, halved.
  const std::string table = host_cost::per_step_table(r, 2, "# ");
  CHECK(table.find("# host cost per step (2 steps):") == 0);
  CHECK(value_after(table, "host waits for the device (syncs)") == 1.5);
  CHECK(value_after(table, "host time blocked in them") == 2.0);
  CHECK(value_after(table, "kernel launches (tandem's own kernels)") == 1.0);
  CHECK(value_after(table, "syncs by call site:\n") == 1.5);
  CHECK(table.find(host_cost::site_name(here)) != std::string::npos);

  host_cost::start();  // starts from zero
  CHECK(host_cost::stop().syncs == 0);
}
