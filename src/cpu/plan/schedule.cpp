// SPDX-License-Identifier: BSD-3-Clause
// Schedule construction: tasks, edges, per-peer FIFOs, signature headers.
#include "cpu/plan/schedule.hpp"

#include <algorithm>
#include <cstring>

#include "core/check.hpp"
#include "core/wire.hpp"

namespace chorus::cpu {

void* ScratchArena::alloc(std::size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  if (bytes == 0) {
    bytes = kAlign;
  }
  while (block_ < blocks_.size()) {
    Block& b = blocks_[block_];
    if (b.size - used_ >= bytes) {
      void* p = b.data.get() + used_;
      used_ += bytes;
      return p;
    }
    ++block_;
    used_ = 0;
  }
  // The first block is exactly what was asked for: an op of a few elements must not pay for
  // (and, under MALLOC_PERTURB_, fill) megabytes. Later blocks grow geometrically, and reset()
  // merges them, so a group settles on one block after a few ops.
  std::size_t size = bytes;
  if (!blocks_.empty()) {
    size = std::max(size, blocks_.back().size * 2);
  }
  // operator new[] of std::byte is aligned to __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16); ask for
  // cache-line alignment explicitly.
  Block b;
  b.data.reset(static_cast<std::byte*>(::operator new[](size, std::align_val_t{kAlign})));
  b.size = size;
  blocks_.push_back(std::move(b));
  block_ = blocks_.size() - 1;
  used_ = bytes;
  return blocks_.back().data.get();
}

void ScratchArena::reset() noexcept {
  // Keep only the largest block once several were needed: the next op of this size fits in one.
  if (blocks_.size() > 1) {
    std::size_t total = 0;
    for (auto& b : blocks_) {
      total += b.size;
    }
    blocks_.clear();
    Block b;
    b.data.reset(static_cast<std::byte*>(::operator new[](total, std::align_val_t{kAlign})));
    b.size = total;
    blocks_.push_back(std::move(b));
  }
  block_ = 0;
  used_ = 0;
}

std::size_t ScratchArena::capacity() const noexcept {
  std::size_t total = 0;
  for (const auto& b : blocks_) {
    total += b.size;
  }
  return total;
}

Schedule::Schedule(int rank, int size, DataType dtype, ReduceOp op, ScratchArena& arena)
    : rank_(rank),
      size_(size),
      dtype_(dtype),
      op_(op),
      arena_(arena),
      send_fifo_(static_cast<std::size_t>(size)),
      recv_fifo_(static_cast<std::size_t>(size)) {}

void Schedule::clear(DataType dtype, ReduceOp op) {
  dtype_ = dtype;
  op_ = op;
  members_.clear();
  view_rank_ = 0;
  gate_ = kNoTask;
  tasks_.clear();
  calls_.clear();
  edges_.clear();
  succ_.clear();
  for (auto& fifo : send_fifo_) {
    fifo.clear();
  }
  for (auto& fifo : recv_fifo_) {
    fifo.clear();
  }
  sig_ = {};
  header_out_ = {};
  next_ = nullptr;
  algorithm_ = nullptr;
  pad_with_messages_ = false;
  payload_bytes_ = 0;
}

TaskId Schedule::add(Task t, std::initializer_list<TaskId> deps) {
  const auto id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(t);
  bool depends = false;
  for (TaskId d : deps) {
    depend(id, d);
    depends |= d != kNoTask;
  }
  if (!depends) {
    depend(id, gate_);
  }
  return id;
}

int Schedule::group_rank(int peer) const {
  if (members_.empty()) {
    return peer;
  }
  CHORUS_CHECK(peer >= 0 && static_cast<std::size_t>(peer) < members_.size(),
               "peer {} outside a view of {} ranks", peer, members_.size());
  return members_[static_cast<std::size_t>(peer)];
}

void Schedule::enter_view(std::vector<int> members, TaskId gate) {
  const auto me = std::find(members.begin(), members.end(), rank_);
  CHORUS_CHECK(me != members.end(), "rank {} is not in the view", rank_);
  view_rank_ = static_cast<int>(me - members.begin());
  members_ = std::move(members);
  gate_ = gate;
}

void Schedule::leave_view() noexcept {
  members_.clear();
  gate_ = kNoTask;
}

TaskId Schedule::join_all() { return join_range(0, next_id()); }

TaskId Schedule::join_range(TaskId from, TaskId to) {
  if (from >= to) {
    return kNoTask;
  }
  // An empty copy: it moves nothing, it only waits.
  static std::byte nothing;
  Task t;
  t.kind = TaskKind::copy;
  t.dst = &nothing;
  t.src = &nothing;
  const auto id = static_cast<TaskId>(tasks_.size());
  tasks_.push_back(t);
  for (TaskId d = from; d < to; ++d) {
    depend(id, d);
  }
  return id;
}

void Schedule::depend(TaskId later, TaskId earlier) {
  if (earlier == kNoTask || later == kNoTask) {
    return;
  }
  CHORUS_CHECK(earlier < later, "task {} depends on later task {}", later, earlier);
  edges_.emplace_back(earlier, later);
}

TaskId Schedule::send(int peer, const void* data, std::size_t bytes,
                      std::initializer_list<TaskId> deps) {
  return transfer(TaskKind::send, peer, nullptr, data, bytes, deps);
}

TaskId Schedule::recv(int peer, void* data, std::size_t bytes, std::initializer_list<TaskId> deps) {
  return transfer(TaskKind::recv, peer, data, nullptr, bytes, deps);
}

TaskId Schedule::recv_reduce(int peer, void* dst, const void* local, void* slot, std::size_t count,
                             int divisor, bool local_first, std::initializer_list<TaskId> deps) {
  const TaskId id =
      transfer(TaskKind::recv_reduce, peer, dst, local, count * element_size(dtype_), deps);
  if (id != kNoTask) {
    Task& t = tasks_[static_cast<std::size_t>(id)];
    t.src2 = slot;
    t.size = count;
    t.divisor = divisor;
    t.local_first = local_first;
  }
  return id;
}

TaskId Schedule::transfer(TaskKind kind, int peer, void* dst, const void* src, std::size_t bytes,
                          std::initializer_list<TaskId> deps) {
  if (bytes == 0) {
    return kNoTask;
  }
  const bool is_send = kind == TaskKind::send;
  peer = group_rank(peer);
  CHORUS_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{} peer {}",
               is_send ? "send to" : "recv from", peer);
  Task t;
  t.kind = kind;
  t.peer = peer;
  t.dst = dst;
  t.src = src;
  t.size = bytes;
  t.wire = wire_allowed_ && wire_ && on_other_host(peer);
  CHORUS_CHECK(!t.wire || kind == TaskKind::recv_reduce || bytes % element_size(dtype_) == 0,
               "a wire transfer of {} bytes of {}", bytes, to_string(dtype_));
  const TaskId id = add(t, deps);
  (is_send ? send_fifo_ : recv_fifo_)[static_cast<std::size_t>(peer)].push_back(id);
  return id;
}

