#include "runtime/trace.h"

#include <chrono>
#include <mutex>

namespace tandem::trace {

namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;

// Never destroyed: threads that outlive static destruction (a communication thread being
// shut down) may still record.
struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
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

void start(int rank) {
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.events.clear();
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
  r.events.push_back(std::move(event));
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

std::vector<Event> take_events() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.events;
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
