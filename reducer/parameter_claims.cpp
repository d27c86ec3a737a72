#include "reducer/parameter_claims.h"

#include <mutex>
#include <unordered_map>

namespace tandem {

namespace {

// The name of the Reducer watching each claimed parameter. Ranks run as threads in the
// unit tests, so the map is shared by threads. Never destroyed: a Reducer that outlives
// static destruction (held by a static) must still find it.
struct Claims {
  std::mutex mutex;
  std::unordered_map<const VariableImpl*, std::string> owner;
};
Claims& claims() {
  static Claims* all = new Claims;
  return *all;
}

}  // namespace

void ParameterClaims::claim(const std::vector<Variable>& params, const std::vector<std::string>& names,
                            const std::string& owner) {
  Claims& all = claims();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = all.owner.find(params[i].impl());
    TANDEM_CHECK(
        it == all.owner.end(),
        "Reducer for " << owner << ": parameter '" << names[i]
                       << "' is already synchronised by the Reducer for " << it->second
                       << ": wrap a model once (destroy the first wrapper before wrapping it again), and "
                          "give each parameter to one Reducer");
  }
  for (const Variable& p : params) {
    all.owner.emplace(p.impl(), owner);
    held_.push_back(p.impl());
  }
}

ParameterClaims::~ParameterClaims() {
  Claims& all = claims();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const VariableImpl* p : held_) all.owner.erase(p);
}

}  // namespace tandem
