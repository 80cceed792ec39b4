// SPDX-License-Identifier: BSD-3-Clause
// The library's version string, compiled into libchorus itself.
#include <chorus/chorus.hpp>

namespace chorus {
const char* version() noexcept { return CHORUS_VERSION_STRING; }
}  // namespace chorus
