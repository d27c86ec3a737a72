// How a differentiable op records itself.
//
// Contract: make_result(data, name, inputs, backward) returns `data` as a Variable. When
// grad mode is on and any input requires grad, the result gets a FunctionNode whose edges
// point at the inputs' gradient edges and whose backward is `backward`; otherwise the
// result is a plain Variable. `backward` must capture Tensors (never Variables of the
// result) and return one gradient per input, in order.
//
// The optional `graph_backward` is the same rule written with differentiable Variable ops
// (ops.h), used only by grad() with create_graph (second-order gradients). It may capture
// the op's input Variables -- never the result, which would make a cycle; an op that needs
// its output recomputes it from the inputs there. Ops given none raise a named error when
// differentiated twice.
//
// records_graph(inputs) says whether make_result will record a node for these inputs, so
// that an op computes what only its backward keeps (a sign class, a rounded copy) only then.
#pragma once

#include <initializer_list>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/variable.h"

namespace tandem {

bool records_graph(const std::vector<Variable>& inputs);

Variable make_result(Tensor data, const char* name, const std::vector<Variable>& inputs,
                     FunctionNode::Backward backward, FunctionNode::GraphBackward graph_backward = nullptr);

}  // namespace tandem
