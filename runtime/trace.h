// The step timeline: a process-wide recorder of spans and counters (Chrome trace events).
//
// Contract:
// - Off by default. While off, every recording site costs one relaxed atomic load
//   (enabled()) and records nothing. start(rank) clears what was recorded, makes "now" the
//   trace's time zero and turns recording on; set_enabled pauses and resumes without
//   clearing; take_events() returns what is kept (and keeps it).
// - Steps bound the memory: begin_step(label) opens a step (a no-op while off). An event
//   belongs to the step in which it began (by ts_ns, whichever thread records it and when);
//   what began before the first step is a step of its own. start(rank, {.steps = N}) keeps
//   the last N steps: opening one more drops the oldest, after running the flushers (late
//   GPU spans come in first) and handing its events to `on_drop` (on the calling thread,
//   outside the lock). An event that began in a dropped step is discarded and counted.
//   N = 0 (the default) keeps every event. retention() says what is kept and dropped.
// - Events carry time in nanoseconds since time zero (steady_clock), the rank as process
//   id and a small thread number as thread id: 1, 2, ... in the order threads first
//   record, or a named track (track()) for work that runs on no host thread (a GPU stream).
//   set_thread_name names the calling thread's track ("main", "communication (world)").
// - Any thread may record at any time: the recorder takes one lock per event.
// - Span records a complete event ('X') from its construction to its destruction, on the
//   constructing thread, if tracing was on at construction (its arguments are built by
//   the site only when on()). complete() records one from a
//   start time taken earlier with now_ns(). counter() records a counter sample ('C').
// - ScopedArgs sets arguments on the calling thread that code underneath may attach to
//   work it hands elsewhere (a process group attaches them to a collective's span, run on
//   its communication thread): current_args() returns them (innermost scope wins).
// The file format is trace_json.h; runtime/dist/trace_collect.h aligns the ranks' time
// zeros and gathers their events into one file; trace_summary.h derives overlap and
// exposed communication from them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::trace {

struct Arg {
  std::string key;
  int64_t number = 0;
  std::string text;  // used instead of number when is_text
  bool is_text = false;
};
Arg arg(std::string key, int64_t number);
Arg arg(std::string key, std::string text);
// The argument named `key`, or nullptr.
const Arg* find_arg(const std::vector<Arg>& args, const std::string& key);

struct Event {
  char phase = 'X';      // 'X': a complete span; 'C': a counter sample
  std::string category;  // "autograd", "reducer", "comm", "train", "optim", "kernel"
  std::string name;
  int64_t ts_ns = 0;   // since the trace's time zero
  int64_t dur_ns = 0;  // 'X'
  int pid = 0;         // the rank
  int tid = 0;         // the thread or track
  double value = 0;    // 'C'
  std::vector<Arg> args;
  int64_t end_ns() const { return ts_ns + dur_ns; }
};

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// How much of a run the recorder keeps (see Steps above).
struct KeepLast {
  int64_t steps = 0;  // 0: every event
  std::function<void(const std::vector<Event>&)> on_drop;
};

void start(int rank, KeepLast keep = {});
void set_enabled(bool on);
inline void stop() { set_enabled(false); }
int rank();

// Nanoseconds since the trace's time zero.
int64_t now_ns();
// The host's steady_clock in nanoseconds, and such a time as trace time: for spans timed
// against a host reference taken earlier (GPU events), across trace restarts.
int64_t steady_ns();
int64_t trace_ns_of(int64_t steady);

void set_thread_name(const std::string& name);
// This thread's track number (assigned at its first use).
int thread_id();
// A new named track, for spans that are not a host thread's (a GPU stream).
int track(const std::string& name);
// Every named track and thread so far: (id, name).
std::vector<std::pair<int, std::string>> track_names();

// Records `event` with this process's rank (and this thread's id when event.tid is 0).
void record(Event event);
// A span from start_ns to now on this thread.
void complete(const char* category, std::string name, int64_t start_ns, std::vector<Arg> args = {});
void counter(const char* name, double value);

// Opens a step; `label` names it in retention() (an iteration number).
void begin_step(int64_t label);

std::vector<Event> take_events();

struct Retention {
  int64_t events = 0;         // kept
  int64_t bytes = 0;          // what the kept events hold, their strings and arguments included
  int64_t steps = 0;          // kept, the one begun before the first begin_step included
  int64_t first_step = -1;    // the oldest kept step's label; -1: the one before the first step
  int64_t dropped_steps = 0;  // handed to on_drop
  int64_t late_events = 0;    // began in a dropped step, recorded after it was dropped
};
Retention retention();

// Sources whose spans complete asynchronously (a GPU stream's) register a function that
// records what has completed so far; flush() runs them all (before events are written).
void add_flusher(const void* owner, std::function<void()> fn);
void remove_flusher(const void* owner);
void flush();

class Span {
 public:
  Span(const char* category, const char* name) : on_(enabled()), category_(category), name_(name) {
    if (on_) start_ns_ = now_ns();
  }
  ~Span() {
    if (on_) complete(category_, name_, start_ns_, std::move(args_));
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  bool on() const { return on_; }
  // Arguments of the span (build them only when on(): while off a site costs one load).
  void set_args(std::vector<Arg> args) { args_ = std::move(args); }

 private:
  bool on_;
  const char* category_;
  const char* name_;
  int64_t start_ns_ = 0;
  std::vector<Arg> args_;
};

class ScopedArgs {
 public:
  explicit ScopedArgs(std::vector<Arg> args);
  ~ScopedArgs();
  ScopedArgs(const ScopedArgs&) = delete;
  ScopedArgs& operator=(const ScopedArgs&) = delete;

 private:
  std::vector<Arg> previous_;
};
const std::vector<Arg>& current_args();

}  // namespace tandem::trace
