# Sourced by run.sh and quick.sh in the repository root of the device machine: the goldens unpacked
# (stage.sh packed them), the prebuilt binaries' folder on the library path, and the golden folder
# reachable at the absolute path the binaries were built with (prebuild.sh wrote it to golden_dir).
# Sets `bin`; returns 1 where the goldens or the binaries are missing or the binaries do not load.
root="$PWD"
bin="$root/.device-bin"
if [ ! -e golden/ds41_tiny_golden.json ] && [ -f .device-golden/golden.tar.xz ]; then
  tar -xJf .device-golden/golden.tar.xz || return 1
fi
[ -e golden/ds41_tiny_golden.json ] || { echo "no goldens (run tests/device/stage.sh here first)"; return 1; }
export LD_LIBRARY_PATH="$bin:${LD_LIBRARY_PATH:-}"
"$bin/test_golden_cuda" --version > /dev/null 2>&1
env_rc=$?
if [ $env_rc != 0 ] && [ $env_rc != 77 ]; then
  echo "the prebuilt binaries do not run here (rc $env_rc):"; "$bin/test_golden_cuda" --version 2>&1 | head -5; return 1
fi
built_golden=$(cat "$bin/golden_dir")
if [ "$built_golden" != "$root/golden" ]; then
  mkdir -p "$(dirname "$built_golden")" && rm -rf "$built_golden" && ln -s "$root/golden" "$built_golden"
fi
