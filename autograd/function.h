// How a differentiable op records itself.
//
// Contract: make_result(data, name, inputs, backward) returns `data` as a Variable. When
// grad mode is on and any input requires grad, the result gets a FunctionNode whose edges
// point at the inputs' gradient edges and whose backward is `backward`; otherwise the
// result is a plain Variable. `backward` must capture Tensors (never Variables of the
// result) and return one gradient per input, in order.
#pragma once

#include <initializer_list>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/variable.h"

namespace tandem {

Variable make_result(Tensor data, const char* name, const std::vector<Variable>& inputs,
                     FunctionNode::Backward backward);

}  // namespace tandem
