// share_device_between_ranks: a distinct NCCL_HOSTID per rank exactly when local ranks
// outnumber the devices, and never over the user's own NCCL_HOSTID.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "runtime/dist/nccl_shared_device.h"

using namespace tandem::dist;

namespace {

LaunchEnv local(int rank, int local_size) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = local_size;
  env.local_rank = rank;
  env.local_size = local_size;
  env.launcher = "openmpi";
  return env;
}

std::string host_id() {
  const char* v = std::getenv("NCCL_HOSTID");
  return v ? v : "";
}

}  // namespace

TEST_CASE("ranks sharing a device get one NCCL host id each", "[dist][nccl]") {
  unsetenv("NCCL_HOSTID");
  CHECK_FALSE(share_device_between_ranks(local(1, 2), 2));  // one device each
  CHECK(host_id().empty());
  CHECK_FALSE(share_device_between_ranks(local(1, 2), 0));  // no device: nothing to share
  CHECK(host_id().empty());

  REQUIRE(share_device_between_ranks(local(1, 3), 1));
  std::string rank1 = host_id();
  CHECK(rank1.find(".tandem-rank-1") != std::string::npos);
  unsetenv("NCCL_HOSTID");
  REQUIRE(share_device_between_ranks(local(2, 3), 2));
  CHECK(host_id() != rank1);
  CHECK(host_id().find(".tandem-rank-2") != std::string::npos);
  unsetenv("NCCL_HOSTID");
}

TEST_CASE("the user's own NCCL_HOSTID is kept", "[dist][nccl]") {
  setenv("NCCL_HOSTID", "chosen", 1);
  CHECK_FALSE(share_device_between_ranks(local(1, 4), 1));
  CHECK(host_id() == "chosen");
  unsetenv("NCCL_HOSTID");
}
