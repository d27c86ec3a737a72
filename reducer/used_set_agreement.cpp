#include "reducer/used_set_agreement.h"

#include <algorithm>
#include <sstream>

namespace tandem {

namespace {

// Positions are compared modulo this, so that the sums of squares cannot overflow.
constexpr int64_t kPositionModulus = int64_t{1} << 20;

// The sums over ranks of x and of x^2 describe equal x on every rank exactly when
// (sum x)^2 == world * sum x^2 (Cauchy-Schwarz holds with equality only for equal values).
bool all_equal(int64_t sum, int64_t sum_of_squares, int world) {
  return static_cast<__int128>(sum) * sum == static_cast<__int128>(world) * sum_of_squares;
}

}  // namespace

ModelParts::ModelParts(const std::vector<std::string>& param_names) {
  for (const std::string& name : param_names) {
    const std::string part = name.find('.') == std::string::npos ? "" : name.substr(0, name.find('.'));
    auto it = std::find(names.begin(), names.end(), part);
    of.push_back(static_cast<size_t>(it - names.begin()));
    if (it == names.end()) names.push_back(part);
  }
}

std::string ModelParts::name_of(size_t i) const {
  const std::string& p = names[of[i]];
  return p.empty() ? "(top level)" : p;
}

std::string ModelParts::describe(const std::vector<size_t>& used) const {
  std::vector<std::string> seen;
  for (size_t i : used) {
    if (std::find(seen.begin(), seen.end(), name_of(i)) == seen.end()) seen.push_back(name_of(i));
  }
  std::string text = std::to_string(used.size()) + " of " + std::to_string(of.size()) + " parameters (";
  for (size_t k = 0; k < seen.size(); ++k) text += (k ? ", " : "") + seen[k];
  return text + ")";
}

UsedSetAgreement::UsedSetAgreement(std::vector<std::string> param_names, std::string owner,
                                   bool allow_absent_ranks)
    : names_(std::move(param_names)),
      parts_(names_),
      owner_(std::move(owner)),
      allow_absent_ranks_(allow_absent_ranks) {}

std::vector<bool> UsedSetAgreement::agree(dist::ProcessGroup& group, const SumCounts& sum_counts,
                                          const std::vector<bool>& local, const RankPosition& at) {
  const int64_t backward = at.backward, steps = at.steps;
  const size_t count = names_.size();
  // Per parameter, then per part, how many ranks used it; how many ranks used any; then
  // this rank's position (backward and step counts) and its square.
  const size_t reaching = count + parts_.names.size(), position = reaching + 1;
  Tensor counts = Tensor::zeros({size()}, DType::i64);
  int64_t* c = counts.data<int64_t>();
  for (size_t i = 0; i < count; ++i) {
    if (local[i]) {
      c[i] = 1;
      c[count + parts_.of[i]] = 1;
      c[reaching] = 1;
    }
  }
  const int64_t b = backward % kPositionModulus, s = steps % kPositionModulus;
  c[position] = b;
  c[position + 1] = b * b;
  c[position + 2] = s;
  c[position + 3] = s * s;
  sum_counts(counts);
  ++issued_;
  const int world = group.size();
  if (!all_equal(c[position], c[position + 1], world) ||
      !all_equal(c[position + 2], c[position + 3], world)) {
    fail_out_of_step(group, at);
  }
  // A rank that reaches none of the parameters (its backward is about something else, and
  // it agreed through prepare_for_backward) contributes zeros; among the ranks that reach
  // some, each part is reached by all or by none.
  const int64_t ranks_reaching = c[reaching];
  for (size_t k = 0; k < parts_.names.size() && !allow_absent_ranks_; ++k) {
    const int64_t ranks = c[count + k];
    if (ranks > 0 && ranks < ranks_reaching) {
      size_t first = 0;
      while (parts_.of[first] != k) ++first;
      bool here = false;
      for (size_t i = 0; i < count; ++i) here = here || (local[i] && parts_.of[i] == k);
      TANDEM_FAIL("ranks diverge in "
                  << owner_ << ": this backward reaches part '" << parts_.name_of(first)
                  << "' (first parameter '" << names_[first] << "') on " << ranks << " of " << ranks_reaching
                  << " ranks" << (ranks_reaching < world ? " whose backwards reach the model" : "") << ", "
                  << (here ? "including" : "not including")
                  << " this one; every rank must run the same backward (the same step) in "
                  << "the same order. If this part is meant to be used on some ranks only (a graph that "
                  << "depends on the rank's data), set ReducerOptions::allow_absent_ranks "
                  << "(DdpOptions::reducer.allow_absent_ranks) to average it over every rank, those "
                  << "that do not use it contributing their current gradient (zeros without one)");
    }
  }
  std::vector<bool> global(count);
  for (size_t i = 0; i < count; ++i) global[i] = c[i] > 0;
  return global;
}

void UsedSetAgreement::fail_out_of_step(dist::ProcessGroup& group, const RankPosition& at) const {
  // Every rank found the mismatch in the same collective, so every rank is here: one more
  // collective gathers the positions for the message.
  const int world = group.size();
  constexpr int64_t kFields = 3;
  Tensor all = Tensor::zeros({kFields * world}, DType::i64);
  int64_t* p = all.data<int64_t>();
  p[kFields * group.rank()] = at.backward;
  p[kFields * group.rank() + 1] = at.steps;
  p[kFields * group.rank() + 2] = at.unreaching;
  dist::allreduce_host(group, all, dist::ReduceOp::sum, "positions of the ranks of " + owner_);
  std::ostringstream ranks, unreaching;
  constexpr int kListed = 8;
  for (int r = 0; r < world && r < kListed; ++r) {
    const int64_t* q = p + kFields * r;
    ranks << (r ? "; " : "") << "rank " << r << ": backward " << q[0] << " after " << q[1]
          << " optimizer step" << (q[1] == 1 ? "" : "s");
    if (q[2] > 0)
      unreaching << " Rank " << r << " ran " << q[2] << " backward pass" << (q[2] == 1 ? "" : "es")
                 << " that reached no parameter of " << owner_
                 << " (a backward a rank runs on its own belongs in a LocalBackwardScope, "
                    "autograd/local_backward_scope.h).";
  }
  if (world > kListed) ranks << "; ...";
  TANDEM_FAIL("ranks diverge in "
              << owner_ << ": the ranks are at different backwards or optimizer steps (" << ranks.str()
              << "; this is rank " << group.rank() << ", counting since the Reducer was made). A rank "
              << "ran a backward or a step that the others did not, or its backward reached none of "
              << owner_ << "'s parameters while theirs did; averaging now would mix gradients "
              << "of different iterations. Every rank must run the same backwards and steps in the "
              << "same order; where some ranks' backwards may reach none of the parameters, call "
              << "prepare_for_backward(loss) before every backward on every rank." << unreaching.str());
}

}  // namespace tandem
