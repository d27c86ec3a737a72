#include "autograd/lr_scheduler.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numbers>

#include "runtime/error.h"

namespace tandem::optim {

namespace {

constexpr const char* kSyntax =
    "expected warmup:N[:START_FACTOR], cosine:T[:MIN_FACTOR], step:S[:GAMMA], "
    "multistep:M1,M2,...[:GAMMA] or constant, a warm-up and one of the others joined by '+' "
    "(e.g. warmup:500+cosine:20000)";

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// Shortest text that reads back to the same double.
std::string shortest(double value) {
  char text[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

struct Reader {
  const std::string& spec;

  [[noreturn]] void fail(const std::string& why) const {
    TANDEM_FAIL("learning-rate schedule '" << spec << "': " << why << "; " << kSyntax);
  }
  int64_t count(const std::string& what, const std::string& text) const {
    int64_t out = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || out < 1)
      fail(what + " must be a whole number >= 1, got '" + text + "'");
    return out;
  }
  double number(const std::string& what, const std::string& text, double low, bool low_open, double high,
                bool high_open) const {
    char* end = nullptr;
    const double out = text.empty() ? NAN : std::strtod(text.c_str(), &end);
    const bool ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(out) &&
                    (low_open ? out > low : out >= low) && (high_open ? out < high : out <= high);
    if (!ok) {
      fail(what + " must be a number in " + (low_open ? "(" : "[") + shortest(low) + ", " + shortest(high) +
           (high_open ? ")" : "]") + ", got '" + text + "'");
    }
    return out;
  }
};

}  // namespace

double LrSchedule::factor(int64_t i) const {
  double warm = 1.0;
  if (warmup_iters > 0 && i < warmup_iters) {
    warm = warmup_start_factor +
           (1.0 - warmup_start_factor) * static_cast<double>(i) / static_cast<double>(warmup_iters);
  }
  double decayed = 1.0;
  switch (decay) {
    case Decay::none:
      break;
    case Decay::cosine: {
      const double t = static_cast<double>(std::min(i, cosine_iters)) / static_cast<double>(cosine_iters);
      decayed = cosine_min_factor + (1.0 - cosine_min_factor) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
      break;
    }
    case Decay::step:
      decayed = std::pow(gamma, static_cast<double>(i / step_size));
      break;
    case Decay::multistep: {
      int64_t passed = 0;
      for (int64_t m : milestones) passed += m <= i ? 1 : 0;
      decayed = std::pow(gamma, static_cast<double>(passed));
      break;
    }
  }
  return warm * decayed;
}

std::string LrSchedule::str() const {
  std::string out;
  auto part = [&out](const char* name, const std::string& first, double second) {
    if (!out.empty()) out += '+';
    out += name;
    out += ':';
    out += first;
    out += ':';
    out += shortest(second);
  };
  if (warmup_iters > 0) part("warmup", std::to_string(warmup_iters), warmup_start_factor);
  switch (decay) {
    case Decay::none:
      break;
    case Decay::cosine:
      part("cosine", std::to_string(cosine_iters), cosine_min_factor);
      break;
    case Decay::step:
      part("step", std::to_string(step_size), gamma);
      break;
    case Decay::multistep: {
      std::string list;
      for (size_t k = 0; k < milestones.size(); ++k) {
        if (k > 0) list += ',';
        list += std::to_string(milestones[k]);
      }
      part("multistep", list, gamma);
      break;
    }
  }
  return out.empty() ? "constant" : out;
}

LrSchedule parse_lr_schedule(const std::string& spec) {
  const Reader r{spec};
  LrSchedule s;
  bool constant = false;
  for (const std::string& part : split(spec, '+')) {
    const std::vector<std::string> fields = split(part, ':');
    const std::string& name = fields[0];
    const size_t n = fields.size();
    auto arguments = [&](size_t min, size_t max) {
      if (n - 1 < min || n - 1 > max) {
        r.fail("'" + part + "' takes " + std::to_string(min) +
               (min == max ? "" : " or " + std::to_string(max)) + " value(s) after '" + name + "'");
      }
    };
    auto one_decay = [&] {
      if (s.decay != LrSchedule::Decay::none || constant)
        r.fail("'" + part + "' is a second schedule besides a warm-up");
    };
    if (name == "warmup") {
      arguments(1, 2);
      if (s.warmup_iters > 0) r.fail("two warm-ups");
      s.warmup_iters = r.count("warm-up iterations", fields[1]);
      if (n > 2) s.warmup_start_factor = r.number("the warm-up's start factor", fields[2], 0, true, 1, false);
    } else if (name == "cosine") {
      arguments(1, 2);
      one_decay();
      s.decay = LrSchedule::Decay::cosine;
      s.cosine_iters = r.count("cosine iterations", fields[1]);
      if (n > 2) s.cosine_min_factor = r.number("the cosine's final factor", fields[2], 0, false, 1, true);
    } else if (name == "step") {
      arguments(1, 2);
      one_decay();
      s.decay = LrSchedule::Decay::step;
      s.step_size = r.count("the step size", fields[1]);
      if (n > 2) s.gamma = r.number("gamma", fields[2], 0, true, 1, false);
    } else if (name == "multistep") {
      arguments(1, 2);
      one_decay();
      s.decay = LrSchedule::Decay::multistep;
      for (const std::string& m : split(fields[1], ',')) {
        s.milestones.push_back(r.count("a milestone", m));
        if (s.milestones.size() > 1 && s.milestones.back() <= s.milestones[s.milestones.size() - 2])
          r.fail("milestones must increase, got '" + fields[1] + "'");
      }
      if (n > 2) s.gamma = r.number("gamma", fields[2], 0, true, 1, false);
    } else if (name == "constant") {
      arguments(0, 0);
      one_decay();
      constant = true;
    } else {
      r.fail("unknown schedule '" + name + "'");
    }
  }
  return s;
}

LrScheduler::LrScheduler(std::vector<Optimizer*> optimizers, LrSchedule schedule)
    : optimizers_(std::move(optimizers)), schedule_(std::move(schedule)) {
  for (Optimizer* o : optimizers_) {
    TANDEM_CHECK(o != nullptr, "LrScheduler: a null optimizer");
    if (!o->initial_lr()) o->set_initial_lr(o->lr());
    base_lrs_.push_back(*o->initial_lr());
  }
  set_iteration(0);
}

LrScheduler::LrScheduler(std::vector<Optimizer*> optimizers, LrSchedule schedule,
                         std::vector<double> base_lrs)
    : optimizers_(std::move(optimizers)), base_lrs_(std::move(base_lrs)), schedule_(std::move(schedule)) {
  TANDEM_CHECK(
      base_lrs_.size() == optimizers_.size(),
      "LrScheduler: " << base_lrs_.size() << " base rates for " << optimizers_.size() << " optimizers");
  for (size_t k = 0; k < optimizers_.size(); ++k) {
    TANDEM_CHECK(optimizers_[k] != nullptr, "LrScheduler: a null optimizer");
    optimizers_[k]->set_initial_lr(base_lrs_[k]);
  }
  set_iteration(0);
}

void LrScheduler::set_iteration(int64_t iteration) {
  TANDEM_CHECK(iteration >= 0, "LrScheduler::set_iteration: iteration " << iteration << " is negative");
  for (size_t k = 0; k < optimizers_.size(); ++k)
    optimizers_[k]->set_lr(schedule_.lr_at(base_lrs_[k], iteration));
  iteration_ = iteration;
}

StateDict LrScheduler::state_dict() const {
  StateDict out;
  for (size_t k = 0; k < base_lrs_.size(); ++k)
    out.emplace("base_lr." + std::to_string(k), Tensor::scalar(base_lrs_[k], DType::f64));
  Tensor iteration = Tensor::empty({}, DType::i64);
  iteration.data<int64_t>()[0] = iteration_;
  out.emplace("iteration", iteration);
  return out;
}

void LrScheduler::check_state_dict(const StateDict& state) const { checked_state(state); }

LrScheduler::SavedState LrScheduler::checked_state(const StateDict& state) const {
  std::vector<double> bases(base_lrs_.size());
  for (size_t k = 0; k < bases.size(); ++k) {
    const std::string key = "base_lr." + std::to_string(k);
    auto it = state.find(key);
    TANDEM_CHECK(it != state.end() && it->second.defined() && it->second.numel() == 1,
                 "LrScheduler::load_state_dict: no entry '" << key << "' (the scheduler has " << bases.size()
                                                            << " optimizers)");
    bases[k] = it->second.item();
    TANDEM_CHECK(std::isfinite(bases[k]) && bases[k] > 0, "LrScheduler::load_state_dict: entry '"
                                                              << key << "' is " << bases[k]
                                                              << ", not a positive finite learning rate");
  }
  auto it = state.find("iteration");
  TANDEM_CHECK(it != state.end() && it->second.defined() && it->second.numel() == 1,
               "LrScheduler::load_state_dict: no entry 'iteration'");
  const Tensor& t = it->second;
  const int64_t iteration =
      t.dtype() == DType::i64 && t.device().is_cpu() ? t.data<int64_t>()[0] : static_cast<int64_t>(t.item());
  TANDEM_CHECK(iteration >= 0, "LrScheduler::load_state_dict: entry 'iteration' is " << iteration);
  const size_t expected = bases.size() + 1;
  TANDEM_CHECK(state.size() == expected, "LrScheduler::load_state_dict: " << state.size()
                                                                          << " entries, expected " << expected
                                                                          << " (base_lr.<k> and iteration)");
  return {.base_lrs = std::move(bases), .iteration = iteration};
}

void LrScheduler::load_state_dict(const StateDict& state) {
  SavedState saved = checked_state(state);
  base_lrs_ = std::move(saved.base_lrs);
  for (size_t k = 0; k < optimizers_.size(); ++k) optimizers_[k]->set_initial_lr(base_lrs_[k]);
  set_iteration(saved.iteration);
}

}  // namespace tandem::optim

namespace tandem::optim {

std::optional<double> LrScheduler::scheduled_lr(const Optimizer& optimizer, int64_t iteration) const {
  for (size_t k = 0; k < optimizers_.size(); ++k) {
    if (optimizers_[k] == &optimizer) return schedule_.lr_at(base_lrs_[k], iteration);
  }
  return std::nullopt;
}

}  // namespace tandem::optim
