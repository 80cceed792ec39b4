// SPDX-License-Identifier: BSD-3-Clause
// Hierarchical allreduce, for a group spread over hosts with several ranks on some of them.
// Phase 1 reduces inside each host to its lowest rank (the leader), over shared memory; phase
// 2 allreduces among the leaders, one per host, over the network; phase 3 broadcasts inside
// each host. A flat ring of n ranks pushes 2(n-1)/n of the data through every host link in
// each direction (1.5x for 2 hosts x 2 ranks) where this pushes 2(h-1)/h for h hosts (1x):
// the network is the scarce resource, and each byte crosses it once per host instead of once
// per rank. Each phase is the ordinary algorithm run on a view of the schedule (its members
// only), and a phase starts once this rank finished the previous one (Schedule::join_all):
// simple, and the intra-host phases are short next to the network phase.
//
// avg is not done this way (each phase would divide by its own size); choose_algorithm()
// keeps it flat.
#include <map>

#include "tcp/algorithms/algorithms.hpp"

namespace chorus::tcp {

bool HostMap::mixed() const noexcept {
  if (members.size() < 2) {
    return false;
  }
  for (const auto& m : members) {
    if (m.size() > 1) {
      return true;
    }
  }
  return false;
}

HostMap make_host_map(const std::vector<std::string>& host_ids) {
  HostMap map;
  std::map<std::string, int> index;
  for (std::size_t r = 0; r < host_ids.size(); ++r) {
    const std::string key = host_ids[r].empty() ? "\n" + std::to_string(r) : host_ids[r];
    auto [it, added] = index.emplace(key, static_cast<int>(map.members.size()));
    if (added) {
      map.members.emplace_back();
    }
    map.host_of.push_back(it->second);
    map.members[static_cast<std::size_t>(it->second)].push_back(static_cast<int>(r));
  }
  return map;
}

void build_hierarchical_allreduce(Schedule& s, const CollectiveArgs& a) {
  const HostMap& hosts = *a.hosts;
  const int me = s.rank();
  const std::vector<int>& host =
      hosts.members[static_cast<std::size_t>(hosts.host_of[static_cast<std::size_t>(me)])];
  const bool leader = host.front() == me;
  const bool small = a.count * element_size(a.dtype) <= a.small_bytes;
  std::vector<int> leaders;
  for (const auto& m : hosts.members) {
    leaders.push_back(m.front());
  }

  CollectiveArgs phase = a;
  phase.hosts = nullptr;
  const void* reduced = a.in;  // where this host's sum is, on the leader
  if (host.size() > 1) {
    s.enter_view(host, kNoTask);
    phase.kind = OpKind::reduce;
    phase.root = 0;
    phase.out = leader ? a.out : nullptr;
    small ? build_tree_reduce(s, phase) : build_chain_reduce(s, phase);
    s.leave_view();
    reduced = a.out;
  }
  TaskId gate = s.join_all();
  if (leader) {
    s.enter_view(leaders, gate);
    phase.kind = OpKind::allreduce;
    phase.in = reduced;
    phase.out = a.out;
    small ? build_rd_allreduce(s, phase) : build_ring_allreduce(s, phase);
    s.leave_view();
  }
  if (host.size() > 1) {
    gate = s.join_all();
    s.enter_view(host, gate);
    phase.kind = OpKind::broadcast;
    phase.root = 0;
    phase.in = a.out;
    phase.out = a.out;
    small ? build_tree_broadcast(s, phase) : build_chain_broadcast(s, phase);
    s.leave_view();
  }
}

}  // namespace chorus::tcp
