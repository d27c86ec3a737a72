// Catch2 main for multi-rank suites: initialises MPI (with the thread level the
// communication thread needs), runs the tests on every rank and fails the job if any
// rank fails. Only rank 0 prints Catch2's summary unless TANDEM_TEST_ALL_RANKS is set.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  Catch::Session session;
  int rc = session.applyCommandLine(argc, argv);
  if (rc != 0) return rc;
  if (rank != 0 && std::getenv("TANDEM_TEST_ALL_RANKS") == nullptr) {
    // Other ranks report failures only (compact reporter prints failed assertions).
    session.configData().reporterName = "compact";
  }
  int failures = session.run();
  int local = failures == 0 ? 0 : 1, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local) std::fprintf(stderr, "rank %d: %d test case(s) failed\n", rank, failures);
  MPI_Finalize();
  return any ? 1 : 0;
}
