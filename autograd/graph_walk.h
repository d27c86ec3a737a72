// Internal to the engine and grad(): one walk over the backward graph.
//
// Contract: discover(starts) visits every node reachable from `starts` once and returns
// them in discovery order, each node's in-degree within that subgraph (how many edges of
// visited nodes point at it), and the leaves requiring grad whose accumulators it reached
// (discovery order, no duplicates). The cost is proportional to the reachable graph.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "autograd/node.h"

namespace tandem::detail {

struct Graph {
  std::vector<std::shared_ptr<Node>> nodes;  // every reachable node, discovery order
  std::unordered_map<Node*, int> dependencies;
  std::vector<std::shared_ptr<VariableImpl>> leaves;
};

Graph discover(const std::vector<std::shared_ptr<Node>>& starts);

// Orders a ready queue newest node first (reverse of creation, so reverse topological).
struct NewestFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace tandem::detail
