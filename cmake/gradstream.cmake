# Small wrappers in the shape of Abseil's absl_cc_library, so every target gets
# the same include path, warnings and test registration.

set(GS_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

# gs_cc_library(NAME foo SRCS a.cc b.cu DEPS lib1 lib2 [PUBLIC_DEFS X])
function(gs_cc_library)
  cmake_parse_arguments(GS "" "NAME" "SRCS;DEPS;DEFS" ${ARGN})
  add_library(${GS_NAME} STATIC ${GS_SRCS})
  target_include_directories(${GS_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${GS_NAME} PUBLIC ${GS_DEPS})
  target_compile_options(${GS_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${GS_WARNINGS}>)
  if(GS_DEFS)
    target_compile_definitions(${GS_NAME} PUBLIC ${GS_DEFS})
  endif()
endfunction()

# gs_cc_binary(NAME foo SRCS main.cc DEPS libs)
function(gs_cc_binary)
  cmake_parse_arguments(GS "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${GS_NAME} ${GS_SRCS})
  target_include_directories(${GS_NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${GS_NAME} PRIVATE ${GS_DEPS} ${GS_TSAN_SUPPORT})
  target_compile_options(${GS_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${GS_WARNINGS}>)
endfunction()

# The environment of every ctest entry: the tests, and the daemons and
# scripts they start, keep Abseil's lock-order checking ([mutex deadlock
# detection] in common/mutex_mode.h). set_tests_properties(... ENVIRONMENT
# "${GS_TEST_ENVIRONMENT}") where a test is added without gs_cc_test.
set(GS_TEST_ENVIRONMENT "GRADSTREAM_MUTEX_DEADLOCK_DETECTION=1")

# gs_cc_test(NAME foo_test SRCS foo_test.cc DEPS libs LABELS unit;shard [TIMEOUT 120])
# Registers one ctest entry per binary. LABELS is required (ctest -L / -LE
# pick by it): `unit` for a test that runs in-process and takes seconds, the
# tier `scripts/test.sh --fast` builds (target gs_unit_tests) and runs.
if(GS_BUILD_TESTS AND NOT TARGET gs_unit_tests)
  add_custom_target(gs_unit_tests)
endif()
function(gs_cc_test)
  if(NOT GS_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(GS "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT GS_LABELS)
    message(FATAL_ERROR "gs_cc_test(${GS_NAME}): LABELS is required (unit, or the "
                        "multi-process tier's: loopback, shard, faults, ...)")
  endif()
  gs_cc_binary(NAME ${GS_NAME} SRCS ${GS_SRCS} DEPS ${GS_DEPS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${GS_NAME} COMMAND ${GS_NAME})
  if(NOT GS_TIMEOUT)
    set(GS_TIMEOUT 300)
  endif()
  set_tests_properties(${GS_NAME} PROPERTIES TIMEOUT ${GS_TIMEOUT} LABELS "${GS_LABELS}"
                       ENVIRONMENT "${GS_TEST_ENVIRONMENT}")
  if("unit" IN_LIST GS_LABELS)
    add_dependencies(gs_unit_tests ${GS_NAME})
  endif()
endfunction()

# gs_cc_benchmark(NAME foo_benchmark SRCS foo_benchmark.cc DEPS libs)
function(gs_cc_benchmark)
  if(NOT GS_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(GS "" "NAME" "SRCS;DEPS" ${ARGN})
  gs_cc_binary(NAME ${GS_NAME} SRCS ${GS_SRCS} DEPS ${GS_DEPS} benchmark::benchmark)
endfunction()

# Adds every direct subdirectory of the current source dir that has a
# CMakeLists.txt, so components can be added without editing a shared file.
macro(gs_add_subdirectories)
  file(GLOB _gs_children RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} CONFIGURE_DEPENDS
       ${CMAKE_CURRENT_SOURCE_DIR}/*/CMakeLists.txt)
  list(SORT _gs_children)
  foreach(_gs_child ${_gs_children})
    get_filename_component(_gs_dir ${_gs_child} DIRECTORY)
    add_subdirectory(${_gs_dir})
  endforeach()
endmacro()
