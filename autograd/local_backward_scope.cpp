#include "autograd/local_backward_scope.h"

namespace tandem {

namespace {

thread_local int t_depth = 0;

}  // namespace

LocalBackwardScope::LocalBackwardScope() { ++t_depth; }
LocalBackwardScope::~LocalBackwardScope() { --t_depth; }
bool LocalBackwardScope::active() { return t_depth > 0; }

}  // namespace tandem
