// SPDX-License-Identifier: BSD-3-Clause
// NCCL version feature flags in one place, so version checks never spread through the backend.
#pragma once

#include "core/private.hpp"

#include <nccl.h>

// Non-blocking communicators (ncclConfig_t.blocking, ncclCommInitRankConfig, ncclInProgress)
// arrived in NCCL 2.14; chorus's init timeout and abort story depend on them.
#if NCCL_VERSION_CODE < 21400
#error \
    "the chorus nccl backend needs NCCL >= 2.14 (non-blocking communicators); build with -Dnccl=disabled or install a newer NCCL"
#endif

// bfloat16 and ncclAvg: NCCL 2.10.
#define CHORUS_NCCL_HAS_BF16 (NCCL_VERSION_CODE >= 21000)
#define CHORUS_NCCL_HAS_AVG (NCCL_VERSION_CODE >= 21000)
// ncclGetLastError: NCCL 2.13.
#define CHORUS_NCCL_HAS_LAST_ERROR (NCCL_VERSION_CODE >= 21300)
// ncclCommSplit: NCCL 2.18.
#define CHORUS_NCCL_HAS_SPLIT (NCCL_VERSION_CODE >= 21800)
