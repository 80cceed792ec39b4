// SPDX-License-Identifier: BSD-3-Clause
// CHORUS_API marks what libchorus exports; everything else is hidden (-fvisibility=hidden).
#pragma once

#if defined(_WIN32)
#define CHORUS_API
#else
#define CHORUS_API __attribute__((visibility("default")))
#endif
