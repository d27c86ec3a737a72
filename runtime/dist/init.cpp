// Start-up and shut-down of the distributed layer: the world group from the launch
// environment and MPI_COMM_WORLD (declared in process_group.h).
#include <mpi.h>

#include <exception>

#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_lifetime.h"
#include "runtime/dist/mpi_process_group.h"
#include "runtime/dist/process_group.h"

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/dist/nccl_process_group.h"
#include "runtime/dist/nccl_shared_device.h"
#endif

namespace tandem::dist {

namespace {

struct Initialised {
  LaunchEnv env;
  std::shared_ptr<ProcessGroup> world;
};

Initialised initialise(Backend backend) {
  TANDEM_CHECK(backend != Backend::threads,
               "init_process_group(threads): thread groups are not launched from the environment; create "
               "them with make_thread_groups or run_ranks (runtime/dist/thread_process_group.h)");
  LaunchEnv env = init_from_env();
  detail::ensure_mpi_initialized(env.launcher != "single" ? env.rank : -1);
  int rank = 0, size = 1;
  TANDEM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TANDEM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  set_process_rank(rank);
  if (env.launcher != "single") {
    TANDEM_CHECK(env.world_size == size, "launch environment ("
                                             << env.launcher << ") says " << env.str()
                                             << ", but MPI_COMM_WORLD has " << size
                                             << " ranks: start the job with mpirun, srun or mpiexec");
    TANDEM_CHECK(env.rank == rank, "launch environment (" << env.launcher << ") says " << env.str()
                                                          << ", but this is MPI rank " << rank);
  } else if (size > 1) {
    // Launched by something we do not know: ask MPI which ranks share this node.
    env.rank = rank;
    env.world_size = size;
    MPI_Comm node = MPI_COMM_NULL;
    TANDEM_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    TANDEM_CHECK_MPI(MPI_Comm_rank(node, &env.local_rank));
    TANDEM_CHECK_MPI(MPI_Comm_size(node, &env.local_size));
    TANDEM_CHECK_MPI(MPI_Comm_free(&node));
    env.launcher = "mpi";
  }
  if (backend == Backend::mpi) return {env, std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "world")};
#if TANDEM_HAVE_CUDA
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  TANDEM_CHECK(rc == cudaSuccess && count > 0,
               "init_process_group(nccl): no usable CUDA device ("
                   << (rc == cudaSuccess ? std::string("0 devices") : std::string(cudaGetErrorString(rc)))
                   << ")");
  share_device_between_ranks(env, count);
  return {env, std::make_shared<NcclProcessGroup>(MPI_COMM_WORLD, env.cuda_device(count), "world")};
#else
  TANDEM_FAIL("init_process_group(nccl): this build has no CUDA/NCCL support (TANDEM_HAVE_CUDA is off)");
#endif
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(Backend backend) { return initialise(backend).world; }

void shutdown_process_groups() { detail::shutdown_mpi(); }

DistributedContext::DistributedContext(Backend backend) {
  Initialised init = initialise(backend);
  env_ = init.env;
  world_ = std::move(init.world);
}

DistributedContext::~DistributedContext() {
  world_.reset();
  // Unwound by an exception: MPI stays up, so whoever catches it can still end the job at
  // once (run_main, MPI_Abort); MPI_Finalize would wait for ranks that may wait for this one.
  if (std::uncaught_exceptions() > 0) return;
  shutdown_process_groups();
}

}  // namespace tandem::dist
