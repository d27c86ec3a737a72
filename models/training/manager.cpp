#include "models/training/manager.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <utility>

#include "runtime/checkpoint.h"
#include "runtime/error.h"

namespace tandem::training {

bool Trigger::fires(int64_t done, int64_t global_batch, bool last) const {
  if (unit == Unit::never) return false;
  if (last && at_end) return true;
  if (unit == Unit::iterations) return every > 0 && done % every == 0;
  // Images shown cross a multiple of `every` during the iteration that brought them to
  // done x global_batch.
  const int64_t images = done * global_batch;
  return global_batch > 0 && images / every > (images - global_batch) / every;
}

Trigger every(int64_t iterations, bool at_end) {
  TANDEM_CHECK(iterations > 0, "training::every(" << iterations << "): the interval must be positive");
  return {.unit = Trigger::Unit::iterations, .every = iterations, .at_end = at_end};
}

Trigger every_kimg(double kimg, bool at_end) {
  const double images = std::round(kimg * 1000.0);
  TANDEM_CHECK(std::isfinite(kimg) && images >= 1.0,
               "training::every_kimg(" << kimg << "): the interval must be at least one image (0.001 kimg)");
  return {.unit = Trigger::Unit::kimg, .every = static_cast<int64_t>(images), .at_end = at_end};
}

Trigger each() { return every(1); }
Trigger end() { return {.unit = Trigger::Unit::iterations, .every = 0, .at_end = true}; }
Trigger never() { return {.unit = Trigger::Unit::never, .every = 0, .at_end = false}; }

namespace {

// A user's function as an extension.
class LambdaExtension : public Extension {
 public:
  explicit LambdaExtension(std::function<void(Manager&)> fn) : fn_(std::move(fn)) {}
  std::string default_name() const override { return "lambda"; }
  void run(Manager& manager) override { fn_(manager); }

 private:
  std::function<void(Manager&)> fn_;
};

}  // namespace

Manager::Manager(std::shared_ptr<dist::ProcessGroup> world, ManagerOptions options)
    : world_(std::move(world)), options_(std::move(options)) {
  TANDEM_CHECK(world_ != nullptr, "training::Manager: no process group");
  TANDEM_CHECK(options_.iterations >= 0,
               "training::Manager: iterations " << options_.iterations << " is negative");
  TANDEM_CHECK(options_.global_batch >= 0,
               "training::Manager: global_batch " << options_.global_batch << " is negative");
  TANDEM_CHECK(!options_.out.empty(), "training::Manager: no output folder (ManagerOptions::out)");
  TANDEM_CHECK(!options_.name.empty(), "training::Manager: no checkpoint name (ManagerOptions::name)");
}

Manager::~Manager() = default;

void Manager::extend(std::shared_ptr<Extension> extension, std::optional<Trigger> trigger, std::string name) {
  TANDEM_CHECK(extension != nullptr, "training::Manager::extend: no extension");
  TANDEM_CHECK(!started_, "training::Manager::extend(" << (name.empty() ? extension->default_name() : name)
                                                       << "): extensions are registered before start()");
  if (name.empty()) name = extension->default_name();
  const Trigger when = trigger ? *trigger : extension->default_trigger();
  entries_.push_back({std::move(extension), when, std::move(name)});
}

void Manager::extend(std::function<void(Manager&)> fn, Trigger trigger, std::string name) {
  TANDEM_CHECK(fn != nullptr, "training::Manager::extend(" << name << "): no function");
  extend(std::make_shared<LambdaExtension>(std::move(fn)), trigger, std::move(name));
}

std::ostream* Manager::out() const {
  if (!is_rank0()) return nullptr;
  return options_.log != nullptr ? options_.log : &std::cout;
}

void Manager::print(const std::string& line) {
  std::ostream* o = out();
  if (o == nullptr) return;
  for (Entry& entry : entries_) entry.extension->before_print();
  *o << line << "\n";
}

std::string Manager::checkpoint_path(int64_t iteration) const {
  return tandem::checkpoint_path(options_.out, options_.name, iteration);
}

double Manager::kimg() const {
  return static_cast<double>(iteration_) * static_cast<double>(options_.global_batch) / 1000.0;
}

int64_t Manager::epoch() const {
  TANDEM_CHECK(options_.iterations_per_epoch > 0,
               "training::Manager::epoch: ManagerOptions::iterations_per_epoch is not set");
  return iteration_ / options_.iterations_per_epoch;
}

int64_t Manager::batch_in_epoch() const {
  TANDEM_CHECK(options_.iterations_per_epoch > 0,
               "training::Manager::batch_in_epoch: ManagerOptions::iterations_per_epoch is not set");
  return iteration_ % options_.iterations_per_epoch;
}

int64_t Manager::resume() {
  std::string chosen;
  SafetensorsFile read;  // rank 0: the chosen file, read (and its checksum checked) once
  if (is_rank0()) {
    for (const auto& [iteration, path] : list_checkpoints(options_.out, options_.name)) {
      try {
        read = load_safetensors(path);
        chosen = path;
        break;
      } catch (const Error& e) {
        if (std::ostream* o = out()) o->flush();
        write_stderr_line("tandem: warning: resume passes over " + e.message());  // before any progress line
      }
    }
  }
  chosen = dist::broadcast_string(*world_, chosen, 0, "resume checkpoint");
  if (chosen.empty()) {
    print("no checkpoint in " + options_.out + "; starting from iteration 0");
    return 0;
  }
  state_.load(chosen, *world_, is_rank0() ? &read : nullptr);
  TANDEM_CHECK(state_.iteration <= options_.iterations,
               "resume: " << chosen << " is at iteration " << state_.iteration << ", beyond the run's "
                          << options_.iterations << " iterations");
  print("resumed from " + chosen + " at iteration " + std::to_string(state_.iteration));
  return state_.iteration;
}

void Manager::start() { begin(std::nullopt); }

void Manager::start(int64_t first_iteration) {
  TANDEM_CHECK(!options_.resume, "training::Manager::start("
                                     << first_iteration
                                     << "): ManagerOptions::resume is set; call start() "
                                        "to resume, start(first_iteration) when the program "
                                        "resumed itself");
  TANDEM_CHECK(first_iteration >= 0 && first_iteration <= options_.iterations,
               "training::Manager::start(" << first_iteration << "): the first iteration is not in [0, "
                                           << options_.iterations << "]");
  begin(first_iteration);
}

void Manager::begin(std::optional<int64_t> first_iteration) {
  TANDEM_CHECK(!started_, "training::Manager::start: called twice");
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.extension->priority() < b.extension->priority();
  });
  has_stops_ =
      std::any_of(entries_.begin(), entries_.end(), [](const Entry& e) { return e.extension->stops(); });
  iteration_ = first_iteration ? *first_iteration : options_.resume ? resume() : 0;
  state_.iteration = iteration_;
  for (Entry& entry : entries_) entry.extension->initialize(*this);
  started_ = true;
  finished_ = iteration_ >= options_.iterations;
}

