# One mode of wsync-bench in a tiny configuration, so that the benchmark cannot rot: it must exit 0 and write JSON that
# parses and has every top-level key of KEYS. Usage:
#   cmake -DBENCH=wsync-bench -DMODE=bus "-DARGS=--quick;--agents;1" "-DKEYS=mode;machine" -DJSON=out.json -P ...
# Optional: -DLAUNCHER=COMMAND (a list) runs `COMMAND wsync-bench MODE ...` instead (bench/wsync-bench/across_hosts.sh);
# -DSKIP_STATUS=N: that exit status means the test cannot run here, and it prints "wsync-bench MODE: skipped: why"
# for the test's SKIP_REGULAR_EXPRESSION.
execute_process(COMMAND ${LAUNCHER} "${BENCH}" ${MODE} ${ARGS} --json "${JSON}" RESULT_VARIABLE status OUTPUT_QUIET
                ERROR_VARIABLE progress)
if(DEFINED SKIP_STATUS AND status EQUAL SKIP_STATUS)
  message(STATUS "wsync-bench ${MODE}: skipped: ${progress}")
  return()
endif()
if(NOT status EQUAL 0)
  message(FATAL_ERROR "wsync-bench ${MODE} ${ARGS} exited with ${status}:\n${progress}")
endif()
file(READ "${JSON}" json)
foreach(key IN LISTS KEYS)
  string(JSON value ERROR_VARIABLE missing GET "${json}" "${key}")
  if(missing)
    message(FATAL_ERROR "wsync-bench ${MODE}: ${JSON} has no top-level '${key}' (${missing})")
  endif()
endforeach()
message(STATUS "wsync-bench ${MODE}: exit 0, JSON with ${KEYS}")
