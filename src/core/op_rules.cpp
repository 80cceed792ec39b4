// SPDX-License-Identifier: BSD-3-Clause
// The shape-rule table (op_rules.hpp). One check function per op type; the messages name the
// op, the rank and the group (as every InvalidArgument of a call does) and say what to fix.
#include "core/op_rules.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <chorus/errors.hpp>

#include "core/backend.hpp"
#include "core/format.hpp"
#include "core/wire.hpp"

// A tensor in a message, "4 x float32", formatted only when a message uses it: require()'s
// arguments are evaluated on every call, and formatting two strings per call is a measurable
// share of a small allreduce (docs/results.md, "Small allreduces through the op descriptor").
namespace chorus::op_rules_detail {
struct Described {
  const Tensor& tensor;
};
}  // namespace chorus::op_rules_detail

template <>
struct fmt::formatter<chorus::op_rules_detail::Described> {
  constexpr auto parse(fmt::format_parse_context& ctx) { return ctx.begin(); }
  template <class Context>
  auto format(const chorus::op_rules_detail::Described& d, Context& ctx) const {
    return fmt::format_to(ctx.out(), "{} x {}", d.tensor.count(),
                          chorus::to_string(d.tensor.dtype()));
  }
};

namespace chorus {
namespace {

// The calling rank's view of one check: throws with the op's prefix.
class Checker {
 public:
  Checker(const OpDescriptor& op, const detail::Backend& backend, const char* name)
      : Checker(op, op.in, op.out, kWhole, backend, name) {}
  // One pair of a coalesced op: `in` and `out` are ins[part] and outs[part].
  Checker(const OpDescriptor& op, const Tensor& in, const Tensor& out, std::size_t part,
          const detail::Backend& backend, const char* name)
      : op(op),
        in(in),
        out(out),
        rank(backend.rank()),
        size(backend.size()),
        backend_(backend),
        name_(name),
        part_(part) {}

  template <class... Args>
  void require(bool cond, fmt::format_string<Args...> format, Args&&... args) const {
    if (!cond) {
      throw InvalidArgument(fmt::format("{} {}: {}{}", name_,
                                        format_on_rank(rank, size, backend_.name()), part_prefix(),
                                        fmt::format(format, std::forward<Args>(args)...)));
    }
  }
  void device(const Tensor& t, const char* what) const {
    if (part_ == kWhole) {
      backend_.check_device(t, what, name_);
    } else if (t.count() != 0 && (t.device() != backend_.device() || t.data() == nullptr)) {
      // Named with its index, formatted only when it fails.
      const std::string named = fmt::format("{} {}", what, part_);
      backend_.check_device(t, named.c_str(), name_);
    }
  }
  void root() const {
    require(op.root >= 0 && op.root < size, "root {} is not a rank in [0, {})", op.root, size);
  }
  bool is_root() const { return rank == op.root; }
  // The input and output are the same view, or do not overlap.
  void same_or_disjoint() const {
    require(in.same_view(out) || !in.overlaps(out),
            "out-of-place input and output overlap; pass the same tensor twice for in-place");
  }
  // `part` is `whole`'s block [first, first + count), or does not overlap it.
  static bool is_block_or_disjoint(const Tensor& part, const Tensor& whole, std::size_t first) {
    const bool block = part.count() > 0 && first + part.count() <= whole.count() &&
                       part.same_view(whole.slice(first, part.count()));
    return block || !part.overlaps(whole);
  }
  // counts has one entry per rank.
  void per_rank(const std::vector<std::size_t>& counts, const char* field) const {
    require(counts.size() == static_cast<std::size_t>(size),
            "{} has {} entries; it needs one per rank ({})", field, counts.size(), size);
  }

  static constexpr std::size_t kWhole = static_cast<std::size_t>(-1);  // not a coalesced pair

