// Making replicas identical at wrap time.
//
// Contract: verify_replicas is collective over `group`: every rank passes its parameter
// descriptions (name, dtype, shape, in order); if any rank's list differs from rank 0's,
// every rank throws an Error, and a differing rank's message names the first difference
// with both ranks' versions ("parameter 3: rank 0 has 'fc.weight' float32[4, 3], rank 1
// has 'fc.weight' float32[4, 5]"). broadcast_from_rank0 overwrites every tensor with rank
// 0's values (collective; same list on every rank); given a broadcast_function
// (ReducerOptions), that function does it instead, over the same tensors.
// check_replicas_equal is collective: it hashes the bytes of every tensor (64-bit FNV-1a,
// on the host; GPU tensors are copied over), compares the hashes across ranks with two
// small allreduces (max and min) and, if any differ, throws on every rank an Error naming
// the first differing tensor and `when` ("after step 300").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "reducer/comm_hook.h"
#include "runtime/dist/process_group.h"

namespace tandem {

struct TensorDescription {
  std::string name;
  const Tensor* tensor = nullptr;
};

void verify_replicas(dist::ProcessGroup& group, const std::vector<TensorDescription>& tensors,
                     const std::string& what);
void check_replicas_equal(dist::ProcessGroup& group, const std::vector<TensorDescription>& tensors,
                          const std::string& when);
void broadcast_from_rank0(dist::ProcessGroup& group, const std::vector<Tensor*>& tensors,
                          const std::string& tag, const DistFunction& broadcast_function = nullptr);

}  // namespace tandem
