#include "reducer/sync_trace.h"

#include <atomic>
#include <utility>

#include "runtime/trace_summary.h"

namespace tandem {

namespace {

// Numbers the synced backwards of every Reducer of the process.
std::atomic<int64_t> g_syncs{0};

}  // namespace

void SyncTrace::begin() {
  sync_ = trace::enabled() ? ++g_syncs : -1;
  start_ns_ = now_ns();
}

void SyncTrace::agreement(int64_t agreed_ns) const {
  if (!on()) return;
  trace::record(trace::Event{.category = "reducer",
                             .name = trace::kAgreement,
                             .ts_ns = start_ns_,
                             .dur_ns = agreed_ns - start_ns_,
                             .args = args(-1)});
}

void SyncTrace::count_in_flight(int64_t bytes) {
  if (!on()) return;
  bytes_in_flight_ += bytes;
  trace::counter("bytes in flight", static_cast<double>(bytes_in_flight_));
}

void SyncTrace::end() const {
  if (on()) trace::complete("reducer", trace::kSync, start_ns_, args(-1));
}

std::optional<trace::ScopedArgs> SyncTrace::bucket_args(int bucket) const {
  if (!on()) return std::nullopt;
  return std::optional<trace::ScopedArgs>(std::in_place, args(bucket));
}

std::vector<trace::Arg> SyncTrace::args(int bucket) const {
  std::vector<trace::Arg> out = {trace::arg("sync", sync_), trace::arg("phase", *phase_label_)};
  if (bucket >= 0) out.push_back(trace::arg("bucket", bucket));
  return out;
}

SyncTrace::Span::Span(const SyncTrace& sync, const char* name, int bucket)
    : on_(sync.on()), name_(name), start_ns_(on_ ? trace::now_ns() : 0) {
  if (on_) args_ = sync.args(bucket);
}

SyncTrace::Span::~Span() {
  if (on_) trace::complete("reducer", name_, start_ns_, std::move(args_));
}

}  // namespace tandem
