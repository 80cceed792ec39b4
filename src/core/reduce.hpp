// SPDX-License-Identifier: BSD-3-Clause
// Element-wise reduction kernels for every (DataType, ReduceOp): vectorizable loops;
// float16/bfloat16 are widened to float32, combined, and rounded once (to nearest even).
#pragma once

#include "core/private.hpp"

#include <cstddef>

#include <chorus/types.hpp>

namespace chorus {

// dst[i] = a[i] op b[i] for i < count, where op is `op` (avg combines like sum).
// If avg_divisor > 0 (only meaningful with ReduceOp::avg) the combined value is divided by
// it in the same pass: the last step of an average, rounded once for float16/bfloat16.
// Integer types wrap on overflow; integer division truncates toward zero.
// dst may be exactly a or exactly b (in-place); any other overlap is undefined.
// Thread-safe (pure function of its arguments).
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op,
            int avg_divisor = 0);

// dst[i] = src[i] / divisor (the average when only one value contributed, e.g. world size 1).
// dst may be exactly src.
void divide(void* dst, const void* src, std::size_t count, DataType dtype, int divisor);

}  // namespace chorus
