# Sourced by the CI leg scripts: cmake_generator BUILD_DIR sets `generator` to the -G arguments for
# a new build folder: Ninja where it is installed (it runs any two jobs of the targets asked for at
# once; make builds several --target goals one after another, as CMake's top-level Makefile is
# .NOTPARALLEL), else CMake's default. A folder already configured keeps its generator (CMake
# refuses another).
cmake_generator() {
  generator=()
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
}
