// SPDX-License-Identifier: BSD-3-Clause
// Hierarchical allreduce, for a group spread over hosts with several ranks on some of them.
// Phase 1 reduces inside each host to its lowest rank (the leader), over shared memory; phase
// 2 allreduces among the leaders, one per host, over the network; phase 3 broadcasts inside
// each host. A flat ring of n ranks pushes 2(n-1)/n of the data through every host link in
// each direction (1.5x for 2 hosts x 2 ranks) where this pushes 2(h-1)/h for h hosts (1x):
// the network is the scarce resource, and each byte crosses it once per host instead of once
// per rank. Each phase is the ordinary algorithm run on a view of the schedule (its members
// only).
//
// Large ops are cut into up to kMaxSegments segments that pipeline through the phases: the
// leaders' network phase of segment k starts once this host's reduction of segment k is done
// (Schedule::join_range over that phase's tasks), and the broadcast of segment k once its network
// phase is done, so the intra-host phases of the other segments run while the network is busy.
// Each stream's posting order stays one FIFO on both ends: the reductions of all segments are
// added first, then the network phases, then the broadcasts (a broadcast added before the next
// segment's reduction would hold that reduction back behind the network).
//
// avg is not done this way (each phase would divide by its own size); choose_algorithm()
// keeps it flat.
#include <algorithm>
#include <map>

#include "cpu/algorithms/algorithms.hpp"
#include "cpu/algorithms/costs.hpp"

namespace chorus::cpu {
namespace {
constexpr std::size_t kMaxSegments = 4;
constexpr std::size_t kMinSegmentSlices = 4;
}  // namespace

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
  const std::size_t es = element_size(a.dtype);
  const bool small = a.count * es <= a.small_bytes;
  std::vector<int> leaders;
  for (const auto& m : hosts.members) {
    leaders.push_back(m.front());
  }
  // Segments of at least kMinSegmentSlices pipeline slices, so each phase still pipelines
  // inside a segment.
  const std::size_t per_segment = kMinSegmentSlices * a.slice_bytes;
  const int segments =
      small ? 1
            : static_cast<int>(std::clamp<std::size_t>(
                  a.count * es / std::max<std::size_t>(1, per_segment), 1, kMaxSegments));

  struct Range {
    TaskId from = 0;
    TaskId to = 0;
  };
  std::vector<Range> reduced(static_cast<std::size_t>(segments));
  std::vector<Range> networked(static_cast<std::size_t>(segments));
  auto segment_args = [&](int k) {
    CollectiveArgs phase = a;
    phase.hosts = nullptr;
    const Span seg = block_of(a.count, segments, k);
    phase.count = seg.count;
    phase.in = at(a.in, seg.offset, a.dtype);
    phase.out = at(a.out, seg.offset, a.dtype);
    return phase;
  };

  // Phase 1: reduce each segment to the host's leader.
  for (int k = 0; k < segments; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    reduced[uk].from = s.next_id();
    if (host.size() > 1) {
      CollectiveArgs phase = segment_args(k);
      s.enter_view(host, kNoTask);
      phase.kind = OpType::reduce;
      phase.root = 0;
      if (!leader) {
        phase.out = nullptr;
      }
      small ? build_tree_reduce(s, phase) : build_chain_reduce(s, phase);
      s.leave_view();
    }
    reduced[uk].to = s.next_id();
  }
  // Phase 2: allreduce each segment among the leaders, once the host's reduction of it is done.
  for (int k = 0; k < segments; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    networked[uk].from = s.next_id();
    if (leader) {
      CollectiveArgs phase = segment_args(k);
      if (host.size() > 1) {
        phase.in = phase.out;  // where this host's sum is
      }
      const TaskId gate = s.join_range(reduced[uk].from, reduced[uk].to);
      s.enter_view(leaders, gate);
      phase.kind = OpType::allreduce;
      small ? build_rd_allreduce(s, phase) : build_ring_allreduce(s, phase);
      s.leave_view();
    }
    networked[uk].to = s.next_id();
  }
  // Phase 3: broadcast each segment inside the host once it is final (on a non-leader: once its
  // own part of the reduction left, as the output may be the input).
  if (host.size() > 1) {
    for (int k = 0; k < segments; ++k) {
      const auto uk = static_cast<std::size_t>(k);
      const TaskId gate = leader ? s.join_range(networked[uk].from, networked[uk].to)
                                 : s.join_range(reduced[uk].from, reduced[uk].to);
      CollectiveArgs phase = segment_args(k);
      s.enter_view(host, gate);
      phase.kind = OpType::broadcast;
      phase.root = 0;
      phase.in = phase.out;
      small ? build_tree_broadcast(s, phase) : build_chain_broadcast(s, phase);
      s.leave_view();
    }
  }
}

AlgorithmRows hier_allreduce_algorithms() noexcept {
  static constexpr AlgorithmSpec kRows[] = {
      {OpType::allreduce, AlgorithmId::hierarchical, hierarchical_runs, always, false,
       hierarchical_us, build_hierarchical_allreduce},
  };
  return kRows;
}

}  // namespace chorus::cpu
