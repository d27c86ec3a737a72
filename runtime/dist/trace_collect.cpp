#include "runtime/dist/trace_collect.h"

#include <utility>

#include "runtime/trace_json.h"

namespace tandem::dist {

void start_trace_aligned(ProcessGroup& group, trace::KeepLast keep) {
  group.barrier("trace clock alignment")->synchronize();
  trace::start(group.rank(), std::move(keep));
  trace::set_thread_name("main");
}

std::vector<trace::Event> write_gathered_trace(ProcessGroup& group, const std::string& path) {
  // Every operation issued so far has finished once the barrier has: its spans are in.
  group.barrier("trace end")->synchronize();
  trace::stop();
  trace::flush();
  std::vector<trace::Event> mine = trace::take_events();
  const std::string part = trace::events_json(mine, trace::track_names(), group.rank());
  // One broadcast per rank: the parts are small (kilobytes per kept step), and broadcast_string
  // works for every backend.
  std::vector<std::string> parts;
  for (int r = 0; r < group.size(); ++r) {
    std::string text = broadcast_string(group, group.rank() == r ? part : std::string(), r,
                                        "trace of rank " + std::to_string(r));
    if (group.rank() == 0) parts.push_back(std::move(text));
  }
  if (group.rank() == 0) trace::write_trace_file(path, parts);
  return mine;
}

}  // namespace tandem::dist
