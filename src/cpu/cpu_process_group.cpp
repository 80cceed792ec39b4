// SPDX-License-Identifier: BSD-3-Clause
// CpuProcessGroup: the tcp backend. The base (core/backend.hpp) has checked the op's
// descriptor; start() here only turns it into an Op and hands that to the engine.

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include <chorus/errors.hpp>
#include <chorus/process_group.hpp>
#include <chorus/shared_buffer.hpp>

#include "core/admission.hpp"
#include "core/backend.hpp"
#include "core/callback_thread.hpp"
#include "core/check.hpp"
#include "core/env.hpp"
#include "core/format.hpp"
#include "core/logging.hpp"
#include "core/op_rules.hpp"
#include "core/survivor_agreement.hpp"
#include "core/wire.hpp"
#include "cpu/algorithms/algorithms.hpp"
#include "cpu/bootstrap/link_costs.hpp"
#include "cpu/engine/engine.hpp"
#include "cpu/group_builder.hpp"

namespace chorus {
namespace cpu {
namespace {

struct WeakKeyLess {
  bool operator()(const std::pair<std::weak_ptr<Store>, int>& a,
                  const std::pair<std::weak_ptr<Store>, int>& b) const {
    if (a.first.owner_before(b.first)) {
      return true;
    }
    if (b.first.owner_before(a.first)) {
      return false;
    }
    return a.second < b.second;
  }
};

// More ranks than this is never what was meant (a WORLD_SIZE typo).
constexpr int kMaxTcpWorldSize = 1 << 20;

// Work::wait() on a collective of up to kWaitSpinMaxBytes looks for up to kWaitSpin before it
// blocks (WorkState::spin_before_blocking). Measured on 2 cores: an 8-byte allreduce over tcp
// 1.5x faster at 2 and 4 ranks; at 1-8 MiB and 4 ranks the waiting threads took 10-20 % of
// the bandwidth from the ranks that move the data, so larger ops block at once.
constexpr std::size_t kWaitSpinMaxBytes = std::size_t{64} << 10;
constexpr std::chrono::microseconds kWaitSpin{50};

// The sizes CHORUS_ALGO_SHOW lists the choice for: those of `make bench` (8 B to 32 MiB,
// times 4), then 64 and 256 MiB.
const std::vector<std::size_t> kChoiceTableSizes = {8,       32,       128,      512,      2048,
                                                    8192,    32768,    131072,   524288,   2097152,
                                                    8388608, 33554432, 67108864, 268435456};

std::uint64_t next_group_index(const std::shared_ptr<Store>& store, int rank);
void check_world_size_fits(int rank, int size);
std::shared_ptr<Store> lobby_of(const std::shared_ptr<Store>& store, const std::string& name);
std::shared_ptr<Store> grown_group_store(const std::shared_ptr<Store>& lobby, std::int64_t epoch);

class CpuProcessGroup final : public detail::Backend {
 public:
  // `formation`: the bound on forming the group (connecting its links), and when to give up
  // early; by default the group's timeout from now.
  CpuProcessGroup(std::shared_ptr<Store> store, int rank, int size, const TcpGroupOptions& options,
                  std::optional<detail::Formation> formation = {})
      : Backend(rank, size, options.group), store_(std::move(store)), options_(options) {
    GroupBuilder builder(*store_, GroupIdentity{rank, size, name(), timeout()}, options_,
                         std::move(formation));
    formed_ = builder.form();
    engine_ = builder.start_engine(engine_hooks());
    if (const SmallOps* small = engine_->small_ops()) {
      record_small_allreduces_late(small->max_bytes());  // start(): the caller-run small path
    }
    if (rank == 0 && env::get("CHORUS_ALGO_SHOW")) {
      show_choices();
    }
  }

  ~CpuProcessGroup() override {
    engine_.reset();  // fails what is pending: their callbacks go to the callback thread
    callbacks_->close(CallbackThread::kCloseBound);
    // A healthy group removes its store keys (a failed one may have lost its store: skip the
    // round trips; an earlier launch's records never stop a relaunch, see membership.hpp).
    if (!failure()) {
      leave_group(*store_, formed_.membership, rank());
    }
  }

  const char* backend_name() const noexcept override { return "tcp"; }
  Device device() const noexcept override { return Device::cpu(); }

