// SPDX-License-Identifier: BSD-3-Clause
// Deep copies of an error for the threads that read it. A Work's error (and a failed group's
// reason) is raised on one thread and rethrown on others; rethrowing the one shared exception
// object would leave its lifetime to the C++ runtime's reference count, which lives in
// libstdc++ (uninstrumented: ThreadSanitizer cannot see that a waiter's reads of the object
// happen before another thread frees it), and std::runtime_error's message is a reference-counted
// string shared by every copy. A copy rebuilt from the code, message and context shares nothing,
// so each waiter owns what it catches.
#pragma once

#include "core/private.hpp"

#include <exception>

namespace chorus {

// A chorus::Error (of any subclass) rebuilt as a new exception object of the same class with its
// own message and context; any other exception is returned as it is (there is no portable way
// to copy it). nullptr stays nullptr. Call it while the original is known to be alive (under the
// lock that guards it, or while holding its owner).
std::exception_ptr private_copy(const std::exception_ptr& error);

// Throws private_copy(error). error must not be null.
[[noreturn]] void rethrow_private_copy(const std::exception_ptr& error);

}  // namespace chorus
