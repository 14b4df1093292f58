# Runs CMD ARGS and checks what a CLI must do on bad input: exit code 2, exactly one line on
# stderr, and that line names the problem (non-empty).
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(STRIP "${err}" err_stripped)
string(REGEX MATCHALL "\n" newlines "${err_stripped}")
list(LENGTH newlines n_newlines)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit code 2, got ${rc}; stderr: ${err}")
endif()
if(err_stripped STREQUAL "" OR NOT n_newlines EQUAL 0)
  message(FATAL_ERROR "expected exactly one line on stderr, got: '${err}'")
endif()
message(STATUS "exit 2, stderr: ${err_stripped}")
