# Runs freeze_probe under mpirun at 2 ranks with rank 1 frozen at PHASE (startup or
# shutdown) and checks that rank 0 ended the job at the deadline: non-zero exit, within
# seconds, with tandem's line naming the phase, the rank and the deadline.
#   cmake -DMPIEXEC=... -DNP_FLAG=-n -DPROBE=.../dist_freeze_probe -DPHASE=startup -DDEADLINE_S=1 \
#         -P run_freeze_probe.cmake
# The environment (MPI settings; start-up: TANDEM_STARTUP_TIMEOUT_S=DEADLINE_S with a
# shorter TANDEM_COLLECTIVE_TIMEOUT_S, which must not bound it; shut-down:
# TANDEM_COLLECTIVE_TIMEOUT_S=DEADLINE_S) comes from the CTest test.
if(NOT DEADLINE_S MATCHES "^[0-9]+$")
  message(FATAL_ERROR "DEADLINE_S must be a whole number of seconds, got '${DEADLINE_S}'")
endif()
set(kDeadlineS ${DEADLINE_S})
math(EXPR kMaxSeconds "${kDeadlineS} + 12")  # mpirun's start and tear-down on a busy machine

if(PHASE STREQUAL "startup")
  set(expected "tandem: ending the job: [rank 0] start-up (MPI_Init_thread) did not finish within ${kDeadlineS} s (TANDEM_STARTUP_TIMEOUT_S): a rank is frozen or was never started"
               "probe: rank 1 freezes before MPI start-up")
  set(forbidden "passed the final barrier")
elseif(PHASE STREQUAL "shutdown")
  set(expected "tandem: ending the job: [rank 0] shut-down (MPI_Finalize) did not finish within ${kDeadlineS} s (TANDEM_COLLECTIVE_TIMEOUT_S): a rank is frozen or never reached its own shut-down"
               "probe: rank 0 passed the final barrier"
               "probe: rank 1 freezes before MPI shut-down")
  set(forbidden "probe: rank 0 shut down")
else()
  message(FATAL_ERROR "unknown PHASE '${PHASE}'")
endif()

set(ENV{TANDEM_PROBE_FREEZE_RANK} 1)
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} ${NP_FLAG} 2 --oversubscribe ${PROBE} ${PHASE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 40)
string(TIMESTAMP stop "%s")
math(EXPR elapsed "${stop} - ${start}")
set(all "${out}\n${err}")
message("---- freeze probe output (phase ${PHASE}, exit ${rc}, ${elapsed} s) ----\n${all}\n----")

set(failed "")
if(NOT rc MATCHES "^[0-9]+$")
  string(APPEND failed "mpirun did not exit by itself: ${rc}\n")
elseif(rc EQUAL 0)
  string(APPEND failed "the job exited 0; a frozen rank must end it non-zero\n")
endif()
if(elapsed GREATER kMaxSeconds)
  string(APPEND failed "the job took ${elapsed} s; the deadline is ${kDeadlineS} s and the limit ${kMaxSeconds} s\n")
endif()
# Whole seconds: an end before the deadline would be a watchdog that fires early.
math(EXPR min_seconds "${kDeadlineS} - 1")
if(elapsed LESS min_seconds)
  string(APPEND failed "the job ended after ${elapsed} s, before the ${kDeadlineS} s deadline\n")
endif()
foreach(text IN LISTS expected)
  string(FIND "${all}" "${text}" pos)
  if(pos EQUAL -1)
    string(APPEND failed "missing from the output: ${text}\n")
  endif()
endforeach()
foreach(text IN LISTS forbidden)
  string(FIND "${all}" "${text}" pos)
  if(NOT pos EQUAL -1)
    string(APPEND failed "in the output, and must not be: ${text}\n")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "freeze probe (${PHASE}) failed:\n${failed}")
endif()
message("freeze probe (${PHASE}): the job ended with exit ${rc} after ${elapsed} s, naming the phase")
