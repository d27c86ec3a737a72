// ParameterClaims: which Reducer watches each parameter, process-wide.
//
// Contract: claim(params, names, owner) claims every parameter for `owner`, or none: it
// throws an Error naming the first parameter another owner holds, and that owner. The
// claims are released when the ParameterClaims is destroyed (so also when a Reducer's
// constructor throws after claiming). Thread-safe: ranks run as threads in the unit tests.
#pragma once

#include <string>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

class ParameterClaims {
 public:
  ParameterClaims() = default;
  ~ParameterClaims();
  ParameterClaims(const ParameterClaims&) = delete;
  ParameterClaims& operator=(const ParameterClaims&) = delete;

  void claim(const std::vector<Variable>& params, const std::vector<std::string>& names,
             const std::string& owner);

 private:
  std::vector<const VariableImpl*> held_;
};

}  // namespace tandem
