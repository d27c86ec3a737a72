# Runs timeout_probe under mpirun at 2 ranks and checks that the skipped collective gave a
# named timeout on rank 0, a non-zero exit of the whole job, and no hang.
#   cmake -DMPIEXEC=... -DNP_FLAG=-n -DPROBE=.../dist_timeout_probe -DMODE=catch -P run_timeout_probe.cmake
# The environment (MPI settings, TANDEM_COLLECTIVE_TIMEOUT_S=3) comes from the CTest test.
set(kTimeoutS 3)
set(kMaxSeconds 30)

string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 2 --oversubscribe ${PROBE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 90)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
set(all "${out}\n${err}")
message("---- probe output (mode ${MODE}, exit ${rc}, ${elapsed} s) ----\n${all}\n----")

set(expected
  "allreduce (sum) of 1000 float32 elements, tag 'bucket 3 of phase D', timed out after ${kTimeoutS} s on rank 0 of 2"
  "4000 bytes"
  "[rank 0]")
if(MODE STREQUAL "catch")
  list(APPEND expected "probe: wait() threw after" "tandem: ending the job:")
elseif(MODE STREQUAL "uncaught")
  list(APPEND expected "terminate called after throwing an instance of 'tandem::dist::TimeoutError'")
elseif(MODE STREQUAL "destroy")
  list(APPEND expected "probe: wait() threw after" "tandem: ending the job: "
                       "shutting down mpi process group 'world' of world ranks {0,1} after a timeout")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

set(failed "")
if(NOT rc MATCHES "^[0-9]+$")
  string(APPEND failed "mpirun did not exit by itself: ${rc}\n")
elseif(rc EQUAL 0)
  string(APPEND failed "the job exited 0; a timeout must end it non-zero\n")
endif()
if(elapsed GREATER kMaxSeconds)
  string(APPEND failed "the job took ${elapsed} s; the timeout is ${kTimeoutS} s and the limit ${kMaxSeconds} s\n")
endif()
foreach(text IN LISTS expected)
  string(FIND "${all}" "${text}" pos)
  if(pos EQUAL -1)
    string(APPEND failed "missing from the output: ${text}\n")
  endif()
endforeach()
# The wait must have lasted about the timeout: not much less (it waited) nor much more.
if(MODE STREQUAL "catch" OR MODE STREQUAL "destroy")
  string(REGEX MATCH "wait\\(\\) threw after ([0-9]+)\\.([0-9]+) s" match "${all}")
  if(match)
    if(CMAKE_MATCH_1 LESS 1 OR CMAKE_MATCH_1 GREATER 10)
      string(APPEND failed "wait() returned after ${CMAKE_MATCH_1}.${CMAKE_MATCH_2} s, not about ${kTimeoutS} s\n")
    endif()
  endif()
  string(FIND "${all}" "was never torn down" pos)
  if(NOT pos EQUAL -1)
    string(APPEND failed "rank 1 outlived the job\n")
  endif()
endif()
if(failed)
  message(FATAL_ERROR "timeout probe (${MODE}) failed:\n${failed}")
endif()
message("timeout probe (${MODE}): named timeout, exit ${rc}, ${elapsed} s")