  void abort(const std::string& reason) override {
    auto error = std::make_exception_ptr(Error(
        ErrorCode::aborted,
        fmt::format("tcp group [{}] on rank {}/{} was aborted: {}", name(), rank(), size(), reason),
        ErrorContext{.rank = rank(), .size = size(), .group = name(), .op = "abort"}));
    record_failure(error);
    engine_->abort(failure());
  }

  std::unique_ptr<Backend> split(const std::vector<int>& ranks, GroupOptions options) override {
    check_arg(!ranks.empty(), "split on rank {}/{} [{}]: the rank list is empty", rank(), size(),
              name());
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      check_arg(ranks[i] >= 0 && ranks[i] < size() && (i == 0 || ranks[i] > ranks[i - 1]),
                "split on rank {}/{} [{}]: ranks must be sorted, distinct and in [0, {}); got {}",
                rank(), size(), name(), size(), format_ranks(ranks));
    }
    // Every rank calls split in the same order, so the counter names the same subgroup
    // everywhere; its store namespace and hence its group id are new.
    const std::uint64_t index = splits_.fetch_add(1);
    const auto it = std::find(ranks.begin(), ranks.end(), rank());
    if (it == ranks.end()) {
      return nullptr;
    }
    TcpGroupOptions sub = options_;
    sub.group = std::move(options);
    if (sub.group.name == GroupOptions{}.name) {
      sub.group.name = fmt::format("{}/split{}", name(), index);
    }
    if (!sub.group.timeout) {
      sub.group.timeout = timeout();
    }
    return std::make_unique<CpuProcessGroup>(
        make_prefix_store(fmt::format("split{}", index), store_),
        static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()), sub);
  }

  std::unique_ptr<Backend> shrink(ShrinkOptions options) override;
  std::unique_ptr<Backend> grow(GrowOptions options) override {
    return grow_through_lobby(std::move(options));
  }
  void stop_admitting(const std::string& reason) override { close_lobby(reason); }

 protected:
  std::unique_ptr<Backend> form_grown(std::int64_t epoch, int rank, int size, GroupOptions options,
                                      detail::Formation formation) override {
    TcpGroupOptions larger = options_;
    larger.group = std::move(options);
    return std::make_unique<CpuProcessGroup>(grown_group_store(lobby(), epoch), rank, size, larger,
                                             std::move(formation));
  }

  std::shared_ptr<Work> start(const OpDescriptor& op, const OpCall& call) override {
    if (!op.ins.empty()) {
      return coalesced(op, call);
    }
    const OpRule& rule = op_rule(op.type);
    if (!rule.collective) {
      return p2p(op.type == OpType::send ? Op::Kind::send : Op::Kind::recv, op.in, op.peer, op.tag,
                 call);
    }
    // The buffers this rank touches, and the op's OpSignature::count (signature.hpp), as the
    // op's rule states them: nothing here names an op.
    const bool root = rank() == op.root;
    Tensor in = rule.buffers == Buffers::none ? Tensor() : op.in;
    Tensor out = rule.buffers == Buffers::in_out ? op.out : in;
    if (!root && rule.root_only == Operand::in) {
      in = Tensor();
    } else if (!root && rule.root_only == Operand::out) {
      out = Tensor();  // only the root has an output; elsewhere the algorithm needs none
    }
    const std::size_t count = rule.count_of == Operand::in    ? op.in.count()
                              : rule.count_of == Operand::out ? op.out.count()
                                                              : 0;
    return collective(op, in, out, count, call, rule.in_counts ? &op.in_counts : nullptr,
                      rule.out_counts ? &op.out_counts : nullptr);
  }

  void check_supported(const OpDescriptor& op, const char* name) const override {
    check_arg(op.ins.size() <= kMaxSignatureParts,
              "{} on rank {}/{} [{}]: {} tensors in one coalesced op; the tcp backend carries at "
              "most {} (split the list into several ops)",
              name, rank(), size(), this->name(), op.ins.size(), kMaxSignatureParts);
  }

