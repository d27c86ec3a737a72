// Ranks agree on their settings: one collective when they do, the same named error on every
// rank when they do not.
#include <catch2/catch.hpp>
#include <mutex>

#include "models/train/settings_agreement.h"
#include "runtime/dist/thread_process_group.h"

using namespace tandem;
using namespace tandem::models;

namespace {

std::vector<RunSetting> settings_of(const std::vector<std::string>& args) {
  return run_settings(parse_train_options(args), "mpi", "");
}

// Each rank's error message ("" when it returned), with rank r given args_of(r).
std::vector<std::string> agree(int size, const std::function<std::vector<std::string>(int)>& args_of) {
  std::vector<std::string> errors(static_cast<size_t>(size));
  dist::run_ranks(size, [&](std::shared_ptr<dist::ProcessGroup> group) {
    try {
      check_settings_agree(*group, settings_of(args_of(group->rank())));
    } catch (const Error& e) {
      errors[static_cast<size_t>(group->rank())] = e.message();
    }
  });
  return errors;
}

}  // namespace

TEST_CASE("the differences name each differing flag with its values and ranks", "[settings]") {
  std::vector<std::vector<RunSetting>> ranks(5, settings_of({"--model", "mlp"}));
  CHECK(describe_setting_differences(ranks).empty());
  ranks[1] = settings_of({"--model", "mlp", "--lr", "0.001"});
  ranks[3] = settings_of({"--model", "mlp", "--lr", "1e-3", "--dynamic"});
  ranks[4] = settings_of({"--model", "mlp", "--lr", "0.01"});
  CHECK(describe_setting_differences(ranks) ==
        "--lr 0.0002 on ranks 0, 2, --lr 0.001 on ranks 1, 3, --lr 0.01 on rank 4; "
        "no --dynamic on ranks 0-2, 4, --dynamic on rank 3");
  ranks[2].pop_back();  // a build without the last flag
  CHECK_THAT(describe_setting_differences(ranks),
             Catch::EndsWith(
                 "; no --detect-anomalous-params on ranks 0-1, 3-4, no value for --detect-anomalous-params "
                 "on rank 2"));
}

TEST_CASE("ranks with the same settings pass; any difference stops every rank with the same message",
          "[settings]") {
  for (int size : {1, 2, 3}) {
    CHECK(agree(size, [](int) {
            return std::vector<std::string>{"--lr", "2e-4"};
          }) == std::vector<std::string>(static_cast<size_t>(size)));
  }
  // --out and --data-dir may differ per node.
  const std::vector<std::string> dirs = {"a", "b/c", "/d"};
  CHECK(agree(3, [&](int r) {
          return std::vector<std::string>{"--out", dirs[static_cast<size_t>(r)], "--data-dir",
                                          dirs[static_cast<size_t>(r)]};
        }) == std::vector<std::string>(3));

  const std::vector<std::string> errors = agree(3, [](int r) {
    if (r == 1) return std::vector<std::string>{"--seed", "3"};
    if (r == 2) return std::vector<std::string>{"--lr", "0.001"};
    return std::vector<std::string>{};
  });
  const std::string expected =
      "settings differ across ranks: --lr 0.0002 on ranks 0-1, --lr 0.001 on rank 2; --seed 0 on ranks 0, 2, "
      "--seed 3 on rank 1. Start every rank with the same flags (only --out and --data-dir may differ, and "
      "the "
      "data there may not)";
  CHECK(errors == std::vector<std::string>(3, expected));
}
