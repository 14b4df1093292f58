# Runs CMD ARGS plus `--prompt-text` with text that is not UTF-8 (a 0xFF byte, which no UTF-8
# sequence contains) and checks what any bad input must give (expect_bad_input.cmake).
string(ASCII 255 _ff)
list(APPEND ARGS --prompt-text "bad ${_ff} text")
include(${CMAKE_CURRENT_LIST_DIR}/expect_bad_input.cmake)
