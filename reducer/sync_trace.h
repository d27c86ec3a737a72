// SyncTrace: what a Reducer records of its synced backwards (runtime/trace.h; off by default,
// one relaxed load per site then), as trace_summary.h reads it.
//
// Contract: each synced backward records its "agreement", each gradient's "pack", each
// bucket's "launch" (the reduction's span, wherever it runs, carries the same arguments),
// "wait" and "unpack", the whole as a "sync" span, and a "bytes in flight" counter; every
// span, of category "reducer", names the sync's number (over every Reducer of the process)
// and the phase, bucket spans the bucket. A sync that began with tracing off records nothing
// and builds no argument, nor does one whose tracing is turned off while it runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/trace.h"

namespace tandem {

class SyncTrace {
 public:
  // A synced backward begins: numbered now when tracing is on, else left untraced.
  void begin();
  // The phase the sync runs, from its activation on: every argument names its label, which
  // must outlive the sync.
  void set_phase(const std::string& label) { phase_label_ = &label; }
  // Whether the sync in flight is traced (it began with tracing on, and tracing is on).
  bool on() const { return sync_ >= 0 && trace::enabled(); }
  // trace::now_ns() when on(), else 0 (no clock read).
  int64_t now_ns() const { return on() ? trace::now_ns() : 0; }
  // The "agreement" span: from begin() to `agreed_ns` (a now_ns() taken as it ended).
  void agreement(int64_t agreed_ns) const;
  // The "bytes in flight" counter moves by `bytes` (launched: positive; waited for: negative).
  void count_in_flight(int64_t bytes);
  // The whole sync, from begin() to now, as the "sync" span.
  void end() const;

  // When on(): bucket `bucket`'s arguments, set (trace::ScopedArgs) for the spans a transport
  // records under it while the returned value lives.
  std::optional<trace::ScopedArgs> bucket_args(int bucket) const;

  // A span of the sync in flight, from construction to destruction: "pack", "launch",
  // "wait", "unpack"; `bucket` >= 0 names its bucket.
  class Span {
   public:
    Span(const SyncTrace& sync, const char* name, int bucket);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    bool on_;
    const char* name_;
    int64_t start_ns_;
    std::vector<trace::Arg> args_;
  };

 private:
  // This sync's number, the phase, and the bucket when `bucket` >= 0.
  std::vector<trace::Arg> args(int bucket) const;

  int64_t sync_ = -1;  // this synced backward's number in the trace; -1: untraced
  int64_t start_ns_ = 0;
  int64_t bytes_in_flight_ = 0;  // launched and not yet waited for (traced backwards)
  const std::string* phase_label_ = nullptr;
};

}  // namespace tandem