 private:
  // A coalesced op: one op over its pairs (one sequence number, one signature with the sum of
  // their counts and their number); its schedule packs them (algorithms/coalesced.cpp).
  std::shared_ptr<Work> coalesced(const OpDescriptor& d, const OpCall& call) {
    std::vector<CoalescedPart> parts(d.ins.size());
    std::size_t total = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      // Per rank, as on one tensor: reduce_scatter counts its output, the others their input.
      const std::size_t count =
          op_rule(d.type).count_of == Operand::out ? d.outs[i].count() : d.ins[i].count();
      parts[i] = {d.ins[i].data(), d.outs[i].data(), count};
      total += count;
    }
    return collective(d, Tensor(), Tensor(), total, call, nullptr, nullptr, std::move(parts));
  }

  // `in_counts`/`out_counts`: the variable-size collectives' counts per rank; `parts`: a
  // coalesced op's pairs (both copied into the Op, which the engine owns).
  std::shared_ptr<Work> collective(const OpDescriptor& d, Tensor in, Tensor out, std::size_t count,
                                   const OpCall& call,
                                   const std::vector<std::size_t>* in_counts = nullptr,
                                   const std::vector<std::size_t>* out_counts = nullptr,
                                   std::vector<CoalescedPart> parts = {}) {
    const OpType kind = d.type;
    const OpRule& rule = op_rule(kind);
    // Built here, on the heap only if the engine runs it: an op run inline never leaves this call.
    Op built;
    Op* o = &built;
    o->kind = Op::Kind::collective;
    const bool carries_data = rule.buffers != Buffers::none;
    const DataType dtype = !d.ins.empty()  ? d.ins[0].dtype()
                           : !carries_data ? DataType::uint8
                           : in.count()    ? in.dtype()
                                           : out.dtype();
    o->args = group_args();
    o->args.kind = kind;
    o->args.in = in.data();
    o->args.out = out.data();
    o->args.count = count;
    o->args.dtype = dtype;
    if (in_counts != nullptr) {
      o->in_counts = *in_counts;
    }
    if (out_counts != nullptr) {
      o->out_counts = *out_counts;
    }
    const ReduceOp op = rule.reduces ? d.op : ReduceOp::sum;
    const int root = rule.rooted ? d.root : 0;
    o->args.op = op;
    o->args.root = root;
    o->args.forced = formed_.forced[static_cast<std::size_t>(kind)];
    if (has_wire(kind)) {
      const DataType wire =
          d.wire_dtype ? *d.wire_dtype : default_wire(dtype, op, formed_.wire_default);
      if (wire != dtype) {
        o->args.wire = wire;
        o->sig.wire = wire;
      }
    }
    o->parts = std::move(parts);
    o->args.num_parts = o->parts.size();
    o->sig.kind = kind;
    o->sig.seq = call.seq;
    if (carries_data) {
      o->sig.dtype = dtype;
      o->sig.count = count;
    }
    o->sig.redop = op;
    o->sig.root = root;
    o->sig.parts = static_cast<std::uint32_t>(o->parts.size());  // check_supported() bounds it
    // This rank's payload: the op's count, or where the ranks' totals differ, its input's.
    o->bytes = (rule.count_of == Operand::none ? in.count() : count) * element_size(dtype);
    o->call = call;
    // A small op the transport can run without messages (its SmallOps capability: the
    // shared-memory board of a one-host group) goes there (the same choice on every rank); this
    // thread runs it when the engine has no collective left to run: the last one handed to it is
    // complete, and none can be handed over meanwhile (this runs under the issue lock). Never
    // on a thread that runs the engine's loop (a caller driving it): that thread must go back
    // to its loop. Done here, it returns a DoneWork: no WorkState, no driver.
    o->via_small_ops = o->parts.empty() && engine_->runs_small(*o);
    if (o->via_small_ops && (!last_engine_collective_ || last_engine_collective_->is_completed()) &&
        !engine_->on_engine_thread()) {
      trace_issued(call, engine_->small_ops()->name());  // issued and started in one update
      std::exception_ptr error;
      if (engine_->run_small_op(*o, error)) {
        return DoneWork::make(call.name, call.seq, std::move(error));
      }
      // Handed to the engine after all (late peers, a mismatch), published already.
    }
    trace_issued(call, nullptr);  // before the engine thread may note its start
    auto queued = std::make_unique<Op>(std::move(built));
    o = queued.get();
    // Into the Op's own vectors, now that it has its final address.
    o->args.in_counts = o->in_counts.empty() ? nullptr : o->in_counts.data();
    o->args.out_counts = o->out_counts.empty() ? nullptr : o->out_counts.data();
    o->args.parts = o->parts.empty() ? nullptr : o->parts.data();
    o->work = make_work(call);
    if (o->bytes <= kWaitSpinMaxBytes) {
      o->work->spin_before_blocking(kWaitSpin);
      o->work->drive_with(engine_->driver());
    }
    auto work = o->work;
    last_engine_collective_ = work;
    engine_->submit(std::move(queued));
    return work;
  }

