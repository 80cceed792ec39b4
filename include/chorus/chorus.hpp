// SPDX-License-Identifier: BSD-3-Clause
// Umbrella header: every public C++ header of chorus.
#pragma once

#include <chorus/version.h>
#include <chorus/ddp.hpp>
#include <chorus/deadline.hpp>
#include <chorus/dlpack.hpp>
#include <chorus/errors.hpp>
#include <chorus/init.hpp>
#include <chorus/logging.hpp>
#include <chorus/options.hpp>
#include <chorus/process_group.hpp>
#include <chorus/shared_buffer.hpp>
#include <chorus/store.hpp>
#include <chorus/tcp_store.hpp>
#include <chorus/tensor.hpp>
#include <chorus/types.hpp>
#include <chorus/work.hpp>

namespace chorus {
// The library's version string ("0.2.0"); may differ from CHORUS_VERSION_STRING when the
// headers and the shared library come from different builds.
CHORUS_API const char* version() noexcept;
}  // namespace chorus
