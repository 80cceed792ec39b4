// SPDX-License-Identifier: BSD-3-Clause
// The α/β cost model the algorithm choice compares: what a message round and a byte cost on
// each kind of link a group's ranks talk over. Every rank of a group must hold the same figures
// (link_costs.hpp agrees on them at group setup), so that every rank picks the same algorithm.
#pragma once

#include <cstddef>

namespace chorus::cpu {

// One kind of link: a round (one message each way between two ranks, including the wake-up
// of the rank that waits for it) costs alpha_us; each byte that crosses it costs 1 / gbps ns.
struct LinkCost {
  double alpha_us = 0;
  double gbps = 1;  // GB/s (1e9 bytes per second)

  // Microseconds for `rounds` rounds that move `bytes` bytes through this link in total.
  double us(double rounds, double bytes) const noexcept {
    return rounds * alpha_us + bytes / (gbps * 1e3);
  }
};

struct LinkCosts {
  LinkCost shm;      // between ranks of one host through the shared-memory rings
  LinkCost socket;   // between ranks of one host over loopback tcp (CHORUS_TRANSPORT=tcp)
  LinkCost network;  // between hosts: never measured here (a loopback probe cannot see it)
  // The single-copy algorithms (direct.cpp): process_vm_readv/writev between private
  // buffers, and memcpy between mapped SharedBuffers. Their rounds cost shm's alpha_us.
  double peer_copy_gbps = 1;
  double memcpy_gbps = 1;
  // Reducing one buffer into another (float32 sum), by the bytes of one operand: what an
  // algorithm that does not pipeline its reductions with its transfers adds per byte.
  double reduce_gbps = 1;
  // CPUs of the host (rank 0's, for every host). Where a host runs more ranks than that, the
  // rank a round waits for is often not running: its rounds cost alpha_us x ranks / CPUs.
  double host_cpus = 1;
};

// The figures used when measuring is switched off (CHORUS_LINK_COSTS=default): the medians
// of the probe (link_costs.cpp) on the 2-core VM the project is developed on; the network is
// 10 Gbit/s Ethernet.
LinkCosts default_link_costs() noexcept;

}  // namespace chorus::cpu
