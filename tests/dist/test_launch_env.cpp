#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "runtime/dist/launch_env.h"
#include "runtime/dist/process_group.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

// Clears every variable a launcher sets for the duration of a test, then restores them.
class EnvGuard {
 public:
  EnvGuard() {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      if (value != nullptr) saved_[name] = value;
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    set_process_host("");  // init_from_env may have named this host
    for (const char* name : kNames) {
      auto it = saved_.find(name);
      if (it != saved_.end()) {
        setenv(name, it->second.c_str(), 1);
      } else {
        unsetenv(name);
      }
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

  void set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {"OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NODEID",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_NNODES",
                                           "PMI_RANK",
                                           "PMI_SIZE",
                                           "MPI_LOCALRANKID",
                                           "MPI_LOCALNRANKS",
                                           "PMI_LOCAL_RANK",
                                           "PMI_LOCAL_SIZE",
                                           "RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "TANDEM_COLLECTIVE_TIMEOUT_S",
                                           "TANDEM_STARTUP_TIMEOUT_S"};
  std::map<std::string, std::string> saved_;
};

void check_env(const LaunchEnv& env, int rank, int world_size, int local_rank, int local_size,
               const std::string& launcher) {
  CHECK(env.rank == rank);
  CHECK(env.world_size == world_size);
  CHECK(env.local_rank == local_rank);
  CHECK(env.local_size == local_size);
  CHECK(env.launcher == launcher);
}

}  // namespace

TEST_CASE("launch env: a plain process is rank 0 of 1", "[launch_env]") {
  EnvGuard env;
  LaunchEnv e = init_from_env();
  check_env(e, 0, 1, 0, 1, "single");
  CHECK(e.str() == "rank 0 of 1 (local 0 of 1, single)");
}

TEST_CASE("launch env: Open MPI variables", "[launch_env]") {
  EnvGuard env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  check_env(init_from_env(), 3, 4, 1, 2, "openmpi");

  SECTION("a missing variable is named") {
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    CHECK_THROWS_WITH(init_from_env(),
                      Catch::Contains("OMPI_COMM_WORLD_LOCAL_SIZE is not set, but OMPI_COMM_WORLD_RANK is"));
  }
  SECTION("a size without a rank names the rank") {
    unsetenv("OMPI_COMM_WORLD_RANK");
    CHECK_THROWS_WITH(init_from_env(),
                      Catch::Contains("OMPI_COMM_WORLD_RANK is not set, but OMPI_COMM_WORLD_SIZE is"));
  }
  SECTION("a rank outside the world is named") {
    env.set("OMPI_COMM_WORLD_RANK", "4");
    CHECK_THROWS_WITH(init_from_env(),
                      Catch::Contains("OMPI_COMM_WORLD_RANK=4 is not in [0, OMPI_COMM_WORLD_SIZE=4)"));
  }
  SECTION("a local rank outside the node is named") {
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK=2 is not in [0, "
                                                       "OMPI_COMM_WORLD_LOCAL_SIZE=2)"));
  }
  SECTION("a local size above the world size is named") {
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "5");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("OMPI_COMM_WORLD_LOCAL_SIZE=5 is not in [1, "
                                                       "OMPI_COMM_WORLD_SIZE=4]"));
  }
  SECTION("a value that is not an integer is named") {
    env.set("OMPI_COMM_WORLD_SIZE", "4x");
    CHECK_THROWS_WITH(init_from_env(),
                      Catch::Contains("(openmpi): OMPI_COMM_WORLD_SIZE='4x' is not an integer"));
  }
  SECTION("Open MPI wins over the other launchers' variables") {
    env.set("SLURM_PROCID", "0");
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "1");
    CHECK(init_from_env().launcher == "openmpi");
  }
}

