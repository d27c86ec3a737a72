// The output directory (--out): made and checked before any work starts.
//
// Contract:
// - out_dir_problem(dir) creates `dir` and its parents when missing and returns why it
//   cannot take the outputs ("cannot create the directory (<reason>)" or "directory is not
//   writable"), or "" when it can. It writes a probe file to find out and removes it.
// - prepare_out_dir(out, world) is collective: only rank 0 writes to --out, so only rank 0
//   checks, and it broadcasts the verdict so that every rank stops before training instead
//   of waiting in a collective for a rank that gave up. On failure every rank throws an
//   Error starting "--out <out>: ": rank 0's names the reason, the others' point to rank 0.
#pragma once

#include <string>

#include "runtime/dist/process_group.h"

namespace tandem::models {

std::string out_dir_problem(const std::string& dir);
void prepare_out_dir(const std::string& out, dist::ProcessGroup& world);

}  // namespace tandem::models
