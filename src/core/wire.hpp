// SPDX-License-Identifier: BSD-3-Clause
// A narrower wire for floating-point reductions: float32 data travels between hosts as
// bfloat16 or float16, float64 data as float32, and every rank adds in the data's own type.
//
// Why: on a network link the bytes are the limit, and halving them nearly halves a large
// allreduce's time. Unlike compressing the whole buffer first (torch DDP's bf16_compress_hook),
// inputs are never rounded and sums are never formed in 16 bits: only a partial sum on its way
// to another host is rounded, and the receiver widens it and adds in float32.
//
// The kernels here run on one pipeline slice at a time (cpu/engine/executor.cpp), while it is
// in cache: no pass over the whole buffer. Sum and avg only (op_rules.cpp admits no other).
#pragma once

#include "core/private.hpp"

#include <cstddef>
#include <optional>

#include <chorus/process_group.hpp>
#include <chorus/types.hpp>

namespace chorus {

// The ops that have a wire: allreduce, reduce_scatter, reduce.
bool has_wire(OpType type) noexcept;
// Whether `dtype` data may travel as `wire`: float32 as bfloat16 or float16, float64 as float32.
bool wire_narrows(DataType dtype, DataType wire) noexcept;
// The wire an op of `dtype` and `op` gets from a group default (the op's own dtype when the
// default does not apply to it: integers, min/max, an unset default).
DataType default_wire(DataType dtype, ReduceOp op, std::optional<DataType> group_default) noexcept;

// dst (count elements of wire) = src (count elements of dtype), rounded to nearest even.
void narrow(void* dst, const void* src, std::size_t count, DataType dtype, DataType wire);
// data[i] = widen(narrow(data[i])): the value every peer receives, kept by its sender too, so
// that every rank of an allreduce ends with the same bits.
void round_through_wire(void* data, std::size_t count, DataType dtype, DataType wire);
// data holds count elements of dtype; its last count * element_size(wire) bytes hold count wire
// elements (a receive landed there). Widens them into place, front to back: element i's write
// ends where wire element i + 1 starts at the earliest, so nothing unread is overwritten.
void widen_from_tail(void* data, std::size_t count, DataType dtype, DataType wire);
// dst[i] = local[i] + widen(received[i]) over count elements, in dtype; with divisor > 0 the sum
// is divided by it (avg's last step). dst may be exactly local.
void reduce_from_wire(void* dst, const void* local, const void* received, std::size_t count,
                      DataType dtype, DataType wire, int divisor);

}  // namespace chorus
