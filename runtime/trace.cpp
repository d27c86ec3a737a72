#include "runtime/trace.h"

#include <chrono>
#include <deque>
#include <mutex>

namespace tandem::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// The events that began in one step: at or after begin_ns, before the next step's.
struct Step {
  int64_t begin_ns = 0;
  int64_t label = -1;
  std::vector<Event> events;
};

// Never destroyed: threads that outlive static destruction (a communication thread being
// shut down) may still record.
struct Recorder {
  std::mutex mu;
  std::deque<Step> steps = std::deque<Step>(1);  // never empty: the oldest kept first
  KeepLast keep;  // set by start() alone, never during begin_step: on_drop runs outside mu
  int64_t dropped_steps = 0;
  int64_t late_events = 0;
  std::vector<std::pair<int, std::string>> names;
  std::atomic<int64_t> origin_ns{0};
  std::atomic<int> rank{0};
  std::atomic<int> next_id{1};
  std::mutex flush_mu;  // apart from mu: a flusher records events
  std::vector<std::pair<const void*, std::function<void()>>> flushers;
};
Recorder& recorder() {
  static Recorder* r = new Recorder;
  return *r;
}

int64_t clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// What a string holds outside itself (nothing while it fits its own small buffer).
int64_t heap_bytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? static_cast<int64_t>(s.capacity()) + 1 : 0;
}

int64_t held_bytes(const Event& e) {
  int64_t bytes = heap_bytes(e.category) + heap_bytes(e.name);
  bytes += static_cast<int64_t>(e.args.capacity() * sizeof(Arg));
  for (const Arg& a : e.args) bytes += heap_bytes(a.key) + heap_bytes(a.text);
  return bytes;
}

thread_local int t_id = 0;
thread_local std::vector<Arg> t_args;

}  // namespace

Arg arg(std::string key, int64_t number) { return Arg{std::move(key), number, {}, false}; }
Arg arg(std::string key, std::string text) { return Arg{std::move(key), 0, std::move(text), true}; }

const Arg* find_arg(const std::vector<Arg>& args, const std::string& key) {
  for (const Arg& a : args) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

void start(int rank, KeepLast keep) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.steps.clear();
    r.steps.emplace_back();
    r.keep = std::move(keep);
    r.dropped_steps = 0;
    r.late_events = 0;
  }
  r.rank.store(rank);
  r.origin_ns.store(clock_ns());
  detail::g_enabled.store(true);
}

void set_enabled(bool on) { detail::g_enabled.store(on); }
int rank() { return recorder().rank.load(); }

int64_t now_ns() { return clock_ns() - recorder().origin_ns.load(std::memory_order_relaxed); }
int64_t steady_ns() { return clock_ns(); }
int64_t trace_ns_of(int64_t steady) { return steady - recorder().origin_ns.load(std::memory_order_relaxed); }

int thread_id() {
  if (t_id == 0) t_id = recorder().next_id.fetch_add(1);
  return t_id;
}

void set_thread_name(const std::string& name) {
  const int id = thread_id();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [known, text] : r.names) {
    if (known == id) {
      text = name;
      return;
    }
  }
  r.names.emplace_back(id, name);
}

int track(const std::string& name) {
  Recorder& r = recorder();
  const int id = r.next_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(r.mu);
  r.names.emplace_back(id, name);
  return id;
}

std::vector<std::pair<int, std::string>> track_names() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.names;
}

void record(Event event) {
  Recorder& r = recorder();
  event.pid = r.rank.load(std::memory_order_relaxed);
  if (event.tid == 0) event.tid = thread_id();
  std::lock_guard<std::mutex> lock(r.mu);
  // The step it began in: nearly always the newest. Before the oldest kept one, it began
  // in a dropped step, unless none was dropped (it began before the trace's time zero).
  for (auto step = r.steps.rbegin(); step != r.steps.rend(); ++step) {
    if (event.ts_ns >= step->begin_ns || (step + 1 == r.steps.rend() && r.dropped_steps == 0)) {
      step->events.push_back(std::move(event));
      return;
    }
  }
  ++r.late_events;
}

void complete(const char* category, std::string name, int64_t start_ns, std::vector<Arg> args) {
  Event e;
  e.phase = 'X';
  e.category = category;
  e.name = std::move(name);
  e.ts_ns = start_ns;
  e.dur_ns = now_ns() - start_ns;
  e.args = std::move(args);
  record(std::move(e));
}

void counter(const char* name, double value) {
  Event e;
  e.phase = 'C';
  e.category = "counter";
  e.name = name;
  e.ts_ns = now_ns();
  e.value = value;
  record(std::move(e));
}

void begin_step(int64_t label) {
  if (!enabled()) return;
  Recorder& r = recorder();
  bool full = false;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    full = r.keep.steps > 0 && static_cast<int64_t>(r.steps.size()) >= r.keep.steps;
  }
  if (full) flush();  // the oldest step's spans that complete asynchronously, before it goes
  std::vector<std::vector<Event>> dropped;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    // Its time zero under the lock: an event recorded before began before it.
    r.steps.push_back(Step{.begin_ns = now_ns(), .label = label, .events = {}});
    while (r.keep.steps > 0 && static_cast<int64_t>(r.steps.size()) > r.keep.steps) {
      dropped.push_back(std::move(r.steps.front().events));
      r.steps.pop_front();
      ++r.dropped_steps;
    }
  }
  if (r.keep.on_drop) {
    for (const std::vector<Event>& events : dropped) r.keep.on_drop(events);
  }
}

std::vector<Event> take_events() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  size_t count = 0;
  for (const Step& step : r.steps) count += step.events.size();
  std::vector<Event> events;
  events.reserve(count);
  for (const Step& step : r.steps) events.insert(events.end(), step.events.begin(), step.events.end());
  return events;
}

Retention retention() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  Retention out;
  for (const Step& step : r.steps) {
    out.events += static_cast<int64_t>(step.events.size());
    out.bytes += static_cast<int64_t>(step.events.capacity() * sizeof(Event));
    for (const Event& e : step.events) out.bytes += held_bytes(e);
  }
  out.steps = static_cast<int64_t>(r.steps.size());
  out.first_step = r.steps.front().label;
  out.dropped_steps = r.dropped_steps;
  out.late_events = r.late_events;
  return out;
}

void add_flusher(const void* owner, std::function<void()> fn) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.flush_mu);
  r.flushers.emplace_back(owner, std::move(fn));
}

void remove_flusher(const void* owner) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.flush_mu);
  std::erase_if(r.flushers, [&](const auto& f) { return f.first == owner; });
}

void flush() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.flush_mu);
  for (auto& [owner, fn] : r.flushers) fn();
}

ScopedArgs::ScopedArgs(std::vector<Arg> args) : previous_(std::move(t_args)) { t_args = std::move(args); }
ScopedArgs::~ScopedArgs() { t_args = std::move(previous_); }
const std::vector<Arg>& current_args() { return t_args; }

}  // namespace tandem::trace
