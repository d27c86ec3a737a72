// Grad mode: whether ops record nodes. Thread-local; NoGradGuard turns it off in a scope,
// GradModeScope sets it either way (a create_graph backward or grad() turns it on).
#pragma once

namespace tandem {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Sets grad mode for the scope's duration and restores the previous mode on exit.
class GradModeScope {
 public:
  explicit GradModeScope(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeScope() { GradMode::set_enabled(previous_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
