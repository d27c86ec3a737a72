# Shared by the scripts: build directory, MPI environment (DESIGN.md §6).
TANDEM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TANDEM_BUILD="${TANDEM_BUILD:-$TANDEM_ROOT/build}"
export OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_mpi_yield_when_idle=1
# Shared-memory messages through copy-in/copy-out fragments instead of cross-process
# copies (CMA): in these VMs the kernel's page pinning makes CMA about a third slower for
# 1-16 MB allreduces (allreduce_bench, 2 ranks: 4 MB in 0.53 ms vs 0.77 ms). Kept if set.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

tandem_configure_and_build() {  # extra cmake args...
  cmake -S "$TANDEM_ROOT" -B "$TANDEM_BUILD" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$TANDEM_BUILD" -j "$(nproc)"
}
