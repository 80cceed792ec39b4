// SPDX-License-Identifier: BSD-3-Clause
// Placeholder until the C ABI lands.
namespace chorus::capi {}