void Schedule::set_wire(std::optional<DataType> wire, const std::vector<int>* host_of) {
  wire_ = wire;
  host_of_ = host_of;
  multi_host_ =
      host_of != nullptr && !host_of->empty() &&
      std::any_of(host_of->begin(), host_of->end(), [&](int h) { return h != host_of->front(); });
}

bool Schedule::on_other_host(int group_peer) const {
  return host_of_ != nullptr && (*host_of_)[static_cast<std::size_t>(group_peer)] !=
                                    (*host_of_)[static_cast<std::size_t>(rank_)];
}

bool Schedule::wire_to(int peer) const {
  return wire_allowed_ && wire_ && on_other_host(group_rank(peer));
}

TaskId Schedule::round_to_wire(void* data, std::size_t count, TaskId dep) {
  if (!wire_active() || count == 0) {
    return dep;
  }
  Task t;
  t.kind = TaskKind::round;
  t.dst = data;
  t.size = count;
  return add(t, {dep});
}

std::size_t Schedule::wire_bytes(const Task& t) const noexcept {
  const std::size_t es = element_size(dtype_);
  const std::size_t count = t.kind == TaskKind::recv_reduce ? t.size : t.size / es;
  if (t.wire) {
    return wire_message_bytes(count, *wire_);
  }
  return t.kind == TaskKind::recv_reduce ? count * es : t.size;
}

