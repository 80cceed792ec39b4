// SPDX-License-Identifier: BSD-3-Clause
// Included first by every internal header: internal headers are not part of the public API.
#pragma once

#ifndef CHORUS_INTERNAL
#error "This is an internal chorus header; include <chorus/...> public headers instead."
#endif
