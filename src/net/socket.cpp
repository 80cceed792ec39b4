// SPDX-License-Identifier: BSD-3-Clause
// Placeholder until the net layer lands (owned by the store work).
namespace chorus::net {}