  // The group-wide fields of every op's arguments: what its algorithm is chosen by.
  CollectiveArgs group_args() const {
    CollectiveArgs a;
    a.small_bytes = options_.small_allreduce_bytes;
    a.slice_bytes = options_.slice_bytes;
    a.hosts = &formed_.hosts;
    a.one_sided = formed_.one_sided;
    a.peer_memory = formed_.peer_memory;
    a.costs = &formed_.link_costs;
    return a;
  }

  // The engine's calls into the group: the first failure, and each op's start.
  EngineConfig engine_hooks() {
    EngineConfig ec;
    ec.on_failure = [this](std::exception_ptr e) { record_failure(std::move(e)); };
    ec.on_start = [this](const OpCall& call, const char* algorithm) {
      trace_started(call, algorithm);
    };
    return ec;
  }

  // CHORUS_ALGO_SHOW (rank 0): the choice table, for experiments.
  void show_choices() const {
    fmt::print(stderr, "chorus: tcp group [{}] of {}: prices {}\npriced by the stack: {}\n{}",
               name(), size(), format_prices(formed_.prices), format_link_costs(formed_.link_costs),
               describe_choices(size(), group_args(), kChoiceTableSizes));
  }

  // The Work of an op the engine runs: its callbacks run on the callback thread, so that no
  // user code runs on the engine thread (heartbeats, failure detection, every other op).
  std::shared_ptr<WorkState> make_work(const OpCall& call) const {
    auto work = std::make_shared<WorkState>(call.name, call.seq);
    work->run_callbacks_on(callbacks_);
    return work;
  }

  std::shared_ptr<Work> p2p(Op::Kind kind, Tensor t, int peer, std::uint32_t tag,
                            const OpCall& call) {
    auto o = std::make_unique<Op>();
    o->kind = kind;
    o->peer = peer;
    o->tag = tag;
    o->data = t.data();
    o->bytes = t.nbytes();
    o->call = call;
    o->args.count = t.count();
    o->args.dtype = t.dtype();
    o->work = make_work(call);
    auto work = o->work;
    engine_->submit(std::move(o));
    return work;
  }

  std::shared_ptr<Store> store_;
  TcpGroupOptions options_;
  std::atomic<std::uint64_t> splits_{0};
  std::atomic<std::uint64_t> shrinks_{0};
  // What forming the group made (group_builder.hpp): what its ops' algorithms are chosen by.
  FormedGroup formed_;
  // The last collective handed to the engine (the issue lock guards it): once it is complete,
  // the engine has no collective queued or running.
  std::shared_ptr<WorkState> last_engine_collective_;
  // Where the Works' then() callbacks run (a thread started by the first one).
  const std::shared_ptr<CallbackThread> callbacks_ = std::make_shared<CallbackThread>(name());
  std::unique_ptr<Engine> engine_;
};

// Index of the next group created as `rank` on `store` in this process (1-based). Keyed by
// the store object (held weakly, so a freed store's address is never mistaken for a new one).
std::uint64_t next_group_index(const std::shared_ptr<Store>& store, int rank) {
  static std::mutex mutex;
  static std::map<std::pair<std::weak_ptr<Store>, int>, std::uint64_t, WeakKeyLess> counters;
  std::lock_guard<std::mutex> lock(mutex);
  std::erase_if(counters, [](const auto& entry) { return entry.first.first.expired(); });
  return ++counters[{std::weak_ptr<Store>(store), rank}];
}

// Where processes wait to join the group named `name` made on `store` (core/admission.hpp).
std::shared_ptr<Store> lobby_of(const std::shared_ptr<Store>& store, const std::string& name) {
  return make_prefix_store("elastic/" + name, store);
}

// The namespace of the larger group of a lobby's admission `epoch`.
std::shared_ptr<Store> grown_group_store(const std::shared_ptr<Store>& lobby, std::int64_t epoch) {
  return make_prefix_store(detail::grown_group_namespace(epoch) + "/group", lobby);
}