TEST_CASE("launch env: Slurm variables", "[launch_env]") {
  EnvGuard env;
  env.set("SLURM_PROCID", "6");
  env.set("SLURM_NTASKS", "7");
  env.set("SLURM_LOCALID", "0");
  SECTION("without a tasks-per-node list one node is assumed") {
    check_env(init_from_env(), 6, 7, 0, 7, "slurm");
  }
  SECTION("the node's entry of the compressed tasks-per-node list is the local size") {
    env.set("SLURM_TASKS_PER_NODE", "2(x3),1");
    env.set("SLURM_NODEID", "3");
    check_env(init_from_env(), 6, 7, 0, 1, "slurm");
    env.set("SLURM_NODEID", "1");
    env.set("SLURM_LOCALID", "1");
    check_env(init_from_env(), 6, 7, 1, 2, "slurm");
  }
  SECTION("the step's list wins over the job's") {
    env.set("SLURM_TASKS_PER_NODE", "4,3");
    env.set("SLURM_STEP_TASKS_PER_NODE", "3,4");
    env.set("SLURM_NODEID", "1");
    check_env(init_from_env(), 6, 7, 0, 4, "slurm");
  }
  SECTION("a local id outside the node names the list it came from") {
    env.set("SLURM_STEP_TASKS_PER_NODE", "6,1");
    env.set("SLURM_NODEID", "1");
    env.set("SLURM_LOCALID", "1");
    CHECK_THROWS_WITH(init_from_env(),
                      Catch::Contains("SLURM_LOCALID=1 is not in [0, SLURM_STEP_TASKS_PER_NODE=1)"));
  }
  SECTION("a node id outside the list is named") {
    env.set("SLURM_TASKS_PER_NODE", "7");
    env.set("SLURM_NODEID", "1");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("SLURM_NODEID=1 is not in [0, 1)"));
  }
  SECTION("a missing local id is named") {
    unsetenv("SLURM_LOCALID");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("SLURM_LOCALID is not set, but SLURM_PROCID is"));
  }
  SECTION("Slurm wins over torchrun variables") {
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "1");
    CHECK(init_from_env().launcher == "slurm");
  }
}

TEST_CASE("launch env: MPICH / PMI variables", "[launch_env]") {
  EnvGuard env;
  env.set("PMI_RANK", "2");
  env.set("PMI_SIZE", "3");
  SECTION("without local variables one node is assumed") { check_env(init_from_env(), 2, 3, 2, 3, "pmi"); }
  SECTION("Hydra's local variables") {
    env.set("MPI_LOCALRANKID", "0");
    env.set("MPI_LOCALNRANKS", "1");
    check_env(init_from_env(), 2, 3, 0, 1, "pmi");
  }
  SECTION("PMI's local variables") {
    env.set("PMI_LOCAL_RANK", "1");
    env.set("PMI_LOCAL_SIZE", "2");
    check_env(init_from_env(), 2, 3, 1, 2, "pmi");
  }
  SECTION("half of a local pair is named") {
    env.set("MPI_LOCALRANKID", "0");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("MPI_LOCALNRANKS is not set, but MPI_LOCALRANKID is"));
  }
  SECTION("a size without a rank names the rank") {
    unsetenv("PMI_RANK");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("(pmi): PMI_RANK is not set, but PMI_SIZE is"));
  }
  SECTION("an empty value is named") {
    env.set("PMI_SIZE", "");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("PMI_SIZE='' is not an integer"));
  }
}

TEST_CASE("launch env: torchrun is refused, naming mpirun and srun", "[launch_env]") {
  EnvGuard env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "4");
  SECTION("a job of several processes: the equivalent commands") {
    env.set("LOCAL_RANK", "1");
    env.set("LOCAL_WORLD_SIZE", "4");
    CHECK_THROWS_WITH(
        init_from_env(),
        Catch::Contains("torchrun's variables (RANK=1, WORLD_SIZE=4) describe a job of 4 processes") &&
            Catch::Contains("torchrun is not a launcher for tandem") && Catch::Contains("mpirun -np 4 ") &&
            Catch::Contains("srun --ntasks 4 "));
  }
  SECTION("several hosts: processes per host in both commands") {
    env.set("LOCAL_RANK", "1");
    env.set("LOCAL_WORLD_SIZE", "2");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("mpirun -np 4 --npernode 2 --host <hosts> ") &&
                                           Catch::Contains("srun --ntasks 4 --ntasks-per-node 2 "));
  }
  SECTION("the command names this program") {
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("test_dist"));
  }
  SECTION("one process is a plain run") {
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "1");
    env.set("LOCAL_RANK", "0");
    check_env(init_from_env(), 0, 1, 0, 1, "single");
  }
  SECTION("LOCAL_RANK alone is torchrun's too: its RANK is named") {
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    env.set("LOCAL_RANK", "1");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("(torchrun): RANK is not set, but LOCAL_RANK is"));
  }
  SECTION("under mpirun the variables are ignored") {
    env.set("OMPI_COMM_WORLD_RANK", "1");
    env.set("OMPI_COMM_WORLD_SIZE", "2");
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    check_env(init_from_env(), 1, 2, 1, 2, "openmpi");
  }
  SECTION("a missing world size is named") {
    unsetenv("WORLD_SIZE");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("(torchrun): WORLD_SIZE is not set, but RANK is"));
  }
  SECTION("an inconsistent local rank is named") {
    env.set("LOCAL_RANK", "4");
    env.set("LOCAL_WORLD_SIZE", "4");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("LOCAL_RANK=4 is not in [0, LOCAL_WORLD_SIZE=4)"));
  }
  SECTION("a world size of zero is named") {
    env.set("RANK", "0");
    env.set("WORLD_SIZE", "0");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("WORLD_SIZE=0 must be at least 1"));
  }
  SECTION("a negative rank is named") {
    env.set("RANK", "-1");
    CHECK_THROWS_WITH(init_from_env(), Catch::Contains("RANK=-1 is not in [0, WORLD_SIZE=4)"));
  }
}