void Schedule::allocate_staging() {
  staging_.assign(static_cast<std::size_t>(size_), Staging{});
  for (int p = 0; p < size_; ++p) {
    std::size_t largest = 0;
    for (TaskId id : send_fifo_[static_cast<std::size_t>(p)]) {
      const Task& t = tasks_[static_cast<std::size_t>(id)];
      if (t.wire) {
        largest = std::max(largest, wire_bytes(t));
      }
    }
    if (largest != 0) {
      // Slots start on cache lines, as the stream's data does (kStreamAlign).
      const std::size_t slot = (largest + kStreamAlign - 1) / kStreamAlign * kStreamAlign;
      staging_[static_cast<std::size_t>(p)] = {
          static_cast<std::byte*>(arena_.alloc(kWireStagingSlots * slot)), slot};
    }
  }
}

TaskId Schedule::copy(void* dst, const void* src, std::size_t bytes,
                      std::initializer_list<TaskId> deps) {
  // A copy onto itself moves nothing but still carries its dependencies when it has any.
  if (bytes == 0 || (dst == src && deps.size() == 0)) {
    return kNoTask;
  }
  Task t;
  t.kind = TaskKind::copy;
  t.dst = dst;
  t.src = src;
  t.size = dst == src ? 0 : bytes;
  return add(t, deps);
}

TaskId Schedule::reduce(void* dst, const void* a, const void* b, std::size_t count, int divisor,
                        std::initializer_list<TaskId> deps) {
  if (count == 0) {
    return kNoTask;
  }
  Task t;
  t.kind = TaskKind::reduce;
  t.dst = dst;
  t.src = a;
  t.src2 = b;
  t.size = count;
  t.divisor = divisor;
  return add(t, deps);
}

TaskId Schedule::read(int peer, const MemoryKey* key, std::size_t offset, void* dst,
                      std::size_t bytes, std::initializer_list<TaskId> deps) {
  return one_sided(TaskKind::read, peer, key, offset, dst, nullptr, bytes, deps);
}

TaskId Schedule::write(int peer, const MemoryKey* key, std::size_t offset, const void* src,
                       std::size_t bytes, std::initializer_list<TaskId> deps) {
  return one_sided(TaskKind::write, peer, key, offset, nullptr, src, bytes, deps);
}

TaskId Schedule::one_sided(TaskKind kind, int peer, const MemoryKey* key, std::size_t offset,
                           void* dst, const void* src, std::size_t bytes,
                           std::initializer_list<TaskId> deps) {
  if (bytes == 0) {
    return kNoTask;
  }
  peer = group_rank(peer);
  CHORUS_CHECK(peer >= 0 && peer < size_ && peer != rank_ && key != nullptr,
               "a one-sided transfer with peer {}", peer);
  Task t;
  t.kind = kind;
  t.peer = peer;
  t.key = key;
  t.offset = offset;
  t.dst = dst;
  t.src = src;
  t.size = bytes;
  return add(t, deps);
}

TaskId Schedule::call(LocalWork work, std::initializer_list<TaskId> deps) {
  Task t;
  t.kind = TaskKind::call;
  t.size = calls_.size();
  calls_.push_back(std::move(work));
  return add(t, deps);
}

void Schedule::interleave(int peer, bool sends, std::size_t split, std::size_t lag) {
  peer = group_rank(peer);
  auto& fifo = (sends ? send_fifo_ : recv_fifo_)[static_cast<std::size_t>(peer)];
  CHORUS_CHECK(split <= fifo.size(), "interleave at {} of {} transfers", split, fifo.size());
  std::vector<TaskId> merged;
  merged.reserve(fifo.size());
  std::size_t b = split;
  for (std::size_t a = 0; a < split; ++a) {
    merged.push_back(fifo[a]);
    if (a >= lag && b < fifo.size()) {
      merged.push_back(fifo[b++]);
    }
  }
  merged.insert(merged.end(), fifo.begin() + static_cast<std::ptrdiff_t>(b), fifo.end());
  fifo = std::move(merged);
}

namespace {
constexpr std::uint8_t kZeros[kStreamAlign] = {};
}  // namespace

std::size_t Schedule::stream_bytes(const std::vector<TaskId>& fifo) const {
  std::size_t bytes = 0;
  for (TaskId id : fifo) {
    bytes += wire_bytes(tasks_[static_cast<std::size_t>(id)]);
  }
  return bytes;
}

StreamFraming stream_framing(std::size_t data_bytes) noexcept {
  const std::size_t tail = data_bytes % kStreamAlign;
  if (tail == 0) {
    return {kStreamAlign, 0};
  }
  if (data_bytes < kPadMessageMinBytes) {
    return {2 * kStreamAlign - tail, 0};  // the header takes the padding: no extra message
  }
  return {kStreamAlign, kStreamAlign - tail};
}