// Refuse a world size that cannot be meant (a WORLD_SIZE typo) before anything is sized by it.
// There is no open-file check: links are made on demand (an allreduce-only group of any size
// holds a few per rank), and a dial that runs out of descriptors names the limit.
void check_world_size_fits(int rank, int size) {
  if (size > kMaxTcpWorldSize) {
    throw InvalidArgument(fmt::format(
        "make_tcp_group on rank {}: size {} is more than the tcp backend supports ({}); check "
        "WORLD_SIZE",
        rank, size, kMaxTcpWorldSize));
  }
}

// The ranks `failure` names as implicated (the dead or silent peers of the error that failed
// the group): the survivors need not wait for them.
std::vector<int> implicated_ranks(const std::exception_ptr& failure) {
  if (!failure) {
    return {};
  }
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    // Error{aborted}: the rank it names aborted the group on purpose (another survivor that
    // called shrink() first, on a group that had not failed): it is alive, and must be waited
    // for like any rank, or it would be fenced out.
    if (e.code() == ErrorCode::aborted) {
      return {};
    }
    return e.context().peers;
  } catch (...) {
  }
  return {};
}

std::unique_ptr<detail::Backend> CpuProcessGroup::shrink(ShrinkOptions options) {
  check_arg(options.grace >= Duration::zero() && options.join_timeout > Duration::zero(),
            "shrink on rank {}/{} [{}]: grace must be >= 0 and join_timeout > 0", rank(), size(),
            name());
  // Ops in flight fail at once: with the error that failed the group, or Error{aborted}.
  abort("the group is being shrunk to its survivors (shrink())");
  std::vector<int> known_dead = implicated_ranks(failure());
  // Every survivor calls shrink in the same order, so the counter names the same namespace.
  const std::uint64_t index = shrinks_.fetch_add(1);
  TcpGroupOptions sub = options_;
  sub.group = std::move(options.group);
  if (sub.group.name == GroupOptions{}.name) {
    sub.group.name = fmt::format("{}/shrink{}", name(), index);
  }
  if (!sub.group.timeout) {
    sub.group.timeout = timeout();
  }
  // A round: agree, then form the group; a survivor that dies while it forms fails the formation
  // on the others, who agree again without it. Each round leaves out at least the rank that
  // failed it, or fails on a deadline itself, so `size()` rounds bound the loop.
  std::exception_ptr last;
  for (int round = 0; round < size(); ++round) {
    auto round_store = make_prefix_store(fmt::format("shrink{}/r{}", index, round), store_);
    const std::vector<int> survivors = detail::agree_on_survivors(
        *round_store, detail::SurvivorAgreement{
                          .rank = rank(),
                          .size = size(),
                          .group = name(),
                          .known_dead = known_dead,
                          .grace = options.grace,
                          .deadline = Deadline::after(options.grace + options.join_timeout),
                      });
    const int new_rank =
        static_cast<int>(std::find(survivors.begin(), survivors.end(), rank()) - survivors.begin());
    try {
      auto group = std::make_unique<CpuProcessGroup>(
          make_prefix_store("group", round_store), new_rank, static_cast<int>(survivors.size()),
          sub, detail::Formation{.bound = options.join_timeout});
      CHORUS_INFO(init,
                  "tcp group [{}] shrunk to [{}]: rank {}/{} is now rank {}/{} (old ranks {})",
                  name(), sub.group.name, rank(), size(), new_rank, survivors.size(),
                  format_ranks(survivors));
      group->inherit_lobby(*this);
      return group;
    } catch (const Error& e) {
      last = std::current_exception();
      for (int r = 0; r < size(); ++r) {
        if (!std::binary_search(survivors.begin(), survivors.end(), r)) {
          known_dead.push_back(r);
        }
      }
      for (int p : e.context().peers) {
        if (p >= 0 && p < static_cast<int>(survivors.size())) {
          known_dead.push_back(survivors[static_cast<std::size_t>(p)]);
        }
      }
      CHORUS_WARN(init,
                  "tcp group [{}] on rank {}/{}: forming the survivors' group failed ({}); "
                  "the survivors agree again",
                  name(), rank(), size(), e.what());
    }
  }
  std::rethrow_exception(last);
}

}  // namespace
}  // namespace cpu

