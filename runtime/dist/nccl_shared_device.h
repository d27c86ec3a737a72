// Several ranks on one CUDA device, as NCCL accepts them.
//
// NCCL refuses two ranks of one communicator on the same device of one host ("Duplicate
// GPU detected"). It accepts them when each rank looks like a host of its own: a distinct
// NCCL_HOSTID per rank. NCCL then connects those ranks through its network (socket)
// transport instead of shared memory or NVLink: correct, not fast. That is what a test of
// several NCCL ranks on a one-GPU machine needs, and what a user who starts more ranks than
// a host has GPUs gets instead of NCCL's error.
//
// Contract: share_device_between_ranks(env, device_count) does nothing and returns false
// when every local rank has a device of its own (env.local_size <= device_count) or when
// NCCL_HOSTID is already set (the user's choice is kept). Otherwise it sets NCCL_HOSTID to
// "<hostname>.tandem-rank-<rank>" in this process's environment, local rank 0 writes one
// line to stderr saying how many ranks share how many devices and what that costs, and it
// returns true. Call it before the process's first NCCL call: NCCL reads NCCL_HOSTID
// when a communicator is created. No MPI, no CUDA.
#pragma once

#include "runtime/dist/launch_env.h"

namespace tandem::dist {

bool share_device_between_ranks(const LaunchEnv& env, int device_count);

}  // namespace tandem::dist
