// grad(): gradients of outputs with respect to chosen inputs, returned as Variables.
//
// Contract:
// - grad(outputs, inputs, grad_outputs, options) returns one gradient per input, of that
//   input's shape: d(sum_i <outputs[i], grad_outputs[i]>)/d(input). A scalar output may go
//   without its grad_output (seed 1); any other output needs one of its shape.
// - It never touches any `.grad`, never runs a leaf's accumulator or its grad-ready hooks,
//   and never notifies BackwardObservers (engine.h): for the Reducer a grad() is not a
//   backward, so an inner gradient (e.g. a penalty's grad of D(x) w.r.t. x) is not
//   synchronised; only the engine's backward of a loss built from it is.
// - Only the nodes on a path from the outputs to the inputs run; an input that is not a
//   leaf gets the gradient that reaches its grad_fn.
// - With create_graph the backward is built from differentiable Variable ops (each node's
//   second-order rule, node.h), so the returned gradients carry history and a loss made
//   from them can be differentiated again (by backward or another grad). A node on the way
//   without such a rule throws an Error naming its op. retain_graph defaults to
//   create_graph; without it the nodes that ran are released, and a later backward or
//   grad through them is a named error.
// - Errors, each naming the output or input by index and shape: an output that does not
//   require grad; a non-scalar output without grad_output, or a grad_output of the wrong
//   shape; an input that does not require grad, or that the outputs do not reach -- unless
//   allow_unused, which returns an undefined Variable for such an input. A reachable input
//   that no gradient reached gets zeros.
#pragma once

#include <optional>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

struct GradOptions {
  bool create_graph = false;
  std::optional<bool> retain_graph = std::nullopt;  // unset: same as create_graph
  bool allow_unused = false;
};

std::vector<Variable> grad(const std::vector<Variable>& outputs, const std::vector<Variable>& inputs,
                           const std::vector<Variable>& grad_outputs = {}, const GradOptions& options = {});

}  // namespace tandem
