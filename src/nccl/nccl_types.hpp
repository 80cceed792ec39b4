// SPDX-License-Identifier: BSD-3-Clause
// DataType / ReduceOp -> ncclDataType_t / ncclRedOp_t: the one mapping table of the backend.
// Unsupported types and (op, type) pairs are reported as nullopt so callers can reject them
// with InvalidArgument before anything reaches NCCL.
#pragma once

#include "core/private.hpp"

#include <optional>

#include <nccl.h>

#include <chorus/types.hpp>

namespace chorus::nccl {

std::optional<ncclDataType_t> to_nccl(DataType dtype) noexcept;
std::optional<ncclRedOp_t> to_nccl(ReduceOp op, DataType dtype) noexcept;

// Same checks with an InvalidArgument that names the op site (`where`) and the alternatives.
ncclDataType_t require_nccl_type(DataType dtype, const std::string& where);
ncclRedOp_t require_nccl_op(ReduceOp op, DataType dtype, const std::string& where);

}  // namespace chorus::nccl
