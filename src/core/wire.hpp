// SPDX-License-Identifier: BSD-3-Clause
// A narrower wire for floating-point reductions: float32 data travels between hosts as
// bfloat16 or float16, float64 data as float32, and every rank adds in the data's own type.
//
// Why: on a network link the bytes are the limit, and halving them nearly halves a large
// allreduce's time. Unlike compressing the whole buffer first (torch DDP's bf16_compress_hook),
// inputs are never rounded and sums are never formed in 16 bits: only a partial sum on its way
// to another host is rounded, and the receiver widens it and adds in float32.
//
// Range: every message (one pipeline slice) carries a power-of-two scale 2^k in a word of the
// wire's width before its elements, as block floating point does: the sender multiplies by 2^k
// before rounding, the receiver by 2^-k after widening. k puts the slice's largest magnitude,
// rounded to the wire's precision, in the wire's top binade (float16: [2^15, 2^16)), so float16
// neither overflows at 65504 nor flushes small magnitudes, and no format loses a float32 or
// float64 denormal, while every element keeps the wire's relative precision down to 2^-29
// (float16) of the slice's largest. k is capped where 2^k stops being a normal number of the
// data's type; a slice whose largest value would round past the data's own maximum saturates at
// the largest value the wire can bring back (never inf); a slice holding inf or NaN travels
// unscaled (k = 0), so they arrive as they left. A message is (count + 1) wire elements.
//
// Rounding a value already rounded by the wire (the owner's round task, then its send) gives
// the same bits: k depends on the slice's largest magnitude rounded to the wire's precision,
// which that rounding does not change (a subset's k is never smaller, and a larger k is exact).
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

// Bytes of the message that carries count elements on `wire`: a scale word and the elements,
// (count + 1) * element_size(wire), 0 for no elements. For count > 0 that is at most the
// count elements of the data's type, so a message fits where its widened elements go.
std::size_t wire_message_bytes(std::size_t count, DataType wire) noexcept;

// dst (wire_message_bytes(count)) = the message for src (count elements of dtype): its scale,
// then each element scaled and rounded to nearest even.
void narrow(void* dst, const void* src, std::size_t count, DataType dtype, DataType wire);
// data[i] = the value a receiver of narrow(data) gets for element i, kept by its sender too, so
// that every rank of an allreduce ends with the same bits.
void round_through_wire(void* data, std::size_t count, DataType dtype, DataType wire);
// data holds count elements of dtype; its last wire_message_bytes(count) bytes hold a message (a
// receive landed there). Widens it into place, front to back, after reading its scale: element
// i's write ends where wire element i + 1 starts at the earliest, so nothing unread is
// overwritten.
void widen_from_tail(void* data, std::size_t count, DataType dtype, DataType wire);
// dst[i] = local[i] + (element i of the message `received`, widened) over count elements, in
// dtype; with divisor > 0 the sum is divided by it (avg's last step). dst may be exactly local.
void reduce_from_wire(void* dst, const void* local, const void* received, std::size_t count,
                      DataType dtype, DataType wire, int divisor);

}  // namespace chorus