TEST_CASE("launch env: the CUDA device is the local rank modulo the device count", "[launch_env]") {
  LaunchEnv env;
  env.local_rank = 3;
  env.local_size = 4;
  CHECK(env.cuda_device(1) == 0);
  CHECK(env.cuda_device(2) == 1);
  CHECK(env.cuda_device(8) == 3);
  CHECK_THROWS_WITH(env.cuda_device(0), Catch::Contains("no CUDA device"));
}

TEST_CASE("launch env: errors name the host when the job spans several hosts", "[launch_env]") {
  EnvGuard env;
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set_process_rank(3);
  auto message = [] {
    try {
      TANDEM_FAIL("the disk is full");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SECTION("two hosts of two ranks") {
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    init_from_env();
    CHECK(process_host() == host);
    CHECK_THAT(message(), Catch::EndsWith(": [rank 3 on host " + std::string(host) + "] the disk is full"));
  }
  SECTION("one host of four ranks: the rank alone") {
    set_process_host("elsewhere");
    env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    init_from_env();
    CHECK(process_host().empty());
    CHECK_THAT(message(), Catch::EndsWith(": [rank 3] the disk is full"));
  }
  set_process_rank(-1);
}

TEST_CASE("process group: the default timeout comes from TANDEM_COLLECTIVE_TIMEOUT_S",
          "[launch_env][timeout]") {
  EnvGuard env;
  CHECK(default_timeout() == std::chrono::seconds(300));
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "2");
  CHECK(default_timeout() == std::chrono::seconds(2));
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "0.25");
  CHECK(default_timeout() == std::chrono::milliseconds(250));
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "soon");
  CHECK_THROWS_WITH(default_timeout(),
                    Catch::Contains("TANDEM_COLLECTIVE_TIMEOUT_S='soon' must be a number of seconds"));
  // Out of range, where the deadline (now + timeout, in the clock's ticks) would overflow
  // or round to nothing: refused by name, never a silently different timeout.
  for (const char* bad : {"-3", "0", "1e16", "1e10", "inf", "nan", "0.0001"}) {
    env.set("TANDEM_COLLECTIVE_TIMEOUT_S", bad);
    CHECK_THROWS_WITH(default_timeout(),
                      Catch::Contains(std::string("TANDEM_COLLECTIVE_TIMEOUT_S='") + bad + "'"));
  }
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "1e6");
  CHECK(default_timeout() == std::chrono::seconds(1000000));
}

TEST_CASE("process group: start-up has its own bound, TANDEM_STARTUP_TIMEOUT_S, at least 120 s by default",
          "[launch_env][timeout]") {
  EnvGuard env;
  CHECK(startup_timeout() == std::chrono::seconds(300));  // the collective timeout's 300 s
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "10");
  CHECK(startup_timeout() == std::chrono::seconds(120));  // not ended by a short collective bound
  env.set("TANDEM_COLLECTIVE_TIMEOUT_S", "600");
  CHECK(startup_timeout() == std::chrono::seconds(600));
  env.set("TANDEM_STARTUP_TIMEOUT_S", "2.5");
  CHECK(startup_timeout() == std::chrono::milliseconds(2500));
  CHECK(default_timeout() == std::chrono::seconds(600));  // and the collectives keep theirs
  env.set("TANDEM_STARTUP_TIMEOUT_S", "later");
  CHECK_THROWS_WITH(startup_timeout(),
                    Catch::Contains("TANDEM_STARTUP_TIMEOUT_S='later' must be a number of seconds"));
}

TEST_CASE("process group: descriptions and timeout messages name op, count, dtype, tag and ranks",
          "[timeout]") {
  CHECK(std::string(reduce_op_name(ReduceOp::avg)) == "avg");
  std::string d = describe_op("allreduce (sum)", 1000, DType::f32, "bucket 3 of phase D");
  CHECK(d == "allreduce (sum) of 1000 float32 elements, tag 'bucket 3 of phase D'");
  std::string m = timeout_message(d, std::chrono::seconds(2), 1, 2, "4000 bytes");
  CHECK_THAT(m, Catch::StartsWith("allreduce (sum) of 1000 float32 elements, tag 'bucket 3 of phase D', "
                                  "timed out after 2 s on rank 1 of 2 (4000 bytes)"));
  CHECK_THAT(timeout_message(d, std::chrono::milliseconds(1500), 0, 4, ""),
             Catch::Contains("timed out after 1.5 s on rank 0 of 4;"));
}