  const OpDescriptor& op;
  const Tensor& in;   // op.in, or a coalesced op's ins[part]
  const Tensor& out;  // op.out, or outs[part]
  const int rank;
  const int size;

 private:
  std::string part_prefix() const {
    return part_ == kWhole ? std::string() : fmt::format("tensor {}: ", part_);
  }

  const detail::Backend& backend_;
  const char* name_;
  const std::size_t part_;
};

using op_rules_detail::Described;
Described describe(const Tensor& t) { return Described{t}; }
std::size_t total(const std::vector<std::size_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}
std::size_t offset_of(const std::vector<std::size_t>& counts, int rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, std::size_t{0});
}
std::size_t times(std::size_t n, int size) { return n * static_cast<std::size_t>(size); }

void check_allreduce(const Checker& c) {
  const Tensor& in = c.in;
  const Tensor& out = c.out;
  c.require(in.count() == out.count() && in.dtype() == out.dtype(),
            "output ({}) must match input ({}) in count and dtype", describe(out), describe(in));
  c.same_or_disjoint();
  c.device(in, "input");
  c.device(out, "output");
}

void check_allgather(const Checker& c) {
  const Tensor& in = c.in;
  const Tensor& out = c.out;
  c.require(in.dtype() == out.dtype() && out.count() == times(in.count(), c.size),
            "output ({}) must hold size {} x input ({})", describe(out), c.size, describe(in));
  c.require(Checker::is_block_or_disjoint(in, out, times(in.count(), c.rank)),
            "input overlaps output; for in-place pass output.slice(rank * n, n) as input");
  c.device(in, "input");
  c.device(out, "output");
}

void check_reduce_scatter(const Checker& c) {
  const Tensor& in = c.in;
  const Tensor& out = c.out;
  c.require(in.dtype() == out.dtype() && in.count() == times(out.count(), c.size),
            "input ({}) must hold size {} x output ({})", describe(in), c.size, describe(out));
  c.require(Checker::is_block_or_disjoint(out, in, times(out.count(), c.rank)),
            "output overlaps input; for in-place pass input.slice(rank * n, n) as output");
  c.device(in, "input");
  c.device(out, "output");
}

void check_broadcast(const Checker& c) {
  c.root();
  c.device(c.op.in, "tensor");
}

void check_reduce(const Checker& c) {
  const auto& op = c.op;
  c.root();
  if (c.is_root()) {
    c.require(op.in.count() == op.out.count() && op.in.dtype() == op.out.dtype(),
              "output ({}) on the root must match input ({})", describe(op.out), describe(op.in));
    c.same_or_disjoint();
    c.device(op.out, "output");
  }
  c.device(op.in, "input");
}

void check_gather(const Checker& c) {
  const auto& op = c.op;
  c.root();
  if (c.is_root()) {
    c.require(op.in.dtype() == op.out.dtype() && op.out.count() == times(op.in.count(), c.size),
              "output ({}) on the root must hold size {} x input ({})", describe(op.out), c.size,
              describe(op.in));
    c.require(Checker::is_block_or_disjoint(op.in, op.out, times(op.in.count(), c.rank)),
              "input overlaps output on the root");
    c.device(op.out, "output");
  }
  c.device(op.in, "input");
}

void check_scatter(const Checker& c) {
  const auto& op = c.op;
  c.root();
  if (c.is_root()) {
    c.require(op.in.dtype() == op.out.dtype() && op.in.count() == times(op.out.count(), c.size),
              "input ({}) on the root must hold size {} x output ({})", describe(op.in), c.size,
              describe(op.out));
    c.require(Checker::is_block_or_disjoint(op.out, op.in, times(op.out.count(), c.rank)),
              "output overlaps input on the root");
    c.device(op.in, "input");
  }
  c.device(op.out, "output");
}

void check_all_to_all(const Checker& c) {
  const auto& op = c.op;
  c.require(op.in.count() == op.out.count() && op.in.dtype() == op.out.dtype(),
            "output ({}) must match input ({})", describe(op.out), describe(op.in));
  c.require(op.in.count() % static_cast<std::size_t>(c.size) == 0,
            "count {} is not divisible by the group size {}", op.in.count(), c.size);
  c.same_or_disjoint();
  c.device(op.in, "input");
  c.device(op.out, "output");
}

void check_barrier(const Checker&) {}

void check_send(const Checker& c) {
  c.require(c.op.peer >= 0 && c.op.peer < c.size && c.op.peer != c.rank,
            "destination {} is not another rank in [0, {})", c.op.peer, c.size);
  c.device(c.op.in, "tensor");
}

void check_recv(const Checker& c) {
  const int src = c.op.peer;
  c.require(src == kAnySource || (src >= 0 && src < c.size && src != c.rank),
            "source {} is not another rank in [0, {}) nor kAnySource", src, c.size);
  c.device(c.op.in, "tensor");
}

void check_allgatherv(const Checker& c) {
  const auto& op = c.op;
  c.per_rank(op.out_counts, "out_counts");
  const std::size_t mine = op.out_counts[static_cast<std::size_t>(c.rank)];
  c.require(op.in.dtype() == op.out.dtype() && op.in.count() == mine &&
                op.out.count() == total(op.out_counts),
            "input ({}) must hold counts[{}] = {} and output ({}) the sum of counts, {}",
            describe(op.in), c.rank, mine, describe(op.out), total(op.out_counts));
  c.require(Checker::is_block_or_disjoint(op.in, op.out, offset_of(op.out_counts, c.rank)),
            "input overlaps output; for in-place pass the output's block of this rank as input");
  c.device(op.in, "input");
  c.device(op.out, "output");
}

void check_reduce_scatterv(const Checker& c) {
  const auto& op = c.op;
  c.per_rank(op.in_counts, "in_counts");
  const std::size_t mine = op.in_counts[static_cast<std::size_t>(c.rank)];
  c.require(op.in.dtype() == op.out.dtype() && op.out.count() == mine &&
                op.in.count() == total(op.in_counts),
            "output ({}) must hold counts[{}] = {} and input ({}) the sum of counts, {}",
            describe(op.out), c.rank, mine, describe(op.in), total(op.in_counts));
  c.require(Checker::is_block_or_disjoint(op.out, op.in, offset_of(op.in_counts, c.rank)),
            "output overlaps input; for in-place pass the input's block of this rank as output");
  c.device(op.in, "input");
  c.device(op.out, "output");
}

void check_all_to_allv(const Checker& c) {
  const auto& op = c.op;
  c.per_rank(op.in_counts, "in_counts");
  c.per_rank(op.out_counts, "out_counts");
  c.require(op.in.dtype() == op.out.dtype() && op.in.count() == total(op.in_counts) &&
                op.out.count() == total(op.out_counts),
            "input ({}) must hold the sum of in_counts ({}) and output ({}) the sum of "
            "out_counts ({}), of one dtype",
            describe(op.in), total(op.in_counts), describe(op.out), total(op.out_counts));
  c.require(!op.in.overlaps(op.out), "input and output overlap; all_to_allv is out-of-place only");
  c.device(op.in, "input");
  c.device(op.out, "output");
}

using CheckFn = void (*)(const Checker&);

// A coalesced op (OpDescriptor::ins/outs): one dtype, every pair passes the op's own check, and
// the pairs' memory is independent (an input overlaps no output but its own, no two outputs
// overlap), so that neither the tcp backend's packing nor NCCL's grouped calls, which run
// concurrently, depend on an order between the pairs. O(n log n) in the number of tensors:
// torch hands over hundreds of gradients at once.
void check_coalesced(const OpDescriptor& op, const detail::Backend& backend, const char* name,
                     CheckFn check) {
  const Checker c(op, backend, name);
  c.require(op_rule(op.type).coalesces,
            "ins/outs (several tensors in one op) are for allreduce, allgather and "
            "reduce_scatter; pass this op's tensor in in/out");
  c.require(!op.ins.empty() && op.ins.size() == op.outs.size(),
            "ins has {} tensors and outs {}; a coalesced op needs one output per input, and at "
            "least one",
            op.ins.size(), op.outs.size());
  c.require(op.in.count() == 0 && op.out.count() == 0,
            "in ({}) and out ({}) must be empty when ins/outs carry the tensors", describe(op.in),
            describe(op.out));
  const DataType dtype = op.ins[0].dtype();
  for (std::size_t i = 0; i < op.ins.size(); ++i) {
    c.require(op.ins[i].dtype() == dtype && op.outs[i].dtype() == dtype,
              "tensor {} is {} in and {} out, but tensor 0 is {}: a coalesced op has one dtype", i,
              to_string(op.ins[i].dtype()), to_string(op.outs[i].dtype()), to_string(dtype));
    check(Checker(op, op.ins[i], op.outs[i], i, backend, name));
  }
  // The outputs sorted by address: neighbours must not overlap; then each input may overlap
  // only its own output (in place), found by binary search among the disjoint outputs.
  std::vector<std::size_t> by_address;
  for (std::size_t i = 0; i < op.outs.size(); ++i) {
    if (op.outs[i].nbytes() != 0) {
      by_address.push_back(i);
    }
  }
  const auto begin = [&](std::size_t i) {
    return reinterpret_cast<std::uintptr_t>(op.outs[i].data());
  };
  std::sort(by_address.begin(), by_address.end(),
            [&](std::size_t a, std::size_t b) { return begin(a) < begin(b); });
  for (std::size_t k = 1; k < by_address.size(); ++k) {
    const std::size_t a = by_address[k - 1];
    const std::size_t b = by_address[k];
    c.require(!op.outs[a].overlaps(op.outs[b]), "outs[{}] and outs[{}] overlap", a, b);
  }
  for (std::size_t i = 0; i < op.ins.size(); ++i) {
    const Tensor& in = op.ins[i];
    const auto from = reinterpret_cast<std::uintptr_t>(in.data());
    // The first output that ends after the input begins; any overlap starts there.
    auto it = std::partition_point(by_address.begin(), by_address.end(), [&](std::size_t o) {
      return begin(o) + op.outs[o].nbytes() <= from;
    });
    for (; it != by_address.end() && in.overlaps(op.outs[*it]); ++it) {
      c.require(*it == i, "ins[{}] overlaps outs[{}]; in place, a tensor is its own output", i,
                *it);
    }
  }
}

// OpDescriptor::wire_dtype: the op's own dtype (full precision) on the three reductions that have
// a wire, or a narrower float wire of a sum or average (core/wire.hpp).
void check_wire(const OpDescriptor& op, const detail::Backend& backend, const char* name) {
  const Checker c(op, backend, name);
  const DataType wire = *op.wire_dtype;
  c.require(has_wire(op.type),
            "wire_dtype ({}) is for allreduce, reduce_scatter and reduce; leave it unset",
            to_string(wire));
  const DataType dtype = op.ins.empty() ? op.in.dtype() : op.ins[0].dtype();
  if (wire == dtype) {
    return;
  }
  c.require(wire_narrows(dtype, wire),
            "wire_dtype {} does not carry {} data: float32 data travels as bfloat16 or float16, "
            "float64 data as float32 (or pass the data's own dtype for full precision)",
            to_string(wire), to_string(dtype));
  c.require(op.op == ReduceOp::sum || op.op == ReduceOp::avg,
            "wire_dtype {} is for sum and avg; a {} keeps full precision (leave it unset)",
            to_string(wire), to_string(op.op));
}

template <CheckFn Check>
void run_check(const OpDescriptor& op, const detail::Backend& backend, const char* name) {
  if (op.ins.empty() && op.outs.empty()) [[likely]] {
    Check(Checker(op, backend, name));
  } else {
    check_coalesced(op, backend, name, Check);
  }
  if (op.wire_dtype) [[unlikely]] {
    check_wire(op, backend, name);
  }
}

// Indexed by OpType: the columns are OpRule's, in order.
using B = Buffers;
using O = Operand;
using T = OpType;
constexpr bool y = true;
constexpr bool n = false;
// clang-format off
constexpr OpRule kRules[kNumOpTypes] = {
  // type              name               coll trace root red coal buffers      count    root_only in_c out_c check
  {T::allreduce,       "allreduce",       y,   n,    n,   y,  y,   B::in_out,   O::in,   O::none,  n,   n,    run_check<check_allreduce>},
  {T::allgather,       "allgather",       y,   n,    n,   n,  y,   B::in_out,   O::in,   O::none,  n,   n,    run_check<check_allgather>},
  {T::reduce_scatter,  "reduce_scatter",  y,   y,    n,   y,  y,   B::in_out,   O::out,  O::none,  n,   n,    run_check<check_reduce_scatter>},
  {T::broadcast,       "broadcast",       y,   n,    y,   n,  n,   B::in_place, O::in,   O::none,  n,   n,    run_check<check_broadcast>},
  {T::reduce,          "reduce",          y,   n,    y,   y,  n,   B::in_out,   O::in,   O::out,   n,   n,    run_check<check_reduce>},
  {T::gather,          "gather",          y,   n,    y,   n,  n,   B::in_out,   O::in,   O::out,   n,   n,    run_check<check_gather>},
  {T::scatter,         "scatter",         y,   y,    y,   n,  n,   B::in_out,   O::out,  O::in,    n,   n,    run_check<check_scatter>},
  {T::all_to_all,      "all_to_all",      y,   n,    n,   n,  n,   B::in_out,   O::in,   O::none,  n,   n,    run_check<check_all_to_all>},
  {T::barrier,         "barrier",         y,   n,    n,   n,  n,   B::none,     O::none, O::none,  n,   n,    run_check<check_barrier>},
  {T::send,            "send",            n,   n,    n,   n,  n,   B::in_place, O::in,   O::none,  n,   n,    run_check<check_send>},
  {T::recv,            "recv",            n,   n,    n,   n,  n,   B::in_place, O::in,   O::none,  n,   n,    run_check<check_recv>},
  {T::allgatherv,      "allgatherv",      y,   n,    n,   n,  n,   B::in_out,   O::out,  O::none,  n,   y,    run_check<check_allgatherv>},
  {T::reduce_scatterv, "reduce_scatterv", y,   y,    n,   y,  n,   B::in_out,   O::in,   O::none,  y,   n,    run_check<check_reduce_scatterv>},
  {T::all_to_allv,     "all_to_allv",     y,   n,    n,   n,  n,   B::in_out,   O::none, O::none,  y,   y,    run_check<check_all_to_allv>},
};
// clang-format on

constexpr bool rows_in_op_type_order() {
  for (int i = 0; i < kNumOpTypes; ++i) {
    if (static_cast<int>(kRules[i].type) != i) {
      return false;
    }
  }
  return true;
}
static_assert(rows_in_op_type_order(), "kRules: row i is the rule of OpType i");

}  // namespace

const OpRule& op_rule(OpType type) {
  const auto index = static_cast<std::size_t>(type);
  if (index >= static_cast<std::size_t>(kNumOpTypes)) {
    throw InvalidArgument(
        fmt::format("OpDescriptor.type is {}, not an OpType (allreduce .. all_to_allv)", index));
  }
  return kRules[index];
}

const char* to_string(OpType type) noexcept {
  const auto index = static_cast<std::size_t>(type);
  return index < static_cast<std::size_t>(kNumOpTypes) ? kRules[index].name : "?";
}

}  // namespace chorus
