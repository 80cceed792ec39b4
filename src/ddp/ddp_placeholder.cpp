// SPDX-License-Identifier: BSD-3-Clause
// Placeholder until the DDP toolkit lands.
namespace chorus::ddp {}