std::shared_ptr<ProcessGroup> make_tcp_group(std::shared_ptr<Store> store, int rank, int size,
                                             TcpGroupOptions options) {
  check_arg(store != nullptr,
            "make_tcp_group: the store is null; pass the store every rank shares");
  check_arg(options.sockets_per_peer >= 1 && options.sockets_per_peer <= 8,
            "make_tcp_group: sockets_per_peer must be in 1..8, got {}", options.sockets_per_peer);
  check_arg(options.slice_bytes >= 1, "make_tcp_group: slice_bytes must be at least 1");
  check_arg(options.local_send_buffer_bytes >= 0,
            "make_tcp_group: local_send_buffer_bytes must be 0 (kernel autotuning) or positive, "
            "got {}",
            options.local_send_buffer_bytes);
  check_arg(options.hello_timeout > Duration::zero(),
            "make_tcp_group: hello_timeout must be positive");
  check_arg(size >= 1 && rank >= 0 && rank < size,
            "make_tcp_group: rank {} is not in [0, {}); check RANK and WORLD_SIZE", rank, size);
  cpu::check_world_size_fits(rank, size);
  // Each group gets its own namespace in the store: the k-th group this process creates as
  // `rank` on `store` is "tcp/g<k>" (all ranks create their groups in the same order, like
  // every other collective), so two groups over one store never read each other's addresses.
  // The count lives in the process, not the store, so a relaunch starts again at g1 on every
  // rank (membership.hpp replaces a dead launch's records).
  const std::uint64_t instance = cpu::next_group_index(store, rank);
  auto lobby = cpu::lobby_of(store, options.group.name);
  auto group_store = make_prefix_store(fmt::format("tcp/g{}", instance), std::move(store));
  auto group = std::make_unique<cpu::CpuProcessGroup>(std::move(group_store), rank, size, options);
  group->set_lobby(std::move(lobby), options.group.name);
  return detail::GroupAccess::wrap(std::move(group));
}

std::shared_ptr<ProcessGroup> join_tcp_group(std::shared_ptr<Store> store, TcpGroupOptions tcp,
                                             JoinOptions options) {
  check_arg(store != nullptr,
            "join_tcp_group: the store is null; pass the store the group's members were made on");
  check_arg(options.join_timeout > Duration::zero(), "join_tcp_group: join_timeout must be > 0");
  const std::string lobby_name = tcp.group.name;
  auto lobby = cpu::lobby_of(store, lobby_name);
  const Duration wait =
      options.wait.value_or(tcp.group.timeout.value_or(env::resolve_default_timeout()));
  // A formation that fails because a member died or the members gave it up (grow() then fails
  // on them and they shrink): the joiner takes a new ticket for their next grow(), while `wait`
  // lasts.
  const Deadline waiting = Deadline::after(wait);
  std::unique_ptr<cpu::CpuProcessGroup> group;
  for (Duration left = wait;; left = waiting.remaining()) {
    const detail::Seat seat = detail::wait_for_seat(*lobby, lobby_name, left);
    TcpGroupOptions joined = tcp;
    joined.group.name = seat.group.name;
    joined.group.timeout = seat.group.timeout;
    CHORUS_INFO(init, "joining group [{}] as rank {}/{} (admitted from the lobby of [{}])",
                seat.group.name, seat.rank, seat.group.size, lobby_name);
    try {
      group = std::make_unique<cpu::CpuProcessGroup>(
          cpu::grown_group_store(lobby, seat.group.epoch), seat.rank, seat.group.size, joined,
          detail::Formation{.bound = options.join_timeout,
                            .give_up = [&lobby, epoch = seat.group.epoch] {
                              return detail::grown_given_up(*lobby, epoch);
                            }});
      break;
    } catch (const Error& e) {
      // A member that died or gave the formation up (the members' grow() failed too): wait
      // for their next one. A clash or a broken store is not retried.
      const bool retry = e.code() == ErrorCode::aborted || e.code() == ErrorCode::network ||
                         e.code() == ErrorCode::timeout;
      if (!retry || waiting.expired()) {
        throw;
      }
      CHORUS_WARN(init, "joining group [{}]: {}; waiting in the lobby of [{}] again",
                  seat.group.name, e.what(), lobby_name);
    }
  }
  group->set_lobby(std::move(lobby), lobby_name);
  return detail::GroupAccess::wrap(std::move(group));
}

}  // namespace chorus
