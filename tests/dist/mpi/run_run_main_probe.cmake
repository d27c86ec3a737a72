# Runs run_main_probe under mpirun at 2 ranks: rank 1's error must be its one line, the job
# must end non-zero well before the collective timeout, with no "terminate called" and no
# signal backtrace.
#   cmake -DMPIEXEC=... -DNP_FLAG=-n -DPROBE=.../dist_run_main_probe -P run_run_main_probe.cmake
# The environment (MPI settings, TANDEM_COLLECTIVE_TIMEOUT_S=60) comes from the CTest test.
set(kMaxSeconds 30)

string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 2 --oversubscribe ${PROBE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 90)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
set(all "${out}\n${err}")
message("---- probe output (exit ${rc}, ${elapsed} s) ----\n${all}\n----")

set(failed "")
if(NOT rc MATCHES "^[0-9]+$")
  string(APPEND failed "mpirun did not exit by itself: ${rc}\n")
elseif(rc EQUAL 0)
  string(APPEND failed "the job exited 0; an error must end it non-zero\n")
endif()
if(elapsed GREATER kMaxSeconds)
  string(APPEND failed "the job took ${elapsed} s, over ${kMaxSeconds} s: it waited for a timeout\n")
endif()
string(REGEX MATCHALL "\\[rank 1\\] [^\n]*" rank1_lines "${all}")
list(LENGTH rank1_lines count)
if(NOT count EQUAL 1)
  string(APPEND failed "rank 1 printed ${count} lines, not its one error line\n")
elseif(NOT rank1_lines MATCHES
       "^\\[rank 1\\] probe: rank 1 fails on purpose \\[at tests/dist/mpi/run_main_probe\\.cpp:[0-9]+\\]$")
  string(APPEND failed "rank 1's line is not '[rank 1] <message> [at <file>:<line>]': ${rank1_lines}\n")
endif()
foreach(noise "terminate called" "Process received signal" "[rank 0]")
  string(FIND "${all}" "${noise}" pos)
  if(NOT pos EQUAL -1)
    string(APPEND failed "'${noise}' is printed\n")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "run_main probe failed:\n${failed}")
endif()
message("run_main probe: one line from rank 1, exit ${rc}, ${elapsed} s")
