// MPI datatypes and reduction operations for tandem's dtypes.
//
// Contract:
// - mpi_type(dtype) is the MPI datatype that carries the dtype's payload (16-bit floats
//   travel as MPI_UINT16_T: MPI has no half types).
// - mpi_op(op, dtype) reduces that payload: MPI's own ops for float32/64 and the integers; for float16
//   and bfloat16, user-defined commutative ops that add/compare in float and round back to
//   16 bits (nearest even) after each pairwise step. avg reduces as sum. The 16-bit ops
//   exist after ensure_reduce_ops(), which is called once MPI runs (idempotent).
// - combine_16bit is one pairwise step of those 16-bit ops on plain buffers (no MPI
//   involved): inout[i] = op(in[i], inout[i]) in float, rounded back to 16 bits; backends
//   that reduce without MPI use it to round exactly as the MPI group does.
// - divide_in_place divides `count` elements by `divisor` in the dtype's own arithmetic
//   (16-bit: in float, rounded back), the second half of an avg; integers throw.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "runtime/dist/process_group.h"
#include "runtime/dtype.h"

namespace tandem::dist::detail {

void ensure_reduce_ops();
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(ReduceOp op, DType dtype);
void combine_16bit(const void* in, void* inout, DType dtype, int64_t count, ReduceOp op);
void divide_in_place(void* data, DType dtype, int64_t count, int divisor);

}  // namespace tandem::dist::detail
