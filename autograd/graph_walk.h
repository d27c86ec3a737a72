// Internal to the engine and grad(): one walk over the backward graph.
//
// Contract: discover(starts) visits every node reachable from `starts` once and returns
// them in discovery order, each node's in-degree within that subgraph (how many edges of
// visited nodes point at it), and the leaves requiring grad whose accumulators it reached
// (discovery order, no duplicates). The cost is proportional to the reachable graph.
// nodes_leading_to(graph, targets) is the subset of the graph's nodes from which some
// target can be reached (targets included): the only nodes a pass that wants gradients for
// the targets alone needs to run. Every edge into such a node comes from such a node, so
// the graph's dependency counts stay right for it. WantedEdges narrows a node's
// needs_input_grad to such a set for one apply.
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/node.h"

namespace tandem::detail {

struct Graph {
  std::vector<std::shared_ptr<Node>> nodes;  // every reachable node, discovery order
  std::unordered_map<Node*, int> dependencies;
  std::vector<std::shared_ptr<VariableImpl>> leaves;
};

Graph discover(const std::vector<std::shared_ptr<Node>>& starts);

std::unordered_set<Node*> nodes_leading_to(const Graph& graph, const std::unordered_set<Node*>& targets);

class WantedEdges {
 public:
  WantedEdges(Node& node, const std::unordered_set<Node*>& wanted) : node_(node) {
    node_.set_wanted_edges(&wanted);
  }
  ~WantedEdges() { node_.set_wanted_edges(nullptr); }
  WantedEdges(const WantedEdges&) = delete;
  WantedEdges& operator=(const WantedEdges&) = delete;

 private:
  Node& node_;
};

// Orders a ready queue newest node first (reverse of creation, so reverse topological).
struct NewestFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

}  // namespace tandem::detail