const Scalars& Manager::observation() {
  if (!observation_) observation_ = (observe_ != nullptr && *observe_) ? (*observe_)() : Scalars{};
  return *observation_;
}

void Manager::report(const std::string& name, double value) {
  observation();
  observation_->emplace_back(name, value);
}

void Manager::request_stop(const std::string& reason) {
  if (stop_asked_) return;
  stop_asked_ = true;
  asked_reason_ = reason;
}

void Manager::agree_on_stop() {
  // [asked, size - rank when asked]: the max is whether any rank asked, and the first that did.
  const int size = world_->size(), rank = world_->rank();
  Tensor flags = Tensor::from_values({2}, {stop_asked_ ? 1.0 : 0.0, stop_asked_ ? double(size - rank) : 0.0},
                                     DType::i64);
  dist::allreduce_host(*world_, flags, dist::ReduceOp::max, "stop agreement");
  if (flags.data<int64_t>()[0] == 0) return;
  const int asker = size - static_cast<int>(flags.data<int64_t>()[1]);
  const std::string reason = dist::broadcast_string(*world_, asked_reason_, asker, "stop reason");
  stopped_ = true;
  stop_reason_ = size > 1 ? reason + " (rank " + std::to_string(asker) + ")" : reason;
  print("stopping at iteration " + std::to_string(iteration_) + ": " + stop_reason_);
}

void Manager::end_iteration(const std::function<Scalars()>& observe) {
  TANDEM_CHECK(running(),
               "training::Manager::end_iteration: " << (started_ ? "the run has ended (loop while running())"
                                                                 : "call start() first"));
  ++iteration_;
  state_.iteration = iteration_;
  observation_.reset();
  observe_ = &observe;
  last_ = iteration_ == options_.iterations;
  const int64_t batch = options_.global_batch;
  if (has_stops_ && !last_) {
    for (Entry& entry : entries_)
      if (entry.extension->stops() && entry.trigger.fires(iteration_, batch, last_))
        entry.extension->run(*this);
    agree_on_stop();
    last_ = stopped_;
  }
  for (Entry& entry : entries_)  // the stops' extensions ran above (or had nothing to stop)
    if (!entry.extension->stops() && entry.trigger.fires(iteration_, batch, last_))
      entry.extension->run(*this);
  observe_ = nullptr;
  if (last_) finished_ = true;
}

void Manager::finish() {
  TANDEM_CHECK(started_, "training::Manager::finish: call start() first");
  if (finalized_) return;
  finalized_ = true;
  finished_ = true;
  for (Entry& entry : entries_) entry.extension->finalize(*this);
  world_->barrier("end of training")->wait();
}

}  // namespace tandem::training
