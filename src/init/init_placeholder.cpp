// SPDX-License-Identifier: BSD-3-Clause
// Placeholder until init_from_env lands.
namespace chorus::init {}
