// Launch environment: which rank this process is, read from the launcher's variables.
//
// Contract:
// - init_from_env() reads only environment variables (no MPI, no CUDA) and tries the
//   launchers in this order, the first whose variables are present winning:
//     "openmpi"  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                OMPI_COMM_WORLD_LOCAL_SIZE (all four required)
//     "slurm"    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (required); the local size from
//                SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE ("2(x3),1") at index
//                SLURM_NODEID, else SLURM_NTASKS (one node assumed)
//     "pmi"      PMI_RANK, PMI_SIZE (required); the local rank and size from
//                MPI_LOCALRANKID/MPI_LOCALNRANKS (Hydra) or PMI_LOCAL_RANK/PMI_LOCAL_SIZE,
//                else rank and size (one node assumed)
//     "single"   none of the above: rank 0 of 1
// - torchrun is not a launcher for tandem: its processes form no MPI world, and every
//   process group (NCCL's too, whose id goes out over MPI) needs one. When none of the
//   launchers above matched and torchrun's RANK, WORLD_SIZE or LOCAL_RANK is set, they are
//   read (RANK and WORLD_SIZE required, LOCAL_RANK and LOCAL_WORLD_SIZE optional) and
//   checked as below; WORLD_SIZE=1 is one process ("single"), a larger one throws, before
//   MPI starts, an Error naming torchrun, mpirun and srun with the equivalent commands
//   ("mpirun -np 2 <this command line>").
// - A launcher is selected by its rank variable (or, for openmpi and pmi, its size
//   variable too); a required variable that is then missing, not an integer, or out of
//   range (rank >= size, local rank >= local size, local size > size) throws a
//   tandem::Error whose message names the variable and its value.
// - The CUDA device of a process is its local rank modulo the device count.
// - When the variables place ranks on several hosts (local size < world size),
//   init_from_env also names this host in every later error (name_host_in_errors), so
//   a failing rank's message reads "[rank r on host H]".
#pragma once

#include <string>

namespace tandem::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  // "openmpi", "slurm", "pmi" or "single"; init_process_group reports "mpi"
  // when MPI runs several ranks that no known launcher described.
  std::string launcher = "single";

  // local_rank % device_count; device_count must be positive.
  int cuda_device(int device_count) const;
  std::string str() const;  // "rank 1 of 4 (local 1 of 2, openmpi)"
};

LaunchEnv init_from_env();

// set_process_host(gethostname()) when `env` spans several hosts (local size < world size),
// else set_process_host(""): on one host the rank alone names the process.
void name_host_in_errors(const LaunchEnv& env);

}  // namespace tandem::dist