void Schedule::frame_stream(TaskKind kind, int peer, bool with_header) {
  const bool send = kind == TaskKind::send;
  auto& fifo = send ? send_fifo_[static_cast<std::size_t>(peer)]
                    : recv_fifo_[static_cast<std::size_t>(peer)];
  const std::size_t bytes = stream_bytes(fifo);
  StreamFraming framing = stream_framing(bytes);
  if (pad_with_messages_) {
    framing = {kStreamAlign + payload_bytes_, (kStreamAlign - bytes % kStreamAlign) % kStreamAlign};
  }
  if (with_header) {
    add_header(kind, peer, fifo, framing.header_bytes);
  }
  if (framing.pad_bytes == 0) {
    return;
  }
  Task pad;
  pad.kind = kind;
  pad.pad = true;
  pad.peer = peer;
  if (send) {
    pad.src = kZeros;
  } else {
    pad.dst = pads_in_[static_cast<std::size_t>(peer)].data();
  }
  pad.size = framing.pad_bytes;
  fifo.push_back(static_cast<TaskId>(tasks_.size()));
  tasks_.push_back(pad);
}

void Schedule::add_header(TaskKind kind, int peer, std::vector<TaskId>& fifo,
                          std::size_t header_bytes) {
  const bool send = kind == TaskKind::send;
  Task header;
  header.kind = kind;
  header.header = true;
  header.peer = peer;
  if (send) {
    header.src = header_out_.data();
  } else {
    header.dst = headers_in_[static_cast<std::size_t>(peer)].data();
  }
  header.size = header_bytes;
  fifo.insert(fifo.begin(), static_cast<TaskId>(tasks_.size()));
  tasks_.push_back(header);
}

void Schedule::finalize(const OpSignature& sig) {
  sig_ = sig;
  header_out_ = {};
  const EncodedSignature encoded = encode(sig);
  std::copy(encoded.begin(), encoded.end(), header_out_.begin());
  std::copy(payload_.begin(), payload_.begin() + static_cast<std::ptrdiff_t>(payload_bytes_),
            header_out_.begin() + kStreamAlign);
  headers_in_.assign(static_cast<std::size_t>(size_), WireHeader{});
  pads_in_.resize(static_cast<std::size_t>(size_));
  // Every peer the op talks to, in either direction, gets and sends a header: the peer set is
  // made symmetric so that the other side checks too even where data flows one way. With a
  // payload, every peer does.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || (payload_bytes_ == 0 && send_fifo_[static_cast<std::size_t>(p)].empty() &&
                       recv_fifo_[static_cast<std::size_t>(p)].empty())) {
      continue;
    }
    frame_stream(TaskKind::send, p);
    frame_stream(TaskKind::recv, p);
  }
  allocate_staging();
  freeze();
}

void Schedule::carry_in_header(const void* payload, std::size_t bytes) {
  CHORUS_CHECK(bytes % kStreamAlign == 0 && bytes <= kHeaderPayloadMaxBytes,
               "a header payload of {} bytes", bytes);
  std::memcpy(payload_.data(), payload, bytes);
  payload_bytes_ = bytes;
  pad_with_messages_ = true;
}

void Schedule::finalize_continuation(const OpSignature& sig) {
  sig_ = sig;
  pads_in_.resize(static_cast<std::size_t>(size_));
  pad_with_messages_ = true;  // no header to carry the padding
  for (int p = 0; p < size_; ++p) {
    frame_stream(TaskKind::send, p, false);
    frame_stream(TaskKind::recv, p, false);
  }
  allocate_staging();
  freeze();
}

void Schedule::freeze() {
  // Successor lists in CSR form.
  std::vector<std::uint32_t>& count = succ_counts_;
  count.assign(tasks_.size() + 1, 0);
  for (auto& [from, to] : edges_) {
    ++count[static_cast<std::size_t>(from)];
    ++tasks_[static_cast<std::size_t>(to)].deps;
  }
  std::uint32_t offset = 0;
  for (std::size_t i = 0; i < tasks_.size(); ++i) {
    tasks_[i].succ_begin = offset;
    tasks_[i].succ_count = 0;
    offset += count[i];
  }
  succ_.assign(offset, kNoTask);
  for (auto& [from, to] : edges_) {
    Task& t = tasks_[static_cast<std::size_t>(from)];
    succ_[t.succ_begin + t.succ_count++] = to;
  }
  edges_.clear();
}

}  // namespace chorus::cpu
