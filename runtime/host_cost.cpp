#include "runtime/host_cost.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/error.h"

namespace tandem::host_cost {

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_launches{0}, g_syncs{0}, g_to_host{0}, g_to_device{0}, g_wait_ns{0}, g_reads{0},
    g_mallocs{0}, g_frees{0};
std::mutex g_mu;
std::map<std::string, Site> g_sync_sites, g_read_sites;  // under g_mu

void add(std::map<std::string, Site>& sites, const std::source_location& where, int64_t bytes,
         int64_t wait_ns) {
  std::string name = site_name(where);
  std::lock_guard<std::mutex> lock(g_mu);
  Site& s = sites[name];
  if (s.site.empty()) s.site = std::move(name);
  ++s.count;
  s.bytes += bytes;
  s.wait_ns += wait_ns;
}

std::vector<Site> sorted(const std::map<std::string, Site>& sites) {
  std::vector<Site> out;
  for (const auto& [name, s] : sites) out.push_back(s);
  std::stable_sort(out.begin(), out.end(), [](const Site& a, const Site& b) { return a.count > b.count; });
  return out;
}

// "double tandem::models::GanModel::log_value(const char*, const Variable&)" -> "log_value".
std::string short_function(const char* function) {
  std::string f = function;
  const size_t paren = f.find('(');
  if (paren != std::string::npos) f.resize(paren);
  const size_t space = f.rfind(' ');
  if (space != std::string::npos) f = f.substr(space + 1);
  const size_t colons = f.rfind("::");
  if (colons != std::string::npos) f = f.substr(colons + 2);
  return f;
}

}  // namespace

bool counting() { return g_counting.load(std::memory_order_relaxed); }

void start() {
  g_counting.store(false);
  for (auto* c :
       {&g_launches, &g_syncs, &g_to_host, &g_to_device, &g_wait_ns, &g_reads, &g_mallocs, &g_frees})
    c->store(0);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sync_sites.clear();
    g_read_sites.clear();
  }
  g_counting.store(true);
}

void set_counting(bool on) { g_counting.store(on); }

Record snapshot() {
  Record r;
  r.launches = g_launches.load();
  r.syncs = g_syncs.load();
  r.device_to_host = g_to_host.load();
  r.host_to_device = g_to_device.load();
  r.wait_ns = g_wait_ns.load();
  r.host_reads = g_reads.load();
  r.device_mallocs = g_mallocs.load();
  r.device_frees = g_frees.load();
  std::lock_guard<std::mutex> lock(g_mu);
  r.sync_sites = sorted(g_sync_sites);
  r.read_sites = sorted(g_read_sites);
  return r;
}

Record stop() {
  g_counting.store(false);
  return snapshot();
}

void note_launch() {
  if (counting()) g_launches.fetch_add(1, std::memory_order_relaxed);
}

namespace {

// A host wait (an explicit one, or a copy's) at `where`.
void count_sync(const std::source_location& where, int64_t bytes, int64_t wait_ns) {
  g_syncs.fetch_add(1);
  g_wait_ns.fetch_add(wait_ns);
  add(g_sync_sites, where, bytes, wait_ns);
}

}  // namespace

void note_sync(const std::source_location& where, int64_t wait_ns) {
  if (counting()) count_sync(where, 0, wait_ns);
}

void note_copy(CopyDirection direction, int64_t bytes, const std::source_location& where, int64_t wait_ns) {
  if (!counting()) return;
  (direction == CopyDirection::device_to_host ? g_to_host : g_to_device).fetch_add(1);
  count_sync(where, bytes, wait_ns);
}

void note_host_read(const std::source_location& where) {
  if (!counting()) return;
  g_reads.fetch_add(1);
  add(g_read_sites, where, 0, 0);
}

void note_device_malloc() {
  if (counting()) g_mallocs.fetch_add(1);
}

void note_device_free() {
  if (counting()) g_frees.fetch_add(1);
}

std::string site_name(const std::source_location& where) {
  return std::string(source_path(where.file_name())) + ":" + std::to_string(where.line()) + " " +
         short_function(where.function_name());
}

int64_t now_ns_if_counting() {
  if (!counting()) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string per_step_table(const Record& r, int64_t steps, const std::string& prefix, size_t max_sites) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  std::ostringstream out;
  char line[256];
  auto row = [&](const char* what, double value, const char* unit) {
    std::snprintf(line, sizeof line, "%s  %-44s %10.2f %s\n", prefix.c_str(), what, value, unit);
    out << line;
  };
  out << prefix << "host cost per step (" << steps << " steps):\n";
  row("kernel launches (tandem's own kernels)", static_cast<double>(r.launches) / n, "");
  row("host waits for the device (syncs)", static_cast<double>(r.syncs) / n, "");
  row("  of which device-to-host copies", static_cast<double>(r.device_to_host) / n, "");
  row("  of which host-to-device copies", static_cast<double>(r.host_to_device) / n, "");
  row("host time blocked in them", static_cast<double>(r.wait_ns) / n / 1e3, "us");
  row("host reads of tensor values (item, to_vector)", static_cast<double>(r.host_reads) / n, "");
  row("cudaMalloc calls", static_cast<double>(r.device_mallocs) / n, "");
  row("cudaFree calls", static_cast<double>(r.device_frees) / n, "");
  auto sites = [&](const char* title, const std::vector<Site>& list) {
    if (list.empty()) return;
    out << prefix << title << ":\n";
    for (size_t i = 0; i < list.size() && i < max_sites; ++i) {
      const Site& s = list[i];
      std::snprintf(line, sizeof line, "%s    %8.2f/step %9.1f us/step  %s\n", prefix.c_str(),
                    static_cast<double>(s.count) / n, static_cast<double>(s.wait_ns) / n / 1e3,
                    s.site.c_str());
      out << line;
    }
    if (list.size() > max_sites)
      out << prefix << "    ... and " << list.size() - max_sites << " more sites\n";
  };
  sites("syncs by call site", r.sync_sites);
  sites("host reads by call site", r.read_sites);
  return out.str();
}

}  // namespace tandem::host_cost
