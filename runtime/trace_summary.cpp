#include "runtime/trace_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace tandem::trace {

namespace {

int64_t overlap_ns(const Event& a, int64_t begin, int64_t end) {
  return std::max<int64_t>(0, std::min(a.end_ns(), end) - std::max(a.ts_ns, begin));
}

bool inside(const Event& e, const Event& outer) {
  return e.ts_ns >= outer.ts_ns && e.end_ns() <= outer.end_ns();
}

int64_t sync_of(const Event& e) {
  const Arg* a = find_arg(e.args, "sync");
  return a != nullptr && !a->is_text ? a->number : -1;
}

// The phase named `name` in `phases`, appended if missing.
PhaseSummary& phase_named(std::vector<PhaseSummary>& phases, const std::string& name) {
  auto it =
      std::find_if(phases.begin(), phases.end(), [&](const PhaseSummary& p) { return p.phase == name; });
  if (it != phases.end()) return *it;
  return phases.emplace_back(PhaseSummary{.phase = name});
}

}  // namespace

std::vector<PhaseSummary> summarize(const std::vector<Event>& events) {
  // The events of each synced backward, by its number.
  std::map<int64_t, std::vector<const Event*>> reducer_work, reductions;
  std::vector<const Event*> syncs, backwards;
  for (const Event& e : events) {
    if (e.phase != 'X') continue;
    if (e.category == "autograd" && e.name == kBackward) backwards.push_back(&e);
    const int64_t k = sync_of(e);
    if (k < 0) continue;
    if (e.category == "reducer") {
      if (e.name == kSync) {
        syncs.push_back(&e);
      } else {
        reducer_work[k].push_back(&e);
      }
    } else if (e.category == "comm" && find_arg(e.args, "bucket") != nullptr) {
      reductions[k].push_back(&e);
    }
  }
  std::vector<PhaseSummary> out;
  for (const Event* s : syncs) {
    const Arg* phase = find_arg(s->args, "phase");
    PhaseSummary& p = phase_named(out, phase != nullptr && phase->is_text ? phase->text : "(unnamed phase)");
    const int64_t k = sync_of(*s);
    const Event* backward = nullptr;
    for (const Event* b : backwards) {
      if (b->pid == s->pid && b->tid == s->tid && inside(*b, *s)) {
        backward = b;
        break;
      }
    }
    // Without a backward span (not recorded) nothing overlaps and all is exposed.
    const int64_t compute_begin = backward ? backward->ts_ns : s->ts_ns;
    const int64_t compute_end = backward ? backward->end_ns() : s->ts_ns;
    int64_t own = 0, own_in_compute = 0, wait = 0, agreement = 0;
    for (const Event* w : reducer_work[k]) {
      if (w->name == kWait) {
        wait += w->dur_ns;
      } else if (w->name == kAgreement || w->name == kPack || w->name == kLaunch || w->name == kUnpack) {
        own += w->dur_ns;
        own_in_compute += overlap_ns(*w, compute_begin, compute_end);
        if (w->name == kAgreement) agreement += w->dur_ns;
      }
    }
    int64_t reduce = 0, overlapped = 0;
    for (const Event* r : reductions[k]) {
      reduce += r->dur_ns;
      overlapped += overlap_ns(*r, compute_begin, compute_end);
    }
    ++p.steps;
    p.sync_ns += s->dur_ns;
    p.reduce_ns += reduce;
    p.overlapped_ns += overlapped;
    p.exposed_ns += s->end_ns() - compute_end;
    p.compute_ns += compute_end - compute_begin - own_in_compute;
    p.comm_ns += wait;
    p.reducer_ns += own;
    p.agreement_ns += agreement;
  }
  return out;
}

void merge(std::vector<PhaseSummary>& into, const std::vector<PhaseSummary>& more) {
  for (const PhaseSummary& m : more) {
    PhaseSummary& p = phase_named(into, m.phase);
    p.steps += m.steps;
    p.sync_ns += m.sync_ns;
    p.reduce_ns += m.reduce_ns;
    p.overlapped_ns += m.overlapped_ns;
    p.exposed_ns += m.exposed_ns;
    p.compute_ns += m.compute_ns;
    p.comm_ns += m.comm_ns;
    p.reducer_ns += m.reducer_ns;
    p.agreement_ns += m.agreement_ns;
  }
}

std::string summary_line(const PhaseSummary& p) {
  char line[512];
  std::snprintf(line, sizeof line,
                "trace: %s: %lld synced backwards; overlap %.0f%% of %.3f ms reduction per backward; exposed "
                "communication %.3f ms per backward; critical path %.3f ms per backward: compute %.0f%%, "
                "communication %.0f%%, Reducer %.0f%% (of which the agreement %.0f%%)",
                p.phase.c_str(), static_cast<long long>(p.steps), 100 * p.overlap_fraction(),
                p.ms_per_step(p.reduce_ns), p.ms_per_step(p.exposed_ns), p.ms_per_step(p.sync_ns),
                100 * p.share(p.compute_ns), 100 * p.share(p.comm_ns), 100 * p.share(p.reducer_ns),
                100 * p.share(p.agreement_ns));
  return line;
}

}  // namespace tandem::trace
