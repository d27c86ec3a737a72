# Shared by the scripts: build directory, MPI environment (DESIGN.md §6).
TANDEM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TANDEM_BUILD="${TANDEM_BUILD:-$TANDEM_ROOT/build}"
export OMPI_MCA_btl=self,vader
export OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_mpi_yield_when_idle=1
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

tandem_configure_and_build() {  # extra cmake args...
  cmake -S "$TANDEM_ROOT" -B "$TANDEM_BUILD" -DCMAKE_BUILD_TYPE=Release "$@"
  cmake --build "$TANDEM_BUILD" -j "$(nproc)"
}
